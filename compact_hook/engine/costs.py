"""Cost-aware timing as stages: the request's economy, and the three decisions it times.

``core.economics`` decides; this gathers what it weighs for one request — the prices the request
brought, the conversation's cache as the provider last reported it (``engine.ledger``), how fast
the conversation grows — and asks it. With ``cost_aware`` off, or nothing priced, or nothing
heard yet, every answer is the one made without cost awareness.
"""

from __future__ import annotations

import asyncio
import logging
import time

from compact_hook.core.chain import Entry
from compact_hook.core.counting import item_strings
from compact_hook.core.economics import (
    PREPARE_TURNS,
    Economy,
    Warmth,
    change_pays,
    clearing_batch,
    compacts_early,
    estimated_saving,
    worth_preparing,
)
from compact_hook.core.items import Role
from compact_hook.core.partition import Partition
from compact_hook.engine.clearing import advance_clearing
from compact_hook.engine.compaction import sized_plan
from compact_hook.engine.ledger import CacheLedger
from compact_hook.engine.run import Run
from compact_hook.engine.view import View

logger = logging.getLogger(__name__)


async def economy_of(run: Run, ledger: CacheLedger, state: Entry) -> Economy | None:
    """What this request's decisions weigh; None when cost-aware timing is off or unpriced. A
    summary's length is this conversation's last one's, where it has one (else the most allowed)."""
    request, config = run.request, run.config
    if not run.cost_aware or request.prices is None:
        return None
    note = await ledger.note(run.root)
    warmth = note.warmth(time.time(), config.cache_ttl_seconds) if note is not None else Warmth.UNKNOWN
    turns = sum(1 for item in run.tiers.items if item.role is Role.ASSISTANT)
    growth = note.growth if note is not None and note.growth > 0 else run.total / max(1, turns)
    return Economy(
        request.prices,
        request.summary_prices or request.prices,
        warmth,
        growth=growth,
        turns=turns,
        summary_tokens=run.counter.count_text(state.summary) if state.summary else config.summary_max_tokens,
    )


async def clearing_waits(run: Run, now: View, advanced: Entry) -> bool:
    """A clearing batch waits while the provider holds the prefix warm and the batch is smaller
    than the one that costs least per turn (``core.economics.clearing_batch``) — never once the
    conversation reaches ``prepare_ratio``: a summary, which reads the middle with every result
    it cleared, costs far more than any batch saves. ``now``: the view before the batch."""
    economy = run.economy
    if economy is None or economy.warmth is not Warmth.WARM:
        return False
    before, cap = await run.tokens(now), min(run.window.prepare, run.window.compact)
    if before >= cap:
        return False
    cleared = run.tiers.view(advanced)
    saved = before - await run.tokens(cleared)
    batch = clearing_batch(economy, rewritten(run, now, cleared))
    return saved < batch and before + (batch - saved) < cap  # the batch can grow to its size in time


def change_pays_now(run: Run, now: int, changed: int) -> bool:
    """Applying a change that takes the request from ``now`` to ``changed`` tokens pays back its
    rewrite over the turns likely still to come (true when nothing is known)."""
    economy = run.known_economy
    return economy is None or change_pays(economy, now - changed, changed)


async def early_plan(run: Run, view: View, tokens: int) -> Partition | None:
    """The cut to compact now, under the trigger, when that pays (else None). Only from the
    clearing threshold on: below it nothing of the conversation is changed at all."""
    economy = run.known_economy
    if economy is None or tokens < run.window.clear:
        return None
    if tokens - run.context_tokens < economy.gap(run.context_tokens):
        return None  # no cut can remove the gap (it only grows with what is kept): no plan needed
    part, size = await asyncio.to_thread(sized_plan, run, view)
    if not part.middle:
        return None
    return part if compacts_early(economy, tokens, size, _read(run, view, part)) else None


async def prepares(run: Run, state: Entry, view: View, tokens: int) -> bool:
    """Whether a summary prepared now is likely to be applied. Unpriced, yes: clearing has already
    done what it can (``engine.clearing.before_a_summary``: past ``prepare_ratio`` every result it
    may clear goes, when that gets back under it). Priced, prices refine it: not while a clearing
    batch that waits, or the next one, would bring the conversation back under ``prepare_ratio``
    and costs less than the compaction (a summary reads the middle with every cleared result), nor
    for a trigger it is unlikely to reach soon."""
    economy = run.known_economy
    if economy is None:
        return True
    advanced = advance_clearing(run, state, at_least=1) if run.config.clear_tool_results else None
    if advanced is not None:
        cleared = run.tiers.view(advanced)
        if await run.tokens(cleared) < run.window.prepare:
            part, size = await asyncio.to_thread(sized_plan, run, view)
            compaction = economy.summary_cost(_read(run, view, part)) + economy.premium * size
            if economy.premium * rewritten(run, view, cleared) <= compaction:
                return False
    return worth_preparing(economy, tokens, run.window.compact)


def rewritten(run: Run, before: View, after: View) -> int:
    """Tokens the provider writes again when the forwarded view changes from ``before`` to
    ``after``: everything from the first item that differs."""
    first = next(
        (i for i, (a, b) in enumerate(zip(before.items, after.items, strict=False)) if a is not b),
        min(len(before.items), len(after.items)),
    )
    counts = run.counter.count(after.prints, lambda i: item_strings(after.items[i]))
    return sum(counts[first:])


def _read(run: Run, view: View, part: Partition) -> int:
    """What a summary of ``part`` reads: the middle with its cleared results restored, tool outputs
    truncated (``engine.compaction``), our earlier summary as it stands."""
    items, prints = [], []
    for position in part.middle:
        origin = view.origins[position]
        item, print_ = (
            (view.items[position], view.prints[position]) if origin is None else run.tiers.truncated(origin)
        )
        items.append(item)
        prints.append(print_)
    return sum(run.counter.count(prints, lambda i: item_strings(items[i])))


def turns_ahead(run: Run, tokens: int) -> int:
    """Tokens still to arrive before a compaction prepared now is applied: up to the trigger, or —
    cost-aware, where it is applied as soon as it pays — a couple of turns' growth."""
    ahead = max(0, run.window.compact - tokens)
    economy = run.known_economy
    if economy is None:
        return ahead
    return min(ahead, int(economy.growth * PREPARE_TURNS))


def saving(run: Run, removed: int, rewritten: int) -> float | None:
    """The estimated USD this request saves (None: unpriced)."""
    prices = run.request.prices
    if prices is None:
        return None
    warmth = run.economy.warmth if run.economy is not None else Warmth.UNKNOWN
    return estimated_saving(prices, warmth, removed, rewritten)

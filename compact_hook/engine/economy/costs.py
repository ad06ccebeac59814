"""Cost-aware timing as a value: one request's economy, and the decisions it refines.

``core.economics`` decides; ``Costs`` gathers what it weighs for one request — the prices the
request brought, the conversation's cache as the provider last reported it
(``engine.economy.prompt_cache``), how fast the conversation grows — and asks it. Prices only refine the
rules about tokens: with ``cost_aware`` off, nothing priced, or nothing heard yet (``known`` is None),
every answer is the one the token rules give alone.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from compact_hook.core.chain import Entry
from compact_hook.core.counting import item_strings
from compact_hook.core.economics import (
    PREPARE_TURNS,
    Economy,
    Way,
    change_pays,
    cheaper_way,
    clearing_batch,
    compacts_early,
    estimated_saving,
    worth_preparing,
)
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Role
from compact_hook.core.notes import Warmth
from compact_hook.core.partition import Partition
from compact_hook.core.transcript import read_tokens
from compact_hook.engine.run import Run
from compact_hook.engine.summary.compaction import for_summary, sized_plan
from compact_hook.engine.tiers.batch import advance_clearing
from compact_hook.engine.view import View
from compact_hook.offload import off_loop

logger = logging.getLogger(__name__)

ViewAt = tuple[tuple[Fingerprint, ...], tuple[int | None, ...], int]
"""A view (its items' prints and origins) and the target a cut of it aims at."""
Planned = tuple[Partition, int, int]
"""A cut, the most the compacted request holds, and what its summary reads."""


@dataclass(frozen=True, slots=True)
class Costs:
    """A request's economy (None: cost-aware timing off, or the model unpriced) and what it says."""

    run: Run
    economy: Economy | None = None
    cuts: dict[ViewAt, Planned] = field(default_factory=dict, compare=False, repr=False)
    """The cuts planned for this request (``_cut``), by view and target."""

    @classmethod
    def of(cls, run: Run, state: Entry) -> Costs:
        """Once per request, after its state, from the conversation's note the run looked up: prices
        per token of ours (the provider bills its own), a summary's length this conversation's last
        one's, where it has one (else the most allowed)."""
        request, config = run.request, run.config
        if not run.cost_aware or request.prices is None:
            return cls(run)
        note, ratio = run.note, run.ratio.value
        warmth = note.warmth(time.time(), config.cache_ttl_seconds) if note is not None else Warmth.UNKNOWN
        turns = sum(1 for item in run.tiers.items if item.role is Role.ASSISTANT)
        growth = note.growth if note is not None and note.growth > 0 else run.total / max(1, turns)
        summary_tokens = (
            run.counter.count_text(state.summary) if state.summary else run.window.ours(config.summary_tokens)
        )
        prices = request.prices.scaled(ratio)
        summary = (request.summary_prices or request.prices).scaled(ratio)
        economy = Economy(prices, summary, warmth, growth, turns, summary_tokens)
        return cls(run, economy)

    @property
    def known(self) -> Economy | None:
        """The economy prices may refine decisions with: cost-aware, and the provider has reported
        on this conversation. The one definition; None means the rules about tokens alone decide."""
        economy = self.economy
        return economy if economy is not None and economy.known else None

    def target(self) -> int:
        """What a compaction aims to leave at most: ``Limits.target``; cost-aware, lower when
        compactions would otherwise come closer together than the spacing that costs least per turn
        (``core.economics``: each event pays a summary and a rewritten prefix) — the tail kept
        verbatim shrinks for it to no less than a quarter of its budget."""
        limits, economy = self.run.window, self.known
        if economy is None:
            return limits.target
        floor = limits.target // 2
        return max(floor, min(limits.target, limits.compact - economy.gap(floor)))

    def turns_ahead(self, tokens: int) -> int:
        """Tokens still to arrive before a compaction prepared now is applied: up to the trigger, or —
        cost-aware, where it is applied as soon as it pays — a couple of turns' growth."""
        ahead = max(0, self.run.window.compact - tokens)
        economy = self.known
        return ahead if economy is None else min(ahead, int(economy.growth * PREPARE_TURNS))

    async def clearing_waits(self, now: View, advanced: Entry) -> bool:
        """A clearing batch waits while the provider holds the prefix warm and the batch is smaller
        than the one that costs least per turn (``core.economics.clearing_batch``) — never once the
        conversation reaches ``prepare_ratio``: a summary, which reads the middle with every result
        it cleared, costs far more than any batch saves. ``now``: the view before the batch."""
        run, economy = self.run, self.economy
        if economy is None or economy.warmth is not Warmth.WARM:
            return False
        before, cap = await run.tokens(now), min(run.window.prepare, run.window.compact)
        if before >= cap:
            return False
        cleared = run.tiers.view(advanced)
        saved = before - await run.tokens(cleared)
        batch = clearing_batch(economy, self.rewritten(now, cleared))
        return saved < batch and before + (batch - saved) < cap  # the batch can grow to its size in time

    def clears_below(self, state: Entry) -> bool:
        """Whether a clearing batch may go under the clearing threshold: cost-aware, once the
        conversation as sent is past it and its results are being cleared already (``state``) — the
        first batch brings it under the threshold, and the large results that were still among the
        newest then would otherwise be carried, at the read price, until it grows back there."""
        run = self.run
        return self.known is not None and state.cleared_before > 0 and run.total >= run.window.clear

    async def batch_pays(self, now: View, advanced: Entry) -> bool:
        """A batch under the clearing threshold goes when it pays: at least the batch that costs
        least per turn (``core.economics.clearing_batch``), and its rewrite paid back over the turns
        likely still to come (``core.economics.change_pays``). ``now``: the view before the batch."""
        run, economy = self.run, self.known
        if economy is None:
            return False
        cleared = run.tiers.view(advanced)
        saved = await run.tokens(now) - await run.tokens(cleared)
        rewritten = self.rewritten(now, cleared)
        return saved >= clearing_batch(economy, rewritten) and change_pays(economy, saved, rewritten)

    def change_pays(self, now: int, changed: int) -> bool:
        """Applying a change that takes the request from ``now`` to ``changed`` tokens pays back its
        rewrite over the turns likely still to come (true when nothing is known)."""
        economy = self.known
        return economy is None or change_pays(economy, now - changed, changed)

    async def early_plan(self, view: View, tokens: int) -> Partition | None:
        """The cut to compact now, under the trigger, when that pays (else None). Only from the
        clearing threshold on: below it nothing of the conversation is changed at all."""
        run, economy = self.run, self.known
        if economy is None or tokens < run.window.clear:
            return None
        if tokens - run.context_tokens < economy.gap(run.context_tokens):
            return None  # no cut can remove the gap (it only grows with what is kept): no plan needed
        part, size, read = await self._cut(view)
        return part if part.middle and compacts_early(economy, tokens, size, read) else None

    async def prepares(self, state: Entry, view: View, tokens: int) -> bool:
        """Whether a summary prepared now is likely to be applied: where it is the cheaper way under
        the trigger (``way_under``). Unpriced, clearing has gone already where it was the cheaper
        way (``Compactor._clear``)."""
        if self.known is None:
            return True
        way, _ = await self.way_under(state, view, tokens)
        return way is Way.SUMMARY

    async def way_under(self, state: Entry, view: View, tokens: int) -> tuple[Way, Entry | None]:
        """Past ``prepare_ratio``, the cheaper way under the trigger — the summary, or everything
        clearing may clear as one batch (the entry, for ``Way.CLEAR``) — by one comparison. By
        tokens: clearing reads nothing, so it is the cheaper way where it lands the conversation
        where a compaction would, under ``prepare_ratio`` and the compaction's target (a summary
        prepared instead would be left unused by the next batch, or outgrown by the trigger — Gemini
        CLI's and Codex's loops; one leaving less room buys a turn or two before the prefix changes
        again). Priced, by money where it gets under ``prepare_ratio``
        (``core.economics.cheaper_way``: a warm prefix holds the batch for the trigger), and nothing
        is due for a trigger the conversation is unlikely to reach soon (``Way.HOLD``)."""
        run, economy, limits = self.run, self.known, self.run.window
        if economy is not None and not worth_preparing(economy, tokens, limits.compact):
            return Way.HOLD, None
        advanced = advance_clearing(run, state, at_least=1) if run.config.clear_tool_results else None
        if advanced is None:
            return Way.SUMMARY, None
        cleared = run.tiers.view(advanced)
        lands = await run.tokens(cleared)
        if lands >= (limits.prepare if economy is not None else min(limits.prepare, limits.target)):
            return Way.SUMMARY, None
        if economy is None:
            return Way.CLEAR, advanced
        _, size, read = await self._cut(view)
        way = cheaper_way(economy, self.rewritten(view, cleared), lands, size, read)
        return way, advanced if way is Way.CLEAR else None

    def saving(self, removed: int, rewritten: int) -> float | None:
        """The estimated USD this request saves (None: unpriced)."""
        prices = self.run.request.prices
        if prices is None:
            return None
        prices = prices.scaled(self.run.ratio.value)
        warmth = self.economy.warmth if self.economy is not None else Warmth.UNKNOWN
        return estimated_saving(prices, warmth, removed, rewritten)

    def rewritten(self, before: View, after: View) -> int:
        """Tokens the provider writes again when the forwarded view changes from ``before`` to
        ``after``: everything from the first item that differs — or that either view made (cleared,
        shaped, the summary: ``View.built``), even where both made it alike: so this estimate has
        counted since it was written, when each view made its own. Counting only what changed is a
        change of behaviour, for its own before and after (``bench/bench_cost.py``)."""
        fresh = {id(item) for item in (*before.built, *after.built)}
        first = next(
            (
                i
                for i, (a, b) in enumerate(zip(before.items, after.items, strict=False))
                if a is not b or id(a) in fresh or id(b) in fresh
            ),
            min(len(before.items), len(after.items)),
        )
        return sum(self.run.sizes.counts(after)[first:])

    async def _cut(self, view: View) -> Planned:
        """The cut at ``target()`` for ``view``, the most the compacted request holds, and what its
        summary reads — planned once per request: the early compaction and the comparison under the
        trigger (asked by clearing, then by preparing) weigh the same cut."""
        key = (tuple(view.prints), tuple(view.origins), self.target())
        if key not in self.cuts:
            part, size = await off_loop(sized_plan, self.run, view, key[2])
            self.cuts[key] = (part, size, self._read(view, part))
        return self.cuts[key]

    def _read(self, view: View, part: Partition) -> int:
        """What a summary of ``part`` reads: the middle with its cleared results restored, tool outputs
        truncated (``engine.summary.compaction``) and, with ``recall``, read by their ends
        (``core.transcript``), our earlier summary as it stands."""
        run = self.run
        read = [for_summary(run, view, position) for position in part.middle]
        counts = run.counter.count([print_ for _, print_ in read], lambda i: item_strings(read[i][0]))
        config = run.config
        cap = config.summary_tool_output_tokens if config.recall else 0
        return sum(read_tokens(item, count, cap) for (item, _), count in zip(read, counts, strict=True))

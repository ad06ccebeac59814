"""Tier 3 as stages: where to cut (``plan``) and the compaction made from the cut (``make``).

``plan`` tokenizes (pins cut to their share): callers run it off the event loop. It aims at the
size it is given (``engine.economy.costs.Costs.target``), so nothing here reads prices. ``make``
summarizes the middle of a ``Cut`` (by the model, or digested), archives what it replaces and
returns the conversation's new state; storing it and sharing it between requests is the
compactor's job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compact_hook.core.chain import Entry
from compact_hook.core.counting import request_total
from compact_hook.core.digest import digest
from compact_hook.core.failures import SummaryFailure
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Item
from compact_hook.core.limits import MIN_TAIL_BUDGET
from compact_hook.core.outcomes import CacheStatus, Reason, Removal, Summarizer
from compact_hook.core.partition import Cutting, KeepPolicy, Partition, assemble_order, partition
from compact_hook.core.pinning import Pin, plan_cuts
from compact_hook.engine.memory.archiving import Kept, keep, removed_at
from compact_hook.engine.run import Run
from compact_hook.engine.summary.summarize import (
    DIGEST_CHARS_PER_TOKEN,
    Budget,
    Summarize,
    Summarizing,
    summarize_middle,
)
from compact_hook.engine.view import View
from compact_hook.errors import SummarizerError
from compact_hook.offload import off_loop

SHRINK_FLOOR = 4
"""A cost-aware compaction shrinks the tail kept verbatim to no less than 1/4 of its budget."""


@dataclass(frozen=True, slots=True)
class Made:
    """A compaction computed here (or found ready in the shared store)."""

    entry: Entry
    cache: CacheStatus
    summary_calls: int = 0
    kept: Kept = Kept()
    """What archiving the replaced entries did (nothing: prepared ahead, or made elsewhere)."""
    unusable: str | None = None
    """The summary model answered with no summary (``core.summary_check``): why; the digest stands in."""


@dataclass(frozen=True, slots=True)
class Failed:
    """A summary that could not be made, how many calls it cost, and how to report it."""

    error: str
    summary_calls: int
    kind: SummaryFailure = SummaryFailure.UNAVAILABLE
    reason: Reason = Reason.SUMMARY_FAILED


@dataclass(frozen=True, slots=True)
class Making:
    """How to make a compaction: the summary model (None: the digest), whether this is the
    breaker's probe (one attempt, no retries), and whether to archive now (else — a compaction
    prepared ahead — what it replaces is listed in the entry's ``unarchived``)."""

    model: Summarize | None
    probe: bool = False
    archive: bool = True


@dataclass(frozen=True, slots=True)
class Cut:
    """A compaction to make: the view it cuts, where (``part``), and the state it starts from."""

    view: View
    part: Partition
    state: Entry

    def key(self, run: Run) -> bytes:
        """Where the compaction is stored: the chain at its tail's start (or the clearing boundary)."""
        return run.chain[max(run.origin(self.view, self.part.tail_start), self.state.cleared_before)]


def plan(run: Run, view: View, target: int, ahead: int = 0) -> Partition:
    """Where to cut (see ``sized_plan``)."""
    return sized_plan(run, view, target, ahead)[0]


def sized_plan(run: Run, view: View, target: int, ahead: int = 0) -> tuple[Partition, int]:
    """Where to cut, planned so the compacted request lands under ``target`` (``Limits.target``,
    or lower: ``engine.economy.costs.Costs.target``), and the most the compacted request will hold (all
    but the middle, pins at their share, a full summary).

    With the default shares it is the first try; when the head, the users' kept messages or
    one big unit make the result too large, the tail's and the kept messages' budgets halve
    until it fits (or cannot shrink further): compacting harder now, in one summary call,
    rather than compacting again on every later turn. Pinned messages keep their own budget.

    ``ahead``: tokens still to arrive before the cut is applied (a prepared compaction is
    applied at the trigger): the tail is that much shorter now, so it is as long then.
    """
    config, limits = run.config, run.window
    counts = run.sizes.counts(view)
    budget = limits.tail_budget(config)
    tail = max(min(MIN_TAIL_BUDGET, budget), budget - ahead)
    kept = limits.keep_budget(config)
    pins = {i: run.pins[o] for i, o in enumerate(view.origins) if o is not None and o in run.pins}
    while True:
        keep = KeepPolicy(
            kept, config.protected_tools, pins, limits.pinned_budget(config), _keeps_turn_opening(run)
        )
        part = partition(view.items, counts, view.pairing.units, Cutting(tail, view.spliced_prefix, keep))
        size = _estimate(run, part, counts, pins)
        fits = size + ahead < limits.target
        if tail <= MIN_TAIL_BUDGET or size + ahead < target or (fits and tail <= budget // SHRINK_FLOOR):
            return _planned(run, view, part), size
        tail, kept = max(MIN_TAIL_BUDGET, tail // 2), kept // 2


def _planned(run: Run, view: View, part: Partition) -> Partition:
    """The partition with its pins' cuts placed, on the client's own items."""
    conversation, counter = run.request.conversation, run.counter
    shapes = tuple(
        (i, plan_cuts(conversation.item(run.origin(view, i)), shape, counter.cut, counter.count_text))
        for i, shape in part.shapes
    )
    return dataclasses.replace(part, shapes=shapes)


def _estimate(run: Run, part: Partition, counts: Sequence[int], pins: Mapping[int, Pin]) -> int:
    """What the compacted request will hold at most: all but the middle, pins at their
    share, plus a full summary."""
    middle = set(part.middle)
    kept = [count for index, count in enumerate(counts) if index not in middle]
    pinned = sum(
        (shape.limit or pins[i].tokens) - (0 if i in middle else counts[i]) for i, shape in part.shapes
    )
    return request_total(run.context_tokens, kept) + pinned + run.window.ours(run.config.summary_tokens)


async def make(run: Run, cut: Cut, making: Making) -> Made | Failed:
    """The new state after compacting ``cut``."""
    config, view, part, state = run.config, cut.view, cut.part, cut.state
    middle = [for_summary(run, view, index)[0] for index in part.middle]
    budget = Budget(config)
    if making.probe:
        budget.retries_left = 0
    text, unusable = None, None
    if making.model is not None:
        try:
            how = Summarizing(config, making.model, run.counter, run.request.focus, run.ratio)
            text = await summarize_middle(middle, how, budget)
        except SummarizerError as exc:
            if exc.kind is not SummaryFailure.UNUSABLE:
                return Failed(str(exc), budget.calls, exc.kind)
            unusable = str(exc)  # the model answered, with nothing to apply: the digest stands in
    summarizer = Summarizer.MODEL if text is not None else Summarizer.DIGEST
    if text is None:
        limit = config.summary_tokens * DIGEST_CHARS_PER_TOKEN
        text = await off_loop(digest, middle, limit, config.recall)
    order = assemble_order(view.items, part)
    prefix = order[: len(order) - (len(view.items) - part.tail_start)]
    kept = tuple(run.origin(view, index) for index in prefix if index is not None)
    gone = sorted({*part.middle, *_newly_cut(run, view, part)})
    originals = tuple(o for i in gone if (o := view.origins[i]) is not None)
    if making.archive:
        removed = removed_at(run, view, gone, Removal.SUMMARIZED)
        written = await keep(run, dataclasses.replace(removed, summary=text, summarizer=summarizer))
        unarchived = originals if written.failed else ()
    else:
        written, unarchived = Kept(), tuple(sorted({*state.unarchived, *originals}))
    entry = Entry(
        run.origin(view, part.tail_start),
        kept,
        text,
        state.cleared_before,
        summarizer,
        prefix.index(None),
        unarchived,
        tuple((run.origin(view, i), shape) for i, shape in part.shapes),
    )
    return Made(run.applied(entry), CacheStatus.MISS, budget.calls, written, unusable)


def _newly_cut(run: Run, view: View, part: Partition) -> list[int]:
    """Pins this compaction cuts that were shown whole until now: archived with the middle
    (the words a cut leaves out must be kept somewhere)."""
    return [
        i
        for i, shape in part.shapes
        if shape.cuts and (o := view.origins[i]) is not None and view.items[i] is run.tiers.truncated(o)[0]
    ]


def for_summary(run: Run, view: View, position: int) -> tuple[Item, Fingerprint]:
    """What the summary model reads of a view position, and its fingerprint: cleared results
    restored (truncated), the rest as forwarded."""
    origin = view.origins[position]
    return (view.items[position], view.prints[position]) if origin is None else run.tiers.truncated(origin)


def _keeps_turn_opening(run: Run) -> bool:
    """The provider refuses a tool turn in progress whose first model message lost its thinking
    (Anthropic's models without the prefix check, thinking enabled): a compaction keeps that
    message's unit before the summary, where the provider reads it as the turn's opening."""
    return run.request.conversation.turn_opens_with_thinking and not run.checks_thinking

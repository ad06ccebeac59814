"""One request going through the pipeline: what it brought, measured once, and the stages
that only need the request itself (no store, no locks).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from compact_hook.config import CompactConfig
from compact_hook.core.assemble import assemble_order
from compact_hook.core.chain import Entry, prefix_chain, root_position, unbind
from compact_hook.core.clearing import next_boundary
from compact_hook.core.counting import TokenCounter, item_strings, request_total
from compact_hook.core.digest import digest
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.fit import Fitted, drop_order, fit
from compact_hook.core.items import Item, PartKind, Role
from compact_hook.core.limits import MIN_TAIL_BUDGET, Limits
from compact_hook.core.normalize import normalize
from compact_hook.core.outcomes import ArchiveStatus, CacheStatus, Preparation, Reason, Removal, Summarizer
from compact_hook.core.partition import KeepPolicy, Partition, partition
from compact_hook.core.pinning import Pin, find_pins, plan_cuts
from compact_hook.core.truncate import truncate_results
from compact_hook.engine.breaker import Breaker
from compact_hook.engine.notices import Notices
from compact_hook.engine.result import CompactRequest, CompactResult, CompactStats
from compact_hook.engine.summarize import DIGEST_CHARS_PER_TOKEN, Budget, Summarize, summarize_middle
from compact_hook.engine.view import Tiers, TruncationCache, View, thinking_removed
from compact_hook.errors import SummarizerError
from compact_hook.formats.base import Conversation, context_strings
from compact_hook.state.archive import (
    Archive,
    ArchiveFolders,
    ArchiveLog,
    Audit,
    conversation_session_id,
)
from compact_hook.state.tokenizers import DEFAULT_TOKENIZER, acounter_for


@dataclass(frozen=True, slots=True)
class Made:
    """A compaction computed here (or found ready in the shared store)."""

    entry: Entry
    cache: CacheStatus
    summary_calls: int = 0
    archive_path: Path | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    """A summary that could not be made, how many calls it cost, and how to report it."""

    error: str
    summary_calls: int
    reason: Reason = Reason.SUMMARY_FAILED


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a view came to be forwarded: the report's fields besides the tokens."""

    state: Entry
    cache: CacheStatus
    reason: Reason | None = None
    summary_calls: int = 0
    archive_path: Path | None = None
    dropped: int = 0
    summarizer: Summarizer | None = None
    normalized: int = 0
    preparation: Preparation | None = None


@dataclass(frozen=True, slots=True)
class Removed:
    """Entries leaving the model's view, to archive: the client's (or our earlier summary), their
    indices in the client's list, why, and what replaces them (for the archive's audit)."""

    entries: list[object]
    origins: tuple[int, ...]
    removal: Removal
    summary: str = ""
    summarizer: Summarizer | None = None


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """What the compactor keeps across requests besides its store: truncated outputs, archive
    log, one archive per folder (each prunes old entries on its own schedule)."""

    truncations: TruncationCache = field(default_factory=TruncationCache)
    archives: ArchiveLog = field(default_factory=ArchiveLog)
    folders: ArchiveFolders = field(default_factory=ArchiveFolders)
    notices: Notices = field(default_factory=Notices)


@dataclass
class Run:
    """The request, its fingerprints and counts (computed once), its limits and tiers."""

    request: CompactRequest
    counter: TokenCounter
    prints: list[Fingerprint]
    counts: list[int]
    context_tokens: int
    total: int
    limits: Limits | None
    tiers: Tiers
    memory: ProcessMemory
    archive_status: ArchiveStatus | None = None
    recalled: tuple[Entry, CacheStatus] | None = None
    """The conversation's stored state, once looked up (see ``Compactor._recall``)."""
    _last: tuple[View | None, int] = field(default=(None, 0), repr=False)

    @classmethod
    async def measure(cls, request: CompactRequest, memory: ProcessMemory) -> Run:
        """Count everything the model reads: only entries never seen before are tokenized."""
        conversation, config = request.conversation, request.config
        counter = request.counter or await acounter_for(config.tokenizer or DEFAULT_TOKENIZER)
        conversation.for_tenant(request.tenant)
        prints = conversation.prints()
        counts = await counter.acount(prints, lambda i: item_strings(conversation.item(i)))
        context = conversation.context
        context_counts = counter.count(conversation.context_prints(), lambda i: context_strings(context[i]))
        context_tokens = sum(context_counts) + (conversation.overhead if context else 0)
        limits = Limits.of(config, conversation.reserve, context_tokens)
        output_limit = limits.output_limit(config) if limits is not None else None
        tiers = Tiers(conversation, prints, counts, config, counter, memory.truncations, output_limit)
        total = request_total(context_tokens, counts)
        return cls(request, counter, prints, counts, context_tokens, total, limits, tiers, memory)

    @property
    def config(self) -> CompactConfig:
        return self.request.config

    @property
    def window(self) -> Limits:
        assert self.limits is not None
        return self.limits

    @cached_property
    def chain(self) -> list[bytes]:
        return prefix_chain(self.request.scope, self.prints)

    @cached_property
    def breaker_key(self) -> bytes:
        return Breaker.key(self.request.summary_model, self.request.tenant)

    @cached_property
    def root(self) -> bytes:
        return self.chain[root_position(self.request.conversation.lazy_items())]

    @property
    def checks_thinking(self) -> bool:
        """The provider checks thinking blocks against their prefix: the format binds them and the
        model runs the check (``thinking_prefix_check``; unset here means yes)."""
        checks = self.config.thinking_prefix_check is not False
        return checks and self.request.conversation.wire.bound_thinking

    @cached_property
    def sends_thinking(self) -> bool:
        """The client's latest model turn carries a thinking block (it sends them back)."""
        conversation = self.request.conversation
        for index in range(len(conversation.entries) - 1, max(-1, len(conversation.entries) - 9), -1):
            item = conversation.item(index)
            if item.role is Role.ASSISTANT:
                return any(part.kind is PartKind.THINKING for part in item.parts)
        return False

    async def tokens(self, view: View) -> int:
        """The view's size; each view is counted once (the pipeline asks several times)."""
        if view.items is self.tiers.items:
            return self.total
        if self._last[0] is not view:
            counts = await self.counter.acount(view.prints, lambda i: item_strings(view.items[i]))
            self._last = (view, request_total(self.context_tokens, counts))
        return self._last[1]

    def session(self) -> str:
        return self.request.session_id or conversation_session_id(self.request.conversation.entries)

    def archive(self) -> Archive:
        return self.request.archive or self.memory.folders.get(self.request.config.archive_dir)

    async def keep(self, removed: Removed) -> Path | None:
        """Archive what leaves the model's view, before it leaves; a failure is reported.

        The same entries of the same session are written once (a request fitted every turn
        would otherwise be archived every turn); a failed write is not remembered as written.
        """
        if not removed.entries:
            return None
        archives = self.memory.archives
        key = archives.key(self.request.tenant + "\n" + self.session(), removed.entries)
        if archives.seen(key):
            return None
        path = await self.archive().save(
            self.session(), removed.entries, self.request.tenant, self._audit(removed)
        )
        if path is None:
            self.archive_status = ArchiveStatus.FAILED
        else:
            archives.add(key)
            self.archive_status = self.archive_status or ArchiveStatus.WRITTEN
        return path

    def _audit(self, removed: Removed) -> Audit:
        origins = removed.origins
        return Audit(
            removed.removal,
            self.request.origin,
            (min(origins), max(origins)) if origins else None,
            len(removed.entries),
            sum(self.counts[i] for i in origins if i < len(self.counts)),
            self.counter.count_text(removed.summary) if removed.summary else 0,
            removed.summary,
            removed.summarizer,
        )

    def removed(self, view: View, positions: Sequence[int], removal: Removal) -> Removed:
        """The view's items at ``positions`` as they are archived (see ``_archived``)."""
        origins = tuple(o for i in positions if (o := view.origins[i]) is not None)
        return Removed([self._archived(view, i) for i in positions], origins, removal)

    # -- tier 2 ------------------------------------------------------------------------------------

    def advance_clearing(self, state: Entry) -> Entry | None:
        """A new state clearing one more batch of old tool results, or None if not worth it yet."""
        results = [index for index in self.tiers.result_items if index >= state.covered]
        savings = {index: self._saving(index) for index in set(results)}
        config = self.config
        boundary = next_boundary(
            results, savings, config.keep_tool_results, state.cleared_before, config.clear_at_least
        )
        if boundary is None:
            return None
        advanced = dataclasses.replace(state, cleared_before=boundary)
        return self.unbound(advanced, max(state.cleared_before, state.covered))

    def _saving(self, index: int) -> int:
        (item, print_), (cleared, cleared_print) = self.tiers.truncated(index), self.tiers.cleared(index)
        if cleared is item:
            return 0
        pair = [item, cleared]
        before, after = self.counter.count([print_, cleared_print], lambda i: item_strings(pair[i]))
        return max(0, before - after)

    # -- tier 3 ------------------------------------------------------------------------------------

    def partition(self, view: View, ahead: int = 0) -> Partition:
        """Where to cut, planned so the compacted request lands under ``Limits.target``.

        With the default shares it is the first try; when the head, the users' kept messages or
        one big unit make the result too large, the tail's and the kept messages' budgets halve
        until it fits (or cannot shrink further): compacting harder now, in one summary call,
        rather than compacting again on every later turn. Pinned messages keep their own budget.

        ``ahead``: tokens still to arrive before the cut is applied (a prepared compaction is
        applied at the trigger): the tail is that much shorter now, so it is as long then.
        Tokenizes (pins cut to their share): run it off the event loop.
        """
        config, limits = self.config, self.window
        counts = self.counter.count(view.prints, lambda i: item_strings(view.items[i]))
        budget = limits.tail_budget(config)
        tail = max(min(MIN_TAIL_BUDGET, budget), budget - ahead)
        keep = limits.keep_budget(config)
        pins = {i: self.pins[o] for i, o in enumerate(view.origins) if o is not None and o in self.pins}
        while True:
            part = partition(
                view.items,
                counts,
                view.pairing.units,
                tail,
                floor=view.spliced_prefix,
                keep=KeepPolicy(keep, config.protected_tools, pins, limits.pinned_budget(config)),
            )
            if tail <= MIN_TAIL_BUDGET or self._estimate(part, counts, pins) + ahead < limits.target:
                return self._planned(view, part)
            tail, keep = max(MIN_TAIL_BUDGET, tail // 2), keep // 2

    @cached_property
    def pins(self) -> dict[int, Pin]:
        """The client's pinned items (the task, injected instructions, later system messages)."""
        config = self.config
        if self.window.pinned_budget(config) <= 0:
            return {}
        return find_pins(self.tiers.items, self.counts, config.pinned_patterns, self.counter.count_text)

    def _planned(self, view: View, part: Partition) -> Partition:
        """The partition with its pins' cuts placed, on the client's own items."""
        conversation, counter = self.request.conversation, self.counter
        shapes = tuple(
            (i, plan_cuts(conversation.item(self._origin(view, i)), shape, counter.cut, counter.count_text))
            for i, shape in part.shapes
        )
        return dataclasses.replace(part, shapes=shapes)

    def _estimate(self, part: Partition, counts: Sequence[int], pins: Mapping[int, Pin]) -> int:
        """What the compacted request will hold at most: all but the middle, pins at their
        share, plus a full summary."""
        middle = set(part.middle)
        kept = [count for index, count in enumerate(counts) if index not in middle]
        pinned = sum(
            (shape.limit or pins[i].tokens) - (0 if i in middle else counts[i]) for i, shape in part.shapes
        )
        return request_total(self.context_tokens, kept) + pinned + self.config.summary_max_tokens

    async def summarize(
        self,
        view: View,
        part: Partition,
        state: Entry,
        model: Summarize | None,
        probe: bool = False,
        *,
        archive: bool = True,
    ) -> Made | Failed:
        """The new state after compacting ``part`` of ``view``: by the model, or digested (None).

        ``probe``: the summary model's breaker just closed its cooldown: one attempt, no retries.
        ``archive``: write what the summary replaces now; else (a compaction prepared ahead) it
        is listed in the entry's ``unarchived``, with what ``state`` had not archived yet.
        """
        config = self.config
        middle = [self._for_summary(view, index) for index in part.middle]
        budget = Budget(config)
        if probe:
            budget.retries_left = 0
        if model is None:
            limit = config.summary_max_tokens * DIGEST_CHARS_PER_TOKEN
            text, summarizer = await asyncio.to_thread(digest, middle, limit), Summarizer.DIGEST
        else:
            try:
                text = await summarize_middle(middle, config, model, self.counter, budget, self.request.focus)
            except SummarizerError as exc:
                return Failed(str(exc), budget.calls)
            summarizer = Summarizer.MODEL
        order = assemble_order(view.items, part)
        prefix = order[: len(order) - (len(view.items) - part.tail_start)]
        keep = tuple(self._origin(view, index) for index in prefix if index is not None)
        gone = sorted({*part.middle, *self._newly_cut(view, part)})
        originals = tuple(o for i in gone if (o := view.origins[i]) is not None)
        if archive:
            removed = self.removed(view, gone, Removal.SUMMARIZED)
            path = await self.keep(dataclasses.replace(removed, summary=text, summarizer=summarizer))
            unarchived = () if path is not None else originals
        else:
            path, unarchived = None, tuple(sorted({*state.unarchived, *originals}))
        entry = Entry(
            self._origin(view, part.tail_start),
            keep,
            text,
            state.cleared_before,
            summarizer,
            prefix.index(None),
            unarchived,
            tuple((self._origin(view, i), shape) for i, shape in part.shapes),
        )
        return Made(self.applied(entry), CacheStatus.MISS, budget.calls, path)

    # -- thinking bound to its prefix ---------------------------------------------------------------

    def unbound(self, entry: Entry, start: int, end: int | None = None) -> Entry:
        """``entry`` changing the forwarded prefix from client entry ``start`` on, at this request:
        the thinking blocks produced before it (``< end``, default this request's length) are
        stale. Only where the provider checks them (``checks_thinking``)."""
        if not self.checks_thinking:
            return entry
        return unbind(entry, start, len(self.prints) if end is None else end)

    def applied(self, compaction: Entry) -> Entry:
        """A compaction as this request applies it: every thinking block kept after the summary
        was produced before it, so each is stale (earlier ranges are summarized or covered)."""
        return self.unbound(dataclasses.replace(compaction, stale_thinking=()), compaction.covered)

    def _newly_cut(self, view: View, part: Partition) -> list[int]:
        """Pins this compaction cuts that were shown whole until now: archived with the middle
        (the words a cut leaves out must be kept somewhere)."""
        return [
            i
            for i, shape in part.shapes
            if shape.cuts
            and (o := view.origins[i]) is not None
            and view.items[i] is self.tiers.truncated(o)[0]
        ]

    def _for_summary(self, view: View, position: int) -> Item:
        """What the summary model reads: cleared results restored (truncated), the rest as forwarded."""
        origin = view.origins[position]
        return view.items[position] if origin is None else self.tiers.truncated(origin)[0]

    def _archived(self, view: View, position: int) -> object:
        """What the archive keeps: the client's own entry, or our earlier summary."""
        origin = view.origins[position]
        return view.items[position].raw if origin is None else self.request.conversation.entries[origin]

    def _origin(self, view: View, position: int) -> int:
        """Index in the client's list of view position ``position`` (the end maps to the end)."""
        if position >= len(view.items):
            return len(self.prints)
        origin = view.origins[position]
        assert origin is not None, "a kept item or the tail never starts at a summary"
        return origin

    def compaction_key(self, view: View, part: Partition, state: Entry) -> bytes:
        return self.chain[max(self._origin(view, part.tail_start), state.cleared_before)]

    # -- the guarantee -----------------------------------------------------------------------------

    def fit(self, view: View) -> tuple[View, Removed, int, bool]:
        """Drop and shrink until the view fits the window.

        Returns the fitted view, the client's entries to archive (dropped ones, and the
        originals of shrunk outputs: shrinking loses text too), how many items were dropped,
        and whether it fits.
        """
        wire, config = self.request.conversation.wire, self.config
        counts = self.counter.count(view.prints, lambda i: item_strings(view.items[i]))
        sizing = _ViewSizing(self.counter, self.request.conversation, view, counts, config.protected_tools)
        units = view.pairing.units
        order = drop_order(view.items, units, config.protected_tools, view.summary_at, wire.first_turn_user)
        budget = self.window.window - request_total(self.context_tokens, [0])
        fitted = fit(view.items, units, order, budget, sizing)
        still = {id(item) for item in fitted.items}
        lost = [i for i, item in enumerate(view.items) if id(item) not in still]
        return (
            self._view_of(view, fitted),
            self.removed(view, lost, Removal.DROPPED),
            len(fitted.dropped),
            fitted.fits,
        )

    def _view_of(self, view: View, fitted: Fitted) -> View:
        """The fitted items with their fingerprints and origins (a shrunk item keeps its original's)."""
        conversation = self.request.conversation
        known = {id(item): k for k, item in enumerate(view.items)}
        prints, origins = [], []
        for item in fitted.items:
            if id(item) in known:
                prints.append(view.prints[known[id(item)]])
                origins.append(view.origins[known[id(item)]])
            else:
                prints.append(conversation.fingerprint(item.raw))
                origins.append(view.origins[known[id(fitted.shrunk[id(item)])]])
        return view.rebuilt(fitted.items, prints, origins)

    async def normalize(self, view: View, force: bool = False) -> tuple[View, int]:
        """The view with every call answered, every orphan result gone and every instruction
        placed where the format allows it, and how many fixes (results added or removed).

        Only for requests we change (or ``normalize: always``, or ``force``: about to be fitted,
        so what normalization adds counts toward the window). What it removes is archived.
        """
        original = self.tiers.items
        unchanged = view.items is original or [id(item) for item in view.items] == [
            id(item) for item in original
        ]
        if unchanged and not force and self.config.normalize != "always":
            return view, 0
        wire = self.request.conversation.wire
        fixed = normalize(view.items, wire, view.pairing, wire.placement)
        if [id(item) for item in fixed] == [id(item) for item in view.items]:
            return view, 0
        before, after = {id(item) for item in view.items}, {id(item) for item in fixed}
        gone = [k for k, item in enumerate(view.items) if id(item) not in after]
        await self.keep(self.removed(view, gone, Removal.NORMALIZED))
        known = {id(item): k for k, item in enumerate(view.items)}
        fingerprint = self.request.conversation.fingerprint
        prints = [view.prints[known[id(i)]] if id(i) in known else fingerprint(i.raw) for i in fixed]
        origins = [view.origins[known[id(i)]] if id(i) in known else None for i in fixed]
        return view.rebuilt(fixed, prints, origins), len(after - before) + len(before - after)

    # -- the end -----------------------------------------------------------------------------------

    async def finish(self, view: View, outcome: Outcome) -> CompactResult:
        """Normalize what we changed, count it, and describe it."""
        config = self.config
        view, fixes = await self.normalize(view)
        items, normalized = view.items, outcome.normalized + fixes
        after = await self.tokens(view)
        if self.limits is not None and after > self.limits.window and config.on_overflow == "passthrough":
            return self.untouched(outcome.reason or Reason.OVER_WINDOW, summary_calls=outcome.summary_calls)
        compacted = outcome.state.summary is not None
        entries = [item.raw for item in items]
        return CompactResult(
            entries,
            compacted,
            self._stats(entries, after) if compacted else CompactStats(),
            outcome.archive_path,
            input_tokens=self.total,
            reason=outcome.reason,
            cache=outcome.cache,
            summary_calls=outcome.summary_calls,
            output_tokens=after,
            truncated=self.tiers.truncated_count(),
            cleared=self.tiers.cleared_count(outcome.state),
            dropped=outcome.dropped,
            normalized=normalized,
            summarizer=outcome.summarizer or (outcome.state.summarizer if compacted else None),
            archive_status=self.archive_status,
            preparation=outcome.preparation,
            thinking_removed=thinking_removed(view, outcome.state.stale_thinking, self.request.conversation),
        )

    def untouched(self, reason: Reason | None, summary_calls: int = 0) -> CompactResult:
        """The request exactly as the client sent it."""
        entries = self.request.conversation.entries
        return CompactResult(
            entries,
            False,
            input_tokens=self.total,
            output_tokens=self.total,
            reason=reason,
            summary_calls=summary_calls,
            archive_status=self.archive_status,
        )

    def _stats(self, entries: Sequence[object], after: int) -> CompactStats:
        retained = len(entries) - 1
        original = len(self.prints)
        return CompactStats(
            original_token_count=self.total,
            compacted_token_count=after,
            compaction_ratio=round(after / self.total, 4) if self.total else 0.0,
            compacted_message_count=max(0, original - retained),
            retained_message_count=retained,
        )


def _protected_parts(view: View, protected: Sequence[str]) -> dict[int, tuple[int, ...]]:
    """Per item (by identity), the parts holding results of protected tools: the fit never shrinks them."""
    found: dict[int, list[int]] = {}
    for (index, position), tool in view.pairing.tool_of.items():
        if tool in protected:
            found.setdefault(id(view.items[index]), []).append(position)
    return {key: tuple(value) for key, value in found.items()}


class _ViewSizing:
    """Sizes of a view's items (counted once), and shrinking that spares protected tools' results."""

    def __init__(
        self,
        counter: TokenCounter,
        conversation: Conversation,
        view: View,
        counts: Sequence[int],
        protected: Sequence[str],
    ) -> None:
        self.counter, self.conversation, self.wire = counter, conversation, conversation.wire
        self.known = {id(item): count for item, count in zip(view.items, counts, strict=True)}
        self.protected = _protected_parts(view, protected)

    def count(self, item: Item) -> int:
        if id(item) not in self.known:
            prints = [self.conversation.fingerprint(item.raw)]
            self.known[id(item)] = self.counter.count(prints, lambda _: item_strings(item))[0]
        return self.known[id(item)]

    def shrink(self, item: Item, limit: int) -> Item | None:
        skip = self.protected.get(id(item), ())
        cuts = truncate_results(item, limit, "tokens", self.counter.cut, skip=skip)
        return self.wire.replace_outputs(item, cuts, keep_media=True) if cuts else None

"""The compaction recipe: count, apply the cheap tiers, reuse what is stored, compact, fit.

One pass per request, in order of cost:

1. tool outputs over ``tool_output_max_tokens`` are truncated (every request; deterministic);
2. the conversation's stored state is spliced in (a compaction, a clearing boundary);
3. at ``clear_trigger_ratio`` old tool results are cleared, the boundary advancing in
   batches and stored;
4. at ``trigger_ratio`` the middle is summarized (or digested) — one summary per
   compaction, shared by concurrent requests and replicas — and stored;
5. if the request still would not fit the window, it is fitted (``on_overflow: fit``);
6. a changed request is normalized so every tool call has its result.

Usable without a proxy (``compact_messages``, stateless); the hook drives a ``Compactor``
with a store. The input list and its messages are never mutated.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compact_hook.archive import Archive, FileArchive, conversation_session_id
from compact_hook.chain import Entry, entry_is_usable, prefix_chain, root_position
from compact_hook.clearing import next_boundary, placeholder
from compact_hook.config import DEFAULT_LOCK_TTL_SECONDS, DEFAULT_LOCK_WAIT_SECONDS, CompactConfig
from compact_hook.digest import digest
from compact_hook.errors import SummarizerError
from compact_hook.fingerprint import Fingerprint, fingerprint, fingerprints
from compact_hook.fit import fit
from compact_hook.flight import SingleFlight
from compact_hook.messages import Message, malformed_reason, tool_call_name, tool_calls_of
from compact_hook.normalize import normalize
from compact_hook.partition import KeepPolicy, Partition, head_length, latest_user_index, partition
from compact_hook.store import CompactionStore
from compact_hook.summarize import Summarize, summarize_middle
from compact_hook.tokens import REPLY_PRIMING, TokenCounter, counter_for
from compact_hook.truncate import truncate_tool_message
from compact_hook.units import Unit, group_units
from compact_hook.view import Tiers, TruncationCache, View

logger = logging.getLogger(__name__)

DEFAULT_TOKENIZER = "o200k_base"
POLL_SECONDS = (0.05, 0.1, 0.2, 0.5)
DIGEST_CHARS_PER_TOKEN = 3


@dataclass(frozen=True, slots=True)
class CompactStats:
    """What a compaction did; all zeros when no summary is in the forwarded request.

    ``compaction_ratio`` is ``compacted_token_count / original_token_count`` (lower is more);
    ``compacted_message_count`` counts the client's messages replaced by the summary.
    """

    original_token_count: int = 0
    compacted_token_count: int = 0
    compaction_ratio: float = 0.0
    compacted_message_count: int = 0
    retained_message_count: int = 0


@dataclass(frozen=True, slots=True)
class CompactResult:
    """The messages to forward, and why they look the way they do.

    ``compacted``: a summary (stored or new) is in ``messages``. ``input_tokens`` /
    ``output_tokens``: the request as received / as forwarded. ``reason`` says why nothing
    (new) was compacted. ``cache``: ``hit`` (stored state reused, no summary call), ``miss``
    (a new summary made here), ``shared`` (made by a concurrent request or replica) or
    ``none``. ``truncated`` / ``cleared`` / ``dropped`` / ``normalized`` count what the cheap
    tiers, the fit guarantee and normalization changed; ``summarizer`` is ``model`` or
    ``digest`` when a summary is present.
    """

    messages: list[Message]
    compacted: bool
    stats: CompactStats = field(default_factory=CompactStats)
    archive_path: Path | None = None
    input_tokens: int = 0
    reason: str = ""
    cache: str = "none"
    summary_calls: int = 0
    output_tokens: int = 0
    truncated: int = 0
    cleared: int = 0
    dropped: int = 0
    normalized: int = 0
    summarizer: str = ""


@dataclass(frozen=True, slots=True)
class Limits:
    """Token limits of one request: clearing trigger, compaction trigger, and the hard window."""

    clear: int
    compact: int
    window: int

    @classmethod
    def of(cls, config: CompactConfig, max_output_tokens: int | None) -> Limits | None:
        compact = threshold(config, max_output_tokens)
        if compact is None or config.context_window is None:
            return None
        window = max(1, config.context_window - (max_output_tokens or 0))
        clear = (
            max(1, int(config.clear_trigger_ratio * config.context_window))
            if config.clear_tool_results
            else compact
        )
        return cls(clear=min(clear, compact), compact=compact, window=window)


@dataclass(frozen=True, slots=True)
class _Made:
    """A compaction computed here (or found ready in the shared store)."""

    entry: Entry
    cache: str
    summary_calls: int = 0
    archive_path: Path | None = None


def counter_for_config(config: CompactConfig) -> TokenCounter:
    return counter_for(config.tokenizer or DEFAULT_TOKENIZER)


def threshold(config: CompactConfig, max_output_tokens: int | None = None) -> int | None:
    """Input tokens at which to compact, or None when the window is unknown.

    ``trigger_ratio × context_window``, lowered when the reply the request asks room for
    (``max_tokens``) would not fit beside the input.
    """
    if config.context_window is None:
        return None
    limit = max(1, int(config.trigger_ratio * config.context_window))
    if max_output_tokens:
        limit = min(limit, max(1, config.context_window - max_output_tokens))
    return limit


def should_compact(
    messages: Sequence[Message],
    config: CompactConfig,
    *,
    max_output_tokens: int | None = None,
    counter: TokenCounter | None = None,
) -> bool:
    """True when the messages reach the threshold (inclusive); False when empty or window unknown."""
    limit = threshold(config, max_output_tokens)
    if not messages or limit is None or not config.enabled or malformed_reason(messages):
        return False
    counter = counter or counter_for_config(config)
    return counter.total(counter.count_messages(messages)) >= limit


async def compact_messages(
    messages: Sequence[Message],
    config: CompactConfig,
    summarize: Summarize,
    session_id: str | None = None,
    *,
    max_output_tokens: int | None = None,
    counter: TokenCounter | None = None,
    archive: Archive | None = None,
) -> CompactResult:
    """Compact ``messages`` if they reach the threshold; otherwise return them as they are
    (but for the cheap tiers). Stateless: nothing is remembered between calls."""
    return await Compactor(store=None).compact(
        messages,
        config,
        summarize,
        session_id,
        max_output_tokens=max_output_tokens,
        counter=counter,
        archive=archive,
    )


class Compactor:
    """Compaction with memory: a store of conversation states and single flight per compaction."""

    def __init__(
        self,
        store: CompactionStore | None,
        lock_ttl: float = DEFAULT_LOCK_TTL_SECONDS,
        lock_wait: float = DEFAULT_LOCK_WAIT_SECONDS,
    ) -> None:
        self.store = store
        self.lock_ttl = lock_ttl
        self.lock_wait = lock_wait
        self.flights: SingleFlight[_Made] = SingleFlight()
        self.truncations = TruncationCache()

    async def compact(
        self,
        messages: Sequence[Message],
        config: CompactConfig,
        summarize: Summarize,
        session_id: str | None = None,
        *,
        scope: bytes = b"",
        max_output_tokens: int | None = None,
        counter: TokenCounter | None = None,
        archive: Archive | None = None,
        prints: Sequence[Fingerprint] | None = None,
    ) -> CompactResult:
        original = list(messages)
        problem = malformed_reason(original)
        if problem:
            return CompactResult(original, False, reason=f"malformed: {problem}")
        counter = counter or counter_for_config(config)
        prints = list(prints) if prints is not None else fingerprints(original)
        counts = await counter.acount_messages(original, prints)
        total = counter.total(counts)
        limits = Limits.of(config, max_output_tokens)
        if not config.enabled or limits is None or not original:
            reason = "disabled" if not config.enabled else "window_unknown" if limits is None else "empty"
            return CompactResult(original, False, input_tokens=total, output_tokens=total, reason=reason)
        tiers = Tiers(original, prints, counts, config, counter, self.truncations)
        run = _Run(original, prints, total, limits, config, counter, tiers, scope, session_id, archive)
        return await self._run(run, summarize)

    async def _run(self, run: _Run, summarize: Summarize) -> CompactResult:
        view = run.tiers.view(None)
        if await run.tokens(view) < run.limits.clear:
            return await run.result(view, Entry(), "none", reason="below_threshold")
        chain = prefix_chain(run.scope, run.prints)
        root = chain[root_position(run.original)]
        state = await self._stored(run, root, chain)
        view = run.tiers.view(state)
        if run.config.clear_tool_results and await run.tokens(view) >= run.limits.clear:
            advanced = run.advance_clearing(state, view)
            if advanced is not None:
                state, view = advanced, run.tiers.view(advanced)
                await self._put(root, chain, state)
        cache = "hit" if state.span else "none"  # stored state in use, no summary call
        if await run.tokens(view) < run.limits.compact:
            return await run.result(view, state, cache)
        return await self._compact(run, summarize, root, chain, state, view, cache)

    async def _compact(
        self,
        run: _Run,
        summarize: Summarize,
        root: bytes,
        chain: list[bytes],
        state: Entry,
        view: View,
        cache: str,
    ) -> CompactResult:
        part = run.partition(view)
        if not part.middle:
            return await self._fit(run, view, state, cache, "nothing_to_summarize")
        key = chain[max(_origin(view, part.tail_start, len(run.original)), state.cleared_before)]
        try:
            made, shared = await self.flights.run(
                key, lambda: self._make_once(key, root, run, view, part, state, summarize)
            )
        except SummarizerError as exc:
            logger.error("compact_hook: compaction failed: %s", exc)
            if run.config.on_overflow == "fit" and await run.tokens(view) > run.limits.window:
                made, shared = await self._digest_instead(run, root, chain, view, part, state), False
            else:
                return await run.result(view, state, cache, reason="summary_failed")
        compacted = run.tiers.view(made.entry)
        cache = "shared" if shared else made.cache
        calls = 0 if shared else made.summary_calls
        return await self._fit(run, compacted, made.entry, cache, "", calls, made.archive_path)

    async def _fit(
        self,
        run: _Run,
        view: View,
        state: Entry,
        cache: str,
        reason: str,
        summary_calls: int = 0,
        archive_path: Path | None = None,
    ) -> CompactResult:
        """The guarantee: over the window and ``on_overflow: fit`` → drop/shrink to fit."""
        if run.config.on_overflow != "fit" or await run.tokens(view) <= run.limits.window:
            return await run.result(view, state, cache, reason, summary_calls, archive_path)
        fitted_view, dropped, fits = run.fit(view)
        if dropped:
            await run.archive().save(run.session(), dropped)
        reason = reason or "fitted"
        if not fits:
            logger.warning("compact_hook: request cannot be brought under %d tokens", run.limits.window)
            reason = "cannot_fit"
        return await run.result(fitted_view, state, cache, reason, summary_calls, archive_path, len(dropped))

    async def _digest_instead(
        self, run: _Run, root: bytes, chain: list[bytes], view: View, part: Partition, state: Entry
    ) -> _Made:
        made = await run.summarize(view, part, state, None)
        await self._put(root, chain, made.entry)
        return made

    async def _stored(self, run: _Run, root: bytes, chain: list[bytes]) -> Entry:
        if self.store is None:
            return Entry()
        found = await self.store.find(root, chain)
        if found is None or not entry_is_usable(found[1], len(run.original)):
            return Entry()
        return found[1]

    async def _put(self, root: bytes, chain: list[bytes], entry: Entry) -> None:
        if self.store is not None:
            await self.store.put(root, chain[entry.span], entry)

    async def _make_once(
        self,
        key: bytes,
        root: bytes,
        run: _Run,
        view: View,
        part: Partition,
        state: Entry,
        summarize: Summarize,
    ) -> _Made:
        """Across replicas: hold the key's lock and compute, or wait for the holder's entry."""
        model = None if run.config.uses_digest else summarize
        if self.store is None:
            return await run.summarize(view, part, state, model)
        token = await self.store.try_lock(key, self.lock_ttl)
        if token is None:
            ready = await self._wait_for(key)
            if ready is not None:
                return _Made(ready, "shared")
            token = await self.store.try_lock(key, self.lock_ttl)
        try:
            made = await run.summarize(view, part, state, model)
            await self.store.put(root, key, made.entry)
            return made
        finally:
            if token is not None:
                await self.store.unlock(key, token)

    async def _wait_for(self, key: bytes) -> Entry | None:
        """Poll for another replica's entry; give up when its lock is gone or we waited enough."""
        assert self.store is not None
        deadline = time.monotonic() + self.lock_wait
        attempt = 0
        while time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS[min(attempt, len(POLL_SECONDS) - 1)])
            attempt += 1
            entry = await self.store.get(key)
            if entry is not None:
                return entry
            if not await self.store.is_locked(key):
                return await self.store.get(key)
        logger.warning("compact_hook: waited %.0f s for another replica's summary; making it", self.lock_wait)
        return None


@dataclass(slots=True)
class _Run:
    """One request going through the pipeline: what it brought, computed once."""

    original: list[Message]
    prints: list[Fingerprint]
    total: int
    limits: Limits
    config: CompactConfig
    counter: TokenCounter
    tiers: Tiers
    scope: bytes
    session_id: str | None
    archive_override: Archive | None
    last_count: tuple[View | None, int] = (None, 0)

    async def tokens(self, view: View) -> int:
        """The view's size; each view is counted once (the pipeline asks several times)."""
        if view.messages is self.original:
            return self.total
        if self.last_count[0] is not view:
            total = self.counter.total(await self.counter.acount_messages(view.messages, view.prints))
            self.last_count = (view, total)
        return self.last_count[1]

    def session(self) -> str:
        return self.session_id or conversation_session_id(self.original)

    def archive(self) -> Archive:
        return self.archive_override or FileArchive(self.config.archive_dir)

    def advance_clearing(self, state: Entry, view: View) -> Entry | None:
        """A new state clearing one more batch of old tool results, or None if not worth it yet."""
        results = [result for result in self.tiers.results if result.index >= state.covered]
        savings = [self._saving(result.index) for result in results]
        boundary = next_boundary(
            results, savings, self.config.keep_tool_results, state.cleared_before, self.config.clear_at_least
        )
        if boundary is None:
            return None
        return Entry(state.covered, state.keep, state.summary, boundary, state.summarizer)

    def _saving(self, index: int) -> int:
        if not self.tiers.clearable(index):
            return 0
        message, print_ = self.tiers.truncated(index)
        cleared = placeholder(self.original[index], self.tiers.tools[index])
        before, after = self.counter.count_messages([message, cleared], [print_, fingerprint(cleared)])
        return max(0, before - after)

    def partition(self, view: View) -> Partition:
        assert self.config.context_window is not None
        counts = self.counter.count_messages(view.messages, view.prints)
        tail_budget = max(1, int(self.config.tail_retention_ratio * self.config.context_window))
        # kept messages must not defeat the compaction: their budget is capped at the tail's
        keep = KeepPolicy(min(self.config.user_message_budget, tail_budget), self.config.protected_tools)
        units = group_units(view.messages)
        return partition(view.messages, counts, units, tail_budget, floor=view.spliced_prefix, keep=keep)

    async def summarize(self, view: View, part: Partition, state: Entry, model: Summarize | None) -> _Made:
        """The new state after compacting ``part`` of ``view``: by the model, or digested (None)."""
        middle = [self._for_summary(view, index) for index in part.middle]
        calls = 0

        async def counted(messages: list[Message]) -> str:
            nonlocal calls
            calls += 1
            assert model is not None
            return await model(messages)

        if model is None:
            text, summarizer = (
                digest(middle, self.config.summary_max_tokens * DIGEST_CHARS_PER_TOKEN),
                "digest",
            )
        else:
            text, summarizer = await summarize_middle(middle, self.config, counted, self.counter), "model"
        keep = tuple(_origin(view, i, len(self.original)) for i in (*range(part.head_end), *part.kept))
        covered = _origin(view, part.tail_start, len(self.original))
        entry = Entry(covered, keep, text, state.cleared_before, summarizer)
        path = await self.archive().save(self.session(), [self._archived(view, i) for i in part.middle])
        return _Made(entry, "miss", calls, path)

    def _for_summary(self, view: View, position: int) -> Message:
        """What the summary model reads: cleared results restored (truncated), the rest as forwarded."""
        origin = view.origins[position]
        return view.messages[position] if origin is None else self.tiers.truncated(origin)[0]

    def _archived(self, view: View, position: int) -> Message:
        """What the archive keeps: the client's own message, or our earlier summary."""
        origin = view.origins[position]
        return view.messages[position] if origin is None else self.original[origin]

    def fit(self, view: View) -> tuple[View, list[Message], bool]:
        units = group_units(view.messages)
        memo: dict[int, int] = {}

        def count(message: Message) -> int:
            if id(message) not in memo:
                memo[id(message)] = self.counter.count_messages([message])[0]
            return memo[id(message)]

        protected = {
            id(message)
            for message, origin in zip(view.messages, view.origins, strict=True)
            if origin is not None and self.tiers.tools.get(origin) in self.config.protected_tools
        }

        def shrink(message: Message, limit: int) -> Message | None:
            if id(message) in protected:
                return None
            return truncate_tool_message(message, limit, "tokens", self.counter.offsets)

        order = _drop_order(view, units, self.config.protected_tools)
        fitted = fit(view.messages, units, order, self.limits.window, count, shrink, REPLY_PRIMING)
        kept = {id(message) for message in fitted.messages}
        archived = [self._archived(view, i) for i, m in enumerate(view.messages) if id(m) not in kept]
        fitted_view = View(
            fitted.messages,
            [fingerprint(m) for m in fitted.messages],
            [None] * len(fitted.messages),
        )
        return fitted_view, archived, fitted.fits

    async def result(
        self,
        view: View,
        state: Entry,
        cache: str,
        reason: str = "",
        summary_calls: int = 0,
        archive_path: Path | None = None,
        dropped: int = 0,
    ) -> CompactResult:
        messages, normalized = self._normalized(view.messages)
        if messages is view.messages:
            after = await self.tokens(view)
        else:
            after = self.counter.total(await self.counter.acount_messages(messages))
        if after > self.limits.window and self.config.on_overflow == "passthrough":
            return CompactResult(
                self.original,
                False,
                input_tokens=self.total,
                output_tokens=self.total,
                reason=reason or "over_window",
                summary_calls=summary_calls,
            )
        compacted = state.summary is not None
        return CompactResult(
            messages,
            compacted,
            self._stats(messages, after) if compacted else CompactStats(),
            archive_path,
            input_tokens=self.total,
            reason=reason,
            cache=cache,
            summary_calls=summary_calls,
            output_tokens=after,
            truncated=self.tiers.truncated_count(),
            cleared=self.tiers.cleared_count(state),
            dropped=dropped,
            normalized=normalized,
            summarizer=state.summarizer if compacted else "",
        )

    def _normalized(self, messages: list[Message]) -> tuple[list[Message], int]:
        """Normalized when we changed the request (or always, if configured); how many fixes."""
        unchanged = messages is self.original or (
            len(messages) == len(self.original)
            and all(a is b for a, b in zip(messages, self.original, strict=True))
        )
        if unchanged and self.config.normalize != "always":
            return messages, 0
        fixed = normalize(messages)
        before, after = {id(m) for m in messages}, {id(m) for m in fixed}
        if before == after and len(fixed) == len(messages):
            return messages, 0
        return fixed, len(after - before) + len(before - after)

    def _stats(self, messages: list[Message], after: int) -> CompactStats:
        retained = len(messages) - 1
        return CompactStats(
            original_token_count=self.total,
            compacted_token_count=after,
            compaction_ratio=round(after / self.total, 4) if self.total else 0.0,
            compacted_message_count=max(0, len(self.original) - retained),
            retained_message_count=retained,
        )


def _origin(view: View, position: int, length: int) -> int:
    """Index in the client's list of view position ``position`` (the end maps to the end)."""
    if position >= len(view.messages):
        return length
    origin = view.origins[position]
    assert origin is not None, "the tail never starts at a summary"
    return origin


def _drop_order(view: View, units: list[Unit], protected: Sequence[str]) -> list[Unit]:
    """Units the fit may drop, in order: the tail oldest first, then the kept units before the
    summary, then units with protected tool results. Never the head, the latest user message,
    the summary, or the newest result of each protected tool."""
    summary_at = view.spliced_prefix - 1
    latest_user = latest_user_index(view.messages)
    head_end = head_length(view.messages)
    newest: dict[str, Unit] = {}
    tools_of: dict[int, set[str]] = {}
    for unit in units:
        tools_of[unit.start] = {tool_call_name(c) for c in tool_calls_of(view.messages[unit.start])} & set(
            protected
        )
        newest.update(dict.fromkeys(tools_of[unit.start], unit))

    def pinned(unit: Unit) -> bool:
        return (
            unit.start < head_end
            or unit.start <= summary_at < unit.end
            or (latest_user is not None and unit.start <= latest_user < unit.end)
            or unit in newest.values()
        )

    droppable = [u for u in units if not pinned(u)]
    tail = [u for u in droppable if u.start > summary_at and not tools_of[u.start]]
    kept = [u for u in droppable if u.start < summary_at and not tools_of[u.start]]
    return tail + kept + [u for u in droppable if tools_of[u.start]]

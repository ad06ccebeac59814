"""The compaction recipe: count, reuse what is stored, decide, partition, summarize, archive.

Usable without a proxy (``compact_messages`` with any ``summarize`` coroutine); the proxy
hook drives the same ``Compactor`` with a shared store. The input list and its messages are
never mutated; the result holds the very same kept message objects.

With a store, one compaction costs one summary, however many turns follow: each request
splices in the stored compaction of its longest known prefix, and only when that view
reaches the threshold again is a new compaction made — of the previous summary plus what
has aged out since — and stored under the longer prefix. Between two compactions the
forwarded list of turn t is a prefix of turn t+1's, so provider prompt caches keep hitting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compact_hook.archive import Archive, FileArchive, conversation_session_id
from compact_hook.chain import Entry, View, entry_is_usable, prefix_chain, root_position, splice
from compact_hook.config import DEFAULT_LOCK_TTL_SECONDS, DEFAULT_LOCK_WAIT_SECONDS, CompactConfig
from compact_hook.errors import SummarizerError
from compact_hook.fingerprint import Fingerprint, fingerprints
from compact_hook.flight import SingleFlight
from compact_hook.messages import Message, malformed_reason
from compact_hook.partition import Partition, partition
from compact_hook.store import CompactionStore
from compact_hook.summarize import Summarize, summarize_middle
from compact_hook.tokens import TokenCounter, counter_for
from compact_hook.units import group_units

logger = logging.getLogger(__name__)

DEFAULT_TOKENIZER = "o200k_base"
POLL_SECONDS = (0.05, 0.1, 0.2, 0.5)


@dataclass(frozen=True, slots=True)
class CompactStats:
    """What a compaction did; all zeros when nothing was compacted.

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

    ``input_tokens`` is the request's size as received; ``reason`` says why nothing (new) was
    compacted; ``cache`` is ``hit`` (a stored compaction reused, no summary call), ``miss``
    (a new summary made here), ``shared`` (made by a concurrent request or replica) or
    ``none``; ``summary_calls`` counts the summary calls this request made.
    """

    messages: list[Message]
    compacted: bool
    stats: CompactStats = field(default_factory=CompactStats)
    archive_path: Path | None = None
    input_tokens: int = 0
    reason: str = ""
    cache: str = "none"
    summary_calls: int = 0


@dataclass(frozen=True, slots=True)
class _Made:
    """A compaction computed by this process (or found ready in the shared store)."""

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
    """Compact ``messages`` if they reach the threshold; otherwise return them as they are.

    Stateless: nothing is remembered between calls (use a ``Compactor`` for that).
    """
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
    """Compaction with memory: a store of past compactions and single flight per compaction."""

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
        limit = threshold(config, max_output_tokens)
        if not config.enabled or limit is None or not original or total < limit:
            reason = (
                "disabled" if not config.enabled else "window_unknown" if limit is None else "below_threshold"
            )
            return CompactResult(original, False, input_tokens=total, reason=reason)
        request = _Request(original, prints, counts, total, limit, config, counter, scope)
        return await self._compact(request, summarize, session_id, archive)

    async def _compact(
        self, request: _Request, summarize: Summarize, session_id: str | None, archive: Archive | None
    ) -> CompactResult:
        chain = prefix_chain(request.scope, request.prints)
        root = chain[root_position(request.original)]
        view = await self._stored_view(request, root, chain)
        view_counts = request.view_counts(view)
        if request.counter.total(view_counts) < request.limit:
            return request.result(view, view_counts, "hit")
        part = _partition(view, view_counts, request.config)
        stored = "hit" if view.spliced_prefix else "none"
        if not part.middle:
            return request.result(view, view_counts, stored, reason="nothing_to_summarize")
        key = chain[_origin(view, part.tail_start, len(request.original))]
        archive = archive or FileArchive(request.config.archive_dir)
        session = session_id or conversation_session_id(request.original)
        try:
            made, shared = await self.flights.run(
                key, lambda: self._make_once(key, root, view, part, request, summarize, archive, session)
            )
        except SummarizerError as exc:
            logger.error("compact_hook: compaction failed, request forwarded without it: %s", exc)
            return request.result(view, view_counts, stored, reason="summary_failed")
        compacted = splice(request.original, request.prints, made.entry)
        if shared:
            made = _Made(made.entry, "shared")
        return request.result(
            compacted, request.view_counts(compacted), made.cache, "", made.summary_calls, made.archive_path
        )

    async def _stored_view(self, request: _Request, root: bytes, chain: list[bytes]) -> View:
        if self.store is None:
            return View.of(request.original, request.prints)
        found = await self.store.find(root, chain)
        if found is None or not entry_is_usable(found[1], len(request.original)):
            return View.of(request.original, request.prints)
        return splice(request.original, request.prints, found[1])

    async def _make_once(
        self,
        key: bytes,
        root: bytes,
        view: View,
        part: Partition,
        request: _Request,
        summarize: Summarize,
        archive: Archive,
        session: str,
    ) -> _Made:
        """Across replicas: hold the key's lock and compute, or wait for the holder's entry."""
        if self.store is None:
            return await _summarize_view(view, part, request, summarize, archive, session)
        token = await self.store.try_lock(key, self.lock_ttl)
        if token is None:
            ready = await self._wait_for(key)
            if ready is not None:
                return _Made(ready, "shared")
            token = await self.store.try_lock(key, self.lock_ttl)
        try:
            made = await _summarize_view(view, part, request, summarize, archive, session)
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
        logger.warning(
            "compact_hook: waited %.0f s for another replica's summary; making it here", self.lock_wait
        )
        return None


@dataclass(frozen=True, slots=True)
class _Request:
    """What one request brings to a compaction, computed once."""

    original: list[Message]
    prints: list[Fingerprint]
    counts: list[int]
    total: int
    limit: int
    config: CompactConfig
    counter: TokenCounter
    scope: bytes

    def view_counts(self, view: View) -> list[int]:
        """Per-message counts of a view: the client's from ``counts``; only a summary is new."""
        if not view.spliced_prefix:
            return self.counts
        summary = view.spliced_prefix - 1
        summary_count = self.counter.count_messages([view.messages[summary]], [view.prints[summary]])[0]
        return [self.counts[o] if o is not None else summary_count for o in view.origins]

    def result(
        self,
        view: View,
        view_counts: list[int],
        cache: str,
        reason: str = "",
        summary_calls: int = 0,
        archive_path: Path | None = None,
    ) -> CompactResult:
        """Forward ``view``: the client's own list, or with a (stored or new) compaction spliced in."""
        if not view.spliced_prefix:
            return CompactResult(self.original, False, input_tokens=self.total, reason=reason, cache=cache)
        return CompactResult(
            view.messages,
            True,
            self.stats(view, self.counter.total(view_counts)),
            archive_path,
            input_tokens=self.total,
            reason=reason,
            cache=cache,
            summary_calls=summary_calls,
        )

    def stats(self, view: View, after: int) -> CompactStats:
        replaced = len(self.original) - (len(view.messages) - 1)
        return CompactStats(
            original_token_count=self.total,
            compacted_token_count=after,
            compaction_ratio=round(after / self.total, 4) if self.total else 0.0,
            compacted_message_count=replaced,
            retained_message_count=len(view.messages) - 1,
        )


def _skip_reason(config: CompactConfig, limit: int | None) -> str:
    if not config.enabled:
        return "disabled"
    return "window_unknown" if limit is None else "below_threshold"


def _partition(view: View, counts: list[int], config: CompactConfig) -> Partition:
    assert config.context_window is not None
    tail_budget = max(1, int(config.tail_retention_ratio * config.context_window))
    return partition(
        view.messages, counts, group_units(view.messages), tail_budget, floor=view.spliced_prefix
    )


def _origin(view: View, position: int, length: int) -> int:
    """Index in the client's list of view position ``position`` (the end maps to the end)."""
    if position >= len(view.messages):
        return length
    origin = view.origins[position]
    assert origin is not None, "the tail never starts at a summary"
    return origin


async def _summarize_view(
    view: View, part: Partition, request: _Request, summarize: Summarize, archive: Archive, session: str
) -> _Made:
    calls = 0

    async def counted(messages: list[Message]) -> str:
        nonlocal calls
        calls += 1
        return await summarize(messages)

    middle = [view.messages[index] for index in part.middle]
    summary = await summarize_middle(middle, request.config, counted, request.counter)
    keep = tuple(_origin(view, i, len(request.original)) for i in (*range(part.head_end), *part.kept))
    entry = Entry(_origin(view, part.tail_start, len(request.original)), keep, summary)
    path = await archive.save(session, middle)
    return _Made(entry, "miss", calls, path)

"""One summary per compaction: shared by concurrent requests, replicas, and later turns.

In process, requests that need the same compaction share one task (``SingleFlight``); across
replicas the store's lock does the same, the others polling for the holder's entry; a summary
that just failed is not repeated for ``failure_ttl``; and the summary model's breaker is told
of every summary made, so a model that keeps failing is left alone for a while.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from compact_hook.core.failures import SummaryFailure
from compact_hook.core.outcomes import CacheStatus, Reason
from compact_hook.engine.run import Run
from compact_hook.engine.summary.breaker import Breaker, Circuit
from compact_hook.engine.summary.compaction import Cut, Failed, Made, Making, make
from compact_hook.settings.process import (
    DEFAULT_FAILURE_TTL_SECONDS,
    DEFAULT_LOCK_TTL_SECONDS,
    DEFAULT_LOCK_WAIT_SECONDS,
)
from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)

T = TypeVar("T")

POLL_SECONDS = (0.05, 0.1, 0.2, 0.5)
"""Waiting on another replica: how long between looks, growing."""


async def pause(attempt: int) -> None:
    """The wait before look number ``attempt`` (from 0) at what another replica is doing."""
    await asyncio.sleep(POLL_SECONDS[min(attempt, len(POLL_SECONDS) - 1)])


@dataclass(frozen=True, slots=True)
class Leases:
    """How long a replica's compaction lock lasts, how long another waits for it, and how long a
    failed summary is remembered (so replicas and later turns do not repeat it at once)."""

    lock_ttl: float = DEFAULT_LOCK_TTL_SECONDS
    lock_wait: float = DEFAULT_LOCK_WAIT_SECONDS
    failure_ttl: float = DEFAULT_FAILURE_TTL_SECONDS


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._running: dict[bytes, asyncio.Task[T]] = {}

    async def run(self, key: bytes, work: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The work's result, and whether it was shared (someone else started it)."""
        task = self._running.get(key)
        if task is not None:
            return await asyncio.shield(task), True
        task = asyncio.ensure_future(work())
        self._running[key] = task
        task.add_done_callback(lambda done: self._finish(key, done))
        return await asyncio.shield(task), False

    def _finish(self, key: bytes, task: asyncio.Task[T]) -> None:
        if self._running.get(key) is task:
            del self._running[key]
        if not task.cancelled():
            task.exception()  # retrieved here, so an unawaited failure is not logged as lost

    def __len__(self) -> int:
        return len(self._running)


FAILED = b"failed:"


class SummaryOnce:
    """Makes a compaction at most once across requests and replicas."""

    def __init__(self, store: CompactionStore | None, leases: Leases, breaker: Breaker) -> None:
        self.store, self.leases, self.breaker = store, leases, breaker
        self.flights: SingleFlight[Made | Failed] = SingleFlight()

    async def made(self, run: Run, cut: Cut) -> tuple[Made | Failed, bool]:
        """The compaction of ``cut`` (stored under ``cut.key``), and whether another request made
        it (shared)."""
        uses_digest = run.config.uses_digest
        gate = Circuit.CLOSED if uses_digest else await self.breaker.gate(Breaker.of(run.request), run.config)
        if gate is Circuit.OPEN:
            return Failed(
                "the summary model's breaker is open", 0, SummaryFailure.BREAKER_OPEN, Reason.BREAKER_OPEN
            ), False
        recent = await self._recent_failure(run.root)
        if recent is not None:
            return Failed(
                f"a summary for this conversation failed moments ago ({recent.value})", 0, recent
            ), False
        making = Making(None if uses_digest else run.request.summarize, probe=gate is Circuit.PROBE)
        return await self.flights.run(cut.key(run), lambda: self._make_once(run, cut, making))

    async def _make_once(self, run: Run, cut: Cut, making: Making) -> Made | Failed:
        """Once per compaction across requests; the breaker hears of every model summary made."""
        made = await self._made_or_awaited(run, cut, making)
        if making.model is not None and made.summary_calls:
            await self.breaker.heard(Breaker.of(run.request), run.config, failure_of_made(made))
        return made

    async def _made_or_awaited(self, run: Run, cut: Cut, making: Making) -> Made | Failed:
        """Across replicas: hold the key's lock and compute, or wait for the holder's entry. Once the
        lock is ours the key is looked at: an entry there other than the state the engine decided
        from (``cut.state``: the conversation's longest stored prefix when it looked) was stored
        since by a holder that let go meanwhile, and is not made twice — however late in the
        request that was (a look of our own before the lock would only narrow that window: a
        loaded machine's plan in a thread left it open on CI). The state decided from (a digest
        where a summary is wanted, a cut made for a larger limit) is the engine's to replace."""
        if self.store is None:
            return await make(run, cut, making)
        key = cut.key(run)
        token = await self.store.try_lock(key, self.leases.lock_ttl)
        if token is None:
            patience = min(self.leases.lock_wait, run.config.summary_deadline_seconds)
            ready = await self._wait_for(key, patience)
            if ready is not None:
                return ready
            token = await self.store.try_lock(key, self.leases.lock_ttl)
        if token is not None:  # a holder may have stored it and let go since the engine looked
            entry = await self.store.get(key)
            if entry is not None and entry != cut.state:
                await self.store.unlock(key, token)
                return Made(entry, CacheStatus.SHARED)
        try:
            made = await make(run, cut, making)
            if isinstance(made, Made):
                await self.store.put(run.root, key, made.entry)
            else:  # before unlocking: a waiting replica must not repeat what just failed
                await self.store.set_note(FAILED + key, made.kind.value, self.leases.failure_ttl)
                await self.store.set_note(FAILED + run.root, made.kind.value, self.leases.failure_ttl)
            return made
        finally:
            if token is not None:
                await self.store.unlock(key, token)

    async def _recent_failure(self, root: bytes) -> SummaryFailure | None:
        """A summary for this conversation failed within ``failure_ttl`` (its kind): do not repeat it yet."""
        if self.store is None or self.leases.failure_ttl <= 0:
            return None
        return failure_noted(await self.store.get_note(FAILED + root))

    async def _wait_for(self, key: bytes, patience: float) -> Made | Failed | None:
        """Poll for another replica's entry (or its failure); None when its lock is gone or we
        waited ``patience`` seconds: then we make it ourselves."""
        assert self.store is not None
        deadline = time.monotonic() + patience
        attempt = 0
        while time.monotonic() < deadline:
            await pause(attempt)
            attempt += 1
            entry = await self.store.get(key)
            if entry is not None:
                return Made(entry, CacheStatus.SHARED)
            failed = failure_noted(await self.store.get_note(FAILED + key))
            if failed is not None:
                return Failed(
                    f"another replica's summary for this compaction failed ({failed.value})", 0, failed
                )
            if not await self.store.is_locked(key):
                entry = await self.store.get(key)
                if entry is None:  # a lease shorter than the summary, or a replica that stopped
                    logger.warning(
                        "compact_hook: another replica's lock ended with no summary (expired or its "
                        "replica stopped); making it"
                    )
                return Made(entry, CacheStatus.SHARED) if entry is not None else None
        logger.warning("compact_hook: waited %.0f s for another replica's summary; making it", patience)
        return None


def failure_of_made(made: Made | Failed) -> SummaryFailure | None:
    """What the breaker hears of a compaction: a model that answered with no summary failed too
    (the digest stood in; called again, it would answer alike)."""
    if isinstance(made, Failed):
        return made.kind
    return SummaryFailure.UNUSABLE if made.unusable is not None else None


def warn_unusable(run: Run, why: str) -> None:
    """Once per model group: its summary model answers with no summary (the digest stood in)."""
    group = run.request.origin.model_group
    if run.memory.notices.first(("summary_unusable", group)):
        logger.warning(
            "compact_hook: model group %s: %s; the digest stands in, now and whenever it answers so (a "
            "larger summary_model writes real summaries)",
            group or "?",
            why,
        )


def failure_noted(note: str | None) -> SummaryFailure | None:
    """The kind of failure a replica noted (an older replica's note, "1", reads as unavailable)."""
    if note is None:
        return None
    try:
        return SummaryFailure(note)
    except ValueError:
        return SummaryFailure.UNAVAILABLE

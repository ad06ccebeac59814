"""Bounded background work: what the proxy does for a conversation while nobody waits.

At most ``concurrency`` jobs run at once and at most ``queue`` more wait; when one more
arrives, the oldest waiting job of the tenant with the most waiting is dropped, so one
client flooding the queue only crowds out its own work. A job is known by a key (one per
conversation), so the same work is never queued twice, and a request that needs the result
now can await the running job or take a waiting one back to do it itself.

Jobs never raise into the loop: an escaped exception is logged. A cancelled job means the
process is shutting down (or ``close`` was called): nothing more is started, the waiting
jobs are dropped, and no task is left pending when the loop closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Job:
    tenant: str
    work: Callable[[], Awaitable[None]]
    dropped: Callable[[], None]
    """Called when the job is dropped without running (queue full, shutdown, taken back)."""


class Background:
    def __init__(self, concurrency: int, queue: int) -> None:
        self.concurrency = concurrency
        self.queue = queue
        self.closed = False
        self._running: dict[bytes, asyncio.Task[None]] = {}
        self._waiting: OrderedDict[bytes, Job] = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        return key in self._running or key in self._waiting

    def __len__(self) -> int:
        return len(self._running) + len(self._waiting)

    def submit(self, key: bytes, job: Job) -> bool:
        """Run ``job`` now or when a slot frees; False if closed or ``key`` is already known."""
        if self.closed or key in self:
            return False
        if len(self._running) < self.concurrency:
            self._start(key, job)
            return True
        if self.queue == 0:
            job.dropped()
            return False
        if len(self._waiting) >= self.queue:
            self._drop(self._victim())
        self._waiting[key] = job
        return True

    def task(self, key: bytes) -> asyncio.Task[None] | None:
        """The running job under ``key``, to await its result."""
        return self._running.get(key)

    def withdraw(self, key: bytes) -> None:
        """Take back a job that has not started (its requester will do the work itself)."""
        if key in self._waiting:
            self._drop(key)

    async def close(self) -> int:
        """Drop what waits, cancel what runs and wait for it to end; how many were cancelled."""
        self.closed = True
        for key in list(self._waiting):
            self._drop(key)
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        return len(running)

    def _start(self, key: bytes, job: Job) -> None:
        task = asyncio.ensure_future(self._guarded(job))
        self._running[key] = task
        task.add_done_callback(lambda done: self._finished(key, done))

    async def _guarded(self, job: Job) -> None:
        try:
            await job.work()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("compact_hook: background work failed")

    def _finished(self, key: bytes, task: asyncio.Task[None]) -> None:
        if self._running.get(key) is task:
            del self._running[key]
        if task.cancelled():  # shutting down: start nothing new, leave no task pending
            self.closed = True
            for waiting in list(self._waiting):
                self._drop(waiting)
            return
        while self._waiting and len(self._running) < self.concurrency and not self.closed:
            next_key, job = self._waiting.popitem(last=False)
            self._start(next_key, job)

    def _victim(self) -> bytes:
        """The oldest waiting job of the tenant with the most jobs waiting."""
        busiest = Counter(job.tenant for job in self._waiting.values()).most_common(1)[0][0]
        return next(key for key, job in self._waiting.items() if job.tenant == busiest)

    def _drop(self, key: bytes) -> None:
        job = self._waiting.pop(key)
        job.dropped()

"""Single flight: concurrent requests that need the same compaction share one computation.

In process, the first caller starts the work as a task and everyone awaits it; the task
is shielded, so a client that disconnects does not cancel the summary others wait for.
Across replicas, the store's lock does the same job (see ``engine.Compactor``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from compact_hook.settings.process import (
    DEFAULT_FAILURE_TTL_SECONDS,
    DEFAULT_LOCK_TTL_SECONDS,
    DEFAULT_LOCK_WAIT_SECONDS,
)

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

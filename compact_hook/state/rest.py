"""How long a ``TieredStore`` leaves Redis aside once it found it unreachable, and what ends that early.

A rest exists so that an unreachable Redis does not cost every request a timeout: for
``DOWN_SECONDS`` the replica answers from its own memory and does not try Redis. Behind sentinels a
rest also ends as soon as they name a master other than the one that failed: the promoted replica
is used from the first call after its promotion, not up to a second later — a second in which each
replica compacts alone, so a compaction event met then costs a summary call per replica.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

logger = logging.getLogger(__name__)

DOWN_SECONDS = 1.0
"""How long Redis is set aside once found unreachable (behind sentinels, until they name another master)."""
PROBE_SECONDS = 0.1
"""While Redis behind sentinels is set aside, they are asked for its master at most this often."""


class MasterWatch(Protocol):
    """Where a Sentinel-managed Redis client last found its master, and where the sentinels say it
    is now (``redis_clients.SentinelWatch``)."""

    def used(self) -> str | None: ...

    async def named(self) -> str | None: ...


class Rest:
    """Redis set aside until ``until`` (a time of the store's clock), or until the sentinels
    (``watch``) name a master other than ``failed_master``."""

    def __init__(self, timeout: float, watch: MasterWatch | None = None) -> None:
        self.timeout = timeout
        self.watch = watch
        self.until = 0.0
        self.failed_master: str | None = None
        """The master the client had when Redis was set aside (None: no watch, or it had none)."""
        self._next_probe = 0.0

    def on(self, now: float) -> bool:
        return now < self.until

    def begin(self, now: float) -> None:
        self.until = now + DOWN_SECONDS
        self.failed_master = self.watch.used() if self.watch is not None else None

    async def ended_early(self, now: float) -> bool:
        """Whether the sentinels now name a master other than the one that failed: the rest ends.
        Asked at most every ``PROBE_SECONDS``, and not again in this rest once they could not answer
        in time (they would cost each request the timeout the rest is there to spare it)."""
        if self.watch is None or self.failed_master is None or now < self._next_probe:
            return False
        self._next_probe = now + PROBE_SECONDS
        try:
            named = await asyncio.wait_for(self.watch.named(), timeout=self.timeout)
        except Exception:  # the sentinels unreachable too: the rest goes on
            self._next_probe = self.until
            return False
        if named is None or named == self.failed_master:
            return False
        logger.warning(
            "compact_hook: the sentinels name a new Redis master (%s, was %s); sharing through it again",
            named,
            self.failed_master,
        )
        self.until, self.failed_master = 0.0, None
        return True

"""A shared store over the in-process one: what a replica shares with the others — through Redis, or
the processes of one machine through the file store (``state.file_store``) — answered from its own
memory whenever the shared store cannot answer (a failed call, a timeout, set aside for a while).

Every write goes to both; a read prefers Redis's answer, and a state this replica made while Redis
was away, longer than Redis's, is given back to it (the others catch up instead of summarizing the
same turns again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from compact_hook.core.chain import Entry
from compact_hook.state import redis_clients
from compact_hook.state.store import CompactionStore, MemoryStore

logger = logging.getLogger(__name__)

DOWN_SECONDS = 1.0
"""How long Redis is set aside once found unreachable (behind sentinels, until they name another master)."""
SAID_MOST = 64
"""Distinct faults a store that says each once remembers having said (past it, it says no more)."""
PROBE_SECONDS = 0.1
"""While Redis behind sentinels is set aside, they are asked for its master at most this often."""


class MasterWatch(Protocol):
    """Where a Sentinel-managed Redis client last found its master, and where the sentinels say it
    is now (``redis_clients.SentinelWatch``)."""

    def used(self) -> str | None: ...

    async def named(self) -> str | None: ...


class Rest:
    """Redis set aside until ``until`` (a time of the store's clock), or until the sentinels
    (``watch``) name a master other than ``failed_master``.

    A rest exists so that an unreachable Redis does not cost every request a timeout: the replica
    answers from its own memory meanwhile. Behind sentinels it ends as soon as they name another
    master: the promoted replica is used from the first call after its promotion, not up to a second
    later — a second in which each replica compacts alone (a summary call per replica)."""

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


@dataclass(frozen=True, slots=True)
class SharedKind:
    """What a tiered store shares through, as its log lines name it and its faults read."""

    name: str
    is_outage: Callable[[BaseException], bool]
    """Whether a fault says the store cannot serve now (set aside for ``DOWN_SECONDS``), rather
    than that one call failed."""
    hint: Callable[[BaseException], str] = lambda _: ""
    once: bool = False
    """Each distinct fault logged once (a file that stays read-only would say so every second)."""
    waits: bool = True
    """Whether a call may wait on something outside (a server): bounded by the tiered store's timeout.
    The file store's never do (its reads wait for nothing, its writes are queued), and a timeout
    costs each call a trip through the loop (``asyncio.wait_for`` schedules a task)."""


class Pending(Exception):  # noqa: N818 (a state, not an error)
    """The shared store cannot answer this read yet (a write about it is queued): memory answers,
    neither a fault nor a fallback."""


REDIS = SharedKind(
    "Redis", redis_clients.is_outage, lambda exc: redis_clients.MOVED_HINT if "MOVED" in str(exc) else ""
)


class TieredStore:
    """Redis first (shared truth across replicas), the in-process store always written too.

    Any Redis error or timeout is logged and answered from memory. Only a sign that Redis is
    unreachable (a connection refused or lost, a timeout, a cluster without a node for a slot, no
    master behind the sentinels) sets it aside for ``DOWN_SECONDS``, so a dead server does not add
    a timeout to every request; any other failed command costs that call alone. Behind sentinels
    (``watch``), a rest ends as soon as they name a master other than the one that failed: the
    promoted replica is used from the first call after its promotion, not up to a second later
    (a second in which each replica compacts alone). ``errors`` counts failed Redis calls,
    ``outages`` the times Redis was set aside, ``fallbacks`` calls answered by memory alone
    (metrics).
    """

    def __init__(
        self,
        shared: CompactionStore,
        local: MemoryStore,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        watch: MasterWatch | None = None,
        kind: SharedKind = REDIS,
    ) -> None:
        self.shared = shared
        self.kind = kind
        self._said: set[str] = set()
        self.local = local
        self.timeout = timeout
        self.clock = clock
        self.rest = Rest(timeout, watch)
        self.errors = 0
        self.outages = 0
        self.fallbacks = 0

    @property
    def shared_available(self) -> bool:
        return not self.rest.on(self.clock())

    async def find(self, root: bytes, chain: Sequence[bytes]) -> tuple[bytes, Entry] | None:
        """The longest state either store knows: Redis's (copied here), or one this replica made
        while Redis was away, which covers more (given to Redis, so the others catch up with it
        instead of summarizing the same turns again)."""
        ok, found = await self._shared(lambda: self.shared.find(root, chain))
        mine = await self.local.find(root, chain)
        if not ok:
            return mine
        if mine is not None and (found is None or mine[1].span > found[1].span):
            await self._shared(lambda: self.shared.put(root, *mine))
            return mine
        if found is not None:
            await self.local.put(root, *found)
        return found  # type: ignore[no-any-return]

    async def get(self, key: bytes) -> Entry | None:
        ok, found = await self._shared(lambda: self.shared.get(key))
        return found if ok else await self.local.get(key)

    async def put(self, root: bytes, key: bytes, entry: Entry) -> None:
        await self.local.put(root, key, entry)
        await self._shared(lambda: self.shared.put(root, key, entry))

    async def try_lock(self, key: bytes, ttl: float) -> str | None:
        ok, token = await self._shared(lambda: self.shared.try_lock(key, ttl))
        return token if ok else "local"

    async def unlock(self, key: bytes, token: str) -> None:
        if token != "local":
            await self._shared(lambda: self.shared.unlock(key, token))

    async def is_locked(self, key: bytes) -> bool:
        ok, locked = await self._shared(lambda: self.shared.is_locked(key))
        return ok and bool(locked)

    async def set_note(self, key: bytes, value: str, ttl: float) -> None:
        await self.local.set_note(key, value, ttl)
        await self._shared(lambda: self.shared.set_note(key, value, ttl))

    async def get_note(self, key: bytes) -> str | None:
        ok, value = await self._shared(lambda: self.shared.get_note(key))
        # notes are never deleted, only written again or expired: one this process wrote and could
        # not share (a failed write) is still known here
        return value if ok and value is not None else await self.local.get_note(key)

    async def put_record(self, key: bytes, value: str, ttl: float, tenant: str | None = None) -> bool:
        kept = await self.local.put_record(key, value, ttl, tenant)
        ok, shared = await self._shared(lambda: self.shared.put_record(key, value, ttl, tenant))
        return kept and (not ok or bool(shared))

    async def get_record(self, key: bytes) -> str | None:
        ok, value = await self._shared(lambda: self.shared.get_record(key))
        return value if ok and value is not None else await self.local.get_record(key)

    async def _shared(self, call: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
        """Run a shared store's call: ``(True, value)``, or ``(False, None)`` when it failed, is
        resting, or cannot answer yet (``Pending``)."""
        if not self.shared_available and not await self.rest.ended_early(self.clock()):
            self.fallbacks += 1
            return False, None
        try:
            if not self.kind.waits:
                return True, await call()
            return True, await asyncio.wait_for(call(), timeout=self.timeout)
        except Pending:
            return False, None
        except Exception as exc:  # down, slow, or answering garbage: never the caller's problem
            self.fault(exc)
            return False, None

    def fault(self, exc: BaseException) -> None:
        """A shared store's call failed (here, or a write it queued): counted, said, and the store
        set aside for a while when the fault says it cannot serve now. Memory answered the call, or
        keeps what the write was to share: a fallback."""
        self.errors += 1
        self.fallbacks += 1
        outage = self.kind.is_outage(exc)
        if outage:
            self.outages += 1
            self.rest.begin(self.clock())
        self._say(exc, outage)

    def _say(self, exc: BaseException, outage: bool) -> None:
        fault = f"{type(exc).__name__}: {exc}"
        if self.kind.once:
            if fault in self._said or len(self._said) >= SAID_MOST:
                return
            self._said.add(fault)
        if outage:
            logger.warning(
                "compact_hook: %s store unavailable (%s); using the in-process store for %.0f s",
                self.kind.name,
                fault,
                DOWN_SECONDS,
            )
        else:
            logger.warning(
                "compact_hook: %s store call failed (%s); answered from the in-process store%s",
                self.kind.name,
                fault,
                self.kind.hint(exc),
            )

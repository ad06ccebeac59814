"""Zero-wait compaction: the next compaction is made while the agent works, applied when due.

The proxy sees a conversation grow turn by turn. From ``prepare_ratio`` of the window the
compaction the trigger will need is started in the background and the request is forwarded
without waiting. The result goes to a store of its own — *prepared*, never spliced into a
request under the trigger, so what we forward keeps its prefix until the compaction event —
and the turn that reaches the trigger applies it with no summary call on its path.

- The cut is planned for when it will be applied: the tail it keeps verbatim is shortened by
  what is still to arrive before the trigger, so applied there it leaves about what a
  compaction made there would.
- What the summary replaces is archived when the compaction is applied (it is remembered in
  the entry's ``unarchived``), never at preparation: nothing left the model's view yet.
- One preparation per conversation: in process the background queue knows it by key; across
  replicas a lock in the prepared store says another replica is on it, and a preparation that
  takes the lock first looks for what a replica prepared and let go of since it was queued (the
  lock alone leaves that window open: a loaded machine queued one before the other locked and ran
  it after). The trigger awaits one in flight rather than starting its own.
- While one is prepared or being prepared, the clearing tier waits (``Compactor._clear``): a
  batch cleared meanwhile would bring the conversation back under ``prepare_ratio``, put off the
  trigger, and leave the prepared cut short by the time it comes — a second summary then, merged,
  and the first paid for and never forwarded (a summary slower than the agent's turns, as on a
  loaded proxy, made that the rule: Gemini CLI's loop at 16K paid 6 calls for 3 applied).
- A prepared compaction is extended (prepared again from it, its summary merged) only when it
  will not suffice at the trigger: applied now it leaves no less than the conversation holds
  without it, so by the trigger it would leave the conversation past it. Otherwise it waits for
  the trigger, even past ``prepare_ratio``: one prepared again from it would be paid for and never
  used.
- A failed preparation counts toward the summary model's breaker and is not retried for
  ``failure_ttl``; the trigger then compacts as it would without preparation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from compact_hook.core.chain import Entry, entry_is_usable
from compact_hook.core.economics import Economy
from compact_hook.core.outcomes import Preparation
from compact_hook.engine.ahead.background import Background, Job
from compact_hook.engine.ahead.tally import SessionTally, Tally
from compact_hook.engine.decision import Decision
from compact_hook.engine.economy.costs import Costs
from compact_hook.engine.memory.archiving import session_of
from compact_hook.engine.run import Run
from compact_hook.engine.summary.breaker import Breaker, Circuit
from compact_hook.engine.summary.compaction import Cut, Made, Making, make, plan
from compact_hook.engine.summary.once import Leases, failure_of_made, pause, warn_unusable
from compact_hook.engine.view import View
from compact_hook.offload import off_loop
from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)

LOCK = b"preparing:"
FAILED = b"prepare-failed:"


@dataclass(frozen=True)
class PrepareSetup:
    """What preparing needs beyond the compactor: where prepared compactions wait, the bounded
    background queue, and whether the process is shutting down (then nothing new starts, and a
    failure is the shutdown's, not the summary model's)."""

    store: CompactionStore
    background: Background
    stopping: Callable[[], bool] = lambda: False


@dataclass(frozen=True, slots=True)
class Preparing:
    """One preparation for the background: under which lock, the state and view it cuts from,
    whether it is the breaker's probe, and the economy its cut aims by."""

    key: bytes
    base: Entry
    view: View
    probe: bool
    economy: Economy | None


@dataclass
class PrepareStats:
    """Counts since start: what preparation cost and what it bought. ``started``: handed to the
    background queue; ``failed``: the summary failed (the breaker heard of it); ``dropped``: let go
    by the bounded queue while waiting (the trigger then compacts itself); ``cancelled``: stopped
    by the shutdown; ``summary_calls``: model calls made in the background, failed ones included;
    ``tally``: summaries made ahead, and how many a trigger applied; ``sessions_unused``: each
    summary made ahead, by how many its conversation had then made and not applied (itself included:
    1 is the price of zero wait, more is a conversation paying for summaries it does not use)."""

    started: int = 0
    failed: int = 0
    dropped: int = 0
    cancelled: int = 0
    summary_calls: int = 0
    tally: Tally = Tally()
    sessions_unused: Counter[int] = field(default_factory=Counter)


@dataclass
class Preparations:
    setup: PrepareSetup
    breaker: Breaker
    leases: Leases
    stats: PrepareStats = field(default_factory=PrepareStats)

    @property
    def store(self) -> CompactionStore:
        return self.setup.store

    @property
    def tally(self) -> SessionTally:
        """Per conversation: summaries prepared, and applied."""
        return SessionTally(self.setup.store)

    async def consider(self, run: Run, due: Decision) -> Preparation | None:
        """Past ``prepare_ratio``, under the trigger: start preparing unless it is under way or what
        is prepared will suffice at the trigger. Never waits for the summary."""
        key, state, view = LOCK + run.root, due.state, due.view
        assert view is not None
        if key in self.setup.background:
            return Preparation.RUNNING
        found = await self.find(run, state)
        base, base_view = state, view
        if found is not None:
            base, base_view = found, run.tiers.view(found)
            if await run.tokens(base_view) < await run.tokens(view):
                return Preparation.READY
            logger.info(
                "compact_hook: the compaction prepared for session %s would not suffice at the trigger; "
                "preparing the next from it (its summary merged)",
                session_of(run),
            )
        if await self.store.is_locked(key):  # another replica is on it
            return Preparation.RUNNING
        if self.setup.stopping() or await self.store.get_note(FAILED + key) is not None:
            return None
        gate = await self.breaker.gate(Breaker.of(run.request), run.config)
        if gate is Circuit.OPEN:
            return None
        preparing = Preparing(key, base, base_view, gate is Circuit.PROBE, due.economy)
        job = Job(run.request.tenant, lambda: self._prepare(run, preparing), self._dropped)
        if not self.setup.background.submit(key, job):
            return None
        self.stats.started += 1
        return Preparation.STARTED

    async def ready(self, run: Run, state: Entry) -> Entry | None:
        """At the trigger: the prepared compaction that covers more than ``state``, if any.

        One in flight here is awaited; one that waits for a slot is taken back (the trigger
        compacts itself, as without preparation); another replica's is waited for.
        """
        key = LOCK + run.root
        self.setup.background.withdraw(key)
        task = self.setup.background.task(key)
        if task is not None:
            await asyncio.shield(task)
        elif await self.store.is_locked(key):
            await self._wait_unlocked(key, min(self.leases.lock_wait, run.config.summary_deadline_seconds))
        return await self.find(run, state)

    async def pending(self, run: Run, state: Entry) -> bool:
        """A compaction for this conversation is being prepared (here, or by another replica), or is
        prepared and covers more than ``state``."""
        key = LOCK + run.root
        if key in self.setup.background or await self.store.is_locked(key):
            return True
        return await self.find(run, state) is not None

    async def find(self, run: Run, state: Entry) -> Entry | None:
        """The longest prepared compaction of this request's prefix, if it covers more than
        ``state``; its clearing boundary is the further of the two."""
        found = await self.store.find(run.root, run.chain)
        if found is None:
            return None
        entry = found[1]
        if not entry_is_usable(entry, len(run.prints)) or entry.covered <= state.covered:
            return None
        return dataclasses.replace(entry, cleared_before=max(entry.cleared_before, state.cleared_before))

    async def _prepare(self, run: Run, preparing: Preparing) -> None:
        """The background job: the trigger's partition and summary, kept as prepared."""
        key, view, costs = preparing.key, preparing.view, Costs(run, preparing.economy)
        token = await self.store.try_lock(key, self.leases.lock_ttl)
        if token is None:  # another replica prepares it
            return
        try:
            if await self.find(run, preparing.base) is not None:  # it did, and let go since we looked
                return
            ahead = costs.turns_ahead(await run.tokens(view))
            part = await off_loop(plan, run, view, costs.target(), ahead)
            if not part.middle:
                return
            making = Making(run.request.summarize, preparing.probe, archive=False)
            made = await make(run, Cut(view, part, preparing.base), making)
            self.stats.summary_calls += made.summary_calls
            if isinstance(made, Made):  # an answer that is no summary: the digest prepared in its place
                await self.breaker.heard(Breaker.of(run.request), run.config, failure_of_made(made))
                if made.unusable is not None:
                    warn_unusable(run, made.unusable)
                await self.store.put(run.root, run.chain[made.entry.span], made.entry)
                self.stats.tally = self.stats.tally.counted(made=1)
                session = await self.tally.count(run.root, made=1)
                self.stats.sessions_unused[session.unused] += 1
                logger.info(
                    "compact_hook: compaction prepared for session %s (%d entries to archive when applied, "
                    "%d summary calls)",
                    session_of(run),
                    len(made.entry.unarchived),
                    made.summary_calls,
                )
            elif self.setup.stopping():  # the shutdown closed what the summary needed
                self.stats.cancelled += 1
            else:
                self.stats.failed += 1
                await self.breaker.heard(Breaker.of(run.request), run.config, made.kind)
                await self.store.set_note(FAILED + key, made.kind.value, self.leases.failure_ttl)
                logger.warning("compact_hook: preparing a compaction failed: %s", made.error)
        except asyncio.CancelledError:
            self.stats.cancelled += 1
            logger.info("compact_hook: a compaction being prepared was cancelled (shutdown)")
            raise
        finally:
            await self.store.unlock(key, token)

    async def close(self) -> None:
        """Cancel what is being prepared (its locks released) and say what preparing cost."""
        await self.setup.background.close()
        stats = self.stats
        logger.info(
            "compact_hook: preparations: %d started, %d made, %d applied, %d unused, %d failed, "
            "%d dropped, %d cancelled",
            stats.started,
            stats.tally.made,
            stats.tally.applied,
            stats.tally.unused,
            stats.failed,
            stats.dropped,
            stats.cancelled,
        )

    def _dropped(self) -> None:
        self.stats.dropped += 1

    async def _wait_unlocked(self, key: bytes, patience: float) -> None:
        """Another replica prepares this conversation's compaction: wait until it is done."""
        deadline = time.monotonic() + patience
        attempt = 0
        while time.monotonic() < deadline and await self.store.is_locked(key):
            await pause(attempt)
            attempt += 1

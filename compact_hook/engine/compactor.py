"""The compaction recipe: count, apply the cheap tiers, reuse what is stored, compact, fit.

One pass per request, in order of cost:

1. measure: count everything the model reads (only new entries are tokenized);
2. tier 1: tool outputs over ``tool_output_max_tokens`` are truncated (every request);
3. recall: the conversation's stored state is spliced in (a compaction, a clearing boundary);
4. tier 2: at ``clear_trigger_ratio`` old tool results are cleared, the boundary advancing
   in batches and stored;
5. tier 3: from ``prepare_ratio`` the compaction is prepared in the background (see
   ``engine.prepare``); at ``trigger_ratio`` a prepared one is applied, or the middle is
   summarized (or digested) — one summary per compaction, shared by concurrent requests and
   replicas — and stored;
6. fit: if the request still would not fit the window, it is fitted (``on_overflow: fit``);
7. finish: a changed request is normalized so every tool call has its result.

The engine knows no wire format: a ``Conversation`` brings its format's adapter. The
input entries are never mutated.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from compact_hook.core.chain import OPEN_END, Entry, entry_is_usable
from compact_hook.core.outcomes import (
    CacheStatus,
    Mode,
    Preparation,
    Reason,
    Summarizer,
)
from compact_hook.core.partition import Partition
from compact_hook.engine.archiving import archive_pending, keep
from compact_hook.engine.breaker import Breaker
from compact_hook.engine.clearing import advance_clearing, before_a_summary
from compact_hook.engine.compaction import Failed, Made, Making, compaction_key, make, plan
from compact_hook.engine.costs import change_pays_now, clearing_waits, early_plan, economy_of, prepares
from compact_hook.engine.finish import Outcome, finish, untouched
from compact_hook.engine.flight import Leases, SingleFlight
from compact_hook.engine.guarantee import fitted, normalized
from compact_hook.engine.ledger import CacheLedger
from compact_hook.engine.once import SummaryOnce
from compact_hook.engine.prepare import Preparations, PrepareSetup
from compact_hook.engine.result import CompactRequest, CompactResult
from compact_hook.engine.run import ProcessMemory, Run
from compact_hook.engine.view import View, without_stale_thinking
from compact_hook.process_config import (
    DEFAULT_FAILURE_TTL_SECONDS,
    DEFAULT_LOCK_TTL_SECONDS,
    DEFAULT_LOCK_WAIT_SECONDS,
)
from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)


class Compactor:
    """Compaction with memory: a store of conversation states and single flight per compaction."""

    def __init__(
        self,
        store: CompactionStore | None,
        lock_ttl: float = DEFAULT_LOCK_TTL_SECONDS,
        lock_wait: float = DEFAULT_LOCK_WAIT_SECONDS,
        failure_ttl: float = DEFAULT_FAILURE_TTL_SECONDS,
        prepare: PrepareSetup | None = None,
        memory: ProcessMemory | None = None,
    ) -> None:
        self.store = store
        self.leases = Leases(lock_ttl, lock_wait, failure_ttl)
        self.memory = memory or ProcessMemory()
        self.breaker = Breaker(store)
        self.once = SummaryOnce(store, self.leases, self.breaker)
        self.ledger = CacheLedger(store)
        self.preparations = (
            Preparations(prepare, self.breaker, self.leases)
            if prepare is not None and store is not None
            else None
        )

    @property
    def flights(self) -> SingleFlight[Made | Failed]:
        """The summaries under way in this process, by compaction key."""
        return self.once.flights

    async def close(self) -> None:
        """The process stops: background work is cancelled cleanly."""
        if self.preparations is not None:
            await self.preparations.close()

    async def compact(self, request: CompactRequest) -> CompactResult:
        run = await Run.measure(request, self.memory)
        config, limits = request.config, run.limits
        if request.mode is Mode.OFF:
            return untouched(run, Reason.OFF)
        if not config.enabled or limits is None or not run.prints:
            reason = (
                Reason.DISABLED
                if not config.enabled
                else Reason.WINDOW_UNKNOWN
                if limits is None
                else Reason.EMPTY
            )
            return untouched(run, reason)
        if limits.no_room:
            run.warn_no_room()
            return untouched(run, Reason.NO_ROOM)
        forced, remembered = request.mode is Mode.FORCE, request.recall or request.mode is Mode.FORCE
        if (
            not remembered
            and run.total < limits.engage
            and not run.tiers.oversized
            and config.normalize != "always"
        ):
            if not await self._thinking_state(run):
                return untouched(run, Reason.BELOW_THRESHOLD)
            remembered = True
        await run.tiers.prepare()
        view = run.tiers.view(None)
        if not remembered and await run.tokens(view) < limits.engage:
            if not await self._thinking_state(run):
                return await self._fit(run, view, Outcome(Entry(), CacheStatus.NONE, Reason.BELOW_THRESHOLD))
            remembered = True
        state, cache = await self._recall(run)
        run.economy = await economy_of(run, self.ledger, state)
        state = await self._clear(run, state)
        view = run.tiers.view(state)
        tokens = await run.tokens(view)
        early = None if forced or tokens >= limits.compact else await early_plan(run, view, tokens)
        if tokens < limits.compact and not forced:
            if early is None or (self.preparations is not None and run.config.prepares):
                return await self._under_trigger(run, state, view, cache, early is not None)
        if not forced and self.preparations is not None:
            prepared = await self.preparations.ready(run, state)
            if prepared is not None:
                return await self._apply(run, prepared)
        return await self._compact(run, state, view, cache, early)

    async def _under_trigger(
        self, run: Run, state: Entry, view: View, cache: CacheStatus, early: bool
    ) -> CompactResult:
        """Under the trigger: forwarded with the cheap tiers, the next compaction prepared where due.
        ``early``: compacting now pays (cost-aware): a prepared compaction that is ready is applied,
        else one is prepared now and applied on a later turn, so no turn waits for its summary."""
        tokens = await run.tokens(view)
        ready = await self._ready_to_apply(run, state, tokens, early)
        if ready is not None:
            return await self._apply(run, ready)
        due = early or (tokens >= run.window.prepare and await prepares(run, state, view, tokens))
        preparation = await self._prepare(run, state, view) if due else None
        unused = await self._unused(run) if preparation is not None else None
        return await self._fit(
            run, view, Outcome(state, cache, preparation=preparation, prepared_unused=unused)
        )

    async def _unused(self, run: Run) -> int | None:
        """This conversation's summaries prepared ahead and not applied (for its report)."""
        return None if self.preparations is None else (await self.preparations.tally.get(run.root)).unused

    async def _ready_to_apply(self, run: Run, state: Entry, tokens: int, early: bool) -> Entry | None:
        """Cost-aware, a prepared compaction is applied before the trigger as soon as it is ready
        and applying it pays back its rewrite (its summary is paid for already): left waiting, a
        session that ends first would leave it unused, and one the conversation outgrows would be
        prepared again."""
        if self.preparations is None or run.economy is None or not (early or run.known_economy):
            return None
        ready = await self.preparations.find(run, state)
        if ready is None:
            return None
        return ready if change_pays_now(run, tokens, await run.tokens(run.tiers.view(ready))) else None

    async def _prepared(self, run: Run, state: Entry) -> bool:
        """A compaction prepared for this conversation waits for the trigger."""
        return self.preparations is not None and await self.preparations.find(run, state) is not None

    async def _thinking_state(self, run: Run) -> bool:
        """Under the thresholds, a conversation we changed before still gets its stored state when
        its provider checks thinking blocks and it sends them back: forwarded as the client sent
        it, the prefix would change again (a window grown back, say) and every block produced
        since our change would be refused. One store lookup, only for such requests."""
        if not run.checks_thinking or not run.sends_thinking:
            return False
        _, cache = await self._recall(run)
        return cache is CacheStatus.HIT

    async def _recall(self, run: Run) -> tuple[Entry, CacheStatus]:
        """The longest stored prefix's state; ``hit`` only when an earlier request left it.
        Looked up once per request."""
        if run.recalled is None:
            run.recalled = await self._lookup(run)
        return run.recalled

    async def _lookup(self, run: Run) -> tuple[Entry, CacheStatus]:
        if self.store is None:
            return Entry(), CacheStatus.NONE
        found = await self.store.find(run.root, run.chain)
        if found is None or not entry_is_usable(found[1], len(run.prints)):
            return Entry(), CacheStatus.NONE
        entry, _ = await archive_pending(run, found[1])
        if entry is not found[1]:
            await self._put(run, entry)
        return entry, CacheStatus.HIT

    async def _prepare(self, run: Run, state: Entry, view: View) -> Preparation | None:
        """Past ``prepare_ratio``: have the compaction the trigger will need made in the background."""
        if self.preparations is None or not run.config.prepares:
            return None
        return await self.preparations.consider(run, state, view)

    async def _apply(self, run: Run, prepared: Entry) -> CompactResult:
        """The trigger is reached and a compaction was prepared: applied with no summary call.

        Archived and stored first (it is this conversation's state from now on); if too much
        arrived since it was prepared, the rest is compacted as usual, its summary merged.
        """
        assert self.preparations is not None
        entry, path = await archive_pending(run, run.applied(prepared))
        await self._put(run, entry)
        self.preparations.stats.applied += 1
        tally = await self.preparations.tally.count(run.root, applied=1)
        run.prefix_changed = True
        view = run.tiers.view(entry)
        tokens = await run.tokens(view)
        if tokens >= run.window.compact:
            return await self._compact(run, entry, view, CacheStatus.PREPARED)
        # prepared long ago (the clearing tier kept the turns since under prepare_ratio): it
        # leaves the conversation past prepare_ratio, so the next one is prepared right away
        due = tokens >= run.window.prepare and await prepares(run, entry, view, tokens)
        preparation = await self._prepare(run, entry, view) if due else None
        outcome = Outcome(
            entry,
            CacheStatus.PREPARED,
            archive_path=path,
            preparation=preparation,
            prepared_unused=tally.unused,
        )
        return await self._fit(run, view, outcome)

    async def _clear(self, run: Run, state: Entry) -> Entry:
        """Tier 2: advance the clearing boundary by a batch when the request is past the clear ratio;
        past ``prepare_ratio``, by whatever gets it back under, before any summary is prepared. Not
        while a prepared compaction waits for the trigger: it takes the old results out there, and
        clearing them first would only leave it short when applied (a second summary then)."""
        now = run.tiers.view(state)
        tokens = await run.tokens(now)
        if not run.config.clear_tool_results or tokens < run.window.clear:
            return state
        if tokens >= run.window.prepare and await self._prepared(run, state):
            return state
        advanced = advance_clearing(run, state)
        if advanced is None and tokens >= run.window.prepare:
            advanced = await before_a_summary(run, state)
        if advanced is None or await clearing_waits(run, now, advanced):
            return state
        await self._put(run, advanced)
        run.prefix_changed = True
        return advanced

    async def _compact(
        self, run: Run, state: Entry, view: View, cache: CacheStatus, part: Partition | None = None
    ) -> CompactResult:
        """Tier 3: summarize the middle (once per compaction event), then fit. ``part``: the cut
        already planned (an early compaction's)."""
        if part is None:
            part = await asyncio.to_thread(plan, run, view)
        if not part.middle:
            return await self._fit(run, view, Outcome(state, cache, Reason.NOTHING_TO_SUMMARIZE))
        made, shared = await self.once.made(run, compaction_key(run, view, part, state), view, part, state)
        calls = 0 if shared else made.summary_calls
        if isinstance(made, Failed):
            return await self._without_summary(run, state, view, part, cache, made, calls)
        status = CacheStatus.SHARED if shared else made.cache
        run.prefix_changed = True
        entry = run.applied(made.entry)  # made for another request (shared): stale from ours on
        if entry != made.entry:
            await self._put(run, entry)
        compacted = run.tiers.view(entry)
        over = await run.tokens(compacted) >= run.window.compact
        outcome = Outcome(entry, status, Reason.OVER_TRIGGER if over else None, calls, made.archive_path)
        return await self._fit(run, compacted, outcome)

    async def _without_summary(
        self,
        run: Run,
        state: Entry,
        view: View,
        part: Partition,
        cache: CacheStatus,
        failed: Failed,
        calls: int,
    ) -> CompactResult:
        """No summary: forwarded with the cheap tiers; over the window the digest stands in, then the fit."""
        logger.error("compact_hook: compaction failed: %s", failed.error)
        if run.config.on_overflow != "fit" or await run.tokens(view) <= run.window.window:
            return await self._fit(
                run, view, Outcome(state, cache, failed.reason, calls, summary_failure=failed.kind)
            )
        digested = await make(run, view, part, state, Making(None))
        assert isinstance(digested, Made)
        run.prefix_changed = True
        await self._put(run, digested.entry)
        outcome = Outcome(
            digested.entry,
            CacheStatus.MISS,
            failed.reason,
            calls,
            digested.archive_path,
            summarizer=Summarizer.DIGEST,
            summary_failure=failed.kind,
        )
        return await self._fit(run, run.tiers.view(digested.entry), outcome)

    async def _fit(self, run: Run, view: View, outcome: Outcome) -> CompactResult:
        """The guarantee: over the window and ``on_overflow: fit`` → drop/shrink to fit.

        Normalized first: the synthetic results it adds are part of what must fit.
        """
        if run.config.on_overflow != "fit":
            return await finish(run, view, outcome)
        view, fixes = await normalized(run, view, force=await run.tokens(view) > run.window.window)
        outcome = dataclasses.replace(outcome, normalized=outcome.normalized + fixes)
        if await run.tokens(view) <= run.window.window:
            return await finish(run, view, outcome)
        fit = await asyncio.to_thread(fitted, run, view)  # shrinking tokenizes
        await keep(run, fit.lost)
        reason = outcome.reason or Reason.FITTED
        if not fit.fits:
            logger.warning("compact_hook: request cannot be brought under %d tokens", run.window.window)
            reason = Reason.CANNOT_FIT
        state = await self._unstable(run, outcome.state)
        view = without_stale_thinking(fit.view, state.stale_thinking, run.request.conversation)
        return await finish(
            run, view, dataclasses.replace(outcome, state=state, reason=reason, dropped=fit.dropped)
        )

    async def _unstable(self, run: Run, state: Entry) -> Entry:
        """A fitted request is no stable prefix (the next fit may drop differently): thinking
        blocks produced from here on are not sent back until the next compaction sets a new,
        stable prefix. Stored when the state has a key; this request strips them either way."""
        unstable = run.unbound(state, state.covered, OPEN_END)
        if unstable.span > 0 and unstable != state:
            await self._put(run, unstable)
        return unstable

    async def _put(self, run: Run, entry: Entry) -> None:
        if self.store is not None:
            await self.store.put(run.root, run.chain[entry.span], entry)

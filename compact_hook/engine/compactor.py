"""The compaction recipe: count, apply the cheap tiers, reuse what is stored, compact, fit.

One pass per request, in order of cost:

1. measure: count everything the model reads (only new entries are tokenized);
2. tier 1: tool outputs over ``tool_output_max_tokens`` are truncated (every request);
3. restore: the conversation's stored state is spliced in (a compaction, a clearing boundary);
4. tier 2: at ``clear_trigger_ratio`` old tool results are cleared, the boundary advancing
   in batches and stored;
5. tier 3: from ``prepare_ratio`` the compaction is prepared in the background (see
   ``engine.ahead.prepare``); at ``trigger_ratio`` a prepared one is applied, or the middle is
   summarized (or digested) — one summary per compaction, shared by concurrent requests and
   replicas — and stored;
6. fit: if the request still would not fit the window, it is fitted (``on_overflow: fit``);
7. finish: a changed request is normalized so every tool call has its result.

The engine knows no wire format: a ``Conversation`` brings its format's adapter. The
input entries are never mutated.
"""

from __future__ import annotations

import dataclasses
import logging

from compact_hook.core.failures import SummaryFailure
from compact_hook.core.outcomes import CacheStatus, Mode, Reason, Summarizer
from compact_hook.core.partition import Partition
from compact_hook.engine.ahead.lookup import Ahead
from compact_hook.engine.ahead.prepare import Preparations, PrepareSetup
from compact_hook.engine.decision import Decision, Step, skip_reason
from compact_hook.engine.economy.costs import Costs
from compact_hook.engine.economy.prompt_cache import CacheLedger
from compact_hook.engine.finish import Forwarding, finish, untouched
from compact_hook.engine.guarantee import fitted, normalized
from compact_hook.engine.memory.archiving import archive_pending, keep, merged
from compact_hook.engine.memory.counts import RememberedCounts
from compact_hook.engine.memory.states import Restored, States
from compact_hook.engine.result import CompactRequest, CompactResult
from compact_hook.engine.run import ProcessMemory, Run
from compact_hook.engine.summary.breaker import Breaker
from compact_hook.engine.summary.compaction import Cut, Failed, Made, Making, make, plan
from compact_hook.engine.summary.once import Leases, SingleFlight, SummaryOnce, warn_unusable
from compact_hook.engine.tiers.clearing import clearing_step
from compact_hook.engine.view import View, without_stale_thinking
from compact_hook.offload import off_loop
from compact_hook.state.store import CompactionStore, MemoryStore

logger = logging.getLogger(__name__)


class Compactor:
    """Compaction with memory: a store of conversation states and single flight per compaction.

    ``leases``: how long a replica holds a compaction's lock, waits for another's, and remembers
    a failure; ``prepare``: what preparing ahead needs (None: the trigger compacts itself)."""

    def __init__(
        self,
        store: CompactionStore | None,
        leases: Leases | None = None,
        prepare: PrepareSetup | None = None,
        memory: ProcessMemory | None = None,
    ) -> None:
        self.store = store
        self.leases = leases or Leases()
        self.memory = memory or ProcessMemory()
        self.breaker = Breaker(store)
        self.once = SummaryOnce(store, self.leases, self.breaker)
        self.ledger = CacheLedger(store)
        self.counts = RememberedCounts(None if isinstance(store, MemoryStore) else store)
        """Kept only where another process can read them (Redis, the file): this process's own
        counts are its tokenizer's cache already."""
        self.preparations = (
            Preparations(prepare, self.breaker, self.leases)
            if prepare is not None and store is not None
            else None
        )
        self.ahead = Ahead(self.preparations)
        self.states = States(store)

    @property
    def flights(self) -> SingleFlight[Made | Failed]:
        """The summaries under way in this process, by compaction key."""
        return self.once.flights

    async def close(self) -> None:
        """The process stops: background work is cancelled cleanly."""
        if self.preparations is not None:
            await self.preparations.close()

    async def compact(self, request: CompactRequest) -> CompactResult:
        """The request compacted where it helps; its last turn, if the assistant's, forwarded as
        sent after everything else (``Conversation.client_turn_apart``)."""
        conversation = request.conversation.client_turn_apart()
        if conversation is not request.conversation:
            request = dataclasses.replace(request, conversation=conversation)
        run = await Run.measure(request, self.memory, self.ledger, self.counts)
        result = await self.carry_out(run, await self.decide(run))
        return result.followed_by(conversation.tail)

    async def decide(self, run: Run) -> Decision:
        """The one place a request's step is chosen (see ``engine.decision``). It reads (the stored
        state, the economy, a prepared compaction) and stores nothing; at the trigger it awaits a
        preparation in flight, or takes back one still waiting for a slot (``Preparations.ready``)."""
        skipped = skip_reason(run)
        if skipped is not None:
            return Decision(Step.UNTOUCHED, skipped)
        request, limits = run.request, run.window
        forced = request.mode is Mode.FORCE
        remembered = request.restore or forced
        quiet = run.total < limits.engage and not run.tiers.oversized and run.config.normalize != "always"
        restored = None
        if not remembered and quiet:
            restored = await self._thinking_state(run)
            if restored is None:
                return Decision(Step.UNTOUCHED, Reason.BELOW_THRESHOLD)
        await run.tiers.prepare()
        view = run.tiers.view(None)
        if restored is None and not remembered and await run.tokens(view) < limits.engage:
            restored = await self._thinking_state(run)
            if restored is None:
                return Decision(Step.FORWARD, Reason.BELOW_THRESHOLD, view=view)
        restored = restored or await self.states.restore(run)
        costs = Costs.of(run, restored.state)
        state = await clearing_step(costs, restored.state, self.ahead)
        view = run.tiers.view(state)
        found = Decision(
            Step.FORWARD,
            state=state,
            view=view,
            cache=restored.cache,
            economy=costs.economy,
            prefix_changed=state is not restored.state,
        )
        return await self._step(run, costs, found, forced)

    async def _step(self, run: Run, costs: Costs, found: Decision, forced: bool) -> Decision:
        """With the state and the view settled: under the trigger (forward, prepare, or an early
        compaction the economy plans), or at it (a prepared compaction applied, else compact now)."""
        assert found.view is not None
        limits, view = run.window, found.view
        tokens = await run.tokens(view)
        early = None if forced or tokens >= limits.compact else await costs.early_plan(view, tokens)
        if tokens < limits.compact and not forced and (early is None or self.ahead.on(run)):
            return await self._under_trigger(costs, found, early)
        prepared = None if forced else await self.ahead.at_trigger(run, found.state)
        if prepared is not None:
            return dataclasses.replace(found, step=Step.APPLY_PREPARED, prepared=prepared)
        return dataclasses.replace(found, step=Step.COMPACT, part=early)

    async def _under_trigger(self, costs: Costs, forward: Decision, early: Partition | None) -> Decision:
        """Under the trigger: forwarded with the cheap tiers, the next compaction prepared where due.
        ``early``: compacting now pays (cost-aware): a prepared compaction that is ready is applied,
        else one is prepared now and applied on a later turn, so no turn waits for its summary."""
        run, view = costs.run, forward.view
        assert view is not None
        ready = await self.ahead.worth_applying(run, forward, early is not None)
        if ready is not None:
            return dataclasses.replace(forward, step=Step.APPLY_PREPARED, prepared=ready)
        tokens = await run.tokens(view)
        due = self.ahead.on(run) and (
            early is not None
            or (tokens >= run.window.prepare and await costs.prepares(forward.state, view, tokens))
        )
        return dataclasses.replace(forward, step=Step.PREPARE) if due else forward

    async def _thinking_state(self, run: Run) -> Restored | None:
        """Under the thresholds, a conversation we changed before still gets its stored state when
        its provider checks thinking blocks and it sends them back: forwarded as the client sent
        it, the prefix would change again (a window grown back, say) and every block produced
        since our change would be refused. One store lookup, only for such requests."""
        if not run.checks_thinking or not run.sends_thinking:
            return None
        restored = await self.states.restore(run)
        return restored if restored.cache is CacheStatus.HIT else None

    async def carry_out(self, run: Run, decision: Decision) -> CompactResult:
        """Do what the decision says: archive what the state still owes and store a new state,
        then forward (the fit guarantee first), prepare, apply, or compact."""
        if decision.step is Step.UNTOUCHED:
            if decision.reason is Reason.NO_ROOM:
                _warn_no_room(run)
            return untouched(run, decision.reason)
        view = decision.view
        assert view is not None, "every step but UNTOUCHED carries the view it forwards"
        state, kept = await archive_pending(run, decision.state)
        if decision.prefix_changed or state is not decision.state:
            await self.states.put(run, state)
        outcome = dataclasses.replace(Forwarding.of(decision), state=state, archived=kept.status)
        decision = dataclasses.replace(decision, state=state)
        if decision.step is Step.APPLY_PREPARED:
            return await self._apply(run, decision, outcome)
        if decision.step is Step.COMPACT:
            return await self._compact(run, decision, outcome)
        if decision.step is Step.PREPARE:
            preparation = await self.ahead.start(run, decision)
            unused = await self.ahead.unused(run) if preparation is not None else None
            outcome = dataclasses.replace(outcome, preparation=preparation, prepared_unused=unused)
        return await self._fit(run, view, outcome)

    async def _apply(self, run: Run, decision: Decision, outcome: Forwarding) -> CompactResult:
        """The trigger is reached and a compaction was prepared: applied with no summary call.

        Archived and stored first (it is this conversation's state from now on); if too much
        arrived since it was prepared, the rest is compacted as usual, its summary merged.
        """
        assert decision.prepared is not None
        entry, kept = await archive_pending(run, run.applied(decision.prepared))
        await self.states.put(run, entry)
        tally = await self.ahead.applied(run)
        view = run.tiers.view(entry)
        applied = dataclasses.replace(
            decision, state=entry, view=view, cache=CacheStatus.PREPARED, prepared=None, prefix_changed=True
        )
        outcome = outcome.changed(entry, CacheStatus.PREPARED, kept, prepared_unused=tally.unused)
        tokens = await run.tokens(view)
        if tokens >= run.window.compact:
            return await self._compact(run, applied, outcome)
        # prepared long ago (the clearing tier kept the turns since under prepare_ratio): it
        # leaves the conversation past prepare_ratio, so the next one is prepared right away
        costs = Costs(run, decision.economy)
        due = tokens >= run.window.prepare and await costs.prepares(entry, view, tokens)
        preparation = await self.ahead.start(run, applied) if due else None
        return await self._fit(run, view, dataclasses.replace(outcome, preparation=preparation))

    async def _compact(self, run: Run, decision: Decision, outcome: Forwarding) -> CompactResult:
        """Tier 3: summarize the middle (once per compaction event), then fit. The decision's
        ``part``: the cut already planned (an early compaction's)."""
        view, part = decision.view, decision.part
        assert view is not None
        if part is None:
            part = await off_loop(plan, run, view, Costs(run, decision.economy).target())
        if not part.middle:
            nothing = dataclasses.replace(outcome, reason=Reason.NOTHING_TO_SUMMARIZE)
            return await self._fit(run, view, nothing)
        cut = Cut(view, part, decision.state)
        made, shared = await self.once.made(run, cut)
        calls = 0 if shared else made.summary_calls
        outcome = dataclasses.replace(outcome, summary_calls=calls)
        if isinstance(made, Failed):
            failed = dataclasses.replace(outcome, reason=made.reason, summary_failure=made.kind)
            return await self._without_summary(run, cut, failed, made)
        entry = run.applied(made.entry)  # made for another request (shared): stale from ours on
        if entry != made.entry:
            await self.states.put(run, entry)
        compacted = run.tiers.view(entry)
        over = await run.tokens(compacted) >= run.window.compact
        cache = CacheStatus.SHARED if shared else made.cache
        outcome = outcome.changed(entry, cache, made.kept, reason=Reason.OVER_TRIGGER if over else None)
        if made.unusable is not None and not shared:  # the digest stood in: said as a failure
            unusable = Reason.SUMMARY_FAILED if outcome.reason is None else outcome.reason
            outcome = dataclasses.replace(outcome, reason=unusable, summary_failure=SummaryFailure.UNUSABLE)
            warn_unusable(run, made.unusable)
        return await self._fit(run, compacted, outcome)

    async def _without_summary(
        self, run: Run, cut: Cut, outcome: Forwarding, failed: Failed
    ) -> CompactResult:
        """No summary: forwarded with the cheap tiers; over the window the digest stands in, then the fit."""
        logger.error("compact_hook: compaction failed: %s", failed.error)
        if run.config.on_overflow != "fit" or await run.tokens(cut.view) <= run.window.window:
            return await self._fit(run, cut.view, outcome)
        digested = await make(run, cut, Making(None))
        assert isinstance(digested, Made)
        await self.states.put(run, digested.entry)
        outcome = outcome.changed(
            digested.entry, CacheStatus.MISS, digested.kept, summarizer=Summarizer.DIGEST
        )
        return await self._fit(run, run.tiers.view(digested.entry), outcome)

    async def _fit(self, run: Run, view: View, outcome: Forwarding) -> CompactResult:
        """The guarantee: over the window and ``on_overflow: fit`` → drop/shrink to fit.

        Normalized first: the synthetic results it adds are part of what must fit.
        """
        if run.config.on_overflow != "fit":
            return await finish(run, view, outcome)
        done = await normalized(run, view, force=await run.tokens(view) > run.window.window)
        view = done.view
        outcome = dataclasses.replace(
            outcome, normalized=outcome.normalized + done.fixes, archived=merged(outcome.archived, done.kept)
        )
        if await run.tokens(view) <= run.window.window:
            return await finish(run, view, outcome)
        fit = await off_loop(fitted, run, view)  # shrinking tokenizes
        kept = await keep(run, fit.lost)
        reason = outcome.reason or Reason.FITTED
        if not fit.fits:
            logger.warning("compact_hook: request cannot be brought under %d tokens", run.window.window)
            reason = Reason.CANNOT_FIT
        state = await self.states.unstable(run, outcome.state)
        view = without_stale_thinking(fit.view, state.stale_thinking, run.request.conversation)
        fitted_outcome = dataclasses.replace(
            outcome, state=state, reason=reason, dropped=fit.dropped, archived=merged(outcome.archived, kept)
        )
        return await finish(run, view, fitted_outcome)


def _warn_no_room(run: Run) -> None:
    """Once per model group, window and reserve: every such request is forwarded as sent."""
    origin, window, reserve = run.request.origin, run.config.context_window, run.request.conversation.reserve
    if run.memory.notices.first(("no_room", origin.model_group, window, reserve)):
        logger.warning(
            "compact_hook: model group %s (%s): the reply's reserve of %s tokens plus %d tokens of "
            "system and tools leave no room for messages in the %s-token window; such requests are "
            "forwarded as sent (raise context_window, or have the client ask for fewer output tokens)",
            origin.model_group or "?",
            origin.wire or "?",
            reserve,
            run.context_tokens,
            window,
        )

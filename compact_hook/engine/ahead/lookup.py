"""What the compactor asks about compactions prepared ahead (``engine.ahead.prepare``).

Every question has the answer "none" when preparing is off (no store, no background setup, or a
model whose summaries are the digest), so the compactor's recipe reads the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass

from compact_hook.core.chain import Entry
from compact_hook.core.outcomes import Preparation
from compact_hook.engine.ahead.prepare import Preparations
from compact_hook.engine.ahead.tally import Tally
from compact_hook.engine.decision import Decision
from compact_hook.engine.economy.costs import Costs
from compact_hook.engine.run import Run


@dataclass(frozen=True)
class Ahead:
    preparations: Preparations | None

    def on(self, run: Run) -> bool:
        """Compactions are prepared for this request's model."""
        return self._for(run) is not None

    def _for(self, run: Run) -> Preparations | None:
        """The preparations this request's model uses (None: it prepares nothing): the one place
        that says so."""
        return self.preparations if run.config.prepares else None

    async def start(self, run: Run, due: Decision) -> Preparation | None:
        """Past ``prepare_ratio``: have the compaction the trigger will need made in the background,
        from the decision's state and view."""
        preparations = self._for(run)
        return None if preparations is None else await preparations.consider(run, due)

    async def waiting(self, run: Run, state: Entry) -> bool:
        """A compaction for this conversation is prepared and waits for the trigger, or is being
        prepared (here or by another replica): the turns until the trigger must not outgrow it."""
        return self.preparations is not None and await self.preparations.pending(run, state)

    async def at_trigger(self, run: Run, state: Entry) -> Entry | None:
        """The prepared compaction the trigger applies instead of making a summary, if ready."""
        return None if self.preparations is None else await self.preparations.ready(run, state)

    async def worth_applying(self, run: Run, forward: Decision, early: bool) -> Entry | None:
        """Cost-aware, a prepared compaction is applied before the trigger as soon as it is ready
        and applying it pays back its rewrite (its summary is paid for already): left waiting, a
        session that ends first would leave it unused, and one the conversation outgrows would be
        prepared again. ``early``: compacting now pays (then the economy need not be heard yet)."""
        costs = Costs(run, forward.economy)
        if self.preparations is None or costs.economy is None or not (early or costs.known):
            return None
        ready = await self.preparations.find(run, forward.state)
        if ready is None:
            return None
        assert forward.view is not None
        now, changed = await run.tokens(forward.view), await run.tokens(run.tiers.view(ready))
        return ready if costs.change_pays(now, changed) else None

    async def applied(self, run: Run) -> Tally:
        """One prepared compaction applied to this conversation: counted, and its tally returned."""
        assert self.preparations is not None, "only a prepared compaction is applied"
        stats = self.preparations.stats
        stats.tally = stats.tally.counted(applied=1)
        return await self.preparations.tally.count(run.root, applied=1)

    async def unused(self, run: Run) -> int | None:
        """This conversation's summaries prepared ahead and not applied (for its report)."""
        return None if self.preparations is None else (await self.preparations.tally.get(run.root)).unused

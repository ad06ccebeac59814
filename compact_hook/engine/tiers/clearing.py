"""When tier 2 clears: the one decision of whether a request advances the clearing boundary, by
tokens first and by money where the economy is known. Which results a batch holds is
``core.clearing``'s; what a batch saves is ``tiers.batch``'s; what clearing and a summary cost
against each other is ``economy.costs``'."""

from __future__ import annotations

from compact_hook.core.chain import Entry
from compact_hook.engine.ahead.lookup import Ahead
from compact_hook.engine.economy.costs import Costs
from compact_hook.engine.tiers.batch import advance_clearing


async def clearing_step(costs: Costs, state: Entry, ahead: Ahead) -> Entry:
    """Tier 2: the clearing boundary advanced by a batch past the clear ratio — or under it,
    cost-aware, once the conversation is being cleared and the batch pays (``Costs.clears_below``,
    ``Costs.batch_pays``). Past ``prepare_ratio``, where a summary is due, everything it may
    clear goes at once where that is the cheaper way under the trigger (``Costs.way_under``: the
    one comparison of clearing and a summary, by tokens, by money where priced); at the trigger
    the compaction happens (cleared instead, the conversation lands higher and the prefix changes
    every few turns: the real CLIs' loops 4.6-25% dearer). Not while a compaction is prepared or
    being prepared for the trigger: clearing its old results first would leave it short there (a
    second summary). The new state is stored when the decision is carried out."""
    run, limits = costs.run, costs.run.window
    now = run.tiers.view(state)
    tokens = await run.tokens(now)
    below = tokens < limits.clear
    if not run.config.clear_tool_results or (below and not costs.clears_below(state)):
        return state
    if tokens >= limits.prepare and await ahead.waiting(run, state):
        return state
    advanced = advance_clearing(run, state)
    preparing = limits.prepare <= tokens < limits.compact and ahead.on(run)
    if advanced is None and preparing:
        _, advanced = await costs.way_under(state, now, tokens)
    if advanced is None or await costs.clearing_waits(now, advanced):
        return state
    if below and not await costs.batch_pays(now, advanced):
        return state
    return advanced

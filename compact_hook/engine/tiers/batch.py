"""Tier 2 as a stage: the clearing boundary advanced by a batch of old tool results.

Which results and how many is ``core.clearing``'s (pure) decision; this reads the run's counts
of each result before and after clearing to weigh the batch.
"""

from __future__ import annotations

import dataclasses

from compact_hook.core.chain import Entry
from compact_hook.core.clearing import Batch, next_boundary
from compact_hook.core.counting import item_strings
from compact_hook.engine.run import Run


def advance_clearing(run: Run, state: Entry, at_least: int | None = None) -> Entry | None:
    """A new state clearing one more batch of old tool results, or None if not worth it yet
    (``at_least``: the batch's smallest saving, ``clear_at_least`` unless given)."""
    results = [index for index in run.tiers.result_items if index >= state.covered]
    config = run.config
    least = run.window.ours(config.clear_at_least) if at_least is None else at_least
    batch = Batch(config.keep_tool_results, least)
    boundary = next_boundary(results, lambda index: _saving(run, index), state.cleared_before, batch)
    if boundary is None:
        return None
    advanced = dataclasses.replace(state, cleared_before=boundary)
    return run.unbound(advanced, max(state.cleared_before, state.covered))


def _saving(run: Run, index: int) -> int:
    (item, print_), (cleared, cleared_print) = run.tiers.truncated(index), run.tiers.cleared(index)
    if cleared is item:
        return 0
    pair = [item, cleared]
    before, after = run.counter.count([print_, cleared_print], lambda i: item_strings(pair[i]))
    return max(0, before - after)

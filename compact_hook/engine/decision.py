"""What the compactor does with a request, as a value: the decision, then its carrying out.

``Compactor.decide`` looks up what it needs (the stored state, the economy, a prepared
compaction), works out the clearing tier's next boundary, and returns one ``Decision`` — it
writes nothing; ``Compactor.carry_out`` does what it says (stores the boundary, applies, makes the
summary, fits). Which step a request takes is therefore read in one function and tested as a value
(``tests/unit/test_decision.py``), not spread over a branch chain that also acts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from compact_hook.core.chain import Entry
from compact_hook.core.economics import Economy
from compact_hook.core.outcomes import CacheStatus, Mode, Reason
from compact_hook.core.partition import Partition
from compact_hook.engine.run import Run
from compact_hook.engine.view import View


class Step(enum.Enum):
    UNTOUCHED = "untouched"
    """Forwarded exactly as the client sent it (``Decision.reason`` says why)."""
    FORWARD = "forward"
    """Under the trigger: the cheap tiers, then the fit guarantee."""
    PREPARE = "prepare"
    """Under the trigger and past ``prepare_ratio``: forwarded, the next compaction made meanwhile."""
    APPLY_PREPARED = "apply_prepared"
    """A compaction prepared earlier is applied: no summary call on this turn."""
    COMPACT = "compact"
    """The middle is summarized now (once per compaction event), then the fit."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One request's step, with what carrying it out needs."""

    step: Step
    reason: Reason | None = None
    state: Entry = Entry()
    view: View | None = None
    cache: CacheStatus = CacheStatus.NONE
    prepared: Entry | None = None
    """``APPLY_PREPARED``: the prepared compaction."""
    part: Partition | None = None
    """``COMPACT``: the cut an early (cost-aware) compaction already planned."""
    economy: Economy | None = None
    """What cost-aware timing weighs for this request (``engine.economy.costs.Costs``; None: off,
    unpriced)."""
    prefix_changed: bool = False
    """``state`` is a clearing batch this request advances: stored when carried out (later steps
    set it too: a compaction applied), and the provider's cache is written again from the change."""


def skip_reason(run: Run) -> Reason | None:
    """Why the request is forwarded untouched before anything is looked up (None: it is not)."""
    request, limits = run.request, run.limits
    if request.mode is Mode.OFF:
        return Reason.OFF
    if not request.config.enabled:
        return Reason.DISABLED
    if limits is None:
        return Reason.WINDOW_UNKNOWN
    if not run.prints:
        return Reason.EMPTY
    if limits.no_room:
        return Reason.NO_ROOM
    return None

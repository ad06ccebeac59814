"""Units and the pairing of tool calls with their results: the one place that decides both.

A *unit* is what compaction keeps or drops whole: one model turn with all its tool calls
and all their results (parallel calls included), or a single other item. How a format
spreads a turn over entries differs — a chat assistant message and its ``tool`` messages;
an Anthropic assistant message and the next user message, whose ``tool_result`` blocks
answer it; Responses reasoning, message and ``function_call`` items followed by their
``function_call_output`` items — but once parsed into items the rule is the same.

Within a unit, results are matched to calls by id first and then by position: real
clients reuse call ids across a conversation (tau-bench, SWE-agent), but within one turn
an id names one call, and results may come in any order. Clearing, the transcript, the
digest, normalization and partitioning all read this one pairing.
"""

from __future__ import annotations

import bisect
import operator
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from compact_hook.core.items import Item, PartKind, Role

PartRef = tuple[int, int]
"""``(item index, part index)``."""
K = TypeVar("K")
V = TypeVar("V")
FIRST = operator.itemgetter(0)
"""A ``PartRef``'s item index."""


class Unit(NamedTuple):
    """``items[start:end]`` (a tuple of two integers: the collector stops walking it once it has seen
    it, and a conversation keeps its pairings' units)."""

    start: int
    end: int


END = operator.attrgetter("end")


@dataclass(frozen=True, slots=True)
class Pairing:
    """Units, and for every tool result the tool that produced it.

    ``tool_of``: every result part → its tool's name ("tool" when unknown).
    ``call_of``: every answered result → the call it answers.
    ``unanswered``: per unit (by start), the calls without a result.
    ``orphans``: results with no call in their unit.
    """

    units: list[Unit]
    tool_of: dict[PartRef, str] = field(default_factory=dict)
    call_of: dict[PartRef, PartRef] = field(default_factory=dict)
    unanswered: dict[int, list[PartRef]] = field(default_factory=dict)
    orphans: list[PartRef] = field(default_factory=list)

    def results(self) -> list[PartRef]:
        """Every tool result, in conversation order."""
        return sorted(self.tool_of)

    def protected_parts(self, protected: Collection[str]) -> dict[int, tuple[int, ...]]:
        """Per item index, the result parts of ``protected`` tools (truncation and the fit spare them)."""
        found: dict[int, list[int]] = {}
        for (index, position), tool in sorted(self.tool_of.items()):
            if tool in protected:
                found.setdefault(index, []).append(position)
        return {index: tuple(parts) for index, parts in found.items()}


def group_units(items: Sequence[Item], start: int = 0) -> list[Unit]:
    """Consecutive units covering every item (from ``start``, where a unit begins) exactly once."""
    units: list[Unit] = []
    index, count = start, len(items)
    while index < count:
        start = index
        index += 1
        while index < count and _same_turn(items[index - 1], items[index]):
            index += 1
        if any(items[k].has_calls for k in range(start, index)):
            while index < count and items[index].has_results and not items[index].has_calls:
                index += 1
        units.append(Unit(start, index))
    return units


def _same_turn(previous: Item, item: Item) -> bool:
    return item.joins_turn and previous.role is Role.ASSISTANT and item.role is Role.ASSISTANT


def pair(items: Sequence[Item]) -> Pairing:
    """Units, which call each result answers, unanswered calls and orphan results."""
    pairing = Pairing(group_units(items))
    for unit in pairing.units:
        _pair_unit(items, unit, pairing)
    return pairing


def pair_again(items: Sequence[Item], earlier: Pairing, same: int) -> Pairing:
    """``pair(items)``, where the first ``same`` items are those ``earlier`` paired (the same entries
    of the conversation's last request): its units that end before ``same`` are kept, the rest is
    paired anew. A unit's pairing reads only its own items, and where it ends only the item after
    it: an agent's request pairs its new turns, not its whole history again."""
    kept = bisect.bisect_left(earlier.units, same, key=END)  # the units ending before
    restart = earlier.units[kept - 1].end if kept else 0
    orphans = earlier.orphans
    cut = len(orphans)
    while cut and orphans[cut - 1][0] >= restart:
        cut -= 1
    pairing = Pairing(
        [*earlier.units[:kept], *group_units(items, restart)],
        _before(earlier.tool_of, restart, FIRST),
        _before(earlier.call_of, restart, FIRST),
        _before(earlier.unanswered, restart, int),
        orphans[:cut],
    )
    for unit in pairing.units[kept:]:
        _pair_unit(items, unit, pairing)
    return pairing


def _before(paired: dict[K, V], restart: int, index: Callable[[K], int]) -> dict[K, V]:
    """What ``paired`` holds of the items before ``restart`` (a unit's start): copied in C, the
    rest taken off its end — units are paired in order, so what they add comes in order."""
    kept = dict(paired)
    for key in reversed(paired):
        if index(key) < restart:
            break
        del kept[key]
    return kept


def _pair_unit(items: Sequence[Item], unit: Unit, pairing: Pairing) -> None:
    calls = _parts(items, unit, PartKind.CALL)
    results = _parts(items, unit, PartKind.RESULT)
    if not calls and not results:
        return
    answered = _match(items, calls, results)
    pairing.call_of.update(answered)
    for result in results:
        call = answered.get(result)
        own = items[result[0]].parts[result[1]].name or items[result[0]].name
        called = items[call[0]].parts[call[1]].name if call is not None else ""
        pairing.tool_of[result] = own or called or "tool"
        if call is None:
            pairing.orphans.append(result)
    taken = set(answered.values())
    missing = [call for call in calls if call not in taken]
    if missing:
        pairing.unanswered[unit.start] = missing


def _parts(items: Sequence[Item], unit: Unit, kind: PartKind) -> list[PartRef]:
    return [
        (index, position)
        for index in range(unit.start, unit.end)
        for position, part in enumerate(items[index].parts)
        if part.kind is kind
    ]


def _match(items: Sequence[Item], calls: list[PartRef], results: list[PartRef]) -> dict[PartRef, PartRef]:
    """result → call: by id where the id names a call of this turn, then in order — by name first
    where the result names its tool (Gemini answers parallel calls by name). Linear."""
    by_id: dict[str, deque[PartRef]] = {}
    for call in calls:
        call_id = items[call[0]].parts[call[1]].call_id
        if call_id:
            by_id.setdefault(call_id, deque()).append(call)
    answered: dict[PartRef, PartRef] = {}
    for result in results:
        candidates = by_id.get(items[result[0]].parts[result[1]].call_id)
        if candidates:
            answered[result] = candidates.popleft()
    taken = set(answered.values())
    free = deque(call for call in calls if call not in taken)
    by_name: dict[str, deque[PartRef]] = {}
    for call in free:
        by_name.setdefault(items[call[0]].parts[call[1]].name, deque()).append(call)
    for result in results:
        if result in answered:
            continue
        name = items[result[0]].parts[result[1]].name
        spare = _first_free(by_name.get(name) if name else None, taken) or _first_free(free, taken)
        if spare is None:
            break
        taken.add(spare)
        answered[result] = spare
    return answered


def _first_free(queue: deque[PartRef] | None, taken: set[PartRef]) -> PartRef | None:
    while queue:
        call = queue.popleft()
        if call not in taken:
            return call
    return None

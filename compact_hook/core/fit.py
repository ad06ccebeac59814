"""The guarantee: a request we reshape leaves within the window, deterministically.

Used after the tiers and the summary, when the request still does not fit (the summary
model is down, or the tail alone is too large). Whole units go, oldest first; then the
largest tool outputs shrink; the pinned items (head, latest user message, summary) never go.
Whatever is dropped is returned, to be archived: nothing is lost, only moved out of the
model's view.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from compact_hook.core.items import Item, Role, head_length
from compact_hook.core.pairing import Unit
from compact_hook.core.partition import latest_user_index, protected_tools_of

MIN_OUTPUT_TOKENS = 100


class Sizing(Protocol):
    """How big an item is, and how to make its tool outputs smaller."""

    def count(self, item: Item) -> int: ...

    def shrink(self, item: Item, limit: int) -> Item | None:
        """The item with its tool outputs cut to at most ``limit`` tokens (None if nothing can be cut)."""
        ...


@dataclass(frozen=True, slots=True)
class Fitted:
    """What is left, what was dropped, whether it fits; ``shrunk`` maps each shrunk item (by
    ``id``) to the item it stands for."""

    items: list[Item]
    dropped: list[Item]
    fits: bool
    shrunk: dict[int, Item]


def fit(items: Sequence[Item], order: Sequence[Unit], budget: int, sizing: Sizing) -> Fitted:
    """Bring the items' total size to at most ``budget``.

    ``order`` lists the units that may go, in the order to try; the last of them is only
    dropped after every tool output has been shrunk (it is what the model answers next).
    """
    current: list[Item | None] = list(items)
    total = sum(sizing.count(item) for item in items)
    dropped: list[Item] = []
    droppable = list(order)

    def drop() -> int:
        unit = droppable.pop(0)
        gone = [item for item in current[unit.start : unit.end] if item is not None]
        current[unit.start : unit.end] = [None] * (unit.end - unit.start)
        dropped.extend(gone)
        return sum(sizing.count(item) for item in gone)

    while total > budget and len(droppable) > 1:
        total -= drop()
    total, shrunk = _shrink_outputs(current, budget, total, sizing)
    while total > budget and droppable:
        total -= drop()
    kept = [item for item in current if item is not None]
    return Fitted(kept, dropped, total <= budget, shrunk)


def _shrink_outputs(
    current: list[Item | None], budget: int, total: int, sizing: Sizing
) -> tuple[int, dict[int, Item]]:
    """Halve the largest tool output until everything fits or no output can shrink further: the
    new total, and each shrunk item (by ``id``) with the original it stands for.

    A heap of outputs by size: O((outputs + halvings) log outputs), never a rescan per step.
    Among outputs of one size the latest shrinks first.
    """
    heap = [
        (-size, -position)
        for position, item in enumerate(current)
        if item is not None and item.has_results and (size := sizing.count(item)) > MIN_OUTPUT_TOKENS
    ]
    heapq.heapify(heap)
    shrunk: dict[int, Item] = {}
    while total > budget and heap:
        negative, position = heapq.heappop(heap)
        tokens, position = -negative, -position
        replaced = current[position]
        assert replaced is not None
        smaller = sizing.shrink(replaced, max(MIN_OUTPUT_TOKENS, tokens // 2))
        size = sizing.count(smaller) if smaller is not None else tokens
        if smaller is None or size >= tokens:
            continue
        shrunk[id(smaller)] = shrunk.pop(id(replaced), replaced)
        current[position] = smaller
        total -= tokens - size
        if size > MIN_OUTPUT_TOKENS:
            heapq.heappush(heap, (-size, -position))
    return total, shrunk


@dataclass(frozen=True, slots=True)
class Spared:
    """What the fit never drops besides the head and the latest user message: the newest result
    of each of ``protected`` tools, the summary (at ``summary_at``), and — where the format needs
    the conversation to open with a user turn (``first_turn_user``) — the first unit after the
    head if it is one."""

    protected: Sequence[str] = ()
    summary_at: int | None = None
    first_turn_user: bool = False


def drop_order(items: Sequence[Item], units: Sequence[Unit], spared: Spared) -> list[Unit]:
    """Units the fit may drop, in order: those after the summary oldest first, then those
    before it, then units with protected tool results. Never the head, the latest user
    message, nor what ``spared`` names.
    """
    protected, summary_at, first_turn_user = spared.protected, spared.summary_at, spared.first_turn_user
    latest_user = latest_user_index(items)
    head_end = head_length(items)
    summary = summary_at if summary_at is not None else -1
    tools_of = {unit.start: protected_tools_of(items, unit, protected) for unit in units}
    newest: dict[str, Unit] = {}
    for unit in units:
        newest.update(dict.fromkeys(tools_of[unit.start], unit))
    opening = next((unit for unit in units if unit.start >= head_end), None)

    def pinned(unit: Unit) -> bool:
        return (
            unit.start < head_end
            or unit.start <= summary < unit.end
            or (latest_user is not None and unit.start <= latest_user < unit.end)
            or unit in newest.values()
            or (first_turn_user and unit == opening and items[unit.start].role is Role.USER)
        )

    droppable = [unit for unit in units if not pinned(unit)]
    after = [unit for unit in droppable if unit.start > summary and not tools_of[unit.start]]
    before = [unit for unit in droppable if unit.start < summary and not tools_of[unit.start]]
    return after + before + [unit for unit in droppable if tools_of[unit.start]]

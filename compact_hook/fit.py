"""The guarantee: a request we reshape leaves within the window, deterministically.

Used after the tiers and the summary, when the request still does not fit (the summary
model is down, or the tail alone is too large). Whole units go, oldest first; then the
largest tool outputs shrink; the pinned messages (head, latest user message, summary)
never go. Whatever is dropped is returned, to be archived: nothing is lost, only moved
out of the model's view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compact_hook.messages import Message, is_tool_result
from compact_hook.units import Unit

MIN_OUTPUT_TOKENS = 100

Shrink = Callable[[Message, int], Message | None]
"""Truncate a tool result to at most n tokens (None if it already fits)."""
Count = Callable[[Message], int]


@dataclass(frozen=True, slots=True)
class Fitted:
    messages: list[Message]
    dropped: list[Message]
    fits: bool


def fit(
    messages: Sequence[Message],
    units: Sequence[Unit],
    drop_order: Sequence[Unit],
    limit: int,
    count: Count,
    shrink: Shrink,
    overhead: int,
) -> Fitted:
    """Bring ``sum(count) + overhead`` to at most ``limit``.

    ``drop_order`` lists the units that may go, in the order to try; the last of them is only
    dropped after every tool output has been shrunk (it is what the model answers next).
    """
    current = {unit.start: [messages[i] for i in range(unit.start, unit.end)] for unit in units}
    dropped: list[Message] = []
    droppable = list(drop_order)

    def total() -> int:
        return overhead + sum(count(m) for group in current.values() for m in group)

    while total() > limit and len(droppable) > 1:
        dropped.extend(current.pop(droppable.pop(0).start))
    _shrink_outputs(current, limit, total, count, shrink)
    while total() > limit and droppable:
        dropped.extend(current.pop(droppable.pop(0).start))
    kept = [message for start in sorted(current) for message in current[start]]
    return Fitted(kept, dropped, total() <= limit)


def _shrink_outputs(
    groups: dict[int, list[Message]], limit: int, total: Callable[[], int], count: Count, shrink: Shrink
) -> None:
    """Halve the largest tool output until everything fits or no output can shrink further."""
    stuck: set[tuple[int, int]] = set()
    while total() > limit:
        sized = [
            (count(message), start, position)
            for start, group in groups.items()
            for position, message in enumerate(group)
            if is_tool_result(message) and (start, position) not in stuck
        ]
        sized = [item for item in sized if item[0] > MIN_OUTPUT_TOKENS]
        if not sized:
            return
        tokens, start, position = max(sized)
        smaller = shrink(groups[start][position], max(MIN_OUTPUT_TOKENS, tokens // 2))
        if smaller is None or count(smaller) >= tokens:
            stuck.add((start, position))
        else:
            groups[start][position] = smaller

"""Pure partitioning of a history into head / kept user messages / middle / tail.

Codex and LangChain cut by message; we cut by unit (see ``units``), so a tool call is never
separated from its results, whatever the budgets say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compact_hook.messages import HEAD_ROLES, Message, is_real_user_message, role_of
from compact_hook.units import Unit


@dataclass(frozen=True, slots=True)
class Partition:
    """Index ranges into the original message list.

    ``messages[:head_end]`` is the head, ``kept`` the middle messages kept verbatim
    (the latest user message when the tail does not hold it), ``middle`` what is summarized,
    ``messages[tail_start:]`` the tail.
    """

    head_end: int
    kept: tuple[int, ...]
    middle: tuple[int, ...]
    tail_start: int


def head_length(messages: Sequence[Message]) -> int:
    """How many leading system/developer messages there are."""
    index = 0
    while index < len(messages) and role_of(messages[index]) in HEAD_ROLES:
        index += 1
    return index


def tail_start(units: Sequence[Unit], counts: Sequence[int], floor: int, budget: int) -> int:
    """Where the tail begins: whole units from the end until they reach ``budget`` tokens.

    The unit that crosses the budget is kept whole; the tail never reaches below ``floor``
    (the head, or a summary spliced in earlier).
    """
    start = len(counts)
    kept_tokens = 0
    for unit in reversed(units):
        if unit.start < floor or kept_tokens >= budget:
            break
        kept_tokens += sum(counts[unit.start : unit.end])
        start = unit.start
    return start


def latest_user_index(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if is_real_user_message(messages[index]):
            return index
    return None


def partition(
    messages: Sequence[Message],
    counts: Sequence[int],
    units: Sequence[Unit],
    tail_budget: int,
    floor: int = 0,
) -> Partition:
    """Split for compaction; an empty ``middle`` means there is nothing worth summarizing.

    ``floor`` is where messages not yet summarized begin (after a spliced-in summary): the
    tail stays above it, and unless something above it ages out there is nothing new to
    summarize — re-summarizing a summary alone would only cost a call.
    """
    head_end = head_length(messages)
    start = tail_start(units, counts, max(head_end, floor), tail_budget)
    latest_user = latest_user_index(messages)
    kept = (latest_user,) if latest_user is not None and head_end <= latest_user < start else ()
    middle = tuple(index for index in range(head_end, start) if index not in kept)
    if start <= floor:
        middle = ()
    return Partition(head_end=head_end, kept=kept, middle=middle, tail_start=start)

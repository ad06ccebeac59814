"""Pure partitioning of a history into head / kept user messages / middle / tail.

Codex and LangChain cut by message; we cut by unit (see ``units``), so a tool call is never
separated from its results, whatever the budgets say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compact_hook.messages import (
    HEAD_ROLES,
    Message,
    is_real_user_message,
    role_of,
    text_of,
    tool_call_name,
    tool_calls_of,
)
from compact_hook.units import Unit

INTERRUPT_MARKERS = ("<turn-aborted>", "<turn_aborted>", "[Request interrupted by user")
"""Text that marks an interrupted turn (Codex, Claude Code): such messages survive compaction."""


@dataclass(frozen=True, slots=True)
class KeepPolicy:
    """What the middle keeps verbatim besides the latest user message.

    Real user messages and results of protected tools, newest first, within
    ``user_message_budget`` tokens; the newest result of each protected tool and every
    interrupted-turn marker always.
    """

    user_message_budget: int = 0
    protected_tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Partition:
    """Index ranges into the original message list.

    ``messages[:head_end]`` is the head, ``kept`` the middle messages kept verbatim (whole
    units, in order: see ``KeepPolicy``), ``middle`` what is summarized,
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
    keep: KeepPolicy = KeepPolicy(),
) -> Partition:
    """Split for compaction; an empty ``middle`` means there is nothing worth summarizing.

    ``floor`` is where messages not yet summarized begin (after a spliced-in summary): the
    tail stays above it, and unless something above it ages out there is nothing new to
    summarize — re-summarizing a summary alone would only cost a call.
    """
    head_end = head_length(messages)
    start = tail_start(units, counts, max(head_end, floor), tail_budget)
    inner = [unit for unit in units if head_end <= unit.start and unit.end <= start]
    kept = select_kept(messages, counts, inner, keep)
    kept_set = set(kept)
    middle = tuple(index for index in range(head_end, start) if index not in kept_set)
    if start <= floor:
        middle = ()
    return Partition(head_end=head_end, kept=kept, middle=middle, tail_start=start)


def select_kept(
    messages: Sequence[Message], counts: Sequence[int], units: Sequence[Unit], keep: KeepPolicy
) -> tuple[int, ...]:
    """Message indices of the middle units kept verbatim, in their original order."""
    latest_user = latest_user_index(messages)
    always: list[Unit] = []
    optional: list[Unit] = []
    newest_protected: set[str] = set()
    for unit in reversed(units):
        tools = {tool_call_name(call) for call in tool_calls_of(messages[unit.start])}
        protected = tools & set(keep.protected_tools)
        if unit.start == latest_user or _has_interrupt_marker(messages, unit) or protected - newest_protected:
            always.append(unit)
            newest_protected |= protected
        elif protected or is_real_user_message(messages[unit.start]):
            optional.append(unit)
    chosen = always + _within_budget(optional, counts, keep.user_message_budget - _tokens(always, counts))
    return tuple(sorted(index for unit in chosen for index in range(unit.start, unit.end)))


def _within_budget(units: Sequence[Unit], counts: Sequence[int], budget: int) -> list[Unit]:
    """Newest first (``units`` come newest first), each whole, while the budget lasts."""
    chosen = []
    for unit in units:
        cost = _tokens([unit], counts)
        if cost > budget:
            break
        chosen.append(unit)
        budget -= cost
    return chosen


def _tokens(units: Sequence[Unit], counts: Sequence[int]) -> int:
    return sum(sum(counts[unit.start : unit.end]) for unit in units)


def _has_interrupt_marker(messages: Sequence[Message], unit: Unit) -> bool:
    return any(
        marker in text_of(messages[index].get("content"))
        for index in range(unit.start, unit.end)
        for marker in INTERRUPT_MARKERS
    )

"""Units: the atoms compaction keeps or drops whole.

A unit is one plain message, or an assistant message that opens tool calls together with
the tool results that follow it (parallel calls included). Pairing is positional — the
results are the tool messages right after the call — because real clients reuse
tool-call ids (tau-bench, SWE-agent), so ids cannot be trusted to pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compact_hook.messages import Message, is_tool_result, tool_calls_of


@dataclass(frozen=True, slots=True)
class Unit:
    """``messages[start:end]``."""

    start: int
    end: int


def group_units(messages: Sequence[Message]) -> list[Unit]:
    """Split a history into consecutive units covering every message exactly once."""
    units: list[Unit] = []
    index = 0
    while index < len(messages):
        end = index + 1
        if tool_calls_of(messages[index]):
            while end < len(messages) and is_tool_result(messages[end]):
                end += 1
        units.append(Unit(index, end))
        index = end
    return units

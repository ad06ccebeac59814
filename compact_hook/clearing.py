"""Tier 2: old tool results become a one-line placeholder, in batches, remembered.

Masking old observations halves an agent's cost at equal task success (arXiv 2508.21433),
but every change to an old message invalidates the provider's prompt cache from that
point on. So clearing moves a *boundary* forward in batches worth at least
``clear_at_least`` tokens, and the boundary is stored with the conversation's state: between
batches every request clears exactly the same results, and the forwarded prefix is stable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compact_hook.messages import Message, is_tool_result, text_of, tool_call_name, tool_calls_of
from compact_hook.units import Unit

PLACEHOLDER = "[Previous: used {tool}]"
MIN_CLEAR_CHARS = 100
"""Results this short are kept: the placeholder would save nothing."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    index: int
    tool: str


def tool_results(messages: Sequence[Message], units: Sequence[Unit]) -> list[ToolResult]:
    """Every tool result with the name of the tool that produced it (paired by position)."""
    found: list[ToolResult] = []
    for unit in units:
        names = [tool_call_name(call) for call in tool_calls_of(messages[unit.start])]
        position = 0
        for index in range(unit.start, unit.end):
            message = messages[index]
            if not is_tool_result(message):
                continue
            own = message.get("name")
            name = (
                own if isinstance(own, str) and own else names[position] if position < len(names) else "tool"
            )
            found.append(ToolResult(index, name))
            position += 1
    return found


def is_clearable(message: Message, tool: str, protected: Sequence[str]) -> bool:
    return tool not in protected and len(text_of(message.get("content"))) > MIN_CLEAR_CHARS


def placeholder(message: Message, tool: str) -> Message:
    """The result with its output replaced; role, ids and name stay, so pairing holds."""
    return {**message, "content": PLACEHOLDER.format(tool=tool)}


def next_boundary(
    results: Sequence[ToolResult],
    savings: Sequence[int],
    keep: int,
    boundary: int,
    at_least: int,
) -> int | None:
    """The new boundary if clearing everything older than the newest ``keep`` results saves
    at least ``at_least`` tokens beyond what ``boundary`` already clears; else None.

    ``savings[k]`` is what clearing ``results[k]`` would save (0 when it may not be cleared).
    """
    if len(results) <= keep:
        return None
    candidate = results[len(results) - keep].index if keep else results[-1].index + 1
    gained = sum(s for r, s in zip(results, savings, strict=True) if boundary <= r.index < candidate)
    return candidate if candidate > boundary and gained >= at_least else None

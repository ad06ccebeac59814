"""Validity normalization: every tool call answered, every tool result with its call.

Providers reject a tool call with no result and a result with no call. Compaction never
creates either (it works on whole units), but clients do send them — an agent interrupted
mid-call, a history trimmed by hand — and a request we reshape should leave valid. Calls
and results pair by position across the history (ids get reused), and by id within one
assistant turn's results, where ids are unique and parallel results may come in any order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compact_hook.messages import Message, is_tool_result, tool_call_name, tool_calls_of
from compact_hook.units import group_units

ABORTED_RESULT = "[compact_hook: this tool call was interrupted; it has no recorded result]"


def normalize(messages: Sequence[Message]) -> list[Message]:
    """A new list: synthetic results for unanswered calls, orphan results removed.

    Messages that need no change are the very same objects.
    """
    out: list[Message] = []
    for unit in group_units(messages):
        first = messages[unit.start]
        calls = tool_calls_of(first)
        results = list(messages[unit.start + 1 : unit.end]) if calls else []
        if not calls:
            if not is_tool_result(first):
                out.append(first)
            continue
        out.append(first)
        out.extend(_answered(calls, results, legacy=not first.get("tool_calls")))
    return out


def _answered(calls: list[dict[str, Any]], results: list[Message], legacy: bool) -> list[Message]:
    """The results of one turn, one per call: matched by id, then by position; extras dropped."""
    ids = [call.get("id") for call in calls]
    slots: list[Message | None] = [None] * len(calls)
    unmatched: list[Message] = []
    for result in results:
        wanted = result.get("tool_call_id")
        slot = next((k for k, i in enumerate(ids) if i == wanted and slots[k] is None), None)
        if slot is None:
            unmatched.append(result)
        else:
            slots[slot] = result
    for result in unmatched:
        free = next((k for k, s in enumerate(slots) if s is None), None)
        if free is not None:
            slots[free] = result
    if all(slot is not None for slot in slots) and len(results) == len(calls):
        return results  # already valid: keep the client's order untouched
    return [slot if slot is not None else _aborted(calls[k], legacy) for k, slot in enumerate(slots)]


def _aborted(call: dict[str, Any], legacy: bool) -> Message:
    if legacy:  # the pre-tools ``function_call`` protocol answers with a ``function`` message
        return {"role": "function", "name": tool_call_name(call), "content": ABORTED_RESULT}
    return {"role": "tool", "tool_call_id": str(call.get("id", "")), "content": ABORTED_RESULT}


def is_valid(messages: Sequence[Message]) -> bool:
    """True when ``normalize`` would change nothing."""
    normalized = normalize(messages)
    return len(normalized) == len(messages) and all(a is b for a, b in zip(normalized, messages, strict=True))

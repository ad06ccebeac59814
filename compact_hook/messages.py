"""The OpenAI chat-completions wire format, as far as compaction needs to understand it.

Messages stay plain dicts end to end: kept messages must leave byte-identical to what the
client sent, so we never parse them into objects and back. These helpers only *read* them.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict


class ToolCallFunction(TypedDict):
    name: str
    arguments: str


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: ToolCallFunction


class ChatMessage(TypedDict, total=False):
    """Documentation of the shape we read; at run time a message is any ``dict``."""

    role: Required[str]
    content: str | list[dict[str, Any]] | None
    name: NotRequired[str]
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]


Message = dict[str, Any]

SUMMARY_PREFIX = "[compact_hook summary] The earlier part of this conversation was compacted. Summary:"
"""Every summary message starts with this, so later passes recognise (and merge) it."""

HEAD_ROLES = frozenset({"system", "developer"})
TOOL_RESULT_ROLES = frozenset({"tool", "function"})
_CONTENT_TYPES = (str, list, type(None))


def malformed_reason(messages: object) -> str | None:
    """Why ``messages`` is not a chat history we can safely rework, or None if it is.

    Anything odd is passed through untouched for the provider to judge: we never "fix"
    a request we do not understand.
    """
    if not isinstance(messages, list):
        return f"messages is {type(messages).__name__}, not a list"
    for index, message in enumerate(messages):
        reason = _message_problem(message)
        if reason is not None:
            return f"messages[{index}]: {reason}"
    return None


def _message_problem(message: object) -> str | None:
    if not isinstance(message, dict):
        return f"is {type(message).__name__}, not an object"
    role = message.get("role")
    if not isinstance(role, str) or not role:
        return "has no role"
    if not isinstance(message.get("content"), _CONTENT_TYPES):
        return f"content is {type(message.get('content')).__name__}"
    content = message.get("content")
    if isinstance(content, list) and not all(isinstance(part, dict) for part in content):
        return "content has a part that is not an object"
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not (
        isinstance(tool_calls, list) and all(isinstance(call, dict) for call in tool_calls)
    ):
        return "tool_calls is not a list of objects"
    return None


def role_of(message: Message) -> str:
    return str(message.get("role", ""))


def tool_calls_of(message: Message) -> list[dict[str, Any]]:
    """The tool calls an assistant message opens (legacy ``function_call`` counts as one)."""
    if role_of(message) != "assistant":
        return []
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        return [call for call in calls if isinstance(call, dict)]
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        return [{"type": "function", "function": legacy}]
    return []


def tool_call_name(call: dict[str, Any]) -> str:
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name else "tool"


def is_tool_result(message: Message) -> bool:
    return role_of(message) in TOOL_RESULT_ROLES


def text_of(content: object) -> str:
    """The plain text of a content value (string or text parts), for prefix checks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def is_summary_message(message: Message) -> bool:
    """A summary we inserted earlier (it is a ``user`` message, but not the user's words)."""
    return role_of(message) == "user" and text_of(message.get("content")).startswith(SUMMARY_PREFIX)


def is_real_user_message(message: Message) -> bool:
    return role_of(message) == "user" and not is_summary_message(message)

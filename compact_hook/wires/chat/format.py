"""OpenAI chat completions (``/v1/chat/completions``, LiteLLM call type ``acompletion``).

Entries are ``messages``. Leading system/developer messages are the head; an assistant
message's ``tool_calls`` (or legacy ``function_call``) are answered by the ``tool`` (or
``function``) messages right after it. ``tools``, ``functions`` and ``response_format`` are
read by the model but never changed; ``max_completion_tokens`` / ``max_tokens`` is the
output reserve.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from compact_hook.core.items import Item, Part, PartKind, Placement, Role, summary_body
from compact_hook.core.normalize import ABORTED_RESULT
from compact_hook.core.outcomes import Reason
from compact_hook.wires.base import Conversation, Rejected
from compact_hook.wires.openai_parts import content_parts, joined_text, output_replaced, with_texts
from compact_hook.wires.parsing import positive_int, problem_in

Message = dict[str, Any]

ROLES = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "tool": Role.TOOL,
    "function": Role.TOOL,
}
CONTEXT_KEYS = ("tools", "functions", "response_format")
_CONTENT_TYPES = (str, list, type(None))


class ChatFormat:
    name, seed, metadata_key = "chat", 0, "metadata"  # see base.WireFormat
    first_turn_user, placement, bound_thinking = False, Placement.ANYWHERE, False

    def parse(self, data: dict[str, Any]) -> Conversation | Rejected:
        messages = data.get("messages")
        problem = malformed_reason(messages)
        if problem is not None:
            return Rejected(Reason.MALFORMED, problem)
        assert isinstance(messages, list)
        context = tuple(data[key] for key in CONTEXT_KEYS if data.get(key))
        reserve = positive_int(data, "max_completion_tokens", "max_tokens")
        return Conversation(self, messages, context, reserve)

    def item(self, raw: Any) -> Item:
        role = raw.get("role")
        name = raw.get("name")
        if role == "tool" or role == "function":
            parts: tuple[Part, ...] = (_result_part(raw),)
        else:
            parts = content_parts(raw.get("content"))
            if role == "assistant" and (raw.get("tool_calls") or raw.get("function_call")):
                parts = parts + tuple(_call_part(call) for call in _calls_of(raw))
        return Item(ROLES.get(role, Role.OTHER), parts, raw, name if type(name) is str else "")

    def render(self, data: dict[str, Any], entries: list[Any]) -> None:
        data["messages"] = entries

    # -- the items we build ------------------------------------------------------------------------

    def summary(self, text: str, mark: Mapping[str, Any] | None = None) -> Item:
        return self.item({"role": "user", "content": summary_body(text)})

    def replace_outputs(self, item: Item, outputs: Mapping[int, str], keep_media: bool) -> Item:
        if 0 not in outputs:
            return item
        return self.item(output_replaced(item.raw, "content", outputs[0], keep_media))

    def without_parts(self, item: Item, indices: Sequence[int]) -> Item | None:
        return None  # only tool messages carry results, and each is one result

    def replace_text(self, item: Item, texts: Mapping[int, str]) -> Item:
        return self.item({**item.raw, "content": with_texts(item.raw.get("content"), texts)})

    def answer(self, unit: Sequence[Item], calls: Sequence[tuple[int, int]]) -> list[Item]:
        """Synthetic results go right after the unit's existing ones (chat wants them all
        directly after the assistant message, in any order)."""
        added = []
        for offset, position in calls:
            call = unit[offset].parts[position]
            if unit[offset].raw.get("tool_calls"):
                raw = {"role": "tool", "tool_call_id": call.call_id, "content": ABORTED_RESULT}
            else:  # the pre-tools ``function_call`` protocol answers with a ``function`` message
                raw = {"role": "function", "name": call.name, "content": ABORTED_RESULT}
            added.append(self.item(raw))
        return [*unit, *added]


def malformed_reason(messages: object) -> str | None:
    """Why ``messages`` is not a chat history we can safely rework, or None if it is.

    Anything odd is passed through untouched for the provider to judge: we never "fix"
    a request we do not understand.
    """
    if not isinstance(messages, list):
        return f"messages is {type(messages).__name__}, not a list"
    problem = problem_in(messages, _message_problem)
    return f"messages{problem}" if problem is not None else None


def _message_problem(message: object) -> str | None:
    if not isinstance(message, dict):
        return f"is {type(message).__name__}, not an object"
    role = message.get("role")
    if not isinstance(role, str) or not role:
        return "has no role"
    content = message.get("content")
    if not isinstance(content, _CONTENT_TYPES):
        return f"content is {type(content).__name__}"
    if isinstance(content, list) and not all(isinstance(part, dict) for part in content):
        return "content has a part that is not an object"
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not (
        isinstance(tool_calls, list) and all(isinstance(call, dict) for call in tool_calls)
    ):
        return "tool_calls is not a list of objects"
    return None


def _calls_of(message: Message) -> list[dict[str, Any]]:
    """The tool calls an assistant message opens (legacy ``function_call`` counts as one)."""
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        return [call for call in calls if isinstance(call, dict)]
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        return [{"type": "function", "function": legacy}]
    return []


def _call_part(call: dict[str, Any]) -> Part:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    name = function.get("name")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = "" if arguments is None else json.dumps(arguments, ensure_ascii=False)
    call_id = call.get("id")
    return Part(
        PartKind.CALL,
        text=arguments,
        name=name if isinstance(name, str) and name else "tool",
        call_id=call_id if isinstance(call_id, str) else "",
    )


def _result_part(message: Message) -> Part:
    call_id = message.get("tool_call_id")
    name = message.get("name")
    call_id = call_id if type(call_id) is str else ""
    name = name if type(name) is str else ""
    content = message.get("content")
    if type(content) is str:
        return Part(PartKind.RESULT, content, name, call_id)
    parts = content_parts(content)
    return Part(PartKind.RESULT, joined_text(parts), name, call_id, sum(part.fixed_tokens for part in parts))

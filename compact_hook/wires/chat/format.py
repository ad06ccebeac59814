"""OpenAI chat completions (``/v1/chat/completions``, LiteLLM call type ``acompletion``).

Entries are ``messages``. Leading system/developer messages are the head; an assistant
message's ``tool_calls`` (or legacy ``function_call``) are answered by the ``tool`` (or
``function``) messages right after it. ``tools``, ``functions`` and ``response_format`` are
read by the model but never changed; ``max_completion_tokens`` / ``max_tokens`` is the
output reserve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compact_hook.core.items import Item, Part, PartKind, Placement, Role, summary_body
from compact_hook.core.normalize import ABORTED_RESULT
from compact_hook.wires.base import Rejected
from compact_hook.wires.conversation import Conversation
from compact_hook.wires.openai_parts import content_parts, joined_text, output_replaced, with_texts
from compact_hook.wires.parsing import arguments_text, positive_int, shape_rejected, string

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
    name, seed, metadata_key, entries_key = "chat", 0, "metadata", "messages"  # see base.WireFormat
    first_turn_user, placement, bound_thinking = False, Placement.ANYWHERE, False

    def parse(self, data: dict[str, Any], unseen: Sequence[int] | None = None) -> Conversation | Rejected:
        rejected = shape_rejected(data, "messages", _message_problem, unseen)
        if rejected is not None:
            return rejected
        messages = data["messages"]
        context = tuple(data[key] for key in CONTEXT_KEYS if data.get(key))
        reserve = positive_int(data, "max_completion_tokens", "max_tokens")
        return Conversation(self, messages, context, reserve)

    def item(self, raw: Any) -> Item:
        role = raw.get("role")
        if role == "tool" or role == "function":
            parts: tuple[Part, ...] = (_result_part(raw),)
        else:
            parts = content_parts(raw.get("content"))
            if role == "assistant" and (raw.get("tool_calls") or raw.get("function_call")):
                parts = parts + tuple(_call_part(call) for call in _calls_of(raw))
        return Item(ROLES.get(role, Role.OTHER), parts, raw, string(raw.get("name")))

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


def _message_problem(message: object) -> str | None:
    """Why a message is not one we can safely rework, or None if it is.

    Anything odd is passed through untouched for the provider to judge: we never "fix"
    a request we do not understand.
    """
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
    return Part(
        PartKind.CALL,
        text=arguments_text(function.get("arguments")),
        name=string(function.get("name")) or "tool",
        call_id=string(call.get("id")),
    )


def _result_part(message: Message) -> Part:
    call_id, name = string(message.get("tool_call_id")), string(message.get("name"))
    content = message.get("content")
    if type(content) is str:
        return Part(PartKind.RESULT, content, name, call_id)
    parts = content_parts(content)
    return Part(PartKind.RESULT, joined_text(parts), name, call_id, sum(part.fixed_tokens for part in parts))

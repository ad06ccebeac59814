"""OpenAI Responses (``/v1/responses``, LiteLLM call type ``aresponses``).

Entries are ``input`` items; a string ``input`` is one user item and is never cut.
``instructions`` is the head, ``tools`` and the ``text.format`` schema are read but never
changed, ``max_output_tokens`` is the output reserve. One model turn spreads over several
items — ``reasoning``, an assistant ``message``, ``function_call`` s — which form one unit
with the ``function_call_output`` items answering them (paired by ``call_id``). Items we do
not know are kept whole, in place.

With ``previous_response_id`` or a ``conversation`` the provider holds the conversation's
state; with ``context_management`` entries (server-side ``compaction``) or the provider's
``compaction`` items the client or the provider manages its size: the request passes through
untouched (``client_managed``). Codex's ``compaction_trigger``, as the last item, is parsed (an
opaque item) for the gate to serve (``proxy.answers.codex``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

from compact_hook.core.items import Item, Part, PartKind, Placement, Role, summary_body
from compact_hook.core.normalize import ABORTED_RESULT
from compact_hook.core.outcomes import Reason
from compact_hook.wires.base import Rejected
from compact_hook.wires.conversation import Conversation
from compact_hook.wires.openai_parts import (
    MEDIA_TOKENS,
    content_parts,
    joined_text,
    media_of,
    output_replaced,
    with_texts,
)
from compact_hook.wires.parsing import arguments_text, compact_json, positive_int, problem_in, string

MESSAGE_ROLES = {
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
}
CALL_TYPES = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "local_shell_call": "local_shell_call_output",
    "computer_call": "computer_call_output",
}
RESULT_TYPES = frozenset(CALL_TYPES.values())
ARGUMENT_KEYS = {"function_call": "arguments", "custom_tool_call": "input"}
"""Where a named call holds its arguments (the others, named by their type, hold an ``action``)."""
ANSWERABLE = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
"""Calls we can answer with a text output when the client left them unanswered."""
MODEL_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
    }
)
"""Built-in tool calls: the model's own, answered within the item itself."""
MANAGED_ITEMS = frozenset({"compaction", "compaction_summary", "compaction_trigger"})
"""Items of the compaction protocol: a compacted history (the provider's: ours are expanded before
parsing, see ``proxy.answers.codex``), or the client asking for one — read only as the last item,
where the gate serves it."""
LOOKED_ONE_BY_ONE = 16
"""More unseen items than this (a conversation's first request, say): all are looked over in C."""
REASONING_BYTES_PER_TOKEN = 4
REASONING_ENVELOPE_BYTES = 650
"""Encrypted reasoning costs about its decoded size, less a fixed envelope, at ~4 bytes a
token: Codex's estimate (``estimate_reasoning_length``)."""


class ResponsesFormat:
    name, seed, metadata_key, entries_key = "responses", 4, "litellm_metadata", "input"  # base.WireFormat
    first_turn_user, placement, bound_thinking = False, Placement.ANYWHERE, False

    def parse(self, data: dict[str, Any], unseen: Sequence[int] | None = None) -> Conversation | Rejected:
        if data.get("previous_response_id") or data.get("conversation"):
            return Rejected(Reason.CLIENT_MANAGED, "previous_response_id or conversation")
        if data.get("context_management"):
            return Rejected(Reason.CLIENT_MANAGED, "context_management")
        raw_input = data.get("input")
        if isinstance(raw_input, str):
            entries: list[Any] = [raw_input]
        elif isinstance(raw_input, list):
            problem = problem_in(raw_input, _item_problem, unseen)
            if problem is not None:
                return Rejected(Reason.MALFORMED, f"input{problem}")
            managed = _managed(raw_input, unseen)
            if managed and managed != [len(raw_input) - 1] or raw_input and _is_provider_item(raw_input[-1]):
                return Rejected(Reason.CLIENT_MANAGED, "compaction items")
            entries = raw_input
        else:
            return Rejected(Reason.MALFORMED, f"input is {type(raw_input).__name__}, not a string or a list")
        return Conversation(self, entries, _context(data), positive_int(data, "max_output_tokens"))

    def item(self, raw: Any) -> Item:
        if isinstance(raw, str):
            return Item(Role.USER, (Part(PartKind.TEXT, raw),) if raw else (), raw)
        kind = raw.get("type", "message")
        if kind == "message":
            role = MESSAGE_ROLES.get(str(raw.get("role")), Role.OTHER)
            return Item(role, content_parts(raw.get("content")), raw, joins_turn=role is Role.ASSISTANT)
        if kind in CALL_TYPES:
            return Item(Role.ASSISTANT, (_call_part(raw, kind),), raw, joins_turn=True)
        if kind in RESULT_TYPES:
            return Item(Role.TOOL, (_result_part(raw),), raw)
        if kind == "reasoning":
            return Item(Role.ASSISTANT, (_reasoning_part(raw),), raw, joins_turn=True)
        opaque = (Part(PartKind.OPAQUE, compact_json(raw), name=str(kind)),)
        if kind in MODEL_ITEMS:
            return Item(Role.ASSISTANT, opaque, raw, joins_turn=True)
        return Item(Role.OTHER, opaque, raw)

    def render(self, data: dict[str, Any], entries: list[Any]) -> None:
        data["input"] = [
            {"role": "user", "content": entry} if isinstance(entry, str) else entry for entry in entries
        ]

    # -- the items we build ------------------------------------------------------------------------

    def summary(self, text: str, mark: Mapping[str, Any] | None = None) -> Item:
        return self.item(
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": summary_body(text)}],
            }
        )

    def replace_outputs(self, item: Item, outputs: Mapping[int, str], keep_media: bool) -> Item:
        if 0 not in outputs:
            return item
        return self.item(output_replaced(item.raw, "output", outputs[0], keep_media))

    def without_parts(self, item: Item, indices: Sequence[int]) -> Item | None:
        return None  # a result item is one result

    def replace_text(self, item: Item, texts: Mapping[int, str]) -> Item:
        if isinstance(item.raw, str):
            return self.item(texts.get(0, item.raw))
        return self.item({**item.raw, "content": with_texts(item.raw.get("content"), texts)})

    def answer(self, unit: Sequence[Item], calls: Sequence[tuple[int, int]]) -> list[Item]:
        """An output item per unanswered call, after the unit's other items."""
        added = []
        for offset, position in calls:
            kind = unit[offset].raw.get("type")
            if kind in ANSWERABLE:
                call_id = unit[offset].parts[position].call_id
                added.append(
                    self.item({"type": CALL_TYPES[kind], "call_id": call_id, "output": ABORTED_RESULT})
                )
        return [*unit, *added]


def _context(data: Mapping[str, Any]) -> tuple[Any, ...]:
    text = data.get("text")
    schema = text.get("format") if isinstance(text, dict) else None
    values = (data.get("instructions"), data.get("tools"), schema if isinstance(schema, dict) else None)
    return tuple(value for value in values if value)


def _is_provider_item(item: Any) -> bool:
    """A compacted history the provider made (its opaque item), as the last input item."""
    return isinstance(item, dict) and item.get("type") in ("compaction", "compaction_summary")


def _managed(items: list[dict[str, Any]], unseen: Sequence[int] | None = None) -> list[int]:
    """Where the compaction items are (``items`` passed ``_item_problem``). Every request asks, of
    hundreds of items in a Codex session and none managed most of the time. ``unseen``: the items
    not sent the same by the conversation's last request this wire accepted (``state.recent``) —
    that one held a compaction item, if any, only last (else it was refused), so of the items it
    sent the same only the one at its end can be one: where the new items begin, or the end."""
    if unseen is None or len(unseen) > LOOKED_ONE_BY_ONE:  # the types gathered and looked up in C first
        if MANAGED_ITEMS.isdisjoint(map(dict.get, items, repeat("type"))):
            return []
        return [index for index, item in enumerate(items) if item.get("type") in MANAGED_ITEMS]
    looked = {*unseen, len(items) - 1, _appended_from(unseen, len(items)) - 1}
    return sorted(index for index in looked if 0 <= index < len(items) and _is_managed(items[index]))


def _appended_from(unseen: Sequence[int], length: int) -> int:
    """Where the run of unseen items that ends the input begins (``length``: none)."""
    start = length
    for index in reversed(unseen):
        if index != start - 1:
            break
        start = index
    return start


def _is_managed(item: dict[str, Any]) -> bool:
    return item.get("type") in MANAGED_ITEMS


def _item_problem(item: object) -> str | None:
    if not isinstance(item, dict):
        return f"is {type(item).__name__}, not an object"
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        return "type is not a string"
    if kind != "message":
        return None
    if not isinstance(item.get("role"), str):
        return "message has no role"
    content = item.get("content")
    if isinstance(content, list) and not all(isinstance(part, dict) for part in content):
        return "content has a part that is not an object"
    return None if isinstance(content, (str, list)) else f"content is {type(content).__name__}"


def _call_part(raw: Mapping[str, Any], kind: str) -> Part:
    arguments = raw.get(ARGUMENT_KEYS.get(kind, "action"))
    name = raw.get("name") if kind in ARGUMENT_KEYS else kind.removesuffix("_call")
    return Part(
        PartKind.CALL,
        arguments_text(arguments),
        name=string(name) or "tool",
        call_id=string(raw.get("call_id")),
    )


def _result_part(raw: Mapping[str, Any]) -> Part:
    output = raw.get("output")
    if isinstance(output, str):
        text, media = output, 0
    elif isinstance(output, list):
        text, media = joined_text(content_parts(output)), len(media_of(output))
    else:
        text, media = ("" if output is None else compact_json(output)), 0
    return Part(PartKind.RESULT, text, call_id=string(raw.get("call_id")), fixed_tokens=media * MEDIA_TOKENS)


def _reasoning_part(raw: Mapping[str, Any]) -> Part:
    summary = raw.get("summary")
    texts = [part.text for part in content_parts(summary)] if isinstance(summary, list) else []
    encrypted = raw.get("encrypted_content")
    hidden = 0
    if isinstance(encrypted, str) and encrypted:
        hidden = max(0, len(encrypted) * 3 // 4 - REASONING_ENVELOPE_BYTES) // REASONING_BYTES_PER_TOKEN
    return Part(PartKind.THINKING, "\n".join(texts), fixed_tokens=hidden)

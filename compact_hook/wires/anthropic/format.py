"""Anthropic Messages (``/v1/messages``, LiteLLM call type ``anthropic_messages``).

Entries are ``messages`` (``user`` / ``assistant``, content a string or blocks, and
mid-conversation ``system`` entries: Claude Code sends its environment as one). The
top-level ``system`` is the head and ``tools`` are read but never changed; ``max_tokens``
is the output reserve. A model turn is an assistant message; its ``tool_use`` blocks are
answered by ``tool_result`` blocks in the next user message, which may carry text too
(the unit keeps that message whole). ``thinking`` / ``redacted_thinking`` blocks stay in
their message, byte-identical.

Roles stay valid around what we build: the summary is a user message; Anthropic merges
consecutive same-role messages into one turn, so a summary next to a user message reads as
one user turn, and a tail never starts with a ``tool_result`` message (it starts at a unit).
The conversation must open with a user turn (``first_turn_user``): the summary leads when
the first kept message is the model's, and the fit never drops a leading user unit.

A ``system`` entry must follow a user turn and come last or before an assistant turn
(``Placement.AFTER_USER``): normalization moves one we reordered (a pinned one) to the next
such place. Thinking blocks are bound to everything before them (``bound_thinking``) on the
models that run the prefix check (``runs_prefix_check``): see ``engine.view``.

Requests that manage their own context size pass through untouched (``client_managed``):
``context_management`` edits other than ``clear_thinking_*`` (which only say which thinking
blocks the provider keeps, and are forwarded as sent), the ``compaction`` parameter, and
``compaction`` blocks.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from compact_hook.core.items import Item, Part, PartKind, Placement, Role, summary_body
from compact_hook.core.normalize import ABORTED_RESULT
from compact_hook.core.outcomes import Reason
from compact_hook.wires.base import Rejected
from compact_hook.wires.conversation import Conversation
from compact_hook.wires.parsing import (
    EntryShape,
    answers_after,
    compact_json,
    media_location,
    positive_int,
    shape_rejected,
    string,
)

MEDIA_TOKENS = 1600
"""Anthropic's figure for a full-size image (~1.15 megapixels, width x height / 750); used
for every image and document block: an estimate, as the real cost depends on the file."""
TOOL_USE_SYSTEM_TOKENS = 346
"""The system prompt Anthropic adds when ``tools`` are present (its pricing page's figure)."""
ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "system": Role.SYSTEM}
MESSAGE_SHAPE = EntryShape(ROLES, "content", text=True)
MEDIA_BLOCKS = frozenset({"image", "document"})
MANAGED_BLOCKS = frozenset({"compaction"})
THINKING_EDIT = re.compile(r"clear_thinking_\d{8}")
"""A ``context_management`` edit that only governs thinking blocks: the history stays ours."""
KNOWN_EDIT = re.compile(r"(clear_tool_uses|compact)_\d{8}")


class AnthropicFormat:
    name, seed, metadata_key, entries_key = "anthropic", 2, "litellm_metadata", "messages"  # base.WireFormat
    first_turn_user, placement, bound_thinking = True, Placement.AFTER_USER, True

    def parse(self, data: dict[str, Any], unseen: Sequence[int] | None = None) -> Conversation | Rejected:
        rejected = shape_rejected(data, "messages", MESSAGE_SHAPE.problem, unseen)
        if rejected is not None:
            return rejected
        messages = data["messages"]
        managed = _managed_by_client(data, messages if unseen is None else [messages[i] for i in unseen])
        if managed is not None:
            return Rejected(Reason.CLIENT_MANAGED, managed)
        context = tuple(data[key] for key in ("system", "tools") if data.get(key))
        overhead = TOOL_USE_SYSTEM_TOKENS if data.get("tools") else 0
        conversation = Conversation(self, messages, context, positive_int(data, "max_tokens"), overhead)
        conversation.summary_mark = functools.partial(summary_breakpoint, data)
        thinking = data.get("thinking")
        conversation.turn_opens_with_thinking = (
            isinstance(thinking, dict) and thinking.get("type") == "enabled"
        )
        return conversation

    def item(self, raw: Any) -> Item:
        content = raw.get("content")
        if isinstance(content, str):
            parts: tuple[Part, ...] = (Part(PartKind.TEXT, content),) if content else ()
        else:
            parts = tuple(_block_part(block) for block in content)
        return Item(ROLES[raw["role"]], parts, raw)

    def render(self, data: dict[str, Any], entries: list[Any]) -> None:
        data["messages"] = entries

    # -- the items we build ------------------------------------------------------------------------

    def summary(self, text: str, mark: Mapping[str, Any] | None = None) -> Item:
        block: dict[str, Any] = {"type": "text", "text": summary_body(text)}
        if mark is not None:
            block["cache_control"] = dict(mark)
        return self.item({"role": "user", "content": [block]})

    def replace_outputs(self, item: Item, outputs: Mapping[int, str], keep_media: bool) -> Item:
        blocks = _blocks(item.raw)
        rebuilt = [
            _with_output(block, outputs[index], keep_media) if index in outputs else block
            for index, block in enumerate(blocks)
        ]
        return self.item({**item.raw, "content": rebuilt})

    def without_parts(self, item: Item, indices: Sequence[int]) -> Item | None:
        gone = set(indices)
        blocks = [block for index, block in enumerate(_blocks(item.raw)) if index not in gone]
        return self.item({**item.raw, "content": blocks}) if blocks else None

    def replace_text(self, item: Item, texts: Mapping[int, str]) -> Item:
        content = item.raw.get("content")
        if isinstance(content, str):
            return self.item({**item.raw, "content": texts.get(0, content)})
        blocks = [
            {**block, "text": texts[index]} if index in texts and block.get("type") == "text" else block
            for index, block in enumerate(_blocks(item.raw))
        ]
        return self.item({**item.raw, "content": blocks})

    def answer(self, unit: Sequence[Item], calls: Sequence[tuple[int, int]]) -> list[Item]:
        """``tool_result`` blocks for the unanswered calls, in the user message right after the
        assistant's (before its other blocks: results must come first), or in a new one."""
        by_turn: dict[int, list[dict[str, Any]]] = {}
        for offset, position in calls:
            call = unit[offset].parts[position]
            block = {
                "type": "tool_result",
                "tool_use_id": call.call_id,
                "content": ABORTED_RESULT,
                "is_error": True,
            }
            by_turn.setdefault(offset, []).append(block)
        return answers_after(unit, by_turn, self._carry)

    def _carry(self, model: Item, following: Item | None, results: list[dict[str, Any]]) -> Item:
        if following is None:
            return self.item({"role": "user", "content": results})
        return self.item({**following.raw, "content": _with_results_first(following.raw, results)})


MAX_BREAKPOINTS = 4


def summary_breakpoint(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``cache_control`` to put on our summary: when the client caches with breakpoints, all of
    one lifetime (a 1-hour one may not follow a 5-minute one), and a slot is free. Then the
    compacted prefix — head, pins, summary — is cached on its own and read on every turn until the
    next compaction, whatever changes after it."""
    found: list[Mapping[str, Any]] = []
    _collect_marks(data.get("system"), found)
    _collect_marks(data.get("tools"), found)
    for message in data.get("messages") or ():
        if isinstance(message, Mapping):
            _collect_marks(message.get("content"), found)
    automatic = data.get("cache_control")
    if isinstance(automatic, Mapping):
        found.append(automatic)
    if not found or len(found) >= MAX_BREAKPOINTS:
        return None
    ttls = {mark.get("ttl", "5m") for mark in found}
    if len(ttls) != 1 or any(mark.get("type") != "ephemeral" for mark in found):
        return None
    return {"type": "ephemeral", **({"ttl": found[0]["ttl"]} if "ttl" in found[0] else {})}


def _collect_marks(value: object, found: list[Mapping[str, Any]]) -> None:
    """The ``cache_control`` of each block (or tool definition) in ``value``."""
    for block in value if isinstance(value, list) else ():
        mark = block.get("cache_control") if isinstance(block, Mapping) else None
        if isinstance(mark, Mapping):
            found.append(mark)


def _managed_by_client(data: Mapping[str, Any], messages: list[Any]) -> str | None:
    """What makes the client the manager of its own context size, or None; ``messages``: those not
    read in an earlier request of the conversation (``state.recent``).

    Decided per edit: ``clear_thinking_*`` only tells the provider which thinking blocks to
    keep; ``clear_tool_uses_*``, ``compact_*`` and any edit we do not know manage the history.
    The text names only what we know (never the client's own strings: it reaches the report).
    """
    if data.get("compaction") is not None:
        return "the compaction parameter"
    management = data.get("context_management")
    if management is not None:
        edits = management.get("edits") if isinstance(management, dict) else None
        if not isinstance(edits, list) or not all(isinstance(edit, dict) for edit in edits):
            return "context_management"
        for edit in edits:
            kind = edit.get("type")
            if not (isinstance(kind, str) and THINKING_EDIT.fullmatch(kind)):
                known = isinstance(kind, str) and KNOWN_EDIT.fullmatch(kind)
                return f"context_management edit {kind if known else 'of a type we do not know'}"
    if _has_compaction_block(messages):
        return "compaction blocks"
    return None


def _has_compaction_block(messages: list[Any]) -> bool:
    return any(
        isinstance(message.get("content"), list)
        and any(block.get("type") in MANAGED_BLOCKS for block in message["content"])
        for message in messages
    )


def _blocks(raw: Mapping[str, Any]) -> list[Any]:
    content = raw.get("content")
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if isinstance(content, str) and content else []


def _block_part(block: dict[str, Any]) -> Part:
    parse = _BLOCK_PARSERS.get(block.get("type"))  # type: ignore[arg-type]
    if parse is not None:
        return parse(block)
    return Part(PartKind.OPAQUE, compact_json(block), name=str(block.get("type")))


def _text_part(block: dict[str, Any]) -> Part:
    return Part(PartKind.TEXT, string(block.get("text")))


def _tool_use_part(block: dict[str, Any]) -> Part:
    return Part(
        PartKind.CALL,
        compact_json(block.get("input", {})),
        string(block.get("name")) or "tool",
        string(block.get("id")),
    )


def _tool_result_part(block: dict[str, Any]) -> Part:
    text, media = _result_content(block.get("content"))
    return Part(
        PartKind.RESULT,
        text,
        "",
        string(block.get("tool_use_id")),
        media * MEDIA_TOKENS,
        block.get("is_error") is True,
    )


def _thinking_part(block: dict[str, Any]) -> Part:
    return Part(PartKind.THINKING, string(block.get("thinking")))


def _media_part(block: dict[str, Any]) -> Part:
    return Part(PartKind.MEDIA, media_location(block), str(block.get("type")), fixed_tokens=MEDIA_TOKENS)


_BLOCK_PARSERS: dict[str, Callable[[dict[str, Any]], Part]] = {
    "text": _text_part,
    "tool_use": _tool_use_part,
    "tool_result": _tool_result_part,
    "thinking": _thinking_part,
    "redacted_thinking": lambda block: Part(PartKind.THINKING),
    "image": _media_part,
    "document": _media_part,
}


def _result_content(content: object) -> tuple[str, int]:
    """A tool_result's text (its text blocks joined) and how many media blocks it holds."""
    if type(content) is str:
        return content, 0
    if not isinstance(content, list):
        return "", 0
    texts = [
        block["text"] for block in content if isinstance(block, dict) and isinstance(block.get("text"), str)
    ]
    return "\n".join(texts), len(_media_of(content))


def _media_of(content: object) -> list[Any]:
    """The media blocks of a list content, in order."""
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict) and block.get("type") in MEDIA_BLOCKS]


def _with_output(block: dict[str, Any], text: str, keep_media: bool) -> dict[str, Any]:
    media = _media_of(block.get("content")) if keep_media else []
    return {**block, "content": [{"type": "text", "text": text}, *media] if media else text}


def _with_results_first(raw: Mapping[str, Any], results: list[dict[str, Any]]) -> list[Any]:
    blocks = _blocks(raw)
    split = next((i for i, block in enumerate(blocks) if block.get("type") != "tool_result"), len(blocks))
    return [*blocks[:split], *results, *blocks[split:]]

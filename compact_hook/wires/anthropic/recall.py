"""The recall tool on Anthropic Messages: a tool with an ``input_schema``; the model's calls are its
``tool_use`` blocks; the follow-up appends the assistant turn and a user turn of ``tool_result``s.
The client's turn keeps the first round's thinking (``THINKING``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compact_hook.core.recall import TOOL_DESCRIPTION, tool_parameters
from compact_hook.wires.base import Call
from compact_hook.wires.replies import field, handle_in_arguments, plain_block, tool_names_in

MESSAGES_PARAMS = (
    "system",
    "tools",
    "tool_choice",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "thinking",
    "metadata",
)

THINKING = frozenset({"thinking", "redacted_thinking"})
"""A turn's thinking is bound to the conversation it was produced after: what the client sends back
next turn must be what followed its own history — the first round's, never a later round's (made
after our recall call and its answer, which the client never sees)."""


class MessagesRecall:
    kept_params: tuple[str, ...] = MESSAGES_PARAMS
    name, metadata_key, entries = "anthropic", "litellm_metadata", "messages"

    def tool(self, name: str) -> dict[str, Any]:
        return {"name": name, "description": TOOL_DESCRIPTION, "input_schema": tool_parameters()}

    def tool_names(self, data: Mapping[str, Any]) -> set[str]:
        return tool_names_in(data.get("tools"), lambda tool: tool.get("name"))

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        uses = [b for b in _blocks(response) if field(b, "type") == "tool_use"]
        ours = [
            Call(str(field(b, "id")), handle_in_arguments(field(b, "input")))
            for b in uses
            if field(b, "name") == tool
        ]
        return ours, len(ours) < len(uses)

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        turn = {"role": "assistant", "content": [plain_block(b) for b in _blocks(response)]}
        results = [{"type": "tool_result", "tool_use_id": call.id, "content": text} for call, text in answers]
        request["messages"] = [*request["messages"], turn, {"role": "user", "content": results}]

    async def send(self, router: Any, request: dict[str, Any]) -> Any:
        return await router.aanthropic_messages(**request, stream=False)

    def usage(self, response: Any) -> dict[str, int]:
        usage = field(response, "usage")
        keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        return {key: int(field(usage, key) or 0) for key in keys}

    def finished(self, response: Any, tool: str, usage: dict[str, int], first: Any) -> Any:
        if not isinstance(response, dict):
            return response
        if response is not first:  # the turn's thinking is the first round's (see ``THINKING``)
            thought = [b for b in _blocks(first) if field(b, "type") in THINKING]
            response["content"] = [
                *thought,
                *(b for b in _blocks(response) if field(b, "type") not in THINKING),
            ]
        blocks = _blocks(response)
        kept = [b for b in blocks if not (field(b, "type") == "tool_use" and field(b, "name") == tool)]
        if len(kept) != len(blocks):
            response["content"] = kept
            if not any(field(b, "type") == "tool_use" for b in kept):
                response["stop_reason"] = "end_turn"
        response["usage"] = {**(response.get("usage") or {}), **usage}
        return response


def _blocks(response: Any) -> list[Any]:
    content = field(response, "content")
    return list(content) if isinstance(content, list) else []

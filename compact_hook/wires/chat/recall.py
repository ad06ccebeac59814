"""The recall tool on chat completions: a function tool; the model's calls are the message's
``tool_calls``; the follow-up appends the assistant turn and one ``tool`` message per answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compact_hook.core.recall import TOOL_DESCRIPTION, tool_parameters
from compact_hook.wires.base import Call
from compact_hook.wires.replies import field, handle_in_arguments, tool_names_in

CHAT_PARAMS = (
    "tools",
    "tool_choice",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "response_format",
    "parallel_tool_calls",
    "reasoning_effort",
    "user",
)
"""What a chat follow-up keeps of the request besides its messages (LiteLLM's own fields stay out)."""


class ChatRecall:
    kept_params: tuple[str, ...] = CHAT_PARAMS
    name, metadata_key, entries = "chat", "metadata", "messages"

    def tool(self, name: str) -> dict[str, Any]:
        function = {"name": name, "description": TOOL_DESCRIPTION, "parameters": tool_parameters()}
        return {"type": "function", "function": function}

    def tool_names(self, data: Mapping[str, Any]) -> set[str]:
        return tool_names_in(data.get("tools"), lambda tool: field(tool.get("function"), "name"))

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        made = _tool_calls(response)
        ours = [
            Call(str(field(c, "id")), handle_in_arguments(field(field(c, "function"), "arguments")))
            for c in made
            if _name(c) == tool
        ]
        return ours, len(ours) < len(made)

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        message = _message(response)
        turn = {
            "role": "assistant",
            "content": field(message, "content"),
            "tool_calls": [_plain(call) for call in _tool_calls(response)],
        }
        results = [{"role": "tool", "tool_call_id": call.id, "content": text} for call, text in answers]
        request["messages"] = [*request["messages"], turn, *results]

    async def send(self, router: Any, request: dict[str, Any]) -> Any:
        return await router.acompletion(**request, stream=False)

    def usage(self, response: Any) -> dict[str, int]:
        usage = field(response, "usage")
        return {
            key: int(field(usage, key) or 0) for key in ("prompt_tokens", "completion_tokens", "total_tokens")
        }

    def finished(self, response: Any, tool: str, usage: dict[str, int], first: Any) -> Any:
        message = _message(response)
        kept = [c for c in _tool_calls(response) if _name(c) != tool]
        if len(kept) != len(_tool_calls(response)):
            message.tool_calls = kept or None
            if not kept:
                response.choices[0].finish_reason = "stop"
        for key, value in usage.items():
            setattr(response.usage, key, value)
        return response


def _message(response: Any) -> Any:
    choices = field(response, "choices") or []
    return field(choices[0], "message") if choices else None


def _tool_calls(response: Any) -> list[Any]:
    calls = field(_message(response), "tool_calls")
    return list(calls) if isinstance(calls, list) else []


def _name(call: Any) -> str:
    return str(field(field(call, "function"), "name") or "")


def _plain(call: Any) -> dict[str, Any]:
    function = field(call, "function")
    return {
        "id": field(call, "id"),
        "type": "function",
        "function": {"name": field(function, "name"), "arguments": field(function, "arguments")},
    }

"""The recall tool on OpenAI Responses: a function tool; the model's calls are ``function_call``
items of the output; the follow-up appends the output (reasoning included) and one
``function_call_output`` per answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compact_hook.core.recall import TOOL_DESCRIPTION, tool_parameters
from compact_hook.wires.base import Call
from compact_hook.wires.replies import field, handle_in_arguments, plain_block, put, tool_names_in

RESPONSES_PARAMS = (
    "instructions",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "temperature",
    "top_p",
    "reasoning",
    "text",
    "parallel_tool_calls",
    "include",
    "store",
    "truncation",
    "user",
    "prompt_cache_key",
)


class ResponsesRecall:
    kept_params: tuple[str, ...] = RESPONSES_PARAMS
    name, metadata_key, entries = "responses", "litellm_metadata", "input"

    def tool(self, name: str) -> dict[str, Any]:
        return {
            "type": "function",
            "name": name,
            "description": TOOL_DESCRIPTION,
            "parameters": tool_parameters(),
        }

    def tool_names(self, data: Mapping[str, Any]) -> set[str]:
        return tool_names_in(data.get("tools"), lambda tool: tool.get("name"))

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        made = [
            item for item in _output(response) if field(item, "type") in ("function_call", "custom_tool_call")
        ]
        ours = [
            Call(str(field(i, "call_id")), handle_in_arguments(field(i, "arguments")))
            for i in made
            if field(i, "name") == tool
        ]
        return ours, len(ours) < len(made)

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        turn = [plain_block(item) for item in _output(response)]  # reasoning (encrypted) included
        results = [
            {"type": "function_call_output", "call_id": call.id, "output": text} for call, text in answers
        ]
        request["input"] = [*request["input"], *turn, *results]

    async def send(self, router: Any, request: dict[str, Any]) -> Any:
        return await router.aresponses(**request, stream=False)

    def usage(self, response: Any) -> dict[str, int]:
        usage = field(response, "usage")
        return {key: int(field(usage, key) or 0) for key in ("input_tokens", "output_tokens", "total_tokens")}

    def finished(self, response: Any, tool: str, usage: dict[str, int], first: Any) -> Any:
        output = _output(response)
        kept = [i for i in output if not (field(i, "type") == "function_call" and field(i, "name") == tool)]
        if len(kept) != len(output):
            put(response, "output", kept)
        held = field(response, "usage")
        for key, value in usage.items():
            put(held, key, value)
        return response


def _output(response: Any) -> list[Any]:
    output = field(response, "output")
    return list(output) if isinstance(output, list) else []

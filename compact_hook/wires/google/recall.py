"""The recall tool on Gemini's ``generateContent``: a function declaration; the model's calls are
``functionCall`` parts (perhaps without an id); the follow-up appends the model's content, thought
signatures included, and a user content of ``functionResponse`` parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compact_hook.core.recall import TOOL_DESCRIPTION, tool_parameters
from compact_hook.wires.base import Call
from compact_hook.wires.replies import handle_in_arguments, plain_block

GOOGLE_PARAMS = (
    "systemInstruction",
    "system_instruction",
    "tools",
    "toolConfig",
    "tool_config",
    "generationConfig",
    "generation_config",
    "safetySettings",
    "safety_settings",
    "cachedContent",
    "cached_content",
)
GOOGLE_USAGE = (
    "promptTokenCount",
    "candidatesTokenCount",
    "totalTokenCount",
    "thoughtsTokenCount",
    "cachedContentTokenCount",
)


def _snake(camel: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in camel)


def _field(value: Any, camel: str) -> Any:
    """A Gemini field under its REST name (camelCase: LiteLLM's objects, dicts) or the SDK's
    (snake_case: google-genai's objects)."""
    if isinstance(value, Mapping):
        return value[camel] if camel in value else value.get(_snake(camel))
    found = getattr(value, camel, None)
    return found if found is not None else getattr(value, _snake(camel), None)


def _set_field(value: Any, camel: str, new: Any) -> None:
    """Set a Gemini field under the name it is held by (``_field``)."""
    snake = _snake(camel)
    if isinstance(value, dict):
        value[snake if snake in value and camel not in value else camel] = new
    elif value is not None:
        setattr(value, snake if getattr(value, camel, None) is None and hasattr(value, snake) else camel, new)


def _parts(response: Any) -> list[Any]:
    candidates = _field(response, "candidates") or []
    parts = _field(_field(candidates[0], "content"), "parts") if candidates else None
    return list(parts) if isinstance(parts, list) else []


class GoogleRecall:
    """Gemini's ``generateContent``: calls are ``functionCall`` parts, which may carry no id (the
    answer then goes by name and position, as Gemini pairs them); a call's ``thoughtSignature`` goes
    back with the model's turn, part for part."""

    kept_params: tuple[str, ...] = GOOGLE_PARAMS
    name, metadata_key, entries = "google", "metadata", "contents"

    def tool(self, name: str) -> dict[str, Any]:
        declaration = {"name": name, "description": TOOL_DESCRIPTION, "parameters": tool_parameters()}
        return {"functionDeclarations": [declaration]}

    def tool_names(self, data: Mapping[str, Any]) -> set[str]:
        tools = data.get("tools")
        return {
            str(_field(declaration, "name"))
            for tool in (tools if isinstance(tools, list) else [])
            for declaration in (_field(tool, "functionDeclarations") or [])
        }

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        made = [call for part in _parts(response) if (call := _field(part, "functionCall")) is not None]
        ours = [
            Call(str(_field(call, "id") or f"{tool}#{n}"), handle_in_arguments(_field(call, "args")))
            for n, call in enumerate(made)
            if _field(call, "name") == tool
        ]
        return ours, len(ours) < len(made)

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        parts = _parts(response)
        # each part as the model sent it, its thought signature included (REST names: what the router sends)
        turn = {"role": "model", "parts": [plain_block(part, mode="json", by_alias=True) for part in parts]}
        named = [_field(call, "name") for part in parts if (call := _field(part, "functionCall")) is not None]
        # every call is ours (a reply that calls the client's tools is never followed up)
        results = [_google_answer(call, text, str(named[0])) for call, text in answers]
        request["contents"] = [*request["contents"], turn, {"role": "user", "parts": results}]

    async def send(self, router: Any, request: dict[str, Any]) -> Any:
        return await router.agenerate_content(**request)

    def usage(self, response: Any) -> dict[str, int]:
        usage = _field(response, "usageMetadata")
        return {key: int(_field(usage, key) or 0) for key in GOOGLE_USAGE}

    def finished(self, response: Any, tool: str, usage: dict[str, int], first: Any) -> Any:
        parts = _parts(response)
        kept = [p for p in parts if _field(_field(p, "functionCall"), "name") != tool]
        if len(kept) != len(parts):
            _set_field(_field(_field(response, "candidates")[0], "content"), "parts", kept)
        held = _field(response, "usageMetadata")
        for key, value in usage.items():
            _set_field(held, key, value)
        return response


def _google_answer(call: Call, text: str, tool: str) -> dict[str, Any]:
    """The answer to one of our calls: by name (and by id where the call had one)."""
    answer: dict[str, Any] = {"name": tool, "response": {"output": text}}
    if not call.id.startswith(tool + "#"):
        answer["id"] = call.id
    return {"functionResponse": answer}

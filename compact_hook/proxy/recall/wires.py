"""The recall tool on each wire the proxy answers it on: its definition, the model's calls to it,
the follow-up request that carries the answers, the usage of the rounds.

Chat completions, Anthropic Messages and Responses, whole (not streamed): the model's reply is in hand before
anything reaches the client, so a recall call can be answered and taken out of it. The rest
(streams, ``generateContent``) is not served yet: the tool is not offered there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from compact_hook.core.recall import ARGUMENT, TOOL_DESCRIPTION, handle_in, tool_parameters
from compact_hook.proxy.server import complete

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


@dataclass(frozen=True, slots=True)
class Call:
    """One call of the model to the recall tool: its id and the handle it asks for."""

    id: str
    handle: str


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else getattr(value, key, None)


def _named(tools: Any, name: Callable[[Mapping[str, Any]], Any]) -> set[str]:
    """The names of a request's tools (``name`` reads one)."""
    return (
        {str(name(tool)) for tool in tools if isinstance(tool, Mapping)} if isinstance(tools, list) else set()
    )


def _handle(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ""
    return handle_in(arguments.get(ARGUMENT)) if isinstance(arguments, Mapping) else ""


class RecallWire(Protocol):
    name: str
    metadata_key: str
    entries: str
    """The request's field holding the conversation."""

    def tool(self, name: str) -> dict[str, Any]: ...

    def tool_names(self, data: Mapping[str, Any]) -> set[str]: ...

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        """The recall calls in ``response``, and whether it calls the client's tools too."""
        ...

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        """Append the model's turn and the answers to ``request``'s conversation."""
        ...

    async def send(self, router: Any, request: dict[str, Any]) -> Any: ...

    def usage(self, response: Any) -> dict[str, int]: ...

    def finished(self, response: Any, tool: str, usage: dict[str, int], first: Any) -> Any:
        """``response`` without calls to ``tool``, its usage ``usage`` (every round's); ``first``: the
        reply that called the tool first (the client's turn continues from it)."""
        ...


class ChatRecall:
    name, metadata_key, entries = "chat", "metadata", "messages"

    def tool(self, name: str) -> dict[str, Any]:
        function = {"name": name, "description": TOOL_DESCRIPTION, "parameters": tool_parameters()}
        return {"type": "function", "function": function}

    def tool_names(self, data: Mapping[str, Any]) -> set[str]:
        return _named(data.get("tools"), lambda tool: _get(tool.get("function"), "name"))

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        made = _tool_calls(response)
        ours = [
            Call(str(_get(c, "id")), _handle(_get(_get(c, "function"), "arguments")))
            for c in made
            if _name(c) == tool
        ]
        return ours, len(ours) < len(made)

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        message = _message(response)
        turn = {
            "role": "assistant",
            "content": _get(message, "content"),
            "tool_calls": [_plain(call) for call in _tool_calls(response)],
        }
        results = [{"role": "tool", "tool_call_id": call.id, "content": text} for call, text in answers]
        request["messages"] = [*request["messages"], turn, *results]

    async def send(self, router: Any, request: dict[str, Any]) -> Any:
        return await complete(router, **request, stream=False)

    def usage(self, response: Any) -> dict[str, int]:
        usage = _get(response, "usage")
        return {
            key: int(_get(usage, key) or 0) for key in ("prompt_tokens", "completion_tokens", "total_tokens")
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
    choices = _get(response, "choices") or []
    return _get(choices[0], "message") if choices else None


def _tool_calls(response: Any) -> list[Any]:
    calls = _get(_message(response), "tool_calls")
    return list(calls) if isinstance(calls, list) else []


def _name(call: Any) -> str:
    return str(_get(_get(call, "function"), "name") or "")


def _plain(call: Any) -> dict[str, Any]:
    function = _get(call, "function")
    return {
        "id": _get(call, "id"),
        "type": "function",
        "function": {"name": _get(function, "name"), "arguments": _get(function, "arguments")},
    }


THINKING = frozenset({"thinking", "redacted_thinking"})
"""A turn's thinking is bound to the conversation it was produced after: what the client sends back
next turn must be what followed its own history — the first round's, never a later round's (made
after our recall call and its answer, which the client never sees)."""


class MessagesRecall:
    name, metadata_key, entries = "anthropic", "litellm_metadata", "messages"

    def tool(self, name: str) -> dict[str, Any]:
        return {"name": name, "description": TOOL_DESCRIPTION, "input_schema": tool_parameters()}

    def tool_names(self, data: Mapping[str, Any]) -> set[str]:
        return _named(data.get("tools"), lambda tool: tool.get("name"))

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        uses = [b for b in _blocks(response) if _get(b, "type") == "tool_use"]
        ours = [Call(str(_get(b, "id")), _handle(_get(b, "input"))) for b in uses if _get(b, "name") == tool]
        return ours, len(ours) < len(uses)

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        turn = {"role": "assistant", "content": [_plain_block(b) for b in _blocks(response)]}
        results = [{"type": "tool_result", "tool_use_id": call.id, "content": text} for call, text in answers]
        request["messages"] = [*request["messages"], turn, {"role": "user", "content": results}]

    async def send(self, router: Any, request: dict[str, Any]) -> Any:
        return await router.aanthropic_messages(**request, stream=False)

    def usage(self, response: Any) -> dict[str, int]:
        usage = _get(response, "usage")
        keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        return {key: int(_get(usage, key) or 0) for key in keys}

    def finished(self, response: Any, tool: str, usage: dict[str, int], first: Any) -> Any:
        if not isinstance(response, dict):
            return response
        if response is not first:  # the turn's thinking is the first round's (see ``THINKING``)
            thought = [b for b in _blocks(first) if _get(b, "type") in THINKING]
            response["content"] = [
                *thought,
                *(b for b in _blocks(response) if _get(b, "type") not in THINKING),
            ]
        blocks = _blocks(response)
        kept = [b for b in blocks if not (_get(b, "type") == "tool_use" and _get(b, "name") == tool)]
        if len(kept) != len(blocks):
            response["content"] = kept
            if not any(_get(b, "type") == "tool_use" for b in kept):
                response["stop_reason"] = "end_turn"
        response["usage"] = {**(response.get("usage") or {}), **usage}
        return response


class ResponsesRecall:
    name, metadata_key, entries = "responses", "litellm_metadata", "input"

    def tool(self, name: str) -> dict[str, Any]:
        return {
            "type": "function",
            "name": name,
            "description": TOOL_DESCRIPTION,
            "parameters": tool_parameters(),
        }

    def tool_names(self, data: Mapping[str, Any]) -> set[str]:
        return _named(data.get("tools"), lambda tool: tool.get("name"))

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        made = [
            item for item in _output(response) if _get(item, "type") in ("function_call", "custom_tool_call")
        ]
        ours = [
            Call(str(_get(i, "call_id")), _handle(_get(i, "arguments")))
            for i in made
            if _get(i, "name") == tool
        ]
        return ours, len(ours) < len(made)

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        turn = [_plain_block(item) for item in _output(response)]  # reasoning (encrypted) included
        results = [
            {"type": "function_call_output", "call_id": call.id, "output": text} for call, text in answers
        ]
        request["input"] = [*request["input"], *turn, *results]

    async def send(self, router: Any, request: dict[str, Any]) -> Any:
        return await router.aresponses(**request, stream=False)

    def usage(self, response: Any) -> dict[str, int]:
        usage = _get(response, "usage")
        return {key: int(_get(usage, key) or 0) for key in ("input_tokens", "output_tokens", "total_tokens")}

    def finished(self, response: Any, tool: str, usage: dict[str, int], first: Any) -> Any:
        output = _output(response)
        kept = [i for i in output if not (_get(i, "type") == "function_call" and _get(i, "name") == tool)]
        if len(kept) != len(output):
            _set(response, "output", kept)
        held = _get(response, "usage")
        for key, value in usage.items():
            _set(held, key, value)
        return response


def _output(response: Any) -> list[Any]:
    output = _get(response, "output")
    return list(output) if isinstance(output, list) else []


def _set(value: Any, key: str, new: Any) -> None:
    if isinstance(value, dict):
        value[key] = new
    elif value is not None:
        setattr(value, key, new)


def _blocks(response: Any) -> list[Any]:
    content = _get(response, "content")
    return list(content) if isinstance(content, list) else []


def _plain_block(block: Any) -> Any:
    """A content block as the provider sent it (thinking and its signature included)."""
    if isinstance(block, Mapping):
        return dict(block)
    dump = getattr(block, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else block


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
            Call(str(_field(call, "id") or f"{tool}#{n}"), _handle(_field(call, "args")))
            for n, call in enumerate(made)
            if _field(call, "name") == tool
        ]
        return ours, len(ours) < len(made)

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        parts = _parts(response)
        turn = {"role": "model", "parts": [_google_part(part) for part in parts]}
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


def _google_part(part: Any) -> Any:
    """A part as the model sent it, its thought signature included (REST names: what the router sends)."""
    if isinstance(part, Mapping):
        return dict(part)
    dump = getattr(part, "model_dump", None)
    return dump(mode="json", exclude_none=True, by_alias=True) if callable(dump) else part


def _google_answer(call: Call, text: str, tool: str) -> dict[str, Any]:
    """The answer to one of our calls: by name (and by id where the call had one)."""
    answer: dict[str, Any] = {"name": tool, "response": {"output": text}}
    if not call.id.startswith(tool + "#"):
        answer["id"] = call.id
    return {"functionResponse": answer}


STREAMED = frozenset({"chat", "anthropic", "responses", "google"})
"""The wires whose streamed replies recall is answered in too (``streams``)."""
WIRES: dict[str, RecallWire] = {
    "chat": ChatRecall(),
    "anthropic": MessagesRecall(),
    "responses": ResponsesRecall(),
    "google": GoogleRecall(),
}
"""By format name (``formats``): the wires recall is answered on."""
KEPT_PARAMS = {
    "chat": CHAT_PARAMS,
    "anthropic": MESSAGES_PARAMS,
    "responses": RESPONSES_PARAMS,
    "google": GOOGLE_PARAMS,
}

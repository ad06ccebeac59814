"""One logical agent conversation, written in each wire format (chat, Anthropic Messages, Responses,
Google generateContent).

Tests describe a conversation once — user turns, tool turns (parallel calls included), assistant
replies — and get the request body each surface would carry, so every scenario runs on all four.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES, WireFormat

WIRES = {"chat": CHAT, "anthropic": ANTHROPIC, "responses": RESPONSES, "google": GOOGLE}
WIRE_NAMES = tuple(WIRES)
"""Every wire's name: what a test runs on when it runs on all of them."""
ENTRIES_KEY = {"chat": "messages", "anthropic": "messages", "responses": "input", "google": "contents"}


@dataclass(frozen=True)
class Call:
    name: str
    output: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: bool = False


@dataclass(frozen=True)
class Said:
    """A user turn (``user=True``) or an assistant reply without tool calls."""

    text: str
    user: bool = True


@dataclass(frozen=True)
class Tools:
    """One model turn making these calls (in parallel when several), with their results."""

    calls: tuple[Call, ...]
    text: str = ""
    answered: bool = True


Step = Said | Tools


def w(count: int, word: str = "w") -> str:
    return " ".join([word] * count)


def body(wire: str, steps: list[Step], system: str | None = None, **extra: Any) -> dict[str, Any]:
    """The request body for ``steps`` in ``wire`` (``system``: the head in that format's place)."""
    builders = {
        "chat": _as_chat,
        "anthropic": _as_anthropic,
        "responses": _as_responses,
        "google": _as_google,
    }
    data = builders[wire](steps, system)
    data.update(extra)
    return data


def entries(wire: str, data: dict[str, Any]) -> list[Any]:
    return data[ENTRIES_KEY[wire]]  # type: ignore[no-any-return]


def _ids(step: int, calls: tuple[Call, ...]) -> list[str]:
    return [f"call_{step}_{n}" for n in range(len(calls))]


def _as_chat(steps: list[Step], system: str | None) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for k, step in enumerate(steps):
        if isinstance(step, Said):
            messages.append({"role": "user" if step.user else "assistant", "content": step.text})
            continue
        ids = _ids(k, step.calls)
        messages.append(
            {
                "role": "assistant",
                "content": step.text or None,
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for i, c in zip(ids, step.calls, strict=True)
                ],
            }
        )
        if step.answered:
            messages.extend(
                {"role": "tool", "tool_call_id": i, "content": c.output}
                for i, c in zip(ids, step.calls, strict=True)
            )
    return {"messages": messages}


def _as_anthropic(steps: list[Step], system: str | None) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for k, step in enumerate(steps):
        if isinstance(step, Said):
            messages.append({"role": "user" if step.user else "assistant", "content": step.text})
            continue
        ids = _ids(k, step.calls)
        text = [{"type": "text", "text": step.text}] if step.text else []
        uses = [
            {"type": "tool_use", "id": i, "name": c.name, "input": c.arguments}
            for i, c in zip(ids, step.calls, strict=True)
        ]
        messages.append({"role": "assistant", "content": text + uses})
        if step.answered:
            results = []
            for i, c in zip(ids, step.calls, strict=True):
                block: dict[str, Any] = {"type": "tool_result", "tool_use_id": i, "content": c.output}
                if c.error:
                    block["is_error"] = True
                results.append(block)
            messages.append({"role": "user", "content": results})
    data: dict[str, Any] = {"messages": messages, "max_tokens": 1}
    if system:
        data["system"] = system
    return data


def _as_responses(steps: list[Step], system: str | None) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for k, step in enumerate(steps):
        if isinstance(step, Said):
            if step.user:
                items.append({"role": "user", "content": step.text})
            else:
                text = [{"type": "output_text", "text": step.text}]
                items.append({"type": "message", "role": "assistant", "content": text})
            continue
        ids = _ids(k, step.calls)
        if step.text:
            text = [{"type": "output_text", "text": step.text}]
            items.append({"type": "message", "role": "assistant", "content": text})
        items.extend(
            {"type": "function_call", "call_id": i, "name": c.name, "arguments": json.dumps(c.arguments)}
            for i, c in zip(ids, step.calls, strict=True)
        )
        if step.answered:
            items.extend(
                {"type": "function_call_output", "call_id": i, "output": c.output}
                for i, c in zip(ids, step.calls, strict=True)
            )
    data: dict[str, Any] = {"input": items}
    if system:
        data["instructions"] = system
    return data


def _as_google(steps: list[Step], system: str | None) -> dict[str, Any]:
    """Gemini's shape: a model turn's first call carries a thought signature (parallel ones none),
    calls carry no ids (the Gemini API returns none), responses answer by name."""
    contents: list[dict[str, Any]] = []
    for k, step in enumerate(steps):
        if isinstance(step, Said):
            contents.append({"role": "user" if step.user else "model", "parts": [{"text": step.text}]})
            continue
        text = [{"text": step.text}] if step.text else []
        calls = [
            {"functionCall": {"name": c.name, "args": c.arguments}}
            | ({"thoughtSignature": f"sig_{k}"} if n == 0 else {})
            for n, c in enumerate(step.calls)
        ]
        contents.append({"role": "model", "parts": text + calls})
        if step.answered:
            responses = [
                {
                    "functionResponse": {
                        "name": c.name,
                        "response": {"error" if c.error else "output": c.output},
                    }
                }
                for c in step.calls
            ]
            contents.append({"role": "user", "parts": responses})
    data: dict[str, Any] = {"contents": contents, "generationConfig": {"maxOutputTokens": 1}}
    if system:
        data["systemInstruction"] = {"parts": [{"text": system}]}
    return data


def wire_of(name: str) -> WireFormat:
    return WIRES[name]

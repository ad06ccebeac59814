"""Checks used by several test modules: pairing validity, building histories."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compact_hook.messages import Message, is_tool_result, tool_calls_of

TRANSCRIPTS = Path(__file__).parent / "data" / "transcripts"


def load_transcript(name: str, fmt: str = "openai") -> Any:
    return json.loads((TRANSCRIPTS / fmt / name).read_text(encoding="utf-8"))


def openai_transcripts() -> list[str]:
    return sorted(path.name for path in (TRANSCRIPTS / "openai").glob("*.json"))


def pairing_problems(messages: Sequence[Message]) -> list[tuple[str, int]]:
    """Tool calls without their results, and results without a call, by position.

    Each problem names the message (by ``id()``), so a test can compare the problems of an
    output with those its input already had: we must never add one.
    """
    problems: list[tuple[str, int]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        calls = tool_calls_of(message)
        if calls:
            end = index + 1
            while end < len(messages) and is_tool_result(messages[end]):
                end += 1
            results = messages[index + 1 : end]
            if len(results) < len(calls):
                problems.append(("unanswered call", id(message)))
            problems.extend(("orphan result", id(extra)) for extra in results[len(calls) :])
            index = end
            continue
        if is_tool_result(message):
            problems.append(("orphan result", id(message)))
        index += 1
    return problems


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}


def system(text: str) -> Message:
    return {"role": "system", "content": text}


def call(*names: str, call_id: str = "call", text: Any = None) -> Message:
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": f"{call_id}_{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}
            for i, name in enumerate(names)
        ],
    }


def result(text: str, call_id: str = "call_0") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def replay_points(messages: Sequence[Message]) -> list[int]:
    """Prefix lengths at which the client calls the model: after user input or tool results."""
    return [
        end
        for end in range(1, len(messages) + 1)
        if messages[end - 1].get("role") in ("user", "tool")
        and (end == len(messages) or messages[end].get("role") == "assistant")
    ]


def is_prefix(shorter: Sequence[Any], longer: Sequence[Any]) -> bool:
    return len(shorter) <= len(longer) and list(longer[: len(shorter)]) == list(shorter)

"""Reading a conversation from a file: a request body, a bare list, or JSONL logs.

The format is told by shape: ``input`` → Responses; ``contents`` → Google generateContent; messages
with Anthropic content blocks (``tool_use``, ``tool_result``, ``thinking``) or a top-level ``system``
→ Anthropic; else chat.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from compact_hook.errors import CompactError
from compact_hook.proxy.request.models import ModelSettings, validate_model_list
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES, WireFormat

ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking"}
RESPONSES_TYPES = {"function_call", "function_call_output", "reasoning", "message"}
ENTRIES_KEYS = {"chat": "messages", "anthropic": "messages", "responses": "input", "google": "contents"}


class InputError(CompactError):
    """A file the CLI cannot read as a conversation."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """A request body in one wire format, as a client would send it."""

    wire: WireFormat
    data: dict[str, Any]

    @property
    def entries(self) -> list[Any]:
        value = self.data.get(ENTRIES_KEYS[self.wire.name])
        return value if isinstance(value, list) else []


def load(path: Path, line: int | None = None) -> Loaded:
    """The conversation in ``path``; for JSONL the longest request, or line ``line`` (1-based)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    values = _json_values(text, path)
    if line is not None:
        if not 1 <= line <= len(values):
            raise InputError(f"{path} has {len(values)} request(s); --line {line} is out of range")
        return detect(values[line - 1])
    return max(map(detect, values), key=lambda loaded: len(loaded.entries))


def detect(value: Any) -> Loaded:
    """The wire format of a request body or bare list, by its shape."""
    if isinstance(value, list):
        value = {"input": value} if _looks_like_responses(value) else {"messages": value}
    if not isinstance(value, dict):
        raise InputError("expected a request body (a JSON object) or a list of messages")
    if isinstance(value.get("input"), list | str):
        return Loaded(RESPONSES, value)
    if isinstance(value.get("contents"), list):
        return Loaded(GOOGLE, value)
    messages = value.get("messages")
    if not isinstance(messages, list):
        raise InputError("no `messages`, `input` or `contents` list found")
    anthropic = "system" in value or any(_has_anthropic_blocks(m) for m in messages)
    return Loaded(ANTHROPIC if anthropic else CHAT, value)


def _json_values(text: str, path: Path) -> list[Any]:
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    values = []
    for number, row in enumerate(text.splitlines(), start=1):
        if not row.strip():
            continue
        try:
            values.append(json.loads(row))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not JSON ({exc.msg})") from exc
    if not values:
        raise InputError(f"{path} is empty")
    return values


def _looks_like_responses(items: list[Any]) -> bool:
    return any(isinstance(i, dict) and ("role" not in i or i.get("type") in RESPONSES_TYPES) for i in items)


def _has_anthropic_blocks(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") in ANTHROPIC_BLOCKS for block in content
    )


def read_config(path: Path) -> dict[str, Any]:
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("model_list"), list):
        raise InputError(f"{path}: no model_list")
    return config


def validate(path: Path) -> list[str]:
    """What the proxy checks at start-up; the model groups with compaction on."""
    config = read_config(path)
    base = CompactConfig.from_env()
    ProcessConfig.from_env()
    validate_model_list(config["model_list"], base)
    return [
        str(entry.get("model_name"))
        for entry in config["model_list"]
        if isinstance(entry, dict) and _compacts(entry)
    ]


def resolve(path: Path, model: str) -> CompactConfig:
    """The settings the proxy would use for ``model`` (window from the block or LiteLLM's model map)."""
    from litellm.router import Router

    config = read_config(path)
    validate_model_list(config["model_list"], CompactConfig.from_env())
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    router = Router(model_list=config["model_list"])
    resolved = ModelSettings(CompactConfig.from_env()).resolve(router, model)
    if resolved is None:
        raise InputError(f"{path}: model {model!r} does not compact (no model_info.compact, or disabled)")
    return resolved


def _compacts(entry: dict[str, Any]) -> bool:
    info = entry.get("model_info")
    block = info.get("compact") if isinstance(info, dict) else None
    return (
        block is not None
        and block is not False
        and not (isinstance(block, dict) and block.get("enabled") is False)
    )

"""What every wire's recall reads of a model's reply: a field of a dict or an object (and sets, in
the reply it finishes), the names of a request's tools, the handle a call's arguments ask for, a
block as the provider sent it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from compact_hook.core.recall import ARGUMENT, handle_in


def field(value: Any, key: str) -> Any:
    """``key`` of a dict, or the attribute of an object (LiteLLM's response objects)."""
    return value.get(key) if isinstance(value, Mapping) else getattr(value, key, None)


def put(value: Any, key: str, new: Any) -> None:
    """Set ``key`` of a dict, or the attribute of an object (nothing when there is neither)."""
    if isinstance(value, dict):
        value[key] = new
    elif value is not None:
        setattr(value, key, new)


def tool_names_in(tools: Any, name: Callable[[Mapping[str, Any]], Any]) -> set[str]:
    """The names of a request's tools (``name`` reads one)."""
    return (
        {str(name(tool)) for tool in tools if isinstance(tool, Mapping)} if isinstance(tools, list) else set()
    )


def handle_in_arguments(arguments: Any) -> str:
    """The handle a call's arguments (JSON text or an object) ask for; empty when they name none."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ""
    return handle_in(arguments.get(ARGUMENT)) if isinstance(arguments, Mapping) else ""


def plain_block(block: Any, **dump: Any) -> Any:
    """A content block as the provider sent it (thinking and its signature included); ``dump``: how
    to dump an object (pydantic's ``model_dump`` options beside ``exclude_none``)."""
    if isinstance(block, Mapping):
        return dict(block)
    dumped = getattr(block, "model_dump", None)
    return dumped(exclude_none=True, **dump) if callable(dumped) else block

"""What every wire adapter reads a request with: the shapes entries must have, the strings of
context values, compact JSON, output reserves, media locations, calls answered after their turn."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from compact_hook.core.counting import Strings
from compact_hook.core.items import Item, Role
from compact_hook.core.outcomes import Reason
from compact_hook.errors import MalformedError
from compact_hook.wires.base import Rejected

TOOL_OVERHEAD = 8
"""Framing tokens per tool definition, beside its JSON (name, description, schema)."""


Missing = TypeVar("Missing")


def answers_after(
    unit: Sequence[Item],
    missing: Mapping[int, Missing],
    carry: Callable[[Item, Item | None, Missing], Item],
) -> list[Item]:
    """The unit's items, each model item with unanswered calls (``missing``, by offset) followed by
    the user item that answers them: ``carry(model item, the user item after it or None, what is
    missing)`` — the next item rebuilt with the answers, or a new one (the formats whose results
    travel in the user's next message: Anthropic, Google)."""
    out: list[Item] = []
    index = 0
    while index < len(unit):
        item = unit[index]
        out.append(item)
        index += 1
        if index - 1 not in missing:
            continue
        following = unit[index] if index < len(unit) and unit[index].role is not Role.ASSISTANT else None
        out.append(carry(item, following, missing[index - 1]))
        index += following is not None
    return out


def context_strings(value: Any) -> Strings:
    """The strings of a context value: text as is; a tool definition or schema as compact JSON.

    Tool definitions reach the model re-rendered by the provider; their JSON is a close,
    slightly generous stand-in (documented as an estimate). A list (of tools, of system
    blocks) is read one level deep.
    """
    strings: list[str] = []
    fixed = 0
    for entry in value if isinstance(value, list) else [value]:
        if isinstance(entry, str):
            strings.append(entry)
        elif isinstance(entry, dict) and entry.get("type") == "text" and isinstance(entry.get("text"), str):
            strings.append(entry["text"])
        else:
            strings.append(compact_json(entry))
            fixed += TOOL_OVERHEAD
    return strings, fixed


def compact_json(value: Any) -> str:
    """Compact JSON text of a wire value (what the model reads of a tool's input, say): orjson, or
    the standard library for what orjson refuses (lone surrogates, huge integers)."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        pass
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except RecursionError as exc:
        raise MalformedError("a value is nested too deeply to read") from exc


def string(value: object) -> str:
    """A wire field that should be a string: it, or empty when it is anything else."""
    return value if type(value) is str else ""


def arguments_text(arguments: Any) -> str:
    """An OpenAI call's arguments as the model reads them: text as sent, any other value as JSON."""
    if isinstance(arguments, str):
        return arguments
    return "" if arguments is None else json.dumps(arguments, ensure_ascii=False)


def positive_int(data: Mapping[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` holding a positive integer (an output reserve)."""
    for key in keys:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@dataclass(frozen=True, slots=True)
class EntryShape:
    """What each entry of a format's list must be before we read it: an object with one of
    ``roles``, holding under ``key`` a list of objects (or, where ``text`` allows it, a string)."""

    roles: Collection[str]
    key: str
    text: bool = False

    def problem(self, entry: object) -> str | None:
        """What is wrong with ``entry`` (None: nothing)."""
        if not isinstance(entry, dict):
            return f"is {type(entry).__name__}, not an object"
        role = entry.get("role")
        if role not in self.roles:
            return f"role is {role!r}, not {', '.join(sorted(self.roles))}"
        children = entry.get(self.key)
        if self.text and isinstance(children, str):
            return None
        if not isinstance(children, list):
            return f"{self.key} is {type(children).__name__}, not a list"
        if not all(isinstance(child, dict) for child in children):
            return f"{self.key} has an entry that is not an object"
        return None


def shape_rejected(
    data: Mapping[str, Any], key: str, check: Callable[[Any], str | None], unseen: Sequence[int] | None
) -> Rejected | None:
    """Why the request's ``key`` list cannot be read (not a list, or an entry ``check`` finds fault
    with: an ``EntryShape``'s ``problem``, say — among ``unseen`` only, where given), as the rejection
    that passes it through untouched; None when it can."""
    entries = data.get(key)
    if not isinstance(entries, list):
        return Rejected(Reason.MALFORMED, f"{key} is {type(entries).__name__}, not a list")
    problem = problem_in(entries, check, unseen)
    return None if problem is None else Rejected(Reason.MALFORMED, f"{key}{problem}")


def problem_in(
    entries: Sequence[Any], check: Callable[[Any], str | None], unseen: Sequence[int] | None = None
) -> str | None:
    """The first entry ``check`` finds fault with, as ``"<key>[i]: why"`` text, or None; ``unseen``:
    the only indices to check (the others were checked in an earlier request, ``state.recent``)."""
    for index in range(len(entries)) if unseen is None else unseen:
        problem = check(entries[index])
        if problem is not None:
            return f"[{index}]: {problem}"
    return None


MAX_INLINE_URL = 200


def media_location(part: dict[str, Any]) -> str:
    """Where an image or file lives, for the transcript (inline data is only described)."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        source = part.get("source")
        url = source.get("url") if isinstance(source, dict) else None
    if not isinstance(url, str):
        return "inline"
    if url.startswith("data:"):
        return f"inline data, {len(url)} characters"
    return url if len(url) <= MAX_INLINE_URL else url[:MAX_INLINE_URL] + "..."

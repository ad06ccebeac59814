"""A summary without a model: the middle's facts, verbatim, in the summary's sections.

It stands in when the summary model fails and the request would not fit otherwise, and it
is the summarizer itself for ``summary_model: digest`` (zero LLM cost). It never invents:
the user's requests, earlier summaries, files touched, each tool call with whether it
failed, and error lines are copied from the transcript; only the selection is ours.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from compact_hook.assemble import summary_text
from compact_hook.messages import (
    Message,
    is_real_user_message,
    is_summary_message,
    is_tool_result,
    tool_call_name,
    tool_calls_of,
)
from compact_hook.transcript import render_content

HEADER = "(Digest made without a model: facts copied from the compacted messages.)"
PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "notebook_path", "target_file", "paths")
PATH_PATTERN = re.compile(r"(?:~|\.{1,2})?(?:/?[\w.@-]+/)+[\w.@-]+\.[A-Za-z0-9]{1,8}\b")
ERROR_PATTERN = re.compile(r"\b(error|exception|traceback|failed|failure|fatal|panic)\b", re.IGNORECASE)
MAX_USER_CHARS = 1500
MAX_LINE_CHARS = 300
MAX_ARGUMENT_CHARS = 160


def digest(middle: Sequence[Message], max_chars: int) -> str:
    """Sections of facts from ``middle``; older lines give way first when over ``max_chars``."""
    sections = {
        "Earlier summary": [summary_text(m) for m in middle if is_summary_message(m)],
        "User requests": [
            _clip(render_content(m.get("content")), MAX_USER_CHARS) for m in middle if _is_user(m)
        ],
        "Files touched": _files(middle),
        "Tool calls and outcomes": _calls(middle),
        "Errors": _errors(middle),
    }
    return _render(_fit(sections, max_chars))


def _is_user(message: Message) -> bool:
    return is_real_user_message(message) and bool(render_content(message.get("content")).strip())


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def _files(middle: Sequence[Message]) -> list[str]:
    seen: dict[str, None] = {}
    for message in middle:
        for call in tool_calls_of(message):
            arguments = _arguments(call)
            for value in _path_values(arguments):
                seen.setdefault(value, None)
            for match in PATH_PATTERN.findall(json.dumps(arguments, ensure_ascii=False)):
                seen.setdefault(match, None)
    return list(seen)


def _path_values(arguments: object) -> list[str]:
    if not isinstance(arguments, dict):
        return []
    values: list[str] = []
    for key in PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            values.append(value)
        elif isinstance(value, list):
            values.extend(v for v in value if isinstance(v, str) and v)
    return values


def _arguments(call: dict[str, object]) -> object:
    function = call.get("function")
    raw = function.get("arguments") if isinstance(function, dict) else None
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _calls(middle: Sequence[Message]) -> list[str]:
    lines: list[str] = []
    pending: list[str] = []
    for message in middle:
        calls = tool_calls_of(message)
        if calls:
            if pending:
                lines.extend(f"- {line} -> no result" for line in pending)
            pending = [_describe_call(call) for call in calls]
        elif is_tool_result(message) and pending:
            lines.append(f"- {pending.pop(0)} -> {_outcome(render_content(message.get('content')))}")
    lines.extend(f"- {line} -> no result" for line in pending)
    return lines


def _describe_call(call: dict[str, object]) -> str:
    function = call.get("function")
    raw = function.get("arguments", "") if isinstance(function, dict) else ""
    arguments = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    return f"{tool_call_name(call)}({_clip(' '.join(arguments.split()), MAX_ARGUMENT_CHARS)})"


def _outcome(result: str) -> str:
    failure = next((line for line in result.splitlines() if ERROR_PATTERN.search(line)), None)
    return f"failed: {_clip(failure, MAX_LINE_CHARS)}" if failure else "ok"


def _errors(middle: Sequence[Message]) -> list[str]:
    seen: dict[str, None] = {}
    for message in middle:
        if is_tool_result(message):
            for line in render_content(message.get("content")).splitlines():
                if ERROR_PATTERN.search(line):
                    seen.setdefault(_clip(line, MAX_LINE_CHARS), None)
    return [f"- {line}" for line in seen]


def _fit(sections: dict[str, list[str]], max_chars: int) -> dict[str, list[str]]:
    """Drop the oldest lines of the longest section until the digest fits."""
    dropped = dict.fromkeys(sections, 0)
    while _size(sections) > max_chars and any(sections.values()):
        name = max(sections, key=lambda key: sum(map(len, sections[key])))
        sections[name] = sections[name][1:]
        dropped[name] += 1
    for name, count in dropped.items():
        if count:
            sections[name] = [f"({count} earlier entries omitted)", *sections[name]]
    return sections


def _size(sections: dict[str, list[str]]) -> int:
    return sum(len(line) + 1 for lines in sections.values() for line in lines) + 200


def _render(sections: dict[str, list[str]]) -> str:
    parts = [HEADER]
    for name, lines in sections.items():
        parts.append(f"## {name}\n" + ("\n".join(lines) if lines else "none"))
    return "\n\n".join(parts)

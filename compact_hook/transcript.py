"""The middle as a readable transcript for the summary model.

A role-prefixed transcript costs fewer tokens than raw JSON and reads naturally
(LangChain's ``get_buffer_string``); tool results are labelled with the tool that produced
them (paired by position, like units), previous summaries are labelled as such so the
model merges them instead of summarizing a summary as if it were dialogue, and image URLs
survive so the summary can mention them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from compact_hook.assemble import summary_text
from compact_hook.messages import (
    Message,
    is_summary_message,
    is_tool_result,
    role_of,
    tool_call_name,
    tool_calls_of,
)

MAX_INLINE_URL = 200


def transcript_entries(messages: Sequence[Message]) -> list[str]:
    """One text block per message, in order; nothing is cut short."""
    entries: list[str] = []
    pending: list[str] = []
    for message in messages:
        if tool_calls_of(message):
            pending = [tool_call_name(call) for call in tool_calls_of(message)]
        if is_tool_result(message):
            name = message.get("name") if isinstance(message.get("name"), str) else None
            tool = name or (pending.pop(0) if pending else "tool")
            entries.append(f"### tool result ({tool})\n{render_content(message.get('content'))}")
        elif is_summary_message(message):
            entries.append(f"### previous summary\n{summary_text(message)}")
        else:
            entries.append(_render_turn(message))
    return entries


def _render_turn(message: Message) -> str:
    lines = [f"### {role_of(message)}"]
    text = render_content(message.get("content"))
    if text:
        lines.append(text)
    for call in tool_calls_of(message):
        function = call.get("function")
        arguments = function.get("arguments", "") if isinstance(function, dict) else ""
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        lines.append(f"-> call {tool_call_name(call)}({arguments})")
    return "\n".join(lines)


def render_content(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(filter(None, (_render_part(part) for part in content if isinstance(part, dict))))
    return ""


def _render_part(part: dict[str, Any]) -> str:
    kind = str(part.get("type", ""))
    if kind in ("text", "input_text", "output_text"):
        return str(part.get("text", ""))
    if kind == "refusal":
        return f"[refusal] {part.get('refusal', '')}"
    if kind in ("image_url", "input_image", "image"):
        return f"[image: {_image_location(part)}]"
    if kind == "thinking":
        return f"[thinking] {part.get('thinking', '')}"
    if kind == "tool_use":
        return f"-> call {part.get('name', 'tool')}({json.dumps(part.get('input', {}), ensure_ascii=False)})"
    if kind == "tool_result":
        return f"[tool result]\n{render_content(part.get('content'))}"
    return f"[{kind or 'unknown'} part]"


def _image_location(part: dict[str, Any]) -> str:
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

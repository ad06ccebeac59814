"""OpenAI content parts, shared by chat completions and Responses: text, media, and the rest.

Chat messages and Responses items carry the same kinds of parts (``text`` / ``input_text`` /
``output_text`` / ``refusal``, images, audio, files); one parser serves both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compact_hook.core.items import Part, PartKind
from compact_hook.wires.parsing import compact_json, media_location

MEDIA_TOKENS = 765
"""One 512px-tile high-detail image under OpenAI's accounting (85 + 4 x 170); used for all media."""
TEXT_KEYS = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "summary_text": "text",
    "refusal": "refusal",
}
OUTPUT_TEXT_TYPE = {"content": "text", "output": "input_text"}
"""The text part's type in a chat tool message's ``content`` and a Responses ``output``."""
MEDIA_TYPES = frozenset(
    {"image_url", "image", "input_image", "input_audio", "audio", "file", "input_file", "document"}
)


def content_parts(content: object) -> tuple[Part, ...]:
    """The parts of a ``content`` (or Responses ``output``) value: a string, or a list of parts."""
    if type(content) is str:
        return (Part(PartKind.TEXT, content),) if content else ()
    if not isinstance(content, list):
        return ()
    return tuple(_part(part) for part in content if isinstance(part, dict))


def _part(part: dict[str, Any]) -> Part:
    kind = part.get("type")
    if kind in TEXT_KEYS:
        value = part.get(TEXT_KEYS[str(kind)])
        return Part(PartKind.TEXT, value if isinstance(value, str) else "")
    if kind in MEDIA_TYPES:
        return Part(PartKind.MEDIA, media_location(part), name=str(kind), fixed_tokens=MEDIA_TOKENS)
    if kind == "thinking":
        thinking = part.get("thinking")
        return Part(PartKind.THINKING, thinking if isinstance(thinking, str) else "")
    return Part(PartKind.OPAQUE, compact_json(part), name=str(kind))


def media_of(content: object) -> list[Any]:
    """The media parts of a list content, in order (kept after a truncated text)."""
    if not isinstance(content, list):
        return []
    return [part for part in content if isinstance(part, dict) and part.get("type") in MEDIA_TYPES]


def output_replaced(raw: Mapping[str, Any], key: str, text: str, keep_media: bool) -> dict[str, Any]:
    """An entry whose one output (under ``key``: a chat tool message's ``content``, a
    ``function_call_output``'s ``output``) becomes ``text``, its media kept after it if asked."""
    media = media_of(raw.get(key)) if keep_media else []
    new: Any = [{"type": OUTPUT_TEXT_TYPE[key], "text": text}, *media] if media else text
    return {**raw, key: new}


def joined_text(parts: tuple[Part, ...]) -> str:
    return "\n".join(part.text for part in parts if part.kind is PartKind.TEXT)


def with_texts(content: Any, texts: Mapping[int, str]) -> Any:
    """``content`` (a string or a list of parts) with the text of the parts at these part
    indices (as ``content_parts`` numbers them) replaced; every other part as it was."""
    if type(content) is str:
        return texts.get(0, content)
    if not isinstance(content, list):
        return content
    rebuilt, index = [], 0
    for part in content:
        if isinstance(part, dict):
            key = TEXT_KEYS.get(str(part.get("type")))
            if index in texts and key is not None:
                part = {**part, key: texts[index]}
            index += 1
        rebuilt.append(part)
    return rebuilt

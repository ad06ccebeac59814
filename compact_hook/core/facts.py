"""Facts an agent needs word for word: error lines. Shared by the digest and the clearing tier,
so a tool result's error survives whichever of them takes the result out of view."""

from __future__ import annotations

import re

ERROR_PATTERN = re.compile(r"\b(error|exception|traceback|failed|failure|fatal|panic)\b", re.IGNORECASE)
MAX_LINE_CHARS = 300


def clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def error_lines(text: str) -> list[str]:
    """The lines of ``text`` that report an error, each clipped, in order, without repeats."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        if ERROR_PATTERN.search(line):
            seen.setdefault(clip(line, MAX_LINE_CHARS), None)
    return list(seen)

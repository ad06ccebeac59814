"""``/compact [focus]``: a user asking, in the conversation, for a compaction now.

Recognized in user-authored text only — a string ``content`` or a first text part, in any of
the four formats (a Responses string ``input`` too) — never in tool output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

PATTERN = re.compile(r"\s*/compact(?=\s|$)")
"""``/compact`` alone or followed by whitespace: ``/compaction`` is not ours."""


def command_in(entry: Any) -> str | None:
    """The focus (possibly empty) if ``entry`` is a user's ``/compact`` command, else None."""
    text = _user_text(entry)
    match = PATTERN.match(text) if text is not None else None  # no copy of a long text that is not one
    return text[match.end() :].strip() if text is not None and match is not None else None


def ran_command(entries: Sequence[Any], commands: Sequence[int] | None = None) -> bool:
    """The conversation ran ``/compact`` earlier (so it has a compaction stored to continue from);
    ``commands``: where its entries that are one are, as known (``Known.commands``), instead of
    reading every entry."""
    if commands is not None:
        return any(index < len(entries) - 1 for index in commands)
    return any(command_in(entry) is not None for entry in entries[:-1])


def is_command(entry: Any) -> bool:
    return command_in(entry) is not None


def _user_text(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if not isinstance(entry, dict) or entry.get("role") != "user":
        return None
    if entry.get("type", "message") != "message":
        return None
    content = entry.get("content", entry.get("parts"))  # Google: ``parts``
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None

"""What a provider's model name says of its generation (Claude's, for now).

Pure: the settings that depend on a model's generation (the thinking prefix check, the measured
count ratio) read it from the deployment's model name, however the provider spells it:
``anthropic/claude-opus-5-5``, ``anthropic.claude-fable-5-1-v1:0``, ``claude-sonnet-4-5-20250929``,
``claude-sonnet-4-5@20250929``, or the old ``claude-3-5-sonnet-20241022``.
"""

from __future__ import annotations

import re

_FAMILY_FIRST = re.compile(r"claude-[a-z]+-(\d{1,2})(?:[-.](\d{1,2}))?(?!\d)")
"""``claude-<family>-<major>[-<minor>]`` (Claude 4 on); a date after it is not a minor version."""
_VERSION_FIRST = re.compile(r"claude-(\d{1,2})(?:[-.](\d{1,2}))?(?!\d)")
"""``claude-<major>[-<minor>]-<family>`` (Claude 3.x) and ``claude-2.1``."""


def claude_version(model: str) -> tuple[int, int] | None:
    """(major, minor) of a Claude model name; None for anything else (``claude-instant-1`` too)."""
    name = model.lower()
    match = _FAMILY_FIRST.search(name) or _VERSION_FIRST.search(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2) or 0)

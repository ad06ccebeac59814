"""Tier 1: oversized tool outputs keep their beginning and end, with a marker in between.

Deterministic (the same output always truncates the same way, so it can run on every
request without disturbing prompt caches) and free (no model call). The beginning of an
output usually says what ran, the end how it finished: both are kept, half each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compact_hook.messages import Message

Offsets = Callable[[str], list[tuple[int, int]]]
"""Character spans of the tokens of a text (``TokenCounter.offsets``)."""

MARKER_ALLOWANCE = 24
"""Tokens reserved for the marker itself, so a truncated output stays within the limit."""
BYTES_PER_TOKEN = 4
"""The ``bytes`` policy's exchange rate: ``tool_output_max_tokens × 4`` bytes."""


def marker(amount: int, unit: str, lines: int) -> str:
    where = f"; the full output had {lines} lines" if lines > 1 else ""
    return f"\n…{amount} {unit} truncated{where}…\n"


def truncate_text(text: str, limit: int, policy: str, offsets: Offsets) -> str | None:
    """``text`` cut to about ``limit`` tokens (head + marker + tail), or None when it fits."""
    if policy == "tokens":
        return _truncate_tokens(text, limit, offsets)
    if policy == "bytes":
        return _truncate_bytes(text, limit * BYTES_PER_TOKEN)
    return None


def _truncate_tokens(text: str, limit: int, offsets: Offsets) -> str | None:
    if len(text) <= limit:  # fewer characters than tokens allowed: cannot be over
        return None
    spans = offsets(text)
    total = len(spans)
    if total <= limit:
        return None
    keep = max(2, limit - MARKER_ALLOWANCE)
    head, tail = keep // 2, keep - keep // 2
    cut_start, cut_end = spans[head - 1][1], spans[total - tail][0]
    removed = total - head - tail
    return text[:cut_start] + marker(removed, "tokens", _lines(text)) + text[cut_end:]


def _truncate_bytes(text: str, limit: int) -> str | None:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return None
    keep = max(2, limit - MARKER_ALLOWANCE * BYTES_PER_TOKEN)
    head, tail = keep // 2, keep - keep // 2
    start = data[:head].decode("utf-8", "ignore")
    end = data[len(data) - tail :].decode("utf-8", "ignore")
    removed = (
        len(data) - len(start.encode("utf-8", "surrogatepass")) - len(end.encode("utf-8", "surrogatepass"))
    )
    return start + marker(removed, "bytes", _lines(text)) + end


def _lines(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def truncate_tool_message(message: Message, limit: int, policy: str, offsets: Offsets) -> Message | None:
    """A copy of a tool result with its output truncated, or None when nothing needs cutting.

    Works on string outputs and on outputs made of content parts (their text parts are
    joined and truncated as one; other parts are kept after it).
    """
    content = message.get("content")
    if isinstance(content, str):
        cut = truncate_text(content, limit, policy, offsets)
        return None if cut is None else {**message, "content": cut}
    if isinstance(content, list):
        return _truncate_parts(message, content, limit, policy, offsets)
    return None


def _truncate_parts(
    message: Message, parts: list[Any], limit: int, policy: str, offsets: Offsets
) -> Message | None:
    texts = [
        p for p in parts if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    ]
    cut = truncate_text("\n".join(p["text"] for p in texts), limit, policy, offsets)
    if cut is None:
        return None
    others = [p for p in parts if not any(p is t for t in texts)]
    return {**message, "content": [{"type": "text", "text": cut}, *others]}

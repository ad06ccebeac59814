"""Tier 1: oversized tool outputs keep their beginning and end, with a marker in between.

Deterministic (the same output always truncates the same way, so it can run on every
request without disturbing prompt caches) and free (no model call). The beginning of an
output usually says what ran, the end how it finished: both are kept, half each.
"""

from __future__ import annotations

from collections.abc import Callable, Container

from compact_hook.core.items import Item, PartKind

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


def truncate_results(
    item: Item, limit: int, policy: str, offsets: Offsets, skip: Container[int] = ()
) -> dict[int, str]:
    """New outputs for the tool results of ``item`` over ``limit`` tokens, by part index.

    Empty when nothing needs cutting. ``skip``: part indices to leave alone (protected tools).
    """
    cuts: dict[int, str] = {}
    for index, part in enumerate(item.parts):
        if part.kind is PartKind.RESULT and index not in skip:
            cut = truncate_text(part.text, limit, policy, offsets)
            if cut is not None:
                cuts[index] = cut
    return cuts

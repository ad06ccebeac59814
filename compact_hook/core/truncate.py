"""Tier 1: oversized tool outputs keep their beginning and end, with a marker in between.

Deterministic (the same output always truncates the same way, so it can run on every
request without disturbing prompt caches) and free (no model call). The beginning of an
output usually says what ran, the end how it finished: both are kept, half each.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass

from compact_hook.core.items import Item, PartKind
from compact_hook.core.recall import MENTION, handle_of, named_by_us

Cut = Callable[[str, int, int], tuple[int, int, int]]
"""``(text, head, tail)`` → (the character where the first ``head`` tokens end, the character where
the last ``tail`` tokens start, how many tokens the text has): ``TokenCounter.cut``."""

MARKER_ALLOWANCE = 24
"""Tokens reserved for the marker itself, so a truncated output stays within the limit."""
BYTES_PER_TOKEN = 4
"""The ``bytes`` policy's exchange rate: ``tool_output_max_tokens × 4`` bytes."""
TOKENIZE_AT_MOST = 1_000_000
"""Characters beyond which a ``tokens`` cut is made by bytes instead: placing a cut on token
boundaries would tokenize the whole output again (seconds for a few MB) for no real gain."""


def marker(amount: int, unit: str, lines: int, what: str = "output", handle: str | None = None) -> str:
    where = f"; the full {what} had {lines} lines" if lines > 1 else ""
    back = f"; {MENTION.format(handle=handle)}" if handle else ""  # ``recall 048213``
    return f"\n…{amount} {unit} truncated{where}{back}…\n"


@dataclass(frozen=True, slots=True)
class Truncating:
    """How to truncate: to about ``limit`` tokens, by ``policy`` (``tokens``, ``bytes``, ``none``:
    ``tool_output_policy``), placing a token cut with ``cut``."""

    limit: int
    policy: str
    cut: Cut
    recall: bool = False
    """Whether the marker names the original's handle (``core.recall``)."""


def truncate_text(text: str, how: Truncating, what: str = "output") -> str | None:
    """``text`` cut to about ``how.limit`` tokens (head + marker + tail), or None when it fits.

    ``what`` the text is, for the marker ("output", "message")."""
    if how.policy == "tokens" and len(text) <= TOKENIZE_AT_MOST:
        return _truncate_tokens(text, how, what)
    if how.policy in ("tokens", "bytes"):
        return _truncate_bytes(text, how, what)
    return None


def _handle(text: str, how: Truncating) -> str | None:
    """The handle a marker names: the original's, or the one a text cut before already names
    (its marker would be cut away with the middle)."""
    if not how.recall:
        return None
    return named_by_us(text) or handle_of(text)


def _truncate_tokens(text: str, how: Truncating, what: str) -> str | None:
    points = cut_points(text, how.limit, how.cut)
    if points is None:
        return None
    head_end, tail_start, removed = points
    shown = marker(removed, "tokens", line_count(text), what, _handle(text, how))
    return text[:head_end] + shown + text[tail_start:]


def cut_points(text: str, limit: int, cut: Cut) -> tuple[int, int, int] | None:
    """Where a head + tail cut of ``text`` to ``limit`` tokens falls: the head's end, the tail's
    start (characters) and the tokens between; None when it fits."""
    if len(text) <= limit:  # fewer characters than tokens allowed: cannot be over
        return None
    keep = max(2, limit - MARKER_ALLOWANCE)
    head, tail = keep // 2, keep - keep // 2
    head_end, tail_start, total = cut(text, head, tail)
    if total <= limit:
        return None
    return head_end, tail_start, total - head - tail


def _truncate_bytes(text: str, how: Truncating, what: str) -> str | None:
    limit = how.limit * BYTES_PER_TOKEN
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
    return start + marker(removed, "bytes", line_count(text), what, _handle(text, how)) + end


def line_count(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def truncate_results(item: Item, how: Truncating, skip: Container[int] = ()) -> dict[int, str]:
    """New outputs for the tool results of ``item`` over ``how.limit`` tokens, by part index.

    Empty when nothing needs cutting. ``skip``: part indices to leave alone (protected tools).
    """
    cuts: dict[int, str] = {}
    for index, part in enumerate(item.parts):
        if part.kind is PartKind.RESULT and index not in skip:
            shorter = truncate_text(part.text, how)
            if shorter is not None:
                cuts[index] = shorter
    return cuts

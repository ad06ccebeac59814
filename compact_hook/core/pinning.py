"""Pinned messages: what the agent was told, kept verbatim through every compaction.

The commonest complaint about compaction is that the agent forgets what it was told: the
task, the project's rules. Claude Code injects CLAUDE.md into the first user message inside
``<system-reminder>``; Codex sends ``# AGENTS.md instructions`` and ``<environment_context>``
as user messages at the start; SWE-agent's first user message is the issue. A summary may keep
their gist; the agent needs the words. So these are *pinned*: kept in their original order,
before the summary, within a budget of their own:

- the conversation's first user message (the task);
- a user message whose user-authored text holds one of ``pinned_patterns`` (tool outputs never
  count). An Anthropic user message that also carries tool results keeps only its text: the
  results belong to a tool turn that may be summarized;
- system / developer messages after the head (chat and Responses allow them mid-conversation).

The same text pinned twice (a reminder repeated every turn) is pinned once. When the pins do
not all fit their budget, each gets a fair share (max-min: small ones whole, the rest equal
shares) and one larger than its share keeps its head and tail around a marker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compact_hook.core.items import Item, PartKind, Role, head_length
from compact_hook.core.truncate import BYTES_PER_TOKEN, TOKENIZE_AT_MOST, Cut, cut_points, line_count, marker

MIN_PIN_TOKENS = 128
"""The least a pin is cut to: below it, the lowest-priority pins are left to the other rules."""


@dataclass(frozen=True, slots=True)
class TextCut:
    """Part ``part``'s text keeps ``[:head_end]`` and ``[tail_start:]`` around a marker saying
    ``removed`` tokens of a ``lines``-line message were left out. Stored with the compaction, so
    showing a cut pin never tokenizes it again."""

    part: int
    head_end: int
    tail_start: int
    removed: int
    lines: int

    def apply(self, text: str) -> str | None:
        """The cut text, or None when the cut does not fit ``text`` (never for our own entries)."""
        if not 0 <= self.head_end <= self.tail_start <= len(text):
            return None
        what = marker(self.removed, "tokens", self.lines, "message")
        return text[: self.head_end] + what + text[self.tail_start :]


@dataclass(frozen=True, slots=True)
class Shape:
    """How a kept item is shown: whole (the default), text only, and/or its text cut to about
    ``limit`` tokens (``cuts``: where, planned by ``plan_cuts``)."""

    text_only: bool = False
    limit: int = 0
    cuts: tuple[TextCut, ...] = ()

    def to_json(self) -> list[Any]:
        cuts = [[c.part, c.head_end, c.tail_start, c.removed, c.lines] for c in self.cuts]
        return [int(self.text_only), self.limit, cuts]

    @classmethod
    def from_json(cls, value: Any) -> Shape:
        text_only, limit, cuts = value
        return cls(bool(text_only), int(limit), tuple(TextCut(*(int(v) for v in cut)) for cut in cuts))


@dataclass(frozen=True, slots=True)
class Pin:
    """A pinned item: what it costs kept whole (its text alone when ``text_only``), and whether
    it is the task (served first)."""

    tokens: int
    text_only: bool = False
    task: bool = False


def find_pins(
    items: Sequence[Item],
    counts: Sequence[int],
    patterns: Sequence[str],
    text_tokens: Callable[[str], int],
) -> dict[int, Pin]:
    """The pinned items of the client's conversation, by index (the head is kept anyway)."""
    pins: dict[int, Pin] = {}
    seen: set[str] = set()
    first = next((index for index, item in enumerate(items) if item.is_user_turn), None)
    for index in range(head_length(items), len(items)):
        item = items[index]
        if index == first:
            pins[index] = Pin(counts[index], task=True)
            seen.add(item.text())
            continue
        if item.role is Role.SYSTEM:
            text_only = False
        elif item.role is Role.USER and any(pattern in item.user_text() for pattern in patterns):
            text_only = item.has_results
        else:
            continue
        text = item.text()
        key = text if text_only or item.role is not Role.SYSTEM else _whole(item)
        if key in seen:
            continue
        seen.add(key)
        pins[index] = Pin(text_tokens(text) if text_only else counts[index], text_only)
    return pins


def _whole(item: Item) -> str:
    """What makes an instruction the same as another: all of it, not its text alone (Anthropic's
    ``tool_addition`` / ``tool_removal`` blocks carry no text, and two of them differ)."""
    return "\x00".join(f"{part.kind.value}\x01{part.name}\x01{part.text}" for part in item.parts)


def allot(pins: Mapping[int, Pin], budget: int) -> dict[int, Shape]:
    """Shapes of the pins kept within ``budget``: all whole when they fit, else fair shares.

    Deterministic. When not even ``MIN_PIN_TOKENS`` each fits, the newest pins that are not
    the task are left out first.
    """
    chosen = sorted(pins, key=lambda index: (not pins[index].task, index))
    while chosen and len(chosen) * MIN_PIN_TOKENS > budget:
        chosen.pop()
    shares = fair_shares([pins[index].tokens for index in chosen], budget)
    return {
        index: Shape(pins[index].text_only, 0 if share >= pins[index].tokens else share)
        for index, share in zip(chosen, shares, strict=True)
    }


def fair_shares(sizes: Sequence[int], budget: int) -> list[int]:
    """Max-min fair allowances: the smallest take what they need, the rest split what is left."""
    shares = [0] * len(sizes)
    remaining = max(0, budget)
    order = sorted(range(len(sizes)), key=lambda k: (sizes[k], k))
    for rank, k in enumerate(order):
        share = remaining // (len(order) - rank)
        shares[k] = min(sizes[k], share)
        remaining -= shares[k]
    return shares


def plan_cuts(item: Item, shape: Shape, cut: Cut, tokens: Callable[[str], int]) -> Shape:
    """``shape`` with the cuts that bring ``item``'s text parts to about ``shape.limit`` tokens
    together, each its head and tail around a marker (none when it fits or has no limit).

    Tokenizes the item's text: run it off the event loop (the partition does)."""
    if not shape.limit:
        return shape
    positions = [k for k, part in enumerate(item.parts) if part.kind is PartKind.TEXT]
    sizes = [_tokens(item.parts[k].text, tokens) for k in positions]
    if sum(sizes) <= shape.limit:
        return dataclasses.replace(shape, cuts=())
    cuts = []
    for position, size, share in zip(positions, sizes, fair_shares(sizes, shape.limit), strict=True):
        text = item.parts[position].text
        if size > share:
            points = _points(text, max(1, share), cut)
            if points is not None:
                cuts.append(TextCut(position, *points, line_count(text)))
    return dataclasses.replace(shape, cuts=tuple(cuts))


def _tokens(text: str, tokens: Callable[[str], int]) -> int:
    return tokens(text) if len(text) <= TOKENIZE_AT_MOST else len(text) // BYTES_PER_TOKEN


def _points(text: str, limit: int, cut: Cut) -> tuple[int, int, int] | None:
    """Token-exact cut points; by characters beyond what is worth tokenizing (see ``truncate``)."""
    if len(text) <= TOKENIZE_AT_MOST:
        return cut_points(text, limit, cut)
    keep = limit * BYTES_PER_TOKEN
    head = keep // 2
    tail_start = len(text) - (keep - head)
    return head, tail_start, (tail_start - head) // BYTES_PER_TOKEN


def shown_texts(item: Item, shape: Shape) -> dict[int, str]:
    """The new texts of ``item``'s cut parts, by part index (the parts a cut does not fit are left whole)."""
    texts = {}
    for text_cut in shape.cuts:
        if 0 <= text_cut.part < len(item.parts) and item.parts[text_cut.part].kind is PartKind.TEXT:
            shown = text_cut.apply(item.parts[text_cut.part].text)
            if shown is not None:
                texts[text_cut.part] = shown
    return texts

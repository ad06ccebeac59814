"""Tier 2: old tool results become a one-line placeholder, in batches, remembered.

Masking old observations halves an agent's cost at equal task success (arXiv 2508.21433),
but every change to an old item invalidates the provider's prompt cache from that point
on. So clearing moves a *boundary* (an item index) forward in batches worth at least
``clear_at_least`` tokens, and the boundary is stored with the conversation's state:
between batches every request clears exactly the same results, and the forwarded prefix is
stable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from compact_hook.core.digest import error_lines
from compact_hook.core.items import Item, PartKind
from compact_hook.core.recall import mention as handle_mention

PLACEHOLDER = "[Previous: used {tool}]"
REPORTED = "[Previous: used {tool}; it reported: {errors}]"
RECALLABLE = "[{mention}]"
RECALLABLE_REPORTED = "[{mention}; it reported: {errors}]"
"""With ``recall``, the handle in place of "Previous: used <tool>" (the call before it names the
tool; the recall tool's description says what the brackets mean): as many tokens as without it.
The placeholder is in every later request, and "; recall <n>" added to it cost +2% on the priced
replay at a 40,000-token window (``bench/bench_cost.py``)."""
MIN_CLEAR_CHARS = 100
"""Results this short are kept: the placeholder would save nothing."""
ERRORS_KEPT = 2
"""Error lines a placeholder keeps (the last ones: an output usually ends with how it failed)."""


def placeholder(tool: str, output: str = "", original: str | None = None) -> str:
    """What a cleared result shows: the tool it came from — or, given the client's ``original``
    output, the handle that reads it back (``core.recall``) — and, word for word, the last error
    lines it reported: the agent must not repeat a failure it can no longer see."""
    errors = " | ".join(error_lines(output)[-ERRORS_KEPT:])
    if original is None:
        return REPORTED.format(tool=tool, errors=errors) if errors else PLACEHOLDER.format(tool=tool)
    named = handle_mention(original)
    shown = RECALLABLE_REPORTED if errors else RECALLABLE
    return shown.format(mention=named, errors=errors)


def clearable_parts(
    item: Item, index: int, tool_of: Mapping[tuple[int, int], str], protected: Sequence[str]
) -> dict[int, str]:
    """The results of item ``index`` that may be cleared: their tools, by part index."""
    found: dict[int, str] = {}
    for position, part in enumerate(item.parts):
        tool = tool_of.get((index, position))
        if part.kind is PartKind.RESULT and tool is not None and tool not in protected:
            if len(part.text) > MIN_CLEAR_CHARS:
                found[position] = tool
    return found


def placeholders(item: Item, tools: Mapping[int, str], original: Item | None = None) -> dict[int, str]:
    """Placeholders for these results of ``item`` (``clearable_parts``), where shorter than the
    output they replace. Reads every output: callers cache it (``Tiers``). ``original``: the
    client's item (before truncation), whose outputs the placeholders name to be recalled."""
    found: dict[int, str] = {}
    for position, tool in tools.items():
        before = None if original is None else original.parts[position].text
        shown = placeholder(tool, item.parts[position].text, before)
        if len(shown) < len(item.parts[position].text):
            found[position] = shown
    return found


@dataclass(frozen=True, slots=True)
class Batch:
    """What a clearing batch must leave and gain: the newest ``keep`` results stay, and the batch
    saves at least ``at_least`` tokens (``keep_tool_results``, ``clear_at_least``)."""

    keep: int
    at_least: int


def next_boundary(
    result_items: Sequence[int], saving: Callable[[int], int], boundary: int, batch: Batch
) -> int | None:
    """The new boundary if clearing every item older than the one holding the newest
    ``batch.keep`` results saves at least ``batch.at_least`` tokens beyond what ``boundary``
    already clears; else None.

    ``result_items``: the item index of every tool result, in order (an item may hold several).
    ``saving(i)``: what clearing item ``i`` would save (0 when it may not be cleared). Asked only
    of the items the batch would newly clear, and only until the batch is worth it: weighing an
    item builds its cleared copy, and a conversation holds far more results than one batch.
    """
    keep = batch.keep
    if len(result_items) <= keep:
        return None
    candidate = result_items[len(result_items) - keep] if keep else result_items[-1] + 1
    if candidate <= boundary:
        return None
    gained = 0
    for index in sorted({index for index in result_items if boundary <= index < candidate}):
        if gained >= batch.at_least:
            break
        gained += saving(index)
    return candidate if gained >= batch.at_least else None

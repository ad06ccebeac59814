"""Validity normalization: every tool call answered, every tool result with its call, every
instruction where the format allows it.

Providers reject a tool call with no result and a result with no call. Compaction never
creates either (it works on whole units), but clients do send them — an agent interrupted
mid-call, a history trimmed by hand — and a request we reshape should leave valid. The
problems come from the one pairing (``pairing.pair``); the format builds the repair.

Anthropic also places its mid-conversation ``system`` entries: after a user turn, before an
assistant turn or last. A compaction puts pinned instructions before the summary (a user
message); ``place_instructions`` moves such a section forward to the next valid place.
"""

from __future__ import annotations

from collections.abc import Sequence

from compact_hook.core.items import Builder, Item, Placement, Role
from compact_hook.core.pairing import Pairing, pair

ABORTED_RESULT = "[compact_hook: this tool call was interrupted; it has no recorded result]"


def normalize(
    items: Sequence[Item],
    builder: Builder,
    pairing: Pairing | None = None,
    placement: Placement = Placement.ANYWHERE,
) -> list[Item]:
    """A new list: synthetic results for unanswered calls, orphan results removed, instructions
    placed where ``placement`` allows them.

    Items that need no change are the very same objects.
    """
    paired = _paired(items, builder, pairing or pair(items))
    return place_instructions(paired) if placement is Placement.AFTER_USER else paired


def _paired(items: Sequence[Item], builder: Builder, pairing: Pairing) -> list[Item]:
    if not pairing.unanswered and not pairing.orphans:
        return list(items)
    orphans: dict[int, list[int]] = {}
    for index, position in pairing.orphans:
        orphans.setdefault(index, []).append(position)
    out: list[Item] = []
    for unit in pairing.units:
        repaired: list[Item] = []
        offset_of: dict[int, int] = {}
        for index in range(unit.start, unit.end):
            item: Item | None = items[index]
            if index in orphans:
                item = builder.without_parts(items[index], orphans[index])
            if item is not None:
                offset_of[index] = len(repaired)
                repaired.append(item)
        missing = pairing.unanswered.get(unit.start)
        if missing:  # items that make calls carry no results, so none of them was removed
            repaired = builder.answer(repaired, [(offset_of[index], part) for index, part in missing])
        out.extend(repaired)
    return out


def place_instructions(items: Sequence[Item]) -> list[Item]:
    """Each section of system items right after a user turn and before an assistant turn, or
    last after a user turn: where it is, if valid; else moved forward to the next such place
    (backward to the last one when there is none ahead; left alone when there is none at all).

    Moving an instruction a little later is the least change that keeps the request valid: its
    words are the client's, and the model still reads them as system instructions.
    """
    out: list[Item] = []
    held: list[Item] = []
    for item in items:
        if item.role is Role.SYSTEM:
            held.append(item)
            continue
        if held and item.role is Role.ASSISTANT and out and out[-1].role is Role.USER:
            out.extend(held)
            held = []
        out.append(item)
    if not held:
        return out
    if out and out[-1].role is Role.USER:
        return [*out, *held]
    for boundary in range(len(out) - 1, 0, -1):
        if out[boundary].role is Role.ASSISTANT and out[boundary - 1].role is Role.USER:
            return [*out[:boundary], *held, *out[boundary:]]
    return list(items)


def is_valid(items: Sequence[Item]) -> bool:
    """True when ``normalize`` would change nothing."""
    pairing = pair(items)
    return not pairing.unanswered and not pairing.orphans

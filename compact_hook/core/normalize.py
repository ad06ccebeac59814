"""Validity normalization: every tool call answered, every tool result with its call.

Providers reject a tool call with no result and a result with no call. Compaction never
creates either (it works on whole units), but clients do send them — an agent interrupted
mid-call, a history trimmed by hand — and a request we reshape should leave valid. The
problems come from the one pairing (``pairing.pair``); the format builds the repair.
"""

from __future__ import annotations

from collections.abc import Sequence

from compact_hook.core.items import Builder, Item
from compact_hook.core.pairing import Pairing, pair

ABORTED_RESULT = "[compact_hook: this tool call was interrupted; it has no recorded result]"


def normalize(items: Sequence[Item], builder: Builder, pairing: Pairing | None = None) -> list[Item]:
    """A new list: synthetic results for unanswered calls, orphan results removed.

    Items that need no change are the very same objects.
    """
    pairing = pairing or pair(items)
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


def is_valid(items: Sequence[Item]) -> bool:
    """True when ``normalize`` would change nothing."""
    pairing = pair(items)
    return not pairing.unanswered and not pairing.orphans

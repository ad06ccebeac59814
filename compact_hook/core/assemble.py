"""Pure assembly of the compacted history: ``[*head, *kept, summary, *tail]``."""

from __future__ import annotations

from collections.abc import Sequence

from compact_hook.core.items import Item, Role
from compact_hook.core.partition import Partition


def assemble_order(items: Sequence[Item], part: Partition) -> list[int | None]:
    """Indices into ``items`` of the compacted list, in order; None marks the summary.

    The summary follows the kept items, so the task (the first user message, pinned) and the
    injected instructions read before it. If the first kept item after any pinned system
    messages is the model's, the summary comes just before it instead: a conversation must
    open with a user turn after its head (Anthropic requires it).
    """
    head = list(range(part.head_end))
    kept = list(part.kept)
    tail = list(range(part.tail_start, len(items)))
    lead = 0
    while lead < len(kept) and items[kept[lead]].role is Role.SYSTEM:
        lead += 1
    if lead < len(kept) and items[kept[lead]].role is not Role.USER:
        return [*head, *kept[:lead], None, *kept[lead:], *tail]
    return [*head, *kept, None, *tail]

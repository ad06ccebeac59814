"""How a request's items pair (each tool call with its result), from its conversation's latest pairings.

Pairing a Claude Code session's 288 items costs more than anything else a known conversation's request
does, and nearly all of it is the same as last time: a list of items (the client's, or a view the
tiers built) is paired anew only from where it parts from the earlier pairing it shares the most with
(``core.pairing.pair_again``), and what it found is kept for the next request (``Known.keep_pairing``,
charged to the conversation's account in ``state.recent``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Item
from compact_hook.core.pairing import Pairing, pair, pair_again
from compact_hook.wires.conversation import Conversation


def paired(conversation: Conversation, items: list[Item], prints: Sequence[Fingerprint]) -> Pairing:
    """``items`` (with their fingerprints ``prints``) paired from the conversation's latest pairings."""
    known = conversation.known
    if known is None:
        return pair(items)
    kept = tuple(prints)
    best: Pairing | None = None
    most = 0
    for earlier_prints, earlier in known.pairings:
        same = list(map(operator.eq, earlier_prints, kept))  # in C
        length = same.index(False) if False in same else len(same)
        if best is None or length > most:
            best, most = earlier, length
    found = pair(items) if best is None else pair_again(items, best, most)
    known.keep_pairing(kept, found)
    return found

"""What the provider reported of each conversation's prompt cache, for cost-aware timing.

The proxy hears each response's usage (cache reads, writes, uncached input) and hands it here under
the conversation's key; the next request of that conversation reads it to know whether the provider
holds its prefix warm (``core.economics.Warmth``). Kept in the store's notes, so replicas share it,
for a few cache lifetimes; with no store (``store: off``), in a small in-process map.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from compact_hook.core.economics import CacheNote, Heard
from compact_hook.state.store import CompactionStore


class Unread:
    """A note not read yet (``None`` is a note read and not found)."""


UNREAD = Unread()
PREFIX = b"cache:"
KEEP_TTLS = 4
"""A note outlives the cache it describes by this many lifetimes: long enough to tell cold from new."""
LOCAL_NOTES = 4_096


class CacheLedger:
    def __init__(self, store: CompactionStore | None, clock: Callable[[], float] = time.time) -> None:
        self.store, self.clock = store, clock
        self._local: OrderedDict[bytes, CacheNote] = OrderedDict()

    async def note(self, conversation: bytes) -> CacheNote | None:
        if self.store is None:
            return self._local.get(conversation)
        text = await self.store.get_note(PREFIX + conversation)
        return CacheNote.from_text(text) if text is not None else None

    async def heard(
        self, conversation: bytes, heard: Heard, ttl: float, known: CacheNote | None | Unread = UNREAD
    ) -> CacheNote:
        """The provider's report of the conversation's latest request, remembered (``known``: its
        note as already read, else it is read here)."""
        now = self.clock()
        if isinstance(known, Unread):
            known = await self.note(conversation)
        note = known.after(now, heard) if known is not None else heard.first(now)
        if self.store is None:
            self._local[conversation] = note
            self._local.move_to_end(conversation)
            while len(self._local) > LOCAL_NOTES:
                self._local.popitem(last=False)
        else:
            await self.store.set_note(PREFIX + conversation, note.to_text(), ttl * KEEP_TTLS)
        return note

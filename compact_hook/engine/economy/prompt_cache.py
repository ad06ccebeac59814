"""What the provider reported of each conversation's requests, kept between them.

The proxy hears each response's usage (cache reads, writes, uncached input) and hands it here under
the conversation's key with where the request stands in it (``core.notes.Lineage``); the next
request of that conversation reads its note to know whether the provider holds its prefix warm
(``core.economics.Warmth``), what its bills say it is counted at (``core.calibration``), and what its
next bill is judged against (``core.evidence``). Kept in the store as a record charged to the tenant,
so replicas share it, for a few cache lifetimes; with no store (``store: off``), in a small
in-process map.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.notes import CacheNote, Heard, Lineage, Notes
from compact_hook.state.store import CompactionStore

PREFIX = b"cache:"
KEEP_TTLS = 4
"""A note outlives the cache it describes by this many lifetimes: long enough to tell cold from new."""
LOCAL_NOTES = 4_096


class CacheLedger:
    def __init__(self, store: CompactionStore | None, clock: Callable[[], float] = time.time) -> None:
        self.store, self.clock = store, clock
        self._local: OrderedDict[bytes, Notes] = OrderedDict()

    async def notes(self, conversation: bytes) -> Notes:
        """Every note kept under a conversation's key (those of conversations that begin alike)."""
        if self.store is None:
            return self._local.get(conversation, Notes())
        text = await self.store.get_record(PREFIX + conversation)
        return Notes.from_text(text) if text is not None else Notes()

    async def note(self, conversation: bytes, client: Sequence[Fingerprint]) -> CacheNote | None:
        """The note of the conversation whose last billed request ``client``'s entries extend."""
        return (await self.notes(conversation)).of(client)

    async def heard(
        self,
        conversation: bytes,
        heard: Heard,
        lineage: Lineage,
        keep: tuple[float, str],
        known: Notes | None = None,
    ) -> CacheNote:
        """The provider's report of a conversation's latest request, remembered (``keep``: the cache's
        lifetime and the tenant the note is charged to; ``known``: the key's notes as already read)."""
        ttl, tenant = keep
        notes = known if known is not None else await self.notes(conversation)
        kept, note = notes.heard(self.clock(), heard, lineage)
        if self.store is None:
            self._local[conversation] = kept
            self._local.move_to_end(conversation)
            while len(self._local) > LOCAL_NOTES:
                self._local.popitem(last=False)
        else:
            await self.store.put_record(PREFIX + conversation, kept.to_text(), ttl * KEEP_TTLS, tenant)
        return note

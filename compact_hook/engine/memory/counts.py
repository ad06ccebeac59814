"""Each conversation's entry counts, kept in the store: a process new to a conversation reads them.

A proxy restarted, a replica that joins, a recycled worker: every live session's next request is a
first contact there, 50–200K tokens of history to tokenize (~240 ms of a core for 100K tokens) —
40 sessions at once kept 40 requests waiting seconds for their counts. So the counts of a
conversation's entries are kept in the store (Redis, the file) as one record under the
conversation's key, and a process that has none of them reads that record before it tokenizes
(``HFTokenCounter.acount``'s ``recall``; only for a large batch of new text: one store read, where
tokenizing would cost more).

Evidence, not truth: the store is shared, so a count read is used only for an entry whose
fingerprint this request computed (fingerprints are seeded by the tenant: no other tenant's
record can fill them) and only where it is coherent with the entry's text (``state.tokenizers``:
at least its fixed cost, at most that plus its text's UTF-8 bytes — no byte-level tokenizer makes
more tokens than bytes). A record is charged to a quota of the tenant's own (``ACCOUNT``), and it
lives ``COUNTS_TTL``: a session idle longer is tokenized again.

Kept when what was counted since the last record is worth a read: the first time a conversation
is counted at ``KEEP_TOKENS`` or more, then each time it has grown by as many (one write per
``KEEP_TOKENS`` of new history, never one per request).
"""

from __future__ import annotations

import base64
import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence

from compact_hook.core.fingerprint import Fingerprint
from compact_hook.state.store import CompactionStore

PREFIX = b"counts:"
ACCOUNT = "counts of "
"""The tenant's account its count records are charged to: its own quota, apart from its other records
(compaction items, the provider's reports), which counts — a cache, read again from the tokenizer
when gone — never push out."""
KEEP_TOKENS = 8_192
"""New tokens counted since the conversation's last record before another is written: about what
one store read saves against tokenizing (~15 ms of a core)."""
COUNTS_TTL = 24 * 3600.0
"""How long a record is kept: a day, for sessions a restart or a deployment finds idle."""
PRINT_BYTES = 16
ENTRY = struct.Struct(f"<{PRINT_BYTES}sI")
"""One entry in a record: its fingerprint and its count."""
MAX_CONVERSATIONS = 4_096
"""Conversations whose last record this process remembers writing (their keys and sizes only)."""


class RememberedCounts:
    """The store's records of conversations' counts (see the module)."""

    def __init__(self, store: CompactionStore | None) -> None:
        self.store = store
        self._kept: OrderedDict[bytes, int] = OrderedDict()
        """Conversation → the tokens its last record written or read held (``KEEP_TOKENS``)."""

    async def recall(self, key: bytes) -> dict[Fingerprint, int]:
        """The counts the conversation's record holds (none: {})."""
        if self.store is None:
            return {}
        text = await self.store.get_record(PREFIX + key)
        found = unpacked(text) if text is not None else {}
        if found:
            self._remember(key, sum(found.values()))
        return found

    async def keep(
        self, key_of: Callable[[], bytes], prints: Sequence[Fingerprint], counts: Sequence[int], tenant: str
    ) -> None:
        """The conversation's counts written, when it grew by ``KEEP_TOKENS`` since its last record
        (``key_of``: its key, worked out only for a conversation that large)."""
        if self.store is None:
            return
        total = sum(counts)
        if total < KEEP_TOKENS:
            return
        key = key_of()
        if total - self._kept.get(key, 0) < KEEP_TOKENS:
            return
        if await self.store.put_record(PREFIX + key, packed(prints, counts), COUNTS_TTL, ACCOUNT + tenant):
            self._remember(key, total)

    def _remember(self, key: bytes, total: int) -> None:
        self._kept[key] = total
        self._kept.move_to_end(key)
        while len(self._kept) > MAX_CONVERSATIONS:
            self._kept.popitem(last=False)


def packed(prints: Sequence[Fingerprint], counts: Sequence[int]) -> str:
    """A record: each entry's fingerprint and count, base64 (a record is text in every store)."""
    rows = b"".join(
        ENTRY.pack(print_, count)
        for print_, count in zip(prints, counts, strict=True)
        if len(print_) == PRINT_BYTES and 0 <= count < 2**32
    )
    return base64.b64encode(rows).decode("ascii")


def unpacked(text: str) -> dict[Fingerprint, int]:
    """A record read back ({} for anything that is not one: the store is not trusted)."""
    try:
        rows = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return {}
    if len(rows) % ENTRY.size:
        return {}
    return dict(ENTRY.iter_unpack(rows))

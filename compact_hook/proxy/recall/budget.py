"""A conversation's recall budget: the bytes its recall answers may give back while it lives.

Each request's answers are bounded by the window (``recall_max_tokens``); across requests a model
could still read the same megabytes back turn after turn. What a conversation's answers gave back is
kept in the store as a note (shared by the replicas where the store is Redis; its life the
conversation's, ``store_ttl_seconds``), read only when the model calls the tool — never on the path
of a request that makes no recall — and added to after the reply. Two replicas answering the same
conversation at once may each spend what was left: the bound holds to within one request's answers.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)
PREFIX = b"recall-bytes:"


@dataclass(frozen=True, slots=True)
class RecallBudget:
    """Where a conversation's spent bytes are kept, and how many it may spend."""

    store: CompactionStore
    key: bytes
    limit: int
    ttl: float

    @classmethod
    def of(cls, store: CompactionStore, tenant: str, session: str, limit: int, ttl: float) -> RecallBudget:
        named = hashlib.blake2b(f"{tenant}\x00{session}".encode("utf-8", "surrogatepass"), digest_size=16)
        return cls(store, PREFIX + named.digest(), limit, ttl)

    async def left(self) -> int:
        """The bytes the conversation's answers may still give back (the whole limit if the store
        cannot say: a store that fails never stops a recall)."""
        try:
            spent = await self.store.get_note(self.key)
            return max(0, self.limit - int(spent or 0))
        except Exception:
            logger.warning("compact_hook: recall budget unreadable; answering within this request's bound")
            return self.limit

    async def spend(self, size: int) -> None:
        """Add ``size`` bytes to what the conversation spent."""
        if size <= 0:
            return
        try:
            spent = int(await self.store.get_note(self.key) or 0)
            await self.store.set_note(self.key, str(spent + size), self.ttl)
        except Exception:
            logger.warning("compact_hook: recall budget not updated (%d bytes)", size)

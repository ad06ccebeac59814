"""Where remembered compactions live: in process, or in Redis shared by every proxy replica.

Per request the store costs O(1) round trips: one read of the conversation's small index
(``covered:key`` pairs under its root), one read of the matching entry. Writes are one
pipelined round trip. ``tiered.TieredStore`` puts Redis in front of an in-process store and falls
back to the latter whenever Redis errors or is slow, so the cache can never fail a request:
a lost entry only costs a new summary.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

from compact_hook.core.chain import Entry
from compact_hook.settings.process import DEFAULT_STORE_MAX_BYTES, DEFAULT_TENANT_RECORD_BYTES
from compact_hook.state.quota import RedisLedger, TenantLedger, charge, fits
from compact_hook.state.redis_clients import Topology

V = TypeVar("V")

INDEX_LIMIT = 32
"""Compactions remembered per conversation root (forks and rewinds keep older ones useful)."""
KEY_PREFIX = "compact_hook:v1"
MAX_NOTE_CHARS = 256
MAX_RECORD_CHARS = 1 << 20
"""A record (what a compaction handle we gave a client stands for) is at most 1 MiB of text; a
longer one is refused (``put_record`` returns False), never cut."""


class CompactionStore(Protocol):
    """Storage of entries by chain key, indexed by conversation root, plus a lock per key."""

    async def find(self, root: bytes, chain: Sequence[bytes]) -> tuple[bytes, Entry] | None:
        """The entry of the longest prefix ``chain[k]`` stored under ``root``, with its key."""

    async def get(self, key: bytes) -> Entry | None: ...

    async def put(self, root: bytes, key: bytes, entry: Entry) -> None: ...

    async def try_lock(self, key: bytes, ttl: float) -> str | None:
        """A token if we now hold the key's compaction lock; None if someone else does."""

    async def unlock(self, key: bytes, token: str) -> None: ...

    async def is_locked(self, key: bytes) -> bool: ...

    async def set_note(self, key: bytes, value: str, ttl: float) -> None:
        """Remember a short value for ``ttl`` seconds, shared with replicas: a failed summary, a
        summary model's breaker, a model group's learned window."""

    async def get_note(self, key: bytes) -> str | None: ...

    async def put_record(self, key: bytes, value: str, ttl: float, tenant: str | None = None) -> bool:
        """Keep ``value`` (at most ``MAX_RECORD_CHARS``) under ``key`` for ``ttl`` seconds, counted
        against ``tenant``'s quota if given (``state.quota``: past it, the tenant's own oldest
        records go); False when it is too long or could not be kept."""

    async def get_record(self, key: bytes) -> str | None: ...


def entry_bytes(entry: Entry) -> int:
    """Roughly what an entry holds in memory: its summary and its indices."""
    return 200 + len(entry.summary or "") + 8 * (len(entry.keep) + len(entry.unarchived))


def best_match(candidates: Sequence[tuple[int, bytes]], chain: Sequence[bytes]) -> list[tuple[int, bytes]]:
    """Index pairs whose key is this request's own prefix hash, longest first."""
    return sorted(
        ((covered, key) for covered, key in candidates if covered < len(chain) and chain[covered] == key),
        reverse=True,
    )


class MemoryStore:
    """LRU with a TTL, bounded in entries and in bytes (summaries are most of an entry's size);
    locks are trivially ours (one process, in-process single flight)."""

    def __init__(
        self,
        max_entries: int,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = DEFAULT_STORE_MAX_BYTES,
        tenant_bytes: int = DEFAULT_TENANT_RECORD_BYTES,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self.ttl = ttl
        self.clock = clock
        self._entries: OrderedDict[bytes, tuple[float, Entry]] = OrderedDict()
        self._index: OrderedDict[bytes, list[tuple[int, bytes]]] = OrderedDict()
        self._notes: OrderedDict[bytes, tuple[float, str]] = OrderedDict()
        self._records: OrderedDict[bytes, tuple[float, str]] = OrderedDict()
        self.record_chars = 0
        self.tenants = TenantLedger(tenant_bytes)

    async def find(self, root: bytes, chain: Sequence[bytes]) -> tuple[bytes, Entry] | None:
        for _, key in best_match(self._index.get(root, []), chain):
            entry = await self.get(key)
            if entry is not None:
                self._index.move_to_end(root)
                return key, entry
        return None

    async def get(self, key: bytes) -> Entry | None:
        return self._live(self._entries, key, self._drop)

    async def put(self, root: bytes, key: bytes, entry: Entry) -> None:
        self._drop(key)
        self._entries[key] = (self.clock() + self.ttl, entry)
        self.bytes += entry_bytes(entry)
        pairs = [pair for pair in self._index.get(root, []) if pair[1] != key]
        self._index[root] = [(entry.span, key), *pairs][:INDEX_LIMIT]
        self._index.move_to_end(root)
        while self._entries and (len(self._entries) > self.max_entries or self.bytes > self.max_bytes):
            self._drop(next(iter(self._entries)))
        while len(self._index) > self.max_entries:
            self._index.popitem(last=False)

    def _drop(self, key: bytes) -> None:
        found = self._entries.pop(key, None)
        if found is not None:
            self.bytes -= entry_bytes(found[1])

    async def try_lock(self, key: bytes, ttl: float) -> str | None:
        return "local"

    async def unlock(self, key: bytes, token: str) -> None:
        return None

    async def is_locked(self, key: bytes) -> bool:
        return False

    async def set_note(self, key: bytes, value: str, ttl: float) -> None:
        self._notes[key] = (self.clock() + ttl, value[:MAX_NOTE_CHARS])
        self._notes.move_to_end(key)
        while len(self._notes) > self.max_entries:
            self._notes.popitem(last=False)

    async def get_note(self, key: bytes) -> str | None:
        found = self._notes.get(key)
        return found[1] if found is not None and found[0] > self.clock() else None

    async def put_record(self, key: bytes, value: str, ttl: float, tenant: str | None = None) -> bool:
        """Records share the store's byte budget with nothing else: at most ``max_bytes`` of them,
        the least recently used going first; a tenant's at most its quota, its oldest going first."""
        if not fits(value, tenant, self.tenants.quota, MAX_RECORD_CHARS):
            return False
        self._drop_record(key)
        self._records[key] = (self.clock() + ttl, value)
        self.record_chars += len(value)
        for older in self.tenants.charge(tenant, key, charge(value)) if tenant is not None else ():
            self._drop_record(older)
        while self.record_chars > self.max_bytes and len(self._records) > 1:
            self._drop_record(next(iter(self._records)))
        return True

    async def get_record(self, key: bytes) -> str | None:
        return self._live(self._records, key, self._drop_record)

    def _drop_record(self, key: bytes) -> None:
        gone = self._records.pop(key, None)
        if gone is not None:
            self.record_chars -= len(gone[1])
            self.tenants.release(key)

    def _live(
        self, table: OrderedDict[bytes, tuple[float, V]], key: bytes, drop: Callable[[bytes], None]
    ) -> V | None:
        """``key``'s value in ``table`` unless expired (then dropped), made the most recently used."""
        found = table.get(key)
        if found is None or found[0] <= self.clock():
            drop(key)
            return None
        table.move_to_end(key)
        return found[1]


_UNLOCK = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class RedisStore:
    """Entries as JSON strings with a TTL; the index as a capped list; locks as ``SET NX PX``.

    ``namespace`` separates stores sharing one Redis (prepared compactions live apart from
    applied ones under the same keys). Every command names one key (reads of several are
    pipelined, never one multi-key command), so the same store works on one server, a Sentinel-
    managed master and a Redis Cluster, where a conversation's keys live in different slots.
    """

    def __init__(
        self,
        client: Any,
        ttl: int,
        namespace: str = "",
        topology: Topology = Topology.SINGLE,
        tenant_bytes: int = DEFAULT_TENANT_RECORD_BYTES,
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.prefix = f"{KEY_PREFIX}:{namespace}" if namespace else KEY_PREFIX
        self.topology = topology
        """One server, a cluster or a Sentinel-managed master (the ``compact_hook_store_redis`` metric)."""
        self.ledger = RedisLedger(client, self.prefix, tenant_bytes)
        """Each tenant's records and their sizes (``state.quota``)."""

    async def find(self, root: bytes, chain: Sequence[bytes]) -> tuple[bytes, Entry] | None:
        raw_pairs = await self.client.lrange(self._key("index", root), 0, INDEX_LIMIT - 1)
        matches = best_match([_parse_pair(raw) for raw in raw_pairs], chain)
        if not matches:
            return None
        # one GET per key, pipelined without a transaction: a cluster serves each from its own slot
        pipe = self.client.pipeline(transaction=False)
        for _, key in matches:
            pipe.get(self._key("entry", key))
        values = await pipe.execute()
        for (_, key), value in zip(matches, values, strict=True):
            if value is not None:
                return key, Entry.from_json(value)
        return None

    async def get(self, key: bytes) -> Entry | None:
        value = await self.client.get(self._key("entry", key))
        return Entry.from_json(value) if value is not None else None

    async def put(self, root: bytes, key: bytes, entry: Entry) -> None:
        index = self._key("index", root)
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self._key("entry", key), entry.to_json(), ex=self.ttl)
        pipe.lrem(index, 0, f"{entry.span}:{key.hex()}")
        pipe.lpush(index, f"{entry.span}:{key.hex()}")
        pipe.ltrim(index, 0, INDEX_LIMIT - 1)
        pipe.expire(index, self.ttl)
        await pipe.execute()

    async def try_lock(self, key: bytes, ttl: float) -> str | None:
        token = uuid.uuid4().hex
        acquired = await self.client.set(self._key("lock", key), token, nx=True, px=max(1, int(ttl * 1000)))
        return token if acquired else None

    async def unlock(self, key: bytes, token: str) -> None:
        await self.client.eval(_UNLOCK, 1, self._key("lock", key), token)

    async def is_locked(self, key: bytes) -> bool:
        return bool(await self.client.exists(self._key("lock", key)))

    async def set_note(self, key: bytes, value: str, ttl: float) -> None:
        await self.client.set(self._key("note", key), value[:MAX_NOTE_CHARS], px=max(1, int(ttl * 1000)))

    async def get_note(self, key: bytes) -> str | None:
        value = await self.client.get(self._key("note", key))
        return value.decode() if isinstance(value, bytes) else value

    async def put_record(self, key: bytes, value: str, ttl: float, tenant: str | None = None) -> bool:
        """The record and, for a tenant, its charge in one pipelined round trip; the records the
        tenant gave up to stay within its quota deleted in a second, only when some go."""
        if not fits(value, tenant, self.ledger.quota, MAX_RECORD_CHARS):
            return False
        expiry = max(1, int(ttl * 1000))
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self._key("record", key), value, px=expiry)
        if tenant is not None:
            self.ledger.charge(pipe, tenant, key, value, expiry)
        done = await pipe.execute()
        await self.ledger.give_up(done[1] if tenant is not None else (), partial(self._key, "record"))
        return True

    async def get_record(self, key: bytes) -> str | None:
        value = await self.client.get(self._key("record", key))
        return value.decode() if isinstance(value, bytes) else value

    def _key(self, kind: str, key: bytes) -> str:
        """Where a ``kind`` (entry, index, lock, note, record) of ``key`` lives in Redis."""
        return f"{self.prefix}:{kind}:{key.hex()}"


def _parse_pair(raw: bytes | str) -> tuple[int, bytes]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    covered, _, key = text.partition(":")
    return int(covered), bytes.fromhex(key)

"""Per-tenant quotas on stored records: one tenant's records never push out another's.

A record (``put_record``: what a compaction handle we gave Codex stands for) may be up to 1 MiB, and
the in-process store's byte budget is shared: without a quota, one tenant's 64 large compactions
would evict every other tenant's on a replica without Redis, and Redis would hold whatever any
tenant wrote. So each tenant (a key or team) may hold at most ``quota`` bytes of records; a record
that takes it past that pushes out the tenant's own oldest records (in the order written), never
another's. A record larger than the quota alone is refused, as ``put_record`` reports any record it
could not keep (the request goes on: Codex's trigger is forwarded as sent).

In process, ``TenantLedger`` keeps the account. In Redis, each tenant has two keys in one hash slot
(``{tenant}``, so a cluster serves both to one script): the hex keys of its records, newest first,
and their sizes with the running total. One script charges a record and pops the tenant's oldest
past the quota; their records are then deleted (one pipelined round trip, only when some go). Both
keys expire with the tenant's newest record. The number of tenants is not bounded here: Redis's own
``maxmemory`` with an eviction policy bounds the whole (docs/operations.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from compact_hook.core.tenancy import tenant_tag

RECORD_OVERHEAD = 256
"""What a record costs beyond its text (its key, expiry and place in its tenant's account): a
tenant's count of records is bounded too, by its quota over this."""

CHARGE_SCRIPT = """
local before = tonumber(redis.call('hget', KEYS[2], ARGV[1]) or '0')
if before > 0 then redis.call('lrem', KEYS[1], 0, ARGV[1]) end
redis.call('hset', KEYS[2], ARGV[1], ARGV[2])
redis.call('lpush', KEYS[1], ARGV[1])
local total = redis.call('hincrby', KEYS[2], '=', tonumber(ARGV[2]) - before)
redis.call('pexpire', KEYS[1], ARGV[4])
redis.call('pexpire', KEYS[2], ARGV[4])
local gone = {}
while total > tonumber(ARGV[3]) do
  local oldest = redis.call('rpop', KEYS[1])
  if not oldest then break end
  total = redis.call('hincrby', KEYS[2], '=', -tonumber(redis.call('hget', KEYS[2], oldest) or '0'))
  redis.call('hdel', KEYS[2], oldest)
  gone[#gone + 1] = oldest
end
return gone
"""
"""KEYS: the tenant's record keys (newest first), its sizes (a record's field is its key in hex; the
field ``=`` holds their sum). ARGV: the record's key in hex, its charge, the quota, the expiry in
ms. Returns the keys (hex) of the records the tenant gave up. The new record is never among them:
its charge alone is within the quota (checked before)."""


def charge(value: str) -> int:
    """What a record counts against its tenant's quota."""
    return len(value) + RECORD_OVERHEAD


def fits(value: str, tenant: str | None, quota: int, largest: int) -> bool:
    """Whether a store may keep the record at all: at most ``largest`` characters, and, for a
    tenant, within its quota alone."""
    return len(value) <= largest and (tenant is None or charge(value) <= quota)


class TenantLedger:
    """Which records each tenant holds in an in-process store, in the order written, and their
    sizes; every entry is a record the store holds (released when the store drops it)."""

    def __init__(self, quota: int, most: int | None = None) -> None:
        """``quota``: the bytes a tenant may hold; ``most``: how many records (None: any number)."""
        self.quota, self.most = quota, most
        self._held: dict[str, OrderedDict[bytes, int]] = {}
        self._totals: dict[str, int] = {}
        self._owners: dict[bytes, str] = {}

    def total(self, tenant: str) -> int:
        return self._totals.get(tenant, 0)

    def charge(self, tenant: str, key: bytes, size: int) -> list[bytes]:
        """Count ``key`` against ``tenant``: the keys of its oldest records it must give up to stay
        within the quota (never ``key`` itself, whose ``size`` is within it)."""
        self.release(key)
        self._held.setdefault(tenant, OrderedDict())[key] = size
        self._owners[key] = tenant
        self._totals[tenant] = self.total(tenant) + size
        gone: list[bytes] = []
        total, count = self._totals[tenant], len(self._held[tenant])
        for older, held in self._held[tenant].items():  # oldest first
            if total <= self.quota and (self.most is None or count <= self.most):
                break
            gone.append(older)
            total, count = total - held, count - 1
        return gone

    def refresh(self, key: bytes) -> None:
        """``key`` was written again, as it was: its tenant gives it up last now."""
        tenant = self._owners.get(key)
        if tenant is not None:
            self._held[tenant].move_to_end(key)

    def release(self, key: bytes) -> None:
        """The store dropped ``key``: its tenant no longer holds it."""
        tenant = self._owners.pop(key, None)
        if tenant is None:
            return
        held = self._held[tenant]
        self._totals[tenant] -= held.pop(key)
        if not held:
            del self._held[tenant], self._totals[tenant]


class RedisLedger:
    """A Redis store's tenants' accounts (see the module docstring): charged in the pipeline that
    writes the record, what a tenant gave up deleted after."""

    def __init__(self, client: Any, prefix: str, quota: int) -> None:
        self.client, self.prefix, self.quota = client, prefix, quota

    def accounts(self, tenant: str) -> tuple[str, str]:
        """A tenant's record keys and their sizes, in one hash slot (``{tag}``)."""
        tag = tenant_tag(tenant)
        return f"{self.prefix}:records:{{{tag}}}", f"{self.prefix}:record-bytes:{{{tag}}}"

    def charge(self, pipe: Any, tenant: str, key: bytes, value: str, expiry_ms: int) -> None:
        """Queue the charge of ``key``'s record on ``pipe`` (its answer: what the tenant gave up)."""
        pipe.eval(CHARGE_SCRIPT, 2, *self.accounts(tenant), key.hex(), charge(value), self.quota, expiry_ms)

    async def give_up(self, gone: Sequence[bytes | str], record_key: Callable[[bytes], str]) -> None:
        """Delete the records a charge pushed out (one pipelined round trip; none when none went)."""
        if not gone:
            return
        pipe = self.client.pipeline(transaction=False)
        for hex_key in gone:
            pipe.delete(
                record_key(bytes.fromhex(hex_key.decode() if isinstance(hex_key, bytes) else hex_key))
            )
        await pipe.execute()

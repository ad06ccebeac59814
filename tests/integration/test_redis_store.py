"""RedisStore and TieredStore against a real redis-server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio

from compact_hook.core.chain import Entry
from compact_hook.settings.process import ProcessConfig
from compact_hook.state.backends import build_stores
from compact_hook.state.store import INDEX_LIMIT, MemoryStore, RedisStore
from compact_hook.state.tiered import DOWN_SECONDS, MasterWatch, TieredStore
from tests.integration.redis_server import RedisSentinelServer, RedisServer


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as running:
        yield running


@pytest.fixture
async def redis_client(server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    connection = redis.asyncio.from_url(server.url)
    await connection.flushdb()
    yield connection
    await connection.aclose()


async def test_find_returns_the_longest_matching_prefix_in_two_round_trips(
    redis_client: redis.asyncio.Redis,
) -> None:
    store = RedisStore(redis_client, ttl=60)
    chain = [b"s", b"k1", b"k2", b"k3"]
    await store.put(b"root", b"k1", Entry(1, (), "one"))
    await store.put(b"root", b"k2", Entry(2, (0,), "two"))
    await store.put(b"root", b"other", Entry(3, (), "another history"))
    assert await store.find(b"root", chain) == (b"k2", Entry(2, (0,), "two"))
    assert await store.find(b"root", chain[:2]) == (b"k1", Entry(1, (), "one"))
    assert await store.find(b"nobody", chain) is None
    assert await redis_client.ttl("compact_hook:v1:entry:" + b"k2".hex()) > 0


async def test_the_index_is_capped(redis_client: redis.asyncio.Redis) -> None:
    store = RedisStore(redis_client, ttl=60)
    for i in range(INDEX_LIMIT + 10):
        await store.put(b"root", f"k{i}".encode(), Entry(i + 1, (), "x"))
    assert await redis_client.llen("compact_hook:v1:index:" + b"root".hex()) == INDEX_LIMIT


async def test_locks_are_exclusive_expire_and_only_the_holder_unlocks(
    redis_client: redis.asyncio.Redis,
) -> None:
    store = RedisStore(redis_client, ttl=60)
    token = await store.try_lock(b"key", ttl=30)
    assert token is not None
    assert await store.try_lock(b"key", ttl=30) is None
    assert await store.is_locked(b"key")
    await store.unlock(b"key", "not-the-token")
    assert await store.is_locked(b"key")
    await store.unlock(b"key", token)
    assert not await store.is_locked(b"key")
    assert await store.try_lock(b"short", ttl=0.05) is not None
    import asyncio

    await asyncio.sleep(0.15)
    assert await store.try_lock(b"short", ttl=30) is not None


async def test_tiered_store_survives_the_server_going_away() -> None:
    with RedisServer() as private:
        connection = redis.asyncio.from_url(private.url)
        store = TieredStore(RedisStore(connection, ttl=60), MemoryStore(100, 60), timeout=0.5)
        await store.put(b"root", b"k1", Entry(1, (), "before the outage"))
        private.stop()
        assert await store.find(b"root", [b"s", b"k1"]) == (b"k1", Entry(1, (), "before the outage"))
        await store.put(b"root", b"k2", Entry(2, (), "during the outage"))
        assert await store.get(b"k2") == Entry(2, (), "during the outage")
        assert await store.try_lock(b"k3", 5) == "local"
        await connection.aclose()


async def test_a_remembered_failure_is_shared_and_expires(redis_client: redis.asyncio.Redis) -> None:
    one, other = RedisStore(redis_client, ttl=60), RedisStore(redis_client, ttl=60)
    assert await other.get_note(b"root") is None
    await one.set_note(b"root", "1", 0.2)
    assert await other.get_note(b"root") == "1"  # a replica sees another's note
    await asyncio.sleep(0.3)
    assert await other.get_note(b"root") is None


async def test_after_a_sentinel_failover_the_store_uses_the_promoted_master_at_once() -> None:
    """Issue 45: a replica that set Redis aside when its master died uses the promoted replica from
    its first call after the sentinels name it, not once its rest is over. The store's clock stands
    still within the rest, so only the sentinels' word can bring it back."""
    now = [0.0]
    with RedisSentinelServer() as sentinel:
        store = build_stores(ProcessConfig(redis_url=sentinel.url)).main
        assert isinstance(store, TieredStore) and isinstance(store.shared, RedisStore)
        store.clock = lambda: now[0]
        await store.shared.put(b"root", b"k1", Entry(1, (), "shared before the failover"))
        # on the replica too (in sync from the start: RedisSentinelServer._ready); WAIT's own bound
        # under the client's 5 s read timeout, so a slow ack fails this assert, not the read
        assert await store.shared.client.execute_command("WAIT", 1, 3000) == 1
        sentinel.master.kill()
        assert await store.get(b"k1") is None and store.outages == 1  # set aside: memory knows nothing
        watch = store.rest.watch
        assert watch is not None
        promoted = f"127.0.0.1:{sentinel.replica.port}"
        deadline = time.monotonic() + 30
        while await named_or_none(watch) != promoted:  # what the store's own sentinel client says
            assert time.monotonic() < deadline, "the sentinels promoted no replica"
            await asyncio.sleep(0.1)
        now[0] = DOWN_SECONDS / 2  # the rest not over
        assert await store.get(b"k1") == Entry(1, (), "shared before the failover")
        assert store.outages == 1 and store.fallbacks == 1
        await store.shared.client.aclose()


async def test_in_redis_a_tenant_past_its_quota_gives_up_its_own_oldest_records(
    redis_client: redis.asyncio.Redis,
) -> None:
    """Issue 45 item 9: Redis held whatever any tenant wrote. Now a tenant's records past its quota are
    deleted, oldest first, another tenant's never; the account expires with the tenant's records."""
    store = RedisStore(redis_client, ttl=60, tenant_bytes=2 * 1024 * 1024)
    record = "m" * 500_000
    assert await store.put_record(b"b-1", "what B's handle stands for", 60, "team:b")
    for number in range(20):
        assert await store.put_record(f"a-{number}".encode(), record, 60, "team:a")
    kept = [n for n in range(20) if await store.get_record(f"a-{n}".encode()) is not None]
    assert kept == [16, 17, 18, 19]
    assert await store.get_record(b"b-1") == "what B's handle stands for"
    keys, sizes = store.ledger.accounts("team:a")
    assert await redis_client.llen(keys) == 4
    assert int(await redis_client.hget(sizes, "=")) == 4 * (len(record) + 256)
    assert 0 < await redis_client.pttl(keys) <= 60_000 and 0 < await redis_client.pttl(sizes) <= 60_000
    assert "team:a" not in keys  # no key or team name in Redis's key space


async def named_or_none(watch: MasterWatch) -> str | None:
    """The master the sentinels name now; None while they cannot say (restarting, deciding)."""
    try:
        return await watch.named()
    except Exception:
        return None

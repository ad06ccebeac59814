"""RedisStore and TieredStore against a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio

from compact_hook.core.chain import Entry
from compact_hook.state.store import INDEX_LIMIT, MemoryStore, RedisStore, TieredStore
from tests.integration.redis_server import RedisServer


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

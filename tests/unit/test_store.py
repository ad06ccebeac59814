"""MemoryStore and the Redis-over-memory fallback (Redis itself is tested in tests/integration)."""

from collections.abc import Sequence
from pathlib import Path

import pytest

from compact_hook.core.chain import Entry
from compact_hook.settings.process import ProcessConfig
from compact_hook.state.backends import build_stores
from compact_hook.state.file_store import FileStore
from compact_hook.state.store import MemoryStore
from compact_hook.state.tiered import DOWN_SECONDS, PROBE_SECONDS, TieredStore
from tests.fakes import BrokenStore


def chain_of(*keys: bytes) -> list[bytes]:
    return [b"scope", *keys]


async def test_find_returns_the_longest_stored_prefix_of_this_chain() -> None:
    store = MemoryStore(100, 60)
    chain = chain_of(b"k1", b"k2", b"k3", b"k4")
    await store.put(b"root", b"k2", Entry(2, (), "short"))
    await store.put(b"root", b"k3", Entry(3, (), "long"))
    await store.put(b"root", b"zz", Entry(4, (), "another conversation's"))
    assert await store.find(b"root", chain) == (b"k3", Entry(3, (), "long"))
    assert await store.find(b"root", chain[:3]) == (b"k2", Entry(2, (), "short"))
    assert await store.find(b"other-root", chain) is None


async def test_entries_expire() -> None:
    now = [0.0]
    store = MemoryStore(100, ttl=10, clock=lambda: now[0])
    await store.put(b"root", b"k1", Entry(1, (), "s"))
    now[0] = 9.9
    assert await store.get(b"k1") is not None
    now[0] = 10.1
    assert await store.get(b"k1") is None
    assert await store.find(b"root", chain_of(b"k1")) is None


async def test_the_store_is_bounded() -> None:
    store = MemoryStore(max_entries=3, ttl=60)
    for i in range(10):
        await store.put(f"root{i}".encode(), f"k{i}".encode(), Entry(1, (), str(i)))
    assert len(store._entries) == 3 and len(store._index) == 3
    assert await store.get(b"k9") is not None and await store.get(b"k0") is None


async def test_a_failing_shared_store_falls_back_to_memory(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    broken = BrokenStore()
    store = TieredStore(broken, MemoryStore(100, 60), timeout=0.1, clock=lambda: now[0])  # type: ignore[arg-type]
    await store.put(b"root", b"k1", Entry(1, (), "kept locally"))
    assert await store.find(b"root", chain_of(b"k1")) == (b"k1", Entry(1, (), "kept locally"))
    assert await store.try_lock(b"k1", 5) == "local"
    assert await store.is_locked(b"k1") is False
    assert broken.calls == 1  # after the first failure Redis is left alone for a while
    assert "Redis store unavailable" in caplog.text
    now[0] = 100
    await store.get(b"k1")
    assert broken.calls == 2  # and tried again later


async def test_one_refused_command_costs_that_call_not_the_replicas_sharing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A command Redis refuses (a cross-slot read on a cluster, a MOVED from a cluster node named
    as one server) is answered from memory for that call alone; Redis is asked again at once."""
    from redis.exceptions import ClusterDownError, ResponseError

    refused = BrokenStore(ResponseError("MOVED 3999 127.0.0.1:7001"))
    store = TieredStore(refused, MemoryStore(100, 60), timeout=0.1)  # type: ignore[arg-type]
    await store.put(b"root", b"k1", Entry(1, (), "kept locally"))
    assert await store.find(b"root", chain_of(b"k1")) == (b"k1", Entry(1, (), "kept locally"))
    assert refused.calls == 2 and store.errors == 2 and store.outages == 0 and store.shared_available
    assert "ResponseError: MOVED 3999" in caplog.text and "redis+cluster://" in caplog.text
    down = BrokenStore(ClusterDownError("CLUSTERDOWN The cluster is down"))
    store = TieredStore(down, MemoryStore(100, 60), timeout=0.1)  # type: ignore[arg-type]
    await store.get(b"k1")
    await store.get(b"k1")
    assert down.calls == 1 and store.outages == 1 and not store.shared_available  # unreachable: set aside
    assert "ClusterDownError: CLUSTERDOWN" in caplog.text


async def test_a_longer_state_made_while_redis_was_away_is_kept_and_given_back_to_redis() -> None:
    """After an outage Redis knows less than this replica: the longer state wins and is shared, so
    the other replicas catch up with it rather than summarizing the same turns again."""
    redis, local = MemoryStore(100, 60), MemoryStore(100, 60)
    store = TieredStore(redis, local, timeout=0.1)
    chain = chain_of(b"k1", b"k2", b"k3")
    await redis.put(b"root", b"k1", Entry(1, (), "before the outage"))
    await local.put(b"root", b"k3", Entry(3, (), "made during the outage"))
    assert await store.find(b"root", chain) == (b"k3", Entry(3, (), "made during the outage"))
    assert await redis.find(b"root", chain) == (b"k3", Entry(3, (), "made during the outage"))
    await redis.put(b"root", b"k3", Entry(3, (), "another replica's, as long"))
    assert await store.find(b"root", chain) == (
        b"k3",
        Entry(3, (), "another replica's, as long"),
    )  # a tie: Redis's


class Watch:
    """Sentinels as a store sees them: the master its client last used, the one they name now."""

    def __init__(self, used: str | None) -> None:
        self.master = used
        self.named_now: str | None | BaseException = used
        self.asked = 0

    def used(self) -> str | None:
        return self.master

    async def named(self) -> str | None:
        self.asked += 1
        if isinstance(self.named_now, BaseException):
            raise self.named_now
        return self.named_now


class FailingOver(MemoryStore):
    """A Redis whose master is gone until ``down`` is cleared (its promoted replica answering)."""

    def __init__(self) -> None:
        super().__init__(100, 60)
        self.down = True
        self.calls = 0

    async def get(self, key: bytes) -> Entry | None:
        self.calls += 1
        if self.down:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        return await super().get(key)


async def test_behind_sentinels_the_rest_ends_as_soon_as_they_name_another_master() -> None:
    """The rest is for a Redis nobody can reach; once the sentinels promote a replica, the next call
    uses it (a second more in memory is a second in which each replica compacts alone)."""
    now = [0.0]
    redis, watch = FailingOver(), Watch("127.0.0.1:6379")
    store = TieredStore(redis, MemoryStore(100, 60), timeout=0.1, clock=lambda: now[0], watch=watch)
    await redis.put(b"root", b"k1", Entry(1, (), "on the promoted replica"))
    assert await store.get(b"k1") is None and store.outages == 1  # the master is gone: set aside
    for named in ("127.0.0.1:6379", None):  # the same master, then none while they decide
        watch.named_now = named
        now[0] += PROBE_SECONDS
        assert await store.get(b"k1") is None and redis.calls == 1
    await store.get(b"k1")
    assert watch.asked == 2  # at most once per PROBE_SECONDS
    redis.down, watch.named_now = False, "127.0.0.1:6380"
    now[0] += PROBE_SECONDS  # well within DOWN_SECONDS
    assert await store.get(b"k1") == Entry(1, (), "on the promoted replica")
    assert (redis.calls, store.outages, store.fallbacks) == (2, 1, 4) and store.shared_available


async def test_sentinels_that_cannot_answer_are_not_asked_again_in_that_rest() -> None:
    now = [0.0]
    watch = Watch("127.0.0.1:6379")
    watch.named_now = ConnectionError("sentinels unreachable")
    store = TieredStore(FailingOver(), MemoryStore(100, 60), timeout=0.1, clock=lambda: now[0], watch=watch)
    for _ in range(5):
        await store.get(b"k1")
        now[0] += PROBE_SECONDS
    assert watch.asked == 1 and store.outages == 1
    now[0] = DOWN_SECONDS + 1
    await store.get(b"k1")  # the rest over: Redis tried again (and set aside again)
    assert store.outages == 2


async def test_without_sentinels_a_rest_lasts_its_second() -> None:
    now = [0.0]
    redis = FailingOver()
    store = TieredStore(redis, MemoryStore(100, 60), timeout=0.1, clock=lambda: now[0])
    await store.get(b"k1")
    redis.down = False
    now[0] = DOWN_SECONDS / 2
    await store.get(b"k1")
    assert redis.calls == 1
    now[0] = DOWN_SECONDS
    await store.get(b"k1")
    assert redis.calls == 2


class SlowStore(BrokenStore):
    async def find(self, root: bytes, chain: Sequence[bytes]) -> None:
        import asyncio

        await asyncio.sleep(5)


async def test_a_slow_shared_store_times_out_into_memory() -> None:
    store = TieredStore(SlowStore(), MemoryStore(100, 60), timeout=0.05)  # type: ignore[arg-type]
    assert await store.find(b"root", chain_of(b"k1")) is None


def test_build_store_follows_the_settings() -> None:
    assert build_stores(ProcessConfig(store="off")).main is None
    assert isinstance(build_stores(ProcessConfig(store="memory")).main, MemoryStore)
    auto = build_stores(ProcessConfig(store="auto")).main  # no Redis: the file store, memory behind it
    assert isinstance(auto, TieredStore) and isinstance(auto.shared, FileStore)
    file = build_stores(ProcessConfig(store="file", store_dir="/nowhere/else")).main
    assert isinstance(file, TieredStore) and file.shared.folder == Path("/nowhere/else")  # type: ignore[attr-defined]
    nothing = build_stores(ProcessConfig(store="redis")).main  # nothing configured: warn, the file store
    assert isinstance(nothing, TieredStore) and isinstance(nothing.shared, FileStore)
    assert isinstance(build_stores(ProcessConfig(redis_url="redis://127.0.0.1:1/0")).main, TieredStore)


@pytest.mark.parametrize(
    ("url", "topology", "client"),
    [
        ("redis://127.0.0.1:1/0", "single", "Redis"),
        ("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", "cluster", "RedisCluster"),
        ("rediss+cluster://user:secret@node:7000", "cluster", "RedisCluster"),
        ("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/2", "sentinel", "Redis"),
    ],
)
def test_redis_url_names_one_server_a_cluster_or_a_sentinel_service(
    url: str, topology: str, client: str, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="compact_hook")
    store = build_stores(ProcessConfig(redis_url=url)).main
    assert isinstance(store, TieredStore)
    shared = store.shared
    assert shared.topology == topology and type(shared.client).__name__ == client  # type: ignore[attr-defined]
    assert f"store: Redis, {topology}" in caplog.text and "secret" not in caplog.text


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://redis:6379", "scheme must be one of"),
        ("redis+sentinel://127.0.0.1:26379", "names the service"),
        ("redis+cluster://", "no host"),
        ("redis+cluster://node:70x0,node:7001", "host:port"),
        ("redis+sentinel://127.0.0.1:26379/mymaster/zero", "database after the service"),
    ],
)
def test_a_redis_url_the_store_cannot_open_fails_at_start_up(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        ProcessConfig(redis_url=url)


def test_our_redis_url_wins_over_litellms_redis() -> None:
    class LiteLLMRedis:
        def init_async_client(self) -> object:
            raise AssertionError("LiteLLM's Redis must not be used when redis_url is set")

    store = build_stores(ProcessConfig(redis_url="redis://127.0.0.1:1/0"), LiteLLMRedis()).main
    assert isinstance(store, TieredStore)


def test_litellms_redis_is_used_when_ours_is_not_set() -> None:
    client = object()

    class LiteLLMRedis:
        def init_async_client(self) -> object:
            return client

    store = build_stores(ProcessConfig(), LiteLLMRedis()).main
    assert isinstance(store, TieredStore) and store.shared.client is client  # type: ignore[attr-defined]
    assert isinstance(build_stores(ProcessConfig(store="memory"), LiteLLMRedis()).main, MemoryStore)


@pytest.mark.parametrize(
    ("key", "value"), [("store", "disk"), ("store_max_entries", 0), ("log_level", "LOUD")]
)
def test_process_settings_are_validated(key: str, value: object) -> None:
    with pytest.raises(ValueError, match=key):
        ProcessConfig(**{key: value})  # type: ignore[arg-type]


RECORD = "m" * 500_000
"""A large memento (half a MiB), as a long conversation's compaction item stands for."""


async def test_one_tenants_many_large_records_push_out_its_own_oldest_never_anothers() -> None:
    """Issue 45 item 9: without a quota, one tenant's 64 large compactions evicted every other tenant's
    records on a replica without Redis (the store's byte budget is shared)."""
    store = MemoryStore(100, 60, max_bytes=8 * 1024 * 1024, tenant_bytes=2 * 1024 * 1024)
    assert await store.put_record(b"b-1", "what B's handle stands for", 60, "team:b")
    for number in range(64):
        assert await store.put_record(f"a-{number}".encode(), RECORD, 60, "team:a")
    assert await store.get_record(b"b-1") == "what B's handle stands for"
    assert store.tenants.total("team:a") <= store.tenants.quota
    kept = [n for n in range(64) if await store.get_record(f"a-{n}".encode()) is not None]
    assert kept == list(range(60, 64))  # A's newest four, within its 2 MiB
    assert store.record_chars == 4 * len(RECORD) + len("what B's handle stands for")


async def test_a_record_larger_than_the_quota_alone_is_not_kept_and_frees_nothing() -> None:
    store = MemoryStore(100, 60, tenant_bytes=100_000)
    assert await store.put_record(b"a-1", "small", 60, "team:a")
    assert not await store.put_record(b"a-2", RECORD, 60, "team:a")
    assert await store.get_record(b"a-1") == "small" and await store.get_record(b"a-2") is None


async def test_a_dropped_record_leaves_its_tenants_account() -> None:
    """Expired, evicted for bytes or rewritten: the account holds only what the store holds."""
    now = [0.0]
    store = MemoryStore(100, 60, clock=lambda: now[0], max_bytes=1_200_000, tenant_bytes=4 * 1024 * 1024)
    await store.put_record(b"a-1", RECORD, 1, "team:a")
    await store.put_record(b"a-1", RECORD, 60, "team:a")  # rewritten: counted once
    assert store.tenants.total("team:a") == len(RECORD) + 256
    await store.put_record(b"b-1", RECORD, 60, "team:b")
    await store.put_record(b"b-2", RECORD, 60, "team:b")  # over the store's bytes: its oldest (A's) goes
    assert store.tenants.total("team:a") == 0 and await store.get_record(b"a-1") is None
    now[0] = 61
    assert await store.get_record(b"b-2") is None and store.tenants.total("team:b") == len(RECORD) + 256

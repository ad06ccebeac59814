"""Two proxy replicas sharing state through the Redis large deployments run: a 3-master Redis Cluster
and a Sentinel-managed master, each named through ``COMPACT_REDIS_URL`` and through LiteLLM's own
settings (``general_settings.coordination_redis``), with real servers the suite starts.

What must hold on every topology: exactly one summary call per compaction event across both
replicas, on a conversation with several events, prepared or not; no store error in either log;
concurrent identical requests on both replicas pay one summary. A cluster node killed mid-run and
restarted costs only the cache: every request is answered, and sharing resumes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from compact_hook import count_tokens
from tests.integration.harness import SUMMARY_MARKER, ProxyProcess
from tests.integration.redis_server import RedisClusterServer, RedisSentinelServer
from tests.integration.stateful import (
    POINTS,
    THRESHOLD,
    TRANSCRIPT,
    ChatReplay,
    replay_through,
    stateful_config,
)
from tests.support import summaries_in

REPLAYED = POINTS[:60:2]
"""Every other turn of the first 60: three or more compaction events at the stateful window."""
STORE_TROUBLE = ("Redis store unavailable", "Redis store call failed")
WAITED = ("for another replica's summary; making it", "lock ended with no summary")
STEADY = {"COMPACT_REDIS_TIMEOUT_SECONDS": "5"}
"""What sharing is judged under: a Redis call counts as failed after 5 s, not the default 0.5 s. The
replicas share a 2-core machine with a 3-master cluster, Sentinel and the rest of the suite, where a
call can outlast 0.5 s; then each replica sets Redis aside and summarizes alone, as it should
(``COMPACT_REDIS_TIMEOUT_SECONDS`` at 0.002 and 0.004 s, prepared ahead on the cluster: 9 and 10
summary calls for 5 events, each replica saying so). That fail-open path is ``tests/unit/test_store.py``'s;
here, sharing itself."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServer]:
    with RedisClusterServer() as running:
        yield running


@pytest.fixture(scope="module")
def sentinel() -> Iterator[RedisSentinelServer]:
    with RedisSentinelServer() as running:
        yield running


def shared_by(
    setup: str, cluster: RedisClusterServer, sentinel: RedisSentinelServer
) -> tuple[dict[str, str], dict[str, Any]]:
    """The environment and the general settings a replica gets for ``setup``, on an empty Redis."""
    cluster.flush()
    sentinel.flush()
    if setup == "cluster, redis_url":
        return {"COMPACT_REDIS_URL": cluster.url, **STEADY}, {}
    if setup == "cluster, LiteLLM's settings":
        return dict(STEADY), {"coordination_redis": {"startup_nodes": cluster.startup_nodes}}
    if setup == "sentinel, redis_url":
        return {"COMPACT_REDIS_URL": sentinel.url, **STEADY}, {}
    return dict(STEADY), {
        "coordination_redis": {"sentinel_nodes": sentinel.sentinel_nodes, "service_name": sentinel.SERVICE}
    }


SETUPS = [
    "cluster, redis_url",
    "cluster, LiteLLM's settings",
    "sentinel, redis_url",
    "sentinel, LiteLLM's settings",
]


@pytest.mark.parametrize("prepare", [False, True], ids=["summary at the trigger", "prepared ahead"])
@pytest.mark.parametrize("setup", SETUPS)
def test_two_replicas_make_one_summary_call_per_compaction_event(
    setup: str,
    prepare: bool,
    standin: Any,
    cluster: RedisClusterServer,
    sentinel: RedisSentinelServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Events are the distinct summaries that reached the provider. Prepared ahead, the one
    prepared for a trigger the replay stops short of is paid and not (yet) applied: one more."""
    env, general = shared_by(setup, cluster, sentinel)
    config = stateful_config(standin, tmp_path_factory.mktemp("archive"), prepare, **general)
    with ProxyProcess(config, env=env) as first, ProxyProcess(config, env=env) as second:
        standin.reset()
        replay = replay_through(standin, [first, second], REPLAYED)
        logs = first.log_text() + second.log_text()
    applied = {summary for turn in replay.turns for summary in summaries_in(turn.forwarded)}
    calls = sum(SUMMARY_MARKER in json.dumps(r["body"]["messages"]) for r in standin.chat_requests)
    trouble = [line for line in logs.splitlines() if any(said in line for said in STORE_TROUBLE + WAITED)]
    assert not trouble  # before the counts: a replica on its own says why it summarized alone
    assert len(applied) >= 2
    assert calls - len(applied) in ((0, 1) if prepare else (0,)), (
        f"{calls} calls, {len(applied)} applied: {_trace(replay)}"
    )
    assert all(count_tokens(t.forwarded) < THRESHOLD for t in replay.turns)
    assert f"store: Redis, {setup.split(',')[0]}" in logs


@pytest.mark.parametrize("setup", ["cluster, redis_url", "sentinel, redis_url"])
def test_concurrent_identical_requests_on_both_replicas_make_one_summary(
    setup: str,
    standin: Any,
    cluster: RedisClusterServer,
    sentinel: RedisSentinelServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    env, general = shared_by(setup, cluster, sentinel)
    config = stateful_config(standin, tmp_path_factory.mktemp("archive"), **general)
    at_trigger = next(end for end in POINTS if count_tokens(TRANSCRIPT[:end]) >= THRESHOLD)
    messages = [{"role": "user", "content": f"A fresh task for the concurrency test ({setup})."}]
    messages += TRANSCRIPT[1:at_trigger]
    with ProxyProcess(config, env=env) as first, ProxyProcess(config, env=env) as second:
        standin.reset()
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda i: _status([first, second][i % 2], messages), range(8)))
        logs = first.log_text() + second.log_text()
    summaries = [r for r in standin.chat_requests if SUMMARY_MARKER in json.dumps(r["body"]["messages"])]
    trouble = [line for line in logs.splitlines() if any(said in line for said in STORE_TROUBLE + WAITED)]
    assert statuses == [200] * 8
    # one summary; a second only where a replica said why: Redis too slow to answer (set aside, each
    # replica on its own for a moment) or the holder's summary outlasted the wait (a slow machine)
    assert len(summaries) == 1 or (len(summaries) == 2 and trouble), (len(summaries), trouble)


def test_a_cluster_node_killed_and_restarted_costs_only_the_cache(
    standin: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Its own cluster: a node is stopped for a few turns (the cluster, needing all its slots,
    is down meanwhile), then restarted empty."""
    config = stateful_config(standin, tmp_path_factory.mktemp("archive"))
    third = len(REPLAYED) // 3
    with RedisClusterServer() as private:
        env = {"COMPACT_REDIS_URL": private.url}
        with ProxyProcess(config, env=env) as first, ProxyProcess(config, env=env) as second:
            before = replay_through(standin, [first, second], REPLAYED[:third])
            private.stop_node(1)
            time.sleep(3)  # the other masters see it gone: the cluster refuses commands, as in production
            during = replay_through(standin, [first, second], REPLAYED[third : 2 * third])
            private.start_node(1)
            after = replay_through(standin, [first, second], REPLAYED[2 * third :])
            logs = first.log_text() + second.log_text()
    turns = before.turns + during.turns + after.turns
    assert len(turns) == len(REPLAYED) and all(count_tokens(t.forwarded) < THRESHOLD for t in turns)
    assert "Redis store unavailable" in logs  # said, with the reason
    shared = [t.headers.get("x-compact-cache") for t in after.turns[1:]]
    assert "hit" in shared  # sharing resumed after the restart
    known = {s for turn in before.turns + during.turns for s in summaries_in(turn.forwarded)}
    new = {s for turn in after.turns for s in summaries_in(turn.forwarded)} - known
    assert after.summary_calls == len(new)  # once it is back, no turn is summarized twice


def _trace(replay: ChatReplay) -> str:
    """The turns where a summary was made, applied or prepared: number, cache, preparation, and the
    summary calls the stand-in saw meanwhile."""
    return "; ".join(
        f"{number} {turn.headers.get('x-compact-cache')} {turn.headers.get('x-compact-prepare')} {turn.summary_calls}"
        for number, turn in enumerate(replay.turns)
        if turn.summary_calls
        or turn.headers.get("x-compact-cache") in ("miss", "shared", "prepared")
        or "x-compact-prepare" in turn.headers
    )


def _status(proxy: ProxyProcess, messages: list[dict[str, Any]]) -> int:
    from tests.integration.wire_clients import chat_client

    client = chat_client(proxy)
    raw = client.chat.completions.with_raw_response.create(model="agent", messages=messages)  # type: ignore[arg-type]
    return raw.http_response.status_code

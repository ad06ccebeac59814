"""Stateful compaction through real proxies, a real Redis, and a replayed Claude Code session.

Each replay request is the history up to the next point where the client would call the
model (after user input or tool results), sent as the client would: the whole history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from compact_hook import count_tokens
from compact_hook.core.items import SUMMARY_PREFIX
from tests.integration.harness import SUMMARY_MARKER, ProxyProcess
from tests.integration.redis_server import RedisServer
from tests.integration.stateful import (
    POINTS,
    REPLAYED,
    THRESHOLD,
    TRANSCRIPT,
    ChatReplay,
    replay_through,
    stateful_config,
)
from tests.integration.wire_clients import chat_client, send_chat
from tests.support import forwarded_json, is_prefix, pairing_problems


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def single_replay(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> ChatReplay:
    standin.reset()
    with ProxyProcess(stateful_config(standin, tmp_path_factory.mktemp("archive"))) as proxy:
        return replay_through(standin, [proxy])


def test_a_replay_makes_one_summary_call_per_compaction_event(single_replay: ChatReplay) -> None:
    assert len(single_replay.events) >= 4
    assert single_replay.summary_calls == len(single_replay.events)
    assert {t.headers["x-compact-cache"] for t in single_replay.turns} == {"none", "hit", "miss"}
    for turn in single_replay.turns:
        assert int(turn.headers["x-compact-summary-calls"]) == turn.summary_calls


def test_every_forwarded_request_is_under_the_threshold_valid_and_made_of_kept_originals(
    single_replay: ChatReplay,
) -> None:
    for turn in single_replay.turns:
        forwarded = turn.forwarded
        assert count_tokens(forwarded) < THRESHOLD
        assert pairing_problems(forwarded) == []
        summaries = [
            i for i, m in enumerate(forwarded) if str(m.get("content", "")).startswith(SUMMARY_PREFIX)
        ]
        assert len(summaries) <= 1
        sent = TRANSCRIPT[: turn.end]
        if not summaries:
            assert [forwarded_json(m) for m in forwarded] == [forwarded_json(m) for m in sent]
            continue
        tail = forwarded[summaries[0] + 1 :]
        assert [forwarded_json(m) for m in tail] == [forwarded_json(m) for m in sent[len(sent) - len(tail) :]]
        originals = [forwarded_json(m) for m in sent]
        assert all(forwarded_json(m) in originals for m in forwarded[: summaries[0]])


def test_between_compaction_events_the_forwarded_prefix_is_stable(single_replay: ChatReplay) -> None:
    turns = single_replay.turns
    for previous, current in zip(turns, turns[1:], strict=False):
        if current.headers["x-compact-cache"] in ("hit", "none"):
            previous_sent = [forwarded_json(m) for m in previous.forwarded]
            assert is_prefix(previous_sent, [forwarded_json(m) for m in current.forwarded]), current.end


def test_two_proxies_sharing_redis_make_as_many_summaries_as_one(
    standin: Any, redis: RedisServer, tmp_path_factory: pytest.TempPathFactory, single_replay: ChatReplay
) -> None:
    config = stateful_config(standin, tmp_path_factory.mktemp("archive"))
    env = {"COMPACT_REDIS_URL": redis.url}
    with ProxyProcess(config, env=env) as first, ProxyProcess(config, env=env) as second:
        shared = replay_through(standin, [first, second])
    assert shared.summary_calls == single_replay.summary_calls
    assert [t.headers["x-compact-cache"] for t in shared.turns] == [
        t.headers["x-compact-cache"] for t in single_replay.turns
    ]
    for previous, current in zip(shared.turns, shared.turns[1:], strict=False):
        if current.headers["x-compact-cache"] == "hit":
            assert is_prefix(
                [forwarded_json(m) for m in previous.forwarded],
                [forwarded_json(m) for m in current.forwarded],
            )


def test_eight_concurrent_identical_requests_across_two_replicas_make_one_summary(
    standin: Any, redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = stateful_config(standin, tmp_path_factory.mktemp("archive"))
    env = {"COMPACT_REDIS_URL": redis.url}
    at_compaction = next(end for end in POINTS if count_tokens(TRANSCRIPT[:end]) >= THRESHOLD)
    messages = [{"role": "user", "content": "A fresh task for the concurrency test."}] + TRANSCRIPT[
        1:at_compaction
    ]
    with ProxyProcess(config, env=env) as first, ProxyProcess(config, env=env) as second:
        standin.reset()
        with ThreadPoolExecutor(8) as pool:
            turns = list(
                pool.map(lambda i: send_quietly(standin, [first, second][i % 2], messages), range(8))
            )
    summaries = [r for r in standin.chat_requests if SUMMARY_MARKER in json.dumps(r["body"]["messages"])]
    assert len(summaries) == 1
    assert all(status == 200 for status, _ in turns)
    assert sorted(headers["x-compact-cache"] for _, headers in turns).count("miss") == 1
    mains = [r["body"]["messages"] for r in standin.chat_requests if r not in summaries]
    assert len(mains) == 8 and all(m == mains[0] for m in mains)


def send_quietly(
    standin: Any, proxy: ProxyProcess, messages: list[dict[str, Any]]
) -> tuple[int, dict[str, str]]:
    raw = chat_client(proxy).chat.completions.with_raw_response.create(
        model="agent",
        messages=messages,  # type: ignore[arg-type]
    )
    return raw.http_response.status_code, dict(raw.headers)


def test_redis_stopped_mid_replay_never_fails_a_request(
    standin: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The proxy takes Redis from LiteLLM's own settings here (REDIS_HOST/REDIS_PORT)."""
    config = stateful_config(standin, tmp_path_factory.mktemp("archive"))
    with RedisServer() as server:
        env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(server.port)}
        with ProxyProcess(config, env=env) as proxy:
            half = len(REPLAYED) // 2
            first = replay_through(standin, [proxy], REPLAYED[:half])
            keys = redis_keys(server)
            assert any(key.startswith("compact_hook:v1:entry:") for key in keys)
            server.stop()
            second = replay_through(standin, [proxy], REPLAYED[half:])
            log = proxy.log_text()
    turns = first.turns + second.turns
    assert len(turns) == len(REPLAYED)
    assert all(count_tokens(t.forwarded) < THRESHOLD for t in turns)
    assert "Redis store unavailable" in log
    assert {t.headers["x-compact-cache"] for t in second.turns} >= {"hit"}


def redis_keys(server: RedisServer) -> list[str]:
    import redis as redis_lib

    client = redis_lib.Redis(host="127.0.0.1", port=server.port)
    try:
        return [key.decode() for key in client.keys("*")]
    finally:
        client.close()


def test_two_tenants_never_share_a_compaction(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    config = stateful_config(
        standin,
        tmp_path_factory.mktemp("archive"),
        custom_auth="tests.integration.tenant_auth.user_api_key_auth",
    )
    at_compaction = next(end for end in POINTS if count_tokens(TRANSCRIPT[:end]) >= THRESHOLD)
    messages = TRANSCRIPT[:at_compaction]
    with ProxyProcess(config) as proxy:
        first_a = send_chat(standin, proxy, "agent", messages, key="sk-tenant-a")
        first_b = send_chat(standin, proxy, "agent", messages, key="sk-tenant-b")
        again_a = send_chat(standin, proxy, "agent", messages, key="sk-tenant-a")
    assert (first_a.headers["x-compact-cache"], first_a.summary_calls) == ("miss", 1)
    assert (first_b.headers["x-compact-cache"], first_b.summary_calls) == ("miss", 1)
    assert (again_a.headers["x-compact-cache"], again_a.summary_calls) == ("hit", 0)

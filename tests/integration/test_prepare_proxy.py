"""Zero-wait compaction through real proxies, with the official SDKs, on all three surfaces.

The summary model is a stand-in that takes a second to answer; the clients pause between
turns like an agent running its tools. From ``prepare_ratio`` the proxy prepares the
compaction in the background, and the turn that reaches the trigger applies it ready
(``x-compact-cache: prepared``, no summary call on its path). A trigger that arrives while the
summary is still being made waits for that one (no second call); two replicas sharing Redis
prepare a conversation once; a proxy stopped mid-preparation exits promptly and leaves no lock.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib

from compact_hook import count_tokens
from tests.integration.harness import (
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    compact_info,
    standin_deployment,
)
from tests.integration.redis_server import RedisServer
from tests.integration.wire_clients import call
from tests.support import claude_code_sessions, is_prefix

WINDOW = 12_000
PREPARE_AT = int(0.75 * WINDOW)
SUMMARY_SECONDS = 1.0
PAUSE_SECONDS = 0.3
TURNS = 50
SESSIONS = {wire: (entries, points[:TURNS]) for wire, (entries, points) in claude_code_sessions().items()}
CHAT = SESSIONS["chat"][0]
AGENTS = {"chat": "chat-agent", "anthropic": "claude-agent", "responses": "codex-agent"}
SUMMARIZERS = {"chat": "chat-sum", "anthropic": "claude-sum", "responses": "codex-sum"}
ENTRIES = {"chat": "messages", "anthropic": "messages", "responses": "input"}
TIERS_OFF = {"tool_output_policy": "none", "clear_tool_results": False, "user_message_budget": 0}
"""For the tests that pick a turn by its size: without the cheap tiers it is what the client sent."""
PLAIN_WINDOW = 22_000
"""The plain agent's: the session has turns past its ``prepare_ratio`` and under its trigger."""
POINTS = claude_code_sessions()["chat"][1]
IN_ZONE = next(end for end in POINTS if count_tokens(CHAT[:end]) >= int(0.75 * PLAIN_WINDOW))
AT_TRIGGER = next(end for end in POINTS if count_tokens(CHAT[:end]) >= int(0.92 * PLAIN_WINDOW))
assert count_tokens(CHAT[:IN_ZONE]) < int(0.92 * PLAIN_WINDOW)


SUMMARIZED = {"context_window": WINDOW, "summary_context_window": 400_000, "summary_max_tokens": 800}


def prepare_config(upstream: StandinUpstream, archive: Path) -> dict[str, Any]:
    url, root = upstream.url, upstream.root_url
    return {
        "model_list": [
            standin_deployment(
                "chat-agent",
                url,
                "standin-strict-chat-agent",
                **compact_info(archive, SUMMARIZED, summary_model="chat-sum"),
            ),
            anthropic_deployment(
                "claude-agent",
                root,
                "standin-strict-claude-agent",
                **compact_info(archive, SUMMARIZED, summary_model="claude-sum"),
            ),
            standin_deployment(
                "codex-agent",
                url,
                "standin-strict-codex-agent",
                **compact_info(archive, SUMMARIZED, summary_model="codex-sum"),
            ),
            standin_deployment(
                "plain-agent",
                url,
                "standin-strict-plain-agent",
                **compact_info(
                    archive, SUMMARIZED, TIERS_OFF, summary_model="plain-sum", context_window=PLAIN_WINDOW
                ),
            ),
            standin_deployment("chat-sum", url, "standin-slow-chat-sum"),
            anthropic_deployment("claude-sum", root, "standin-slow-claude-sum"),
            standin_deployment("codex-sum", url, "standin-slow-codex-sum"),
            standin_deployment("plain-sum", url, "standin-slow-plain-sum"),
        ],
        "router_settings": {"num_retries": 0},
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }


@dataclass
class TimedTurn:
    headers: dict[str, str]
    seconds: float

    @property
    def cache(self) -> str:
        return self.headers.get("x-compact-cache", "")

    @property
    def cleared(self) -> str:
        return self.headers.get("x-compact-cleared", "")

    @property
    def is_event(self) -> bool:
        return (
            self.cache in ("prepared", "miss", "shared") and self.headers.get("x-compact-compacted") == "true"
        )


@pytest.fixture(scope="module")
def slow_upstream() -> Iterator[StandinUpstream]:
    with StandinUpstream(slow_seconds=SUMMARY_SECONDS) as server:
        yield server


@pytest.fixture(scope="module")
def prepare_proxy(
    slow_upstream: StandinUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    with ProxyProcess(prepare_config(slow_upstream, tmp_path_factory.mktemp("archive"))) as process:
        yield process


def calls_to(upstream: StandinUpstream, summarizer: str) -> int:
    return sum(1 for r in upstream.requests if summarizer in json.dumps((r["body"] or {}).get("model", "")))


def wait_for_summary_call(upstream: StandinUpstream, summarizer: str, before: int) -> None:
    deadline = time.monotonic() + 30
    while calls_to(upstream, summarizer) == before:
        assert time.monotonic() < deadline, "no summary call reached the provider"
        time.sleep(0.02)


def forwarded(upstream: StandinUpstream, wire: str) -> list[list[Any]]:
    agent = f"standin-strict-{AGENTS[wire]}"
    return [r["body"][ENTRIES[wire]] for r in upstream.requests if (r["body"] or {}).get("model") == agent]


def agent_session(proxy: ProxyProcess, wire: str) -> list[TimedTurn]:
    """The session turn by turn, as the agent sends it, pausing while its tools run."""
    entries, points = SESSIONS[wire]
    turns = []
    for number, end in enumerate(points):
        started = time.monotonic()
        headers, _ = call(proxy, wire, AGENTS[wire], entries[:end], stream=number % 2 == 1)
        turns.append(TimedTurn(headers, time.monotonic() - started))
        time.sleep(PAUSE_SECONDS)
    return turns


@pytest.fixture(scope="module")
def sessions(prepare_proxy: ProxyProcess, slow_upstream: StandinUpstream) -> dict[str, list[TimedTurn]]:
    """The three surfaces' sessions at once (three agents on one proxy)."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        running = {wire: pool.submit(agent_session, prepare_proxy, wire) for wire in SESSIONS}
        return {wire: future.result() for wire, future in running.items()}


@pytest.mark.parametrize("wire", ["chat", "anthropic", "responses"])
def test_compaction_turns_apply_a_summary_prepared_while_the_agent_worked(
    sessions: dict[str, list[TimedTurn]], slow_upstream: StandinUpstream, wire: str
) -> None:
    turns = sessions[wire]
    events = [number for number, turn in enumerate(turns) if turn.is_event]
    # foreseen: a turn since the previous event was past prepare_ratio, and no clearing batch about
    # to bring it back under (then nothing is prepared: the batch would leave the summary unused)
    foreseen = [
        number
        for previous, number in zip([0, *events], events, strict=False)
        if any("x-compact-prepare" in turn.headers for turn in turns[previous + 1 : number])
    ]
    assert foreseen
    for number in events:
        if number in foreseen:  # the turn before was past prepare_ratio: nothing waits on this one
            assert turns[number].cache == "prepared"
            assert turns[number].headers["x-compact-summary-calls"] == "0"
        else:  # one tool output jumped from under prepare_ratio past the trigger: compacted then
            assert int(turns[number - 1].headers["x-compact-tokens-after"]) < PREPARE_AT
    calls = calls_to(slow_upstream, SUMMARIZERS[wire])
    assert len(events) <= calls <= len(events) + 1  # unused at most: the last one (the session ends)


@pytest.mark.parametrize("wire", ["chat", "anthropic", "responses"])
def test_what_is_forwarded_changes_only_at_compaction_events(
    sessions: dict[str, list[TimedTurn]], slow_upstream: StandinUpstream, wire: str
) -> None:
    turns, bodies = sessions[wire], forwarded(slow_upstream, wire)
    assert len(bodies) == len(turns)
    for number in range(1, len(turns)):
        turn = turns[number]
        if not turn.is_event and turn.cleared == turns[number - 1].cleared:  # clearing moves in batches
            assert is_prefix(bodies[number - 1], bodies[number]), number
        assert int(turns[number].headers["x-compact-tokens-after"]) < int(0.92 * WINDOW)


def test_a_trigger_arriving_while_the_summary_is_made_waits_for_that_one(
    prepare_proxy: ProxyProcess, slow_upstream: StandinUpstream
) -> None:
    before = calls_to(slow_upstream, "plain-sum")
    racing = [{**CHAT[0], "content": "race: " + str(CHAT[0]["content"])}, *CHAT[1:]]
    zone, _ = call(prepare_proxy, "chat", "plain-agent", racing[:IN_ZONE])
    assert zone["x-compact-prepare"] == "started"
    trigger, _ = call(prepare_proxy, "chat", "plain-agent", racing[:AT_TRIGGER])
    assert trigger["x-compact-cache"] == "prepared" and trigger["x-compact-summary-calls"] == "0"
    assert trigger["x-compact-compacted"] == "true"
    assert calls_to(slow_upstream, "plain-sum") - before == 1


def test_two_replicas_on_redis_prepare_a_conversation_once(
    slow_upstream: StandinUpstream, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = prepare_config(slow_upstream, tmp_path_factory.mktemp("archive"))
    with RedisServer() as server:
        env = {"COMPACT_REDIS_URL": server.url}
        with ProxyProcess(config, env=env) as first, ProxyProcess(config, env=env) as second:
            before = calls_to(slow_upstream, "plain-sum")
            started, _ = call(first, "chat", "plain-agent", CHAT[:IN_ZONE])
            wait_for_summary_call(slow_upstream, "plain-sum", before)  # the first replica holds the lock
            seen, _ = call(second, "chat", "plain-agent", CHAT[:IN_ZONE])
            applied, _ = call(second, "chat", "plain-agent", CHAT[:AT_TRIGGER])
            assert started["x-compact-prepare"] == "started"
            assert seen["x-compact-prepare"] in ("running", "ready")  # the first replica is on it
            assert applied["x-compact-cache"] == "prepared" and applied["x-compact-summary-calls"] == "0"
            assert calls_to(slow_upstream, "plain-sum") - before == 1


def test_a_proxy_stopped_while_preparing_exits_promptly_and_leaves_no_lock(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with StandinUpstream(slow_seconds=60) as slow, RedisServer() as server:
        config = prepare_config(slow, tmp_path_factory.mktemp("archive"))
        proxy = ProxyProcess(config, env={"COMPACT_REDIS_URL": server.url}).start()
        try:
            headers, _ = call(proxy, "chat", "plain-agent", CHAT[:IN_ZONE])
            assert headers["x-compact-prepare"] == "started"
            wait_for_summary_call(slow, "plain-sum", 0)
            locks = redis_lib.Redis(port=server.port).keys("compact_hook:v1:prepared:lock:*")
            assert len(locks) == 1
            stopped = time.monotonic()
            proxy._signal(signal.SIGTERM)
            assert proxy._proc is not None
            try:
                code = proxy._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pytest.fail(
                    "the proxy did not exit within 20 s of SIGTERM while a summary was being prepared"
                )
            assert time.monotonic() - stopped < 20 and code != -signal.SIGKILL
            log = proxy.log_text()
        finally:
            proxy.stop()
        assert "being prepared was cancelled" in log
        assert "Task was destroyed but it is pending" not in log
        assert redis_lib.Redis(port=server.port).keys("compact_hook:v1:prepared:lock:*") == []

"""Hostile and faulty conditions through real proxies: malformed requests, forged metadata, a soak with
failing summaries and a Redis restart.

Malformed requests must get exactly the status they get from the same proxy without the hook; a client's
forged report must never come back as ours; and under concurrency, flaky summaries (failures and
timeouts) and Redis going away mid-run, no request may fail because of us, nothing orphaned may reach the
provider, and every compaction must be archived.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.harness import ProxyProcess, anthropic_deployment, standin_deployment
from tests.integration.redis_server import RedisServer
from tests.support import load_transcript, pairing_problems, replay_points

CALLBACK = {"callbacks": "compact_hook.proxy_handler_instance"}
COMPACT = {"compact": {"context_window": 1_000_000}}


def models(standin: Any) -> list[dict[str, Any]]:
    return [
        standin_deployment("agent", standin.url, "standin-agent", **COMPACT),
        anthropic_deployment("agent-claude", standin.root_url, "standin-claude", **COMPACT),
        standin_deployment("plain", standin.url, "standin-plain"),
    ]


@pytest.fixture(scope="module")
def twins(standin: Any) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    """The same proxy twice: with compact_hook, and without it."""
    base = {"model_list": models(standin), "router_settings": {"num_retries": 0}}
    with ProxyProcess({**base, "litellm_settings": CALLBACK}) as hooked, ProxyProcess(base) as plain:
        yield hooked, plain


def junk(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value, nested now and then."""
    kind = rng.randrange(9 if depth < 4 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False, 0, -1, 2**40, 3.5])
    if kind == 2:
        return rng.choice(
            ["", "user", "assistant", "tool", "x" * rng.randrange(1, 3000), "ü\u2028\x00", "\ud800"]
        )
    if kind == 3:
        return rng.choice(
            ["text", "tool_use", "tool_result", "image", "function_call", "reasoning", "input_text"]
        )
    if kind == 4:
        return rng.randrange(-5, 5)
    if kind in (5, 6):
        return [junk(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    keys = [
        "role",
        "content",
        "type",
        "text",
        "tool_calls",
        "tool_call_id",
        "id",
        "call_id",
        "output",
        "input",
    ]
    return {rng.choice(keys): junk(rng, depth + 1) for _ in range(rng.randrange(0, 5))}


def malformed(rng: random.Random) -> tuple[str, bytes]:
    """A request that is odd somewhere: entries of the wrong type or shape, odd blocks, odd fields."""
    route, model, key = rng.choice(
        [
            ("/v1/chat/completions", "agent", "messages"),
            ("/v1/messages", "agent-claude", "messages"),
            ("/v1/responses", "agent", "input"),
        ]
    )
    body: dict[str, Any] = {"model": model}
    shape = rng.randrange(4)
    if shape == 0:
        body[key] = junk(rng)
    elif shape == 1:
        body[key] = [junk(rng) for _ in range(rng.randrange(1, 6))]
    else:
        role = rng.choice(["user", "assistant", "tool", "system", "developer"])
        body[key] = [{"role": role, "content": junk(rng)} for _ in range(rng.randrange(1, 6))]
    if route == "/v1/messages" and rng.random() < 0.8:
        body["max_tokens"] = rng.choice([16, 0, "x", None])
    for field in ("tools", "system", "instructions", "metadata", "max_tokens"):
        if rng.random() < 0.15:
            body[field] = junk(rng)
    text = json.dumps(body, ensure_ascii=rng.random() < 0.5)
    if rng.random() < 0.03:
        text = text[: len(text) // 2]  # truncated JSON
    return route, text.encode("utf-8", "surrogatepass")


def post(client: httpx.Client, proxy: ProxyProcess, route: str, body: bytes) -> httpx.Response:
    headers = {**proxy.auth_headers, "content-type": "application/json"}
    return client.post(f"{proxy.url}{route}", content=body, headers=headers)


def test_malformed_requests_get_the_status_they_get_without_the_hook(
    twins: tuple[ProxyProcess, ProxyProcess],
) -> None:
    hooked, plain = twins
    rng = random.Random(20261122)
    requests = [malformed(rng) for _ in range(150)]
    differences = []
    with httpx.Client(timeout=60) as client:
        for route, body in requests:
            with_hook, without = post(client, hooked, route, body), post(client, plain, route, body)
            if with_hook.status_code != without.status_code:
                differences.append((route, body[:200], with_hook.status_code, without.status_code))
    assert differences == []
    log = hooked.log_text()
    assert "passed through: malformed" in log  # the hook did see malformed requests, and let them pass
    assert "internal error" not in log  # nothing fell through to the fail-open catch-all


@pytest.mark.parametrize("model", ["agent", "plain"])
def test_a_forged_report_with_a_header_injection_never_comes_back(
    twins: tuple[ProxyProcess, ProxyProcess], model: str
) -> None:
    hooked, _ = twins
    forged = {"compacted": True, "tokens_before": 999999, "reason": "x\r\nx-evil: 1", "cache": "ünï"}
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"compact_hook": forged, "compact_hook_internal": True},
    }
    with httpx.Client(timeout=60) as client:
        response = client.post(f"{hooked.base_url}/chat/completions", json=body, headers=hooked.auth_headers)
    assert response.status_code == 200 and "x-evil" not in response.headers
    assert response.headers.get("x-compact-tokens-before") != "999999"
    if model == "agent":
        assert response.headers["x-compact-reason"] == "below_threshold"
    else:
        assert not [name for name in response.headers if name.startswith("x-compact-")]


# -- the soak -------------------------------------------------------------------------------------------

SESSIONS = 30
TURNS = 10
WINDOW = 5000
TRANSCRIPT = load_transcript("tau_bench_airline_gpt4o_task2_trial1.json")
POINTS = replay_points(TRANSCRIPT)


def session_turns(session: int) -> list[list[dict[str, Any]]]:
    """Ten growing requests of one session (its own task text makes it a conversation of its own)."""
    first = next(k for k, m in enumerate(TRANSCRIPT) if m["role"] == "user")
    messages = [dict(m) for m in TRANSCRIPT]
    messages[first] = {**messages[first], "content": f"[session {session}] {messages[first]['content']}"}
    picks = [POINTS[round(k * (len(POINTS) - 1) / (TURNS - 1))] for k in range(TURNS)]
    return [messages[:end] for end in picks]


def soak_config(standin: Any, archive: Path) -> dict[str, Any]:
    compact = {
        "context_window": WINDOW,
        "summary_model": "summarizer",
        "summary_context_window": 100_000,
        "summary_max_tokens": 300,
        "summary_timeout_seconds": 1,
        "summary_deadline_seconds": 2.5,
        "max_retries": 1,
        "retry_backoff_seconds": 0,
        "archive_dir": str(archive),
    }
    return {
        "model_list": [
            standin_deployment("agent", standin.url, "standin-strict-soak", compact=compact),
            standin_deployment("summarizer", standin.url, "standin-flaky-summarizer"),
        ],
        "router_settings": {"num_retries": 0},
        "litellm_settings": CALLBACK,
    }


def test_a_soak_with_flaky_summaries_and_a_redis_restart_fails_no_request_and_loses_nothing(
    standin: Any, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    results: list[tuple[int, int, httpx.Response]] = []
    lock = threading.Lock()
    with RedisServer() as redis_server:
        env = {"COMPACT_REDIS_URL": redis_server.url}
        config = soak_config(standin, archive)
        with ProxyProcess(config, env=env) as first, ProxyProcess(config, env=env) as second:
            proxies = [first, second]
            done = threading.Event()

            def restart_redis_mid_run() -> None:
                while len(results) < SESSIONS * TURNS // 2 and not done.is_set():
                    time.sleep(0.05)
                redis_server.stop()
                time.sleep(1.0)
                redis_server.start()

            def run_session(session: int) -> None:
                with httpx.Client(timeout=120) as client:
                    for turn, messages in enumerate(session_turns(session)):
                        proxy = proxies[(session + turn) % 2]
                        response = client.post(
                            f"{proxy.base_url}/chat/completions",
                            json={"model": "agent", "messages": messages, "user": f"session-{session}"},
                            headers=proxy.auth_headers,
                        )
                        with lock:
                            results.append((session, turn, response))

            restarter = threading.Thread(target=restart_redis_mid_run, daemon=True)
            restarter.start()
            with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
                list(pool.map(run_session, range(SESSIONS)))
            done.set()
            restarter.join(timeout=30)
            logs = first.log_text() + second.log_text()
    failed = [(s, t, r.status_code, r.text[:300]) for s, t, r in results if r.status_code != 200]
    assert len(results) == SESSIONS * TURNS and failed == []
    forwarded = [
        r["body"]["messages"]
        for r in standin.chat_requests
        if r["body"].get("model") == "standin-strict-soak"
    ]
    assert len(forwarded) == SESSIONS * TURNS
    assert all(pairing_problems(messages) == [] for messages in forwarded)
    headers = [r.headers for _, _, r in results]
    compactions = [h for h in headers if h.get("x-compact-cache") in ("miss", "prepared")]
    assert compactions, "the soak never compacted"
    assert all(h.get("x-compact-archive") == "written" for h in compactions)
    assert not [h for h in headers if h.get("x-compact-archive") == "failed"]
    # the flaky summaries were met: on a request's path, or by a compaction prepared in the background
    # (failed there, or failed once and retried: the retry is logged as a failed attempt)
    met_on_path = any(h.get("x-compact-reason") == "summary_failed" for h in headers)
    retried = re.search(r"summary attempt \d+ failed", logs) is not None
    assert met_on_path or retried or "preparing a compaction failed" in logs
    assert "Redis store unavailable" in logs
    assert list(archive.rglob("compact-*.json"))

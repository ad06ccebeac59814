"""Recovery and control through a real proxy, with the official SDKs, on all three surfaces.

A stand-in provider whose real limit (9,000 of its tokens) is far below the window we are
configured with (16,384) refuses long requests with its own context-length 400; the proxy
learns the limit and retries, so every turn of a replayed session answers 200. Per-request
control (header, request metadata, key and team metadata), ``/compact`` answered by the proxy
itself, and the summary model's circuit breaker are exercised the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import (
    SUMMARY_MARKER,
    ProxyProcess,
    anthropic_deployment,
    standin_deployment,
    standin_upstream,
)
from tests.integration.wire_clients import call
from tests.support import (
    ANTHROPIC,
    CHAT,
    RESPONSES,
    anthropic_replay_points,
    chat_to_responses,
    load_transcript,
    pairing_problems,
    replay_points,
    responses_replay_points,
)

WINDOW = 16_384
LIMIT = 9_000
CHAT_MESSAGES = load_transcript("claude_code_fa812bfe_pre_compact.json")
ANTHROPIC_MESSAGES = load_transcript("claude_code_fa812bfe_pre_compact.json", "anthropic")["messages"]
RESPONSES_ITEMS = chat_to_responses(CHAT_MESSAGES)
REPLAYS = {
    "chat": (CHAT_MESSAGES, replay_points(CHAT_MESSAGES)),
    "anthropic": (ANTHROPIC_MESSAGES, anthropic_replay_points(ANTHROPIC_MESSAGES)),
    "responses": (RESPONSES_ITEMS, responses_replay_points(RESPONSES_ITEMS)),
}
SURFACES = {
    "chat": standin_upstream.CHAT,
    "anthropic": standin_upstream.MESSAGES,
    "responses": standin_upstream.RESPONSES,
}
PATHS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}
LIMITED = {"chat": "chat-limited", "anthropic": "claude-limited", "responses": "codex-limited"}
FORMATS = {"chat": CHAT, "anthropic": ANTHROPIC, "responses": RESPONSES}
ENTRIES = {"chat": "messages", "anthropic": "messages", "responses": "input"}


def compact(archive: Path, summary_model: str, **extra: Any) -> dict[str, Any]:
    settings = {
        "context_window": WINDOW,
        "archive_dir": str(archive),
        "retry_backoff_seconds": 0,
        "summary_model": summary_model,
        "summary_context_window": 400_000,
        "summary_max_tokens": 1000,
    }
    return {"compact": {**settings, **extra}}


@pytest.fixture(scope="module")
def proxy(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    archive = tmp_path_factory.mktemp("archive")
    url, root = standin.url, standin.root_url
    config = {
        "model_list": [
            standin_deployment(
                "chat-limited", url, f"standin-strict-limit{LIMIT}-chat", **compact(archive, "gpt-sum")
            ),
            anthropic_deployment(
                "claude-limited",
                root,
                f"standin-strict-limit{LIMIT}-claude",
                **compact(archive, "claude-sum"),
            ),
            standin_deployment(
                "codex-limited", url, f"standin-strict-limit{LIMIT}-codex", **compact(archive, "gpt-sum")
            ),
            standin_deployment("chat-agent", url, "standin-strict-chat-agent", **compact(archive, "gpt-sum")),
            anthropic_deployment(
                "claude-agent", root, "standin-strict-claude-agent", **compact(archive, "claude-sum")
            ),
            standin_deployment(
                "chat-broken",
                url,
                "standin-strict-chat-broken",
                **compact(archive, "broken-sum", max_retries=0),
            ),
            standin_deployment("gpt-sum", url, "standin-gpt-sum"),
            anthropic_deployment("claude-sum", root, "standin-claude-sum"),
            standin_deployment("broken-sum", url, "standin-fail-broken-sum"),
        ],
        "router_settings": {"num_retries": 0},
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
        "general_settings": {"custom_auth": "tests.integration.tenant_auth.user_api_key_auth"},
    }
    with ProxyProcess(config) as process:
        yield process


def provider_tokens(wire: str, body: dict[str, Any]) -> int:
    """What the stand-in counts for a request (its limit applies to this)."""
    return standin_upstream.approx_tokens(sum(len(t) for t in SURFACES[wire].texts(body)))


def summary_calls(standin: Any, since: int) -> list[dict[str, Any]]:
    return [r["body"] for r in standin.requests[since:] if SUMMARY_MARKER in json.dumps(r["body"] or {})]


@pytest.mark.parametrize("wire", ["chat", "anthropic", "responses"])
def test_a_provider_with_a_lower_real_limit_answers_every_turn(
    standin: Any, proxy: ProxyProcess, wire: str
) -> None:
    entries, points = REPLAYS[wire]
    model = LIMITED[wire]
    since = len(standin.requests)
    headers = []
    for number, end in enumerate(points):
        sent, _ = call(proxy, wire, model, entries[:end], stream=number % 2 == 1, key="sk-tenant-replay")
        headers.append(sent)
    upstream = [
        r["body"]
        for r in standin.requests[since:]
        if r["path"] == PATHS[wire] and f"limit{LIMIT}" in (r["body"] or {}).get("model", "")
    ]
    refused = [body for body in upstream if provider_tokens(wire, body) > LIMIT]
    assert len(headers) == len(points)  # every turn answered (the SDK raises on a 400)
    assert 1 <= len(refused) <= 2, [provider_tokens(wire, b) for b in refused]
    assert sum(1 for h in headers if h.get("x-compact-recovered") == "true") == len(refused)
    assert all(pairing_problems(body[ENTRIES[wire]], FORMATS[wire]) == [] for body in upstream)
    assert all(
        "fallbacks" not in body
        and "context_window_fallbacks" not in body
        and "compact_hook_retry" not in body
        for body in upstream
    )

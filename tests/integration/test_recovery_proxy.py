"""Recovery and control through a real proxy, with the official SDKs, on all four surfaces.

A stand-in provider whose real limit (9,000 of its tokens) is far below the window we are
configured with (16,384) refuses long requests with its own context-length 400; the proxy
learns the limit and retries, so every turn of a replayed session answers 200. Per-request
control (header, request metadata, key and team metadata), ``/compact`` answered by the proxy
itself, and the summary model's circuit breaker are exercised the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.harness import (
    SUMMARY_MARKER,
    ProxyProcess,
    anthropic_deployment,
    compact_info,
    gemini_deployment,
    standin_deployment,
)
from tests.integration.wire_clients import call
from tests.support import (
    ANTHROPIC,
    CHAT,
    GOOGLE,
    RESPONSES,
    anthropic_replay_points,
    chat_to_google,
    chat_to_responses,
    google_replay_points,
    load_transcript,
    pairing_problems,
    replay_points,
    responses_replay_points,
    tokens_of,
)

WINDOW = 16_384
LIMIT = 9_000
CHAT_MESSAGES = load_transcript("claude_code_fa812bfe_pre_compact.json")
ANTHROPIC_MESSAGES = load_transcript("claude_code_fa812bfe_pre_compact.json", "anthropic")["messages"]
RESPONSES_ITEMS = chat_to_responses(CHAT_MESSAGES)
GEMINI_CONTENTS = chat_to_google(CHAT_MESSAGES)
REPLAYS = {
    "chat": (CHAT_MESSAGES, replay_points(CHAT_MESSAGES)),
    "anthropic": (ANTHROPIC_MESSAGES, anthropic_replay_points(ANTHROPIC_MESSAGES)),
    "responses": (RESPONSES_ITEMS, responses_replay_points(RESPONSES_ITEMS)),
    "google": (GEMINI_CONTENTS, google_replay_points(GEMINI_CONTENTS)),
}
PATHS = {
    "chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
    "google": "GenerateContent",  # :generateContent and :streamGenerateContent
}
LIMITED = {
    "chat": "chat-limited",
    "anthropic": "claude-limited",
    "responses": "codex-limited",
    "google": "gemini-limited",
}
COUNTS_LESS = "bill080"
"""In a stand-in model's name: it bills 0.8 of what we count (within ``count_floor``: its usage counts
our requests, and its refusal says it counted less than we did)."""
FORMATS = {"chat": CHAT, "anthropic": ANTHROPIC, "responses": RESPONSES, "google": GOOGLE}
ENTRIES = {"chat": "messages", "anthropic": "messages", "responses": "input", "google": "contents"}
TIERS_OFF = {"tool_output_policy": "none", "clear_tool_results": False, "user_message_budget": 0}
"""Control is about the summary: without the cheap tiers a conversation's size is what it sent."""


RECOVERY_TURNS = 40
"""The refusal comes at turn 5; by turn 40 the session is 2-3 windows long, compacted several times
under the learned limit (the whole 127-turn session took 142 s on four wires)."""
SUMMARIZED = {"context_window": WINDOW, "summary_context_window": 400_000, "summary_max_tokens": 1000}


@pytest.fixture(scope="module")
def recovery_proxy(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    archive = tmp_path_factory.mktemp("archive")
    url, root = standin.url, standin.root_url
    config = {
        "model_list": [
            standin_deployment(
                "chat-limited",
                url,
                f"standin-strict-limit{LIMIT}-chat",
                **compact_info(archive, SUMMARIZED, summary_model="gpt-sum"),
            ),
            anthropic_deployment(
                "claude-limited",
                root,
                f"standin-strict-limit{LIMIT}-claude",
                **compact_info(archive, SUMMARIZED, summary_model="claude-sum"),
            ),
            standin_deployment(
                "codex-limited",
                url,
                f"standin-strict-limit{LIMIT}-codex",
                **compact_info(archive, SUMMARIZED, summary_model="gpt-sum"),
            ),
            gemini_deployment(
                "gemini-limited",
                root,
                f"gemini-3-standin-strict-limit{LIMIT}-gemini",
                **compact_info(archive, SUMMARIZED, summary_model="gpt-sum"),
            ),
            *(
                deployment(
                    f"{group}-less", base, f"{prefix}-strict-limit{LIMIT}-{COUNTS_LESS}-{group}", **info
                )
                for group, deployment, base, prefix in (
                    ("chat-limited", standin_deployment, url, "standin"),
                    ("claude-limited", anthropic_deployment, root, "standin"),
                    ("codex-limited", standin_deployment, url, "standin"),
                    ("gemini-limited", gemini_deployment, root, "gemini-3-standin"),
                )
                for info in [compact_info(archive, SUMMARIZED, summary_model="gpt-sum")]
            ),
            standin_deployment(
                "chat-agent",
                url,
                "standin-strict-chat-agent",
                **compact_info(archive, SUMMARIZED, TIERS_OFF, summary_model="gpt-sum"),
            ),
            gemini_deployment(
                "gemini-agent",
                root,
                "gemini-3-standin-strict-gemini-agent",
                **compact_info(archive, SUMMARIZED, TIERS_OFF, summary_model="gpt-sum"),
            ),
            anthropic_deployment(
                "claude-agent",
                root,
                "standin-strict-claude-agent",
                **compact_info(archive, SUMMARIZED, TIERS_OFF, summary_model="claude-sum"),
            ),
            standin_deployment(
                "chat-broken",
                url,
                "standin-strict-chat-broken",
                **compact_info(archive, SUMMARIZED, summary_model="broken-sum", max_retries=0),
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


def summary_requests_since(standin: Any, since: int) -> list[dict[str, Any]]:
    return [r["body"] for r in standin.requests[since:] if SUMMARY_MARKER in json.dumps(r["body"] or {})]


@pytest.mark.parametrize("counts", ["as we do", "less than we do"])
@pytest.mark.parametrize("wire", ["chat", "anthropic", "responses", "google"])
def test_a_provider_with_a_lower_real_limit_refuses_at_most_once_and_answers_every_turn(
    standin: Any, recovery_proxy: ProxyProcess, wire: str, counts: str
) -> None:
    """At most once: the retry fits (a provider that counts less than we do is not followed down on
    it), and the limit is learned — the group's where the error states it, the key's where it does not
    (Responses)."""
    entries, points = REPLAYS[wire][0], REPLAYS[wire][1][:RECOVERY_TURNS]
    model = LIMITED[wire] if counts == "as we do" else f"{LIMITED[wire]}-less"
    since = len(standin.requests)
    headers = []
    for number, end in enumerate(points):
        sent, _ = call(
            recovery_proxy, wire, model, entries[:end], stream=number % 2 == 1, key="sk-tenant-replay"
        )
        headers.append(sent)
    records = [
        r
        for r in standin.requests[since:]
        if r["path"].split("?")[0].endswith(PATHS[wire])
        and f"limit{LIMIT}" in (r["body"] or {}).get("model", "")
    ]
    upstream = [r["body"] for r in records]
    refused = [r["billed"] for r in records if r["billed"] > LIMIT]  # what the provider counted
    assert len(headers) == len(points)  # every turn answered (the SDK raises on a 400)
    assert len(refused) <= 1, refused  # at most once: the limit is learned from it
    # (a provider counting less than we do may refuse none: the windows stay where the prior puts them)
    assert len(refused) == 1 or counts == "less than we do", refused
    assert sum(1 for h in headers if h.get("x-compact-recovered") == "true") == len(refused)
    assert all(pairing_problems(body[ENTRIES[wire]], FORMATS[wire]) == [] for body in upstream)
    assert all(
        "fallbacks" not in body
        and "context_window_fallbacks" not in body
        and "compact_hook_retry" not in body
        for body in upstream
    )


# -- control ---------------------------------------------------------------------------------------------


def prefix(wire: str, low: int, high: int) -> list[Any]:
    """The first replay point of the session whose size (our tokens) is in [low, high]."""
    entries, points = REPLAYS[wire]
    for end in points:
        size = tokens_of({ENTRIES[wire]: entries[:end]}, FORMATS[wire], "o200k_base")
        if low <= size <= high:
            return entries[:end]
    raise AssertionError(f"no {wire} prefix of {low}-{high} tokens")


SHORT_CHAT = prefix("chat", 12_000, 13_000)
"""Under the trigger (15,073 tokens): nothing is compacted unless asked."""


def test_force_and_focus_through_the_header_and_the_request_metadata(
    standin: Any, recovery_proxy: ProxyProcess
) -> None:
    since = len(standin.requests)
    auto, _ = call(recovery_proxy, "chat", "chat-agent", SHORT_CHAT)
    forced, _ = call(recovery_proxy, "chat", "chat-agent", SHORT_CHAT, extra_headers={"x-compact": "force"})
    assert auto["x-compact-compacted"] == "false"
    assert forced["x-compact-compacted"] == "true" and forced["x-compact-cache"] == "miss"
    focus = {"metadata": {"compact": {"mode": "force", "focus": "the failing bead tests"}}}
    focused, _ = call(
        recovery_proxy, "chat", "chat-agent", SHORT_CHAT, key="sk-tenant-focus", extra_body=focus
    )
    assert focused["x-compact-compacted"] == "true"
    requests = summary_requests_since(standin, since)
    assert any("Pay particular attention to: the failing bead tests" in json.dumps(r) for r in requests)


@pytest.mark.parametrize("wire", ["anthropic", "responses"])
def test_force_and_off_through_litellm_metadata(
    standin: Any, recovery_proxy: ProxyProcess, wire: str
) -> None:
    entries, points = REPLAYS[wire]
    model = "claude-agent" if wire == "anthropic" else "chat-agent"
    short = prefix(wire, 12_000, 13_000)
    forced, _ = call(
        recovery_proxy, wire, model, short, extra_body={"litellm_metadata": {"compact": "force"}}
    )
    assert forced["x-compact-compacted"] == "true"
    long = entries[: points[-1]]
    since = len(standin.requests)
    off, _ = call(recovery_proxy, wire, model, long, extra_body={"litellm_metadata": {"compact": "off"}})
    assert off["x-compact-reason"] == "off" and off["x-compact-compacted"] == "false"
    [forwarded] = [r["body"] for r in standin.requests[since:] if r["path"] == PATHS[wire]]
    assert forwarded[ENTRIES[wire]] == long  # exactly as sent, though far over the window


def test_a_keys_and_a_teams_metadata_control_their_requests(
    standin: Any, recovery_proxy: ProxyProcess
) -> None:
    long = CHAT_MESSAGES[: replay_points(CHAT_MESSAGES)[-1]]
    opted_out, _ = call(recovery_proxy, "chat", "chat-agent", long, key="sk-tenant-optout")
    assert opted_out["x-compact-reason"] == "off"
    # the request says more than its key: force wins over the key's off
    forced, _ = call(
        recovery_proxy,
        "chat",
        "chat-agent",
        SHORT_CHAT,
        key="sk-tenant-optout",
        extra_headers={"x-compact": "force"},
    )
    assert forced["x-compact-compacted"] == "true"
    since = len(standin.requests)
    focused, _ = call(recovery_proxy, "chat", "chat-agent", SHORT_CHAT, key="sk-tenant-focused")
    assert focused["x-compact-compacted"] == "true"
    assert any("the database migration" in json.dumps(r) for r in summary_requests_since(standin, since))
    # a team's settings override the model's: a trigger at 20% of the window compacts a short conversation
    medium = prefix("chat", 5_000, 6_000)
    plain, _ = call(recovery_proxy, "chat", "chat-agent", medium, key="sk-tenant-plain")
    eager, _ = call(recovery_proxy, "chat", "chat-agent", medium, key="sk-tenant-eager")
    assert plain["x-compact-compacted"] == "false" and eager["x-compact-compacted"] == "true"


# -- /compact --------------------------------------------------------------------------------------------


def with_command(wire: str, entries: list[Any], command: str) -> list[Any]:
    if wire == "responses":
        return [*entries, {"type": "message", "role": "user", "content": command}]
    if wire == "google":
        return [*entries, {"role": "user", "parts": [{"text": command}]}]
    return [*entries, {"role": "user", "content": command}]


def with_reply(wire: str, entries: list[Any], reply: str, question: str) -> list[Any]:
    if wire == "responses":
        answer = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": reply}]}
        return [*entries, answer, {"type": "message", "role": "user", "content": question}]
    if wire == "google":
        return [
            *entries,
            {"role": "model", "parts": [{"text": reply}]},
            {"role": "user", "parts": [{"text": question}]},
        ]
    return [*entries, {"role": "assistant", "content": reply}, {"role": "user", "content": question}]


@pytest.mark.edge  # LiteLLM 1.109 answers a streamed /v1/messages refusal itself: /compact on both
@pytest.mark.parametrize(
    ("wire", "stream"),
    [
        ("chat", False),
        ("chat", True),
        ("anthropic", False),
        ("anthropic", True),
        ("responses", False),
        ("responses", True),
        ("google", False),  # streamed, LiteLLM calls the provider whatever we say (see the test below)
    ],
)
def test_slash_compact_is_answered_by_the_proxy_and_the_next_turn_continues_from_it(
    standin: Any, recovery_proxy: ProxyProcess, wire: str, stream: bool
) -> None:
    entries, points = REPLAYS[wire]
    model = {"anthropic": "claude-agent", "google": "gemini-agent"}.get(wire, "chat-agent")
    history = prefix(wire, 13_500, 14_000) if stream else prefix(wire, 12_000, 13_000)
    key = f"sk-tenant-command-{wire}-{stream}"  # a tenant of its own: nothing stored by the other tests
    since = len(standin.requests)
    _, reply = call(
        recovery_proxy,
        wire,
        model,
        with_command(wire, history, "/compact keep the bead ids"),
        stream=stream,
        key=key,
    )
    made = standin.requests[since:]
    assert reply.startswith("Compacted: ") and "messages summarized" in reply
    assert [
        r
        for r in made
        if r["path"].split("?")[0].endswith(PATHS[wire]) and SUMMARY_MARKER not in json.dumps(r["body"])
    ] == []
    [summary_request] = summary_requests_since(standin, since)  # one summary call, and no call of the model
    assert "Pay particular attention to: keep the bead ids" in json.dumps(summary_request)
    since = len(standin.requests)
    following = with_reply(wire, with_command(wire, history, "/compact keep the bead ids"), reply, "go on")
    headers, _ = call(recovery_proxy, wire, model, following, stream=stream, key=key)
    assert summary_requests_since(standin, since) == []
    assert headers["x-compact-compacted"] == "true" and headers["x-compact-cache"] == "hit"


@pytest.mark.edge
def test_slash_compact_on_a_gemini_stream_compacts_now_and_goes_on_to_the_model(
    standin: Any, recovery_proxy: ProxyProcess
) -> None:
    history = prefix("google", 12_000, 13_000)  # under the trigger: compacted only because asked
    since = len(standin.requests)
    headers, reply = call(
        recovery_proxy,
        "google",
        "gemini-agent",
        with_command("google", history, "/compact keep the bead ids"),
        stream=True,
        key="sk-tenant-gemini-stream",
    )
    assert reply.startswith("stand-in reply") and headers["x-compact-compacted"] == "true"
    [forwarded] = [
        r["body"]
        for r in standin.requests[since:]
        if r["path"].split("?")[0].endswith(":streamGenerateContent")
    ]
    assert forwarded["contents"][-1]["parts"][-1]["text"] == "/compact keep the bead ids"
    [summary_request] = summary_requests_since(standin, since)
    assert "Pay particular attention to: keep the bead ids" in json.dumps(summary_request)


# -- the breaker -----------------------------------------------------------------------------------------


def test_a_summary_model_that_always_fails_is_left_alone_after_three_failures(
    standin: Any, recovery_proxy: ProxyProcess
) -> None:
    """Six different conversations over the trigger, a summary model that always fails: three attempts
    (no retries configured), then the breaker is open and the others are forwarded without calling it."""
    long = CHAT_MESSAGES[: replay_points(CHAT_MESSAGES)[-1]]
    since = len(standin.requests)
    reasons = []
    for number in range(6):
        variant = [{"role": "user", "content": f"conversation {number}"}, *long[1:]]
        headers, _ = call(recovery_proxy, "chat", "chat-broken", variant, key="sk-tenant-breaker")
        reasons.append(headers["x-compact-reason"])
    attempts = [r for r in standin.requests[since:] if "broken-sum" in (r["body"] or {}).get("model", "")]
    assert len(attempts) == 3
    assert reasons[:3] == ["summary_failed"] * 3 and reasons[3:] == ["breaker_open"] * 3

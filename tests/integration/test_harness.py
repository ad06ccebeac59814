"""Tests of the test infrastructure itself: if these fail, no end-to-end result can be trusted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.integration.harness import (
    STANDIN_PATH,
    SUMMARY_MARKER,
    ProxyDied,
    ProxyProcess,
    StandinUpstream,
    free_port,
    proxy_start_failure,
    standin_deployment,
    standin_upstream,
)
from tests.integration.launcher import Forked
from tests.integration.wire_clients import openai_sdk

HEADINGS = standin_upstream.SUMMARY_HEADINGS
MESSAGES: Any = [  # Any: the openai SDK types messages as TypedDicts
    {"role": "system", "content": "You are terse. Ünïcödé → ✓ 🎉"},
    {
        "role": "user",
        "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": " part two"}],
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "a.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')\n\ttabs  "},
    {"role": "user", "content": "continue"},
]


# ------------------------------------------------------------------------------------------------------------
# stand-in upstream, in process
# ------------------------------------------------------------------------------------------------------------


def test_standin_answers_openai_sdk(upstream: Any) -> None:
    reply = openai_sdk(upstream.url).chat.completions.create(model="standin-quarter", messages=MESSAGES)

    assert reply.choices[0].message.content == "stand-in reply to 5 messages"
    assert reply.choices[0].finish_reason == "stop"
    chars = sum(len(t) for t in standin_upstream.message_texts(MESSAGES))
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == (chars + 3) // 4
    assert reply.usage.completion_tokens == (len("stand-in reply to 5 messages") + 3) // 4
    [rec] = upstream.requests
    assert rec["path"] == "/v1/chat/completions"
    assert rec["headers"]["authorization"] == "Bearer none"
    assert rec["body"] == {"model": "standin-quarter", "messages": MESSAGES}
    assert json.loads(rec["raw"]) == rec["body"]


def test_standin_streams_openai_chunks(upstream: Any) -> None:
    stream = openai_sdk(upstream.url).chat.completions.create(
        model="standin", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)

    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "stand-in reply to 5 messages"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert upstream.requests[0]["body"]["stream"] is True


def test_standin_stream_without_usage_has_no_usage_chunk(upstream: Any) -> None:
    chunks = list(
        openai_sdk(upstream.url).chat.completions.create(model="standin", messages=MESSAGES, stream=True)
    )
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_standin_records_exact_request_bytes(upstream: Any) -> None:
    """Byte-exact recording is what lets e2e tests tell 'unchanged' from 'equal after parsing'."""
    raw = '{ "model" : "standin",\n  "messages": [{"role":"user", "content":"caf\\u00e9 café \\n"}] }'
    resp = httpx.post(f"{upstream.url}/chat/completions", content=raw.encode(), timeout=10)

    assert resp.status_code == 200
    [rec] = upstream.requests
    assert rec["raw"] == raw
    assert rec["body"]["messages"] == [{"role": "user", "content": "café café \n"}]


def test_standin_summary_request_is_structured_and_deterministic(upstream: Any) -> None:
    messages: Any = [
        {"role": "system", "content": f"Summarize the transcript. {SUMMARY_MARKER}"},
        {"role": "user", "content": "USER: fix the build\nASSISTANT: ran make, 3 errors"},
    ]
    client = openai_sdk(upstream.url)
    first = client.chat.completions.create(model="standin", messages=messages).choices[0].message.content
    second = client.chat.completions.create(model="standin", messages=messages).choices[0].message.content

    assert first == second and first is not None
    positions = [first.index(h) for h in HEADINGS]
    assert positions == sorted(positions)
    total_chars = sum(len(m["content"]) for m in messages)
    assert f"{total_chars} characters" in first
    assert "Summarize the transcript." in first  # first 80 chars of the transcript
    assert SUMMARY_MARKER not in first


def test_standin_fail_mode_returns_openai_error(upstream: Any) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        openai_sdk(upstream.url).chat.completions.create(model="standin-fail", messages=MESSAGES)

    assert info.value.status_code == 500
    assert info.value.body is not None and "stand-in failure" in str(info.value.body)
    assert len(upstream.requests) == 1  # recorded even though it failed


def test_standin_empty_mode_returns_empty_content(upstream: Any) -> None:
    reply = openai_sdk(upstream.url).chat.completions.create(model="standin-empty", messages=MESSAGES)
    assert reply.choices[0].message.content == ""
    assert reply.usage is not None and reply.usage.completion_tokens == 0


def test_standin_slow_mode_delays_the_answer() -> None:
    """Uses its own short-delay instance: the mechanism is the point, not three seconds of waiting."""
    assert StandinUpstream().slow_seconds == 3.0
    with StandinUpstream(slow_seconds=0.3) as slow:
        started = time.monotonic()
        reply = openai_sdk(slow.url).chat.completions.create(model="standin-slow", messages=MESSAGES)
        elapsed = time.monotonic() - started
    assert elapsed >= 0.3
    assert reply.choices[0].message.content == "stand-in reply to 5 messages"


@pytest.mark.parametrize(
    "raw, fragment",
    [(b"{not json", "invalid JSON"), (b"[1, 2]", "JSON object"), (b'{"model": "standin"}', "messages")],
)
def test_standin_rejects_bad_requests_and_keeps_serving(upstream: Any, raw: bytes, fragment: str) -> None:
    bad = httpx.post(f"{upstream.url}/chat/completions", content=raw, timeout=10)
    good = httpx.post(
        f"{upstream.url}/chat/completions", json={"model": "standin", "messages": []}, timeout=10
    )

    assert bad.status_code == 400
    assert fragment in bad.json()["error"]["message"]
    assert good.status_code == 200
    assert [r["raw"] for r in upstream.requests][0] == raw.decode()


def test_standin_models_and_unknown_paths(upstream: Any) -> None:
    ids = [m.id for m in openai_sdk(upstream.url).models.list()]
    missing = httpx.post(f"{upstream.url}/embeddings", json={"input": "x"}, timeout=10)

    assert "standin" in ids and "standin-fail" in ids
    assert missing.status_code == 404


# ------------------------------------------------------------------------------------------------------------
# stand-in upstream, as a script (what `make run` starts)
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture
def script_standin() -> Iterator[str]:
    """The script started like `make run` does; yields its base URL without /v1."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(STANDIN_PATH), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "listening on" in proc.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_script_standin_control_endpoints(script_standin: str) -> None:
    client = openai_sdk(f"{script_standin}/v1")
    client.chat.completions.create(model="standin", messages=[{"role": "user", "content": "hi"}])
    recorded = httpx.get(f"{script_standin}/_recorded", timeout=10).json()
    reset = httpx.post(f"{script_standin}/_reset", timeout=10)
    after = httpx.get(f"{script_standin}/_recorded", timeout=10).json()

    assert [r["body"]["messages"] for r in recorded] == [[{"role": "user", "content": "hi"}]]
    assert reset.status_code == 200
    assert after == []


# ------------------------------------------------------------------------------------------------------------
# real litellm proxy
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_proxy(standin: Any) -> Iterator[ProxyProcess]:
    """One proxy for the module's proxy tests, started by exec as a user starts it (the rest of the
    suite forks its proxies from the launcher): both ways stay tested."""
    config = {"model_list": [standin_deployment("standin", standin.url)]}
    with ProxyProcess(config, fork=False) as running:
        yield running


def test_proxy_forwards_messages_unchanged(plain_proxy: ProxyProcess, upstream: Any) -> None:
    client = openai_sdk(plain_proxy.base_url, api_key=plain_proxy.master_key)
    reply = client.chat.completions.create(model="standin", messages=MESSAGES)

    assert reply.choices[0].message.content == "stand-in reply to 5 messages"
    [rec] = upstream.chat_requests
    assert rec["body"]["messages"] == MESSAGES
    assert json.dumps(rec["body"]["messages"]) == json.dumps(MESSAGES)  # key order too
    assert set(rec["body"]) == {"model", "messages"}
    assert rec["body"]["model"] == "standin"


def test_proxy_forwards_stream_with_usage_requested(plain_proxy: ProxyProcess, upstream: Any) -> None:
    """litellm asks the provider for usage on every stream, whether or not the client did."""
    client = openai_sdk(plain_proxy.base_url, api_key=plain_proxy.master_key)
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(model="standin", messages=MESSAGES, stream=True)
        if c.choices
    )

    assert text == "stand-in reply to 5 messages"
    [rec] = upstream.chat_requests
    assert rec["body"]["messages"] == MESSAGES
    assert rec["body"]["stream"] is True
    assert rec["body"]["stream_options"] == {"include_usage": True}
    assert set(rec["body"]) == {"model", "messages", "stream", "stream_options"}


def test_proxy_log_text_has_startup_output(plain_proxy: ProxyProcess) -> None:
    assert plain_proxy.startup_seconds is not None and plain_proxy.startup_seconds < 90
    assert "Application startup complete" in plain_proxy.log_text()
    assert isinstance(plain_proxy._proc, subprocess.Popen)  # exec'd, not forked


def test_a_forked_proxy_logs_starts_and_stops_like_an_execd_one(standin: Any) -> None:
    config = {"model_list": [standin_deployment("standin", standin.url)]}
    proxy = ProxyProcess(config, fork=True).start()
    try:
        assert isinstance(proxy._proc, Forked) and proxy._proc.poll() is None
        assert "Application startup complete" in proxy.log_text()
    finally:
        proxy.stop()
    assert proxy._proc.poll() is not None  # reaped by the launcher, its exit code reported


def test_a_proxy_that_crashed_fails_its_test_with_the_signal_and_its_log(standin: Any) -> None:
    config = {"model_list": [standin_deployment("standin", standin.url)]}
    said = r"killed by SIGSEGV; its log ends:\n(.|\n)*Extension modules: "  # the end of faulthandler's stacks
    with pytest.raises(ProxyDied, match=said + r"(.|\n)*\(the proxy on port \d+ killed by SIGSEGV\)$"):
        with ProxyProcess(config, fork=True) as proxy:
            os.kill(proxy.pid or 0, signal.SIGSEGV)
            assert proxy._proc is not None and proxy._proc.wait(timeout=10) == -signal.SIGSEGV


def test_proxy_start_failure_reports_the_missing_module() -> None:
    config = {
        "model_list": [standin_deployment("standin", "http://127.0.0.1:9/v1")],
        "litellm_settings": {"callbacks": "nonexistent_module_xyz.instance"},
    }
    output = proxy_start_failure(config)
    assert "nonexistent_module_xyz" in output


def test_the_clients_check_pairs_requests_sent_at_once_in_any_order() -> None:
    """opencode sends its title request beside its first turn: the relay and the stand-in may see
    them in either order. A value the proxy changed is still found, and a request the proxy
    answered itself (Codex's compaction) is left out."""
    from tests.integration.agent_clients import CLIENTS, RECALL_TOOL, _not_as_sent

    [opencode] = [client for client in CLIENTS if client.name == "opencode"]
    title = {"messages": [{"role": "user", "content": "a title"}]}
    tools = [{"type": "function", "function": {"name": "bash"}}]
    recall = {"type": "function", "function": {"name": RECALL_TOOL}}
    first = {"messages": [{"role": "user", "content": "go"}], "tools": tools}
    forwarded_first = {**first, "tools": [*tools, recall]}
    assert _not_as_sent(opencode, [title, first], [forwarded_first, title], [False, False]) == []
    changed = {**first, "tools": [{"type": "function", "function": {"name": "shell"}}]}
    assert _not_as_sent(opencode, [title, first], [changed, title], [False, False]) == ["request 1: tools"]
    assert _not_as_sent(opencode, [title, first], [title], [False, True]) == []

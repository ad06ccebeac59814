"""Codex's remote compaction ("compaction v2") served by the proxy, on a chat-only deployment, an
Anthropic one and a native Responses one, read as Codex reads it (SSE ``data:`` lines, by ``type``).

The trigger request is answered by the proxy (no provider call but the one summary call); the item it
returns is a handle; a later request carrying it reaches the provider with our summary in its place, the
user messages Codex kept where Codex put them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.harness import ProxyProcess, anthropic_deployment, compact_info, standin_deployment
from tests.integration.wire_clients import is_summary_call
from tests.support import chat_to_responses, load_transcript, responses_replay_points

pytestmark = pytest.mark.edge  # also run on the newest LiteLLM (make test-newest)

WINDOW = 20_000
ITEMS = chat_to_responses(load_transcript("claude_code_fa812bfe_pre_compact.json"))
HISTORY = ITEMS[: responses_replay_points(ITEMS)[len(responses_replay_points(ITEMS)) // 2]]
TRIGGER = {"type": "compaction_trigger"}
SETTINGS = {
    "context_window": WINDOW,
    "summary_max_tokens": 800,
    "summary_context_window": 400_000,  # the history fits one summary request
    "prepare": False,
}
PATHS = {"chat-only": "/chat/completions", "anthropic": "/messages", "native Responses": "/responses"}
GROUPS = {
    "chat-only": "codex-chat",
    "anthropic": "codex-claude",
    "native Responses": "codex-responses",
}


@pytest.fixture(scope="module")
def codex_proxy(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    archive = tmp_path_factory.mktemp("archive")
    info = compact_info(archive, SETTINGS, summary_model="codex-summarizer")
    config = {
        "model_list": [
            # LiteLLM bridges Responses to chat completions for a chat-only provider
            {
                "model_name": "codex-chat",
                "litellm_params": {
                    "model": "custom_openai/standin-strict-codex-chat",
                    "api_base": standin.url,
                    "api_key": "sk-standin",
                },
                "model_info": info,
            },
            anthropic_deployment("codex-claude", standin.root_url, "standin-strict-codex-claude", **info),
            standin_deployment("codex-responses", standin.url, "standin-strict-codex-responses", **info),
            standin_deployment(
                "codex-theirs",
                standin.url,
                "standin-codex-theirs",
                **info | {"compact": {**info["compact"], "remote_compaction": "theirs"}},
            ),
            standin_deployment("codex-summarizer", standin.url, "standin-codex-summarizer"),
        ],
        "router_settings": {"num_retries": 0},
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    with ProxyProcess(config) as process:
        yield process


def sse_events(response: httpx.Response) -> list[dict[str, Any]]:
    """The events of a Responses stream as Codex reads them: each ``data:`` line's JSON, by its type."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                events.append(json.loads(line[5:]))
            except ValueError as exc:
                raise AssertionError(response.text) from exc
    return events


def post(proxy: ProxyProcess, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {proxy.master_key}"}
    with httpx.Client(timeout=300, trust_env=False) as client:
        if not body.get("stream"):
            return client.post(f"{proxy.url}/v1/responses", json=body, headers=headers)
        with client.stream("POST", f"{proxy.url}/v1/responses", json=body, headers=headers) as response:
            response.read()
            return response


def compact(proxy: ProxyProcess, group: str, history: list[Any]) -> dict[str, Any]:
    """Codex's trigger request (streamed): the one compaction item it needs, checked as Codex checks it."""
    body = {"model": group, "input": [*history, TRIGGER], "stream": True, "store": False, "instructions": "x"}
    response = post(proxy, body)
    assert response.status_code == 200, response.text + proxy.log_text()[-6000:]
    events = sse_events(response)
    done = [e["item"] for e in events if e.get("type") == "response.output_item.done"]
    compactions = [item for item in done if item.get("type") == "compaction"]
    completed = [e for e in events if e.get("type") == "response.completed"]
    assert len(compactions) == 1 and isinstance(compactions[0]["encrypted_content"], str)
    assert completed and isinstance(completed[-1]["response"]["id"], str)
    usage = completed[-1]["response"]["usage"]
    assert all(isinstance(usage[key], int) for key in ("input_tokens", "output_tokens", "total_tokens"))
    return compactions[0]


def user_messages(items: list[Any]) -> list[Any]:
    return [i for i in items if i.get("role") == "user" and "compact_hook summary" not in json.dumps(i)]


@pytest.mark.parametrize("deployment", sorted(GROUPS))
def test_codex_compaction_is_answered_and_its_item_expanded_upstream(
    standin: Any, codex_proxy: ProxyProcess, deployment: str
) -> None:
    group = GROUPS[deployment]
    standin.reset()
    item = compact(codex_proxy, group, HISTORY)
    summary_calls = [
        r for r in standin.requests if r["method"] == "POST" and is_summary_call(r["body"] or {})
    ]
    others = [r for r in standin.requests if r["method"] == "POST" and r not in summary_calls]
    assert len(summary_calls) == 1  # one summary call
    [ping] = (
        others  # and the model asked only for the stream the answer rides on (``proxy.answers.compact.as_ping``)
    )
    assert "Reply with the word: ok" in json.dumps(ping["body"]) and len(json.dumps(ping["body"])) < 600
    assert len(item["encrypted_content"]) < 80  # a handle, not the summary

    # Codex's next request: the user messages it kept, the item as it came back, a new question
    kept = user_messages(HISTORY)[-3:]
    standin.reset()
    follow = {"model": group, "input": [*kept, item, {"role": "user", "content": "go on"}], "stream": False}
    response = post(codex_proxy, follow)
    assert response.status_code == 200, response.text
    [request] = [
        r for r in standin.requests if r["method"] == "POST" and not is_summary_call(r["body"] or {})
    ]
    assert request["path"].endswith(PATHS[deployment])  # native, or bridged by LiteLLM
    forwarded = request["body"]
    text = json.dumps(forwarded)
    assert item["encrypted_content"] not in text and '"compaction"' not in text
    assert "compact_hook summary" in text
    for message in kept:  # in place, in order
        assert json.dumps(message["content"])[1:-1][:60] in text


def test_a_non_streamed_trigger_gets_the_whole_response(standin: Any, codex_proxy: ProxyProcess) -> None:
    standin.reset()
    body = {"model": "codex-chat", "input": [*HISTORY, TRIGGER], "stream": False}
    response = post(codex_proxy, body)
    assert response.status_code == 200, response.text
    output = response.json()["output"]
    assert [o["type"] for o in output] == ["compaction"] and output[0]["encrypted_content"].startswith(
        "compact_hook:"
    )


def test_an_unknown_handle_becomes_a_notice_and_the_request_is_answered(
    standin: Any, codex_proxy: ProxyProcess
) -> None:
    standin.reset()
    stale = {"type": "compaction", "encrypted_content": "compact_hook:" + "n" * 22}  # our form, never given
    body = {
        "model": "codex-chat",
        "input": [{"role": "user", "content": "hi"}, stale, {"role": "user", "content": "go on"}],
    }
    response = post(codex_proxy, body)
    assert response.status_code == 200, response.text
    [forwarded] = [r["body"] for r in standin.requests if r["method"] == "POST"]
    assert "no longer available" in json.dumps(forwarded) and "compact_hook:nnn" not in json.dumps(forwarded)


def test_ten_thousand_copies_of_our_item_expand_once_and_reach_the_provider_as_one_notice(
    standin: Any, codex_proxy: ProxyProcess
) -> None:
    """Issue 45: one request carrying our item 10,000 times (and 10,000 handles under our prefix) cost
    as many store reads and parses on the event loop; the provider gets one memento and one notice.
    (What it costs other tenants meanwhile: ``bench/bench_stall.py``.)"""
    item = compact(codex_proxy, "codex-responses", HISTORY)
    forged = [{"type": "compaction", "encrypted_content": f"compact_hook:{n}"} for n in range(10_000)]
    standin.reset()
    flood = [item] * 10_000 + forged
    body = {"model": "codex-responses", "input": [*flood, {"role": "user", "content": "go on"}]}
    response = post(codex_proxy, body)
    assert response.status_code == 200, response.text
    [forwarded] = [
        r["body"] for r in standin.requests if r["method"] == "POST" and not is_summary_call(r["body"] or {})
    ]
    text = json.dumps(forwarded)
    assert text.count("compact_hook summary") == 1 and '"compaction"' not in text
    assert text.count("beyond what one request may carry") == 1
    assert len(forwarded["input"]) < 20


def test_theirs_forwards_the_trigger_to_the_provider(standin: Any, codex_proxy: ProxyProcess) -> None:
    standin.reset()
    body = {"model": "codex-theirs", "input": [*HISTORY[:5], TRIGGER], "stream": False}
    response = post(codex_proxy, body)
    assert response.headers.get("x-compact-reason") == "client_managed"
    [forwarded] = [r["body"] for r in standin.requests if r["method"] == "POST"]
    assert forwarded["input"][-1] == TRIGGER

"""The cheap tiers and the fit guarantee through a real proxy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from compact_hook import count_tokens
from compact_hook.core.digest import HEADER as DIGEST_HEADER
from compact_hook.core.items import SUMMARY_PREFIX
from tests.integration.harness import SUMMARY_MARKER, ProxyProcess, standin_deployment
from tests.support import is_prefix, load_transcript, pairing_problems, replay_points

WINDOW = 20_000
TRANSCRIPT = load_transcript("claude_code_fa812bfe_pre_compact.json")


def canonical(message: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in message.items() if v is not None}, sort_keys=True, ensure_ascii=False)


@pytest.fixture(scope="module")
def proxy(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    archive = str(tmp_path_factory.mktemp("archive"))
    base = {
        "context_window": WINDOW,
        "archive_dir": archive,
        "retry_backoff_seconds": 0,
        "summary_max_tokens": 1000,
        "prepare": False,  # summary calls are counted per turn here; test_prepare_proxy.py prepares
    }
    broken = {**base, "summary_model": "summarizer-fail", "max_retries": 1}
    config = {
        "model_list": [
            standin_deployment("agent-fit", standin.url, "standin-fit", compact=broken),
            standin_deployment(
                "agent-pass", standin.url, "standin-pass", compact={**broken, "on_overflow": "passthrough"}
            ),
            standin_deployment("summarizer-fail", standin.url, "standin-fail"),
            standin_deployment(
                "agent-clear", standin.url, "standin-clear", compact={**base, "clear_at_least": 2000}
            ),
            standin_deployment(
                "agent-noclear", standin.url, "standin-noclear", compact={**base, "clear_tool_results": False}
            ),
        ],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
        "router_settings": {"num_retries": 0},
    }
    with ProxyProcess(config) as process:
        yield process


def send(
    proxy: ProxyProcess, standin: Any, model: str, messages: list[dict[str, Any]]
) -> tuple[dict[str, str], list[dict[str, Any]], int]:
    before = len(standin.chat_requests)
    client = openai.OpenAI(api_key=proxy.master_key, base_url=proxy.base_url, max_retries=0, timeout=120)
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    new = [r["body"] for r in standin.chat_requests[before:]]
    summaries = [b for b in new if SUMMARY_MARKER in json.dumps(b["messages"])]
    [main] = [b for b in new if b not in summaries and "fail" not in b["model"]]
    return dict(raw.headers), main["messages"], len(summaries)


def test_summary_model_down_a_request_far_over_the_window_is_fitted_with_the_digest(
    proxy: ProxyProcess, standin: Any
) -> None:
    headers, forwarded, _ = send(proxy, standin, "agent-fit", TRANSCRIPT)
    assert headers["x-compact-compacted"] == "true"
    assert headers["x-compact-summarizer"] == "digest"
    assert count_tokens(forwarded) <= WINDOW
    assert pairing_problems(forwarded) == []
    [summary] = [m for m in forwarded if str(m.get("content", "")).startswith(SUMMARY_PREFIX)]
    assert DIGEST_HEADER in summary["content"]
    failed = [r for r in standin.chat_requests if r["body"]["model"] == "standin-fail"]
    assert len(failed) == 2  # 1 + max_retries, then the digest


def test_with_passthrough_it_is_forwarded_as_the_client_sent_it(proxy: ProxyProcess, standin: Any) -> None:
    headers, forwarded, _ = send(proxy, standin, "agent-pass", TRANSCRIPT)
    assert headers["x-compact-compacted"] == "false"
    assert [canonical(m) for m in forwarded] == [canonical(m) for m in TRANSCRIPT]


def test_a_replay_with_clearing_costs_fewer_summaries_and_tokens_and_keeps_the_prefix_stable(
    proxy: ProxyProcess, standin: Any, record_property: Any
) -> None:
    figures = {}
    for model in ("agent-clear", "agent-noclear"):
        calls = tokens = 0
        previous: tuple[dict[str, str], list[str]] | None = None
        for end in replay_points(TRANSCRIPT):
            headers, forwarded, summaries = send(proxy, standin, model, TRANSCRIPT[:end])
            calls += summaries
            tokens += count_tokens(forwarded)
            current = [canonical(m) for m in forwarded]
            assert count_tokens(forwarded) <= WINDOW and pairing_problems(forwarded) == []
            if previous is not None and not is_prefix(previous[1], current):
                batch = headers["x-compact-cleared"] != previous[0]["x-compact-cleared"]
                assert batch or headers["x-compact-cache"] in ("miss", "shared"), end
            previous = (headers, current)
        figures[model] = (calls, tokens)
    record_property("replay_figures", figures)
    print("replay figures (summary calls, tokens forwarded):", figures)
    assert figures["agent-clear"][0] < figures["agent-noclear"][0]
    assert figures["agent-clear"][1] < figures["agent-noclear"][1]

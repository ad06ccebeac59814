"""The cheap tiers and the fit guarantee through a real proxy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from compact_hook import count_tokens
from compact_hook.core.digest import HEADER as DIGEST_HEADER
from compact_hook.core.items import SUMMARY_PREFIX
from tests.integration.harness import ProxyProcess, standin_deployment
from tests.integration.wire_clients import send_chat
from tests.support import forwarded_json, is_prefix, load_transcript, pairing_problems, replay_points

WINDOW = 20_000
TRANSCRIPT = load_transcript("claude_code_fa812bfe_pre_compact.json")


@pytest.fixture(scope="module")
def tiers_proxy(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
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


def test_summary_model_down_a_request_far_over_the_window_is_fitted_with_the_digest(
    tiers_proxy: ProxyProcess, standin: Any
) -> None:
    turn = send_chat(standin, tiers_proxy, "agent-fit", TRANSCRIPT)
    headers, forwarded = turn.headers, turn.forwarded
    assert headers["x-compact-compacted"] == "true"
    assert headers["x-compact-summarizer"] == "digest"
    assert count_tokens(forwarded) <= WINDOW
    assert pairing_problems(forwarded) == []
    [summary] = [m for m in forwarded if str(m.get("content", "")).startswith(SUMMARY_PREFIX)]
    assert DIGEST_HEADER in summary["content"]
    failed = [r for r in standin.chat_requests if r["body"]["model"] == "standin-fail"]
    assert len(failed) == 2  # 1 + max_retries, then the digest


def test_with_passthrough_it_is_forwarded_as_the_client_sent_it(
    tiers_proxy: ProxyProcess, standin: Any
) -> None:
    turn = send_chat(standin, tiers_proxy, "agent-pass", TRANSCRIPT)
    headers, forwarded = turn.headers, turn.forwarded
    assert headers["x-compact-compacted"] == "false"
    assert [forwarded_json(m) for m in forwarded] == [forwarded_json(m) for m in TRANSCRIPT]


def test_a_replay_with_clearing_costs_fewer_summaries_and_tokens_and_keeps_the_prefix_stable(
    tiers_proxy: ProxyProcess, standin: Any, record_property: Any
) -> None:
    figures = {}
    for model in ("agent-clear", "agent-noclear"):
        calls = tokens = 0
        previous: tuple[dict[str, str], list[str]] | None = None
        for end in replay_points(TRANSCRIPT):
            turn = send_chat(standin, tiers_proxy, model, TRANSCRIPT[:end])
            headers, forwarded, summaries = turn.headers, turn.forwarded, turn.summary_calls
            calls += summaries
            tokens += count_tokens(forwarded)
            current = [forwarded_json(m) for m in forwarded]
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

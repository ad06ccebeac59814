"""End to end: the openai client -> a real litellm proxy with compact_hook -> the stand-in upstream.

LiteLLM re-serializes what it forwards and drops keys whose value is ``null`` (e.g. the
``content: null`` of a tool-calling assistant message), so "byte-identical" is checked on
each message's JSON after that normalization, which is all the provider can ever see.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from compact_hook import count_tokens
from compact_hook.core.items import SUMMARY_PREFIX
from compact_hook.core.transcript import transcript_entries
from tests.integration.harness import (
    SUMMARY_MARKER,
    ProxyProcess,
    compact_info,
    proxy_start_failure,
    standin_deployment,
)
from tests.integration.wire_clients import chat_client
from tests.support import forwarded_json, items_of, load_transcript, pairing_problems

pytestmark = pytest.mark.edge  # also run on the newest LiteLLM (make test-newest)

WINDOW = 20_000
THRESHOLD = int(0.92 * WINDOW)
TRANSCRIPT = "claude_code_fa812bfe_pre_compact.json"


ISSUE_2_BEHAVIOUR = {
    # the engine and hook in isolation: no cheap tiers, no fitting (test_tiers_proxy.py covers those)
    "tool_output_policy": "none",
    "clear_tool_results": False,
    "user_message_budget": 0,
    "on_overflow": "passthrough",
}


@pytest.fixture(scope="module")
def archive_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("archive")


@pytest.fixture(scope="module")
def e2e_proxy(standin: Any, archive_dir: Path) -> Iterator[ProxyProcess]:
    config = {
        "model_list": [
            standin_deployment(
                "agent",
                standin.url,
                "standin-agent",
                **compact_info(archive_dir, {"context_window": WINDOW}, ISSUE_2_BEHAVIOUR),
            ),
            standin_deployment(
                "agent-broken-summary",
                standin.url,
                "standin-main",
                **compact_info(
                    archive_dir,
                    {"context_window": WINDOW},
                    ISSUE_2_BEHAVIOUR,
                    summary_model="summarizer-fail",
                ),
            ),
            standin_deployment("summarizer-fail", standin.url, "standin-fail"),
            standin_deployment("plain", standin.url, "standin-plain"),
        ],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    with ProxyProcess(config) as process:
        yield process


@pytest.fixture
def e2e_client(e2e_proxy: ProxyProcess) -> openai.OpenAI:
    return chat_client(e2e_proxy)


def main_requests(standin: Any, model: str) -> list[dict[str, Any]]:
    return [
        r["body"]
        for r in standin.chat_requests
        if r["body"]["model"] == model and SUMMARY_MARKER not in json.dumps(r["body"]["messages"])
    ]


def summary_requests(standin: Any) -> list[dict[str, Any]]:
    return [r["body"] for r in standin.chat_requests if SUMMARY_MARKER in json.dumps(r["body"]["messages"])]


def test_a_short_conversation_arrives_upstream_unchanged(e2e_client: openai.OpenAI, standin: Any) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hi. ✓ 日本"},
    ]
    raw = e2e_client.chat.completions.with_raw_response.create(model="agent", messages=messages)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    assert raw.headers["x-compact-compacted"] == "false"
    assert raw.headers["x-compact-reason"] == "below_threshold"
    [forwarded] = main_requests(standin, "standin-agent")
    assert [forwarded_json(m) for m in forwarded["messages"]] == [forwarded_json(m) for m in messages]
    assert summary_requests(standin) == []


def check_compacted(original: list[dict[str, Any]], forwarded: list[dict[str, Any]]) -> int:
    """Shape checks shared by the streaming and non-streaming cases; returns the summary's index."""
    summaries = [i for i, m in enumerate(forwarded) if str(m.get("content", "")).startswith(SUMMARY_PREFIX)]
    assert len(summaries) == 1
    at = summaries[0]
    users = [forwarded_json(m) for m in original if m["role"] == "user"]
    assert forwarded_json(forwarded[0]) == users[0]  # no system head: the task is pinned first
    assert users[-1] in [
        forwarded_json(m) for m in forwarded[:at]
    ]  # the latest request is kept before the summary
    tail = forwarded[at + 1 :]
    assert [forwarded_json(m) for m in tail] == [
        forwarded_json(m) for m in original[len(original) - len(tail) :]
    ]
    assert pairing_problems(forwarded) == []
    assert count_tokens(forwarded) < THRESHOLD
    return at


def test_a_long_conversation_arrives_compacted(
    e2e_client: openai.OpenAI, standin: Any, archive_dir: Path
) -> None:
    original = load_transcript(TRANSCRIPT)
    raw = e2e_client.chat.completions.with_raw_response.create(
        model="agent",
        messages=original,
        user="session-e2e",  # type: ignore[arg-type]
    )
    assert raw.http_response.status_code == 200
    assert raw.parse().choices[0].message.content.startswith("stand-in reply")  # type: ignore[union-attr]
    assert raw.headers["x-compact-compacted"] == "true"
    before, after = int(raw.headers["x-compact-tokens-before"]), int(raw.headers["x-compact-tokens-after"])
    assert after < THRESHOLD <= before
    [forwarded] = main_requests(standin, "standin-agent")
    at = check_compacted(original, forwarded["messages"])
    # The archive holds exactly the summarized middle.
    [archive_file] = archive_dir.glob("t-*/session-e2e/compact-*-1.json")  # under the caller's tenant folder
    archived = json.loads(archive_file.read_text())
    kept = {forwarded_json(m) for m in forwarded["messages"]}
    assert [forwarded_json(m) for m in archived] == [
        forwarded_json(m) for m in original if forwarded_json(m) not in kept
    ]
    assert len(archived) == len(original) - (len(forwarded["messages"]) - 1)
    assert int(raw.headers["x-compact-messages-summarized"]) == len(archived)
    # The summary model was sent the whole middle, in order (in chunks: it is larger than its window).
    chunks = [transcript_of(body) for body in summary_requests(standin)]
    assert len(chunks) > 1
    assert "".join(chunks).replace("\n", "") == "".join(transcript_entries(items_of(archived))).replace(
        "\n", ""
    )
    assert at == 2  # the pinned task, then the latest request, then the summary


def transcript_of(summary_request: dict[str, Any]) -> str:
    match = re.search(
        r"<transcript[^>]*>\n(.*)\n</transcript>", summary_request["messages"][-1]["content"], re.S
    )
    assert match is not None
    return match.group(1)


def test_a_long_streaming_conversation_arrives_compacted(e2e_client: openai.OpenAI, standin: Any) -> None:
    original = load_transcript(TRANSCRIPT)
    raw = e2e_client.chat.completions.with_raw_response.create(
        model="agent",
        messages=original,
        stream=True,  # type: ignore[arg-type]
    )
    assert raw.headers["x-compact-compacted"] == "true"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    assert text.startswith("stand-in reply")
    [forwarded] = main_requests(standin, "standin-agent")
    assert forwarded["stream"] is True
    check_compacted(original, forwarded["messages"])


def test_a_failing_summary_model_still_gets_the_client_a_200_with_the_original(
    e2e_client: openai.OpenAI, standin: Any
) -> None:
    original = load_transcript(TRANSCRIPT)
    raw = e2e_client.chat.completions.with_raw_response.create(
        model="agent-broken-summary",
        messages=original,  # type: ignore[arg-type]
    )
    assert raw.http_response.status_code == 200
    assert raw.headers["x-compact-compacted"] == "false"
    assert raw.headers["x-compact-reason"] == "summary_failed"
    [forwarded] = main_requests(standin, "standin-main")
    assert [forwarded_json(m) for m in forwarded["messages"]] == [forwarded_json(m) for m in original]
    failed = [r for r in standin.chat_requests if r["body"]["model"] == "standin-fail"]
    assert len(failed) == 3  # 1 + max_retries, no router retries on top


def test_a_model_without_compact_is_untouched(e2e_client: openai.OpenAI, standin: Any) -> None:
    original = load_transcript(TRANSCRIPT)
    raw = e2e_client.chat.completions.with_raw_response.create(model="plain", messages=original)  # type: ignore[arg-type]
    assert "x-compact-compacted" not in raw.headers
    [forwarded] = main_requests(standin, "standin-plain")
    assert [forwarded_json(m) for m in forwarded["messages"]] == [forwarded_json(m) for m in original]
    assert summary_requests(standin) == []


def test_a_bad_compact_setting_fails_proxy_start_up_naming_model_and_key(standin: Any) -> None:
    config = {
        "model_list": [standin_deployment("broken", standin.url, compact={"trigger_ratio": 7})],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    output = proxy_start_failure(config)
    assert "model 'broken': model_info.compact.trigger_ratio" in output

"""Retention, the small version of ``bench/bench_retention.py``: planted facts survive compaction on all
three surfaces of a real proxy, with the built-in digest as the summarizer (no model needed).

A constraint in the first user message and ``<system-reminder>`` instructions (pinned) must reach the
provider word for word on every turn from the first compaction on; file paths from tool-call arguments and
error lines from tool results at least 90% of the time (the targets of issue 12).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from compact_hook.wires import ANTHROPIC, CHAT, RESPONSES
from tests.integration.harness import ProxyProcess, anthropic_deployment, standin_deployment
from tests.integration.wire_clients import send
from tests.retention import KINDS, TARGETS, Planted, Retention, compacted, plant, relocate
from tests.support import (
    anthropic_replay_points,
    chat_to_responses,
    load_transcript,
    pairing_problems,
    replay_points,
    responses_replay_points,
)

pytestmark = pytest.mark.integration

WINDOW = 8_000
WIRES = {"chat": CHAT, "anthropic": ANTHROPIC, "responses": RESPONSES}


@pytest.fixture(scope="module")
def retention_proxy(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    archive = tmp_path_factory.mktemp("archive")
    compact = {"context_window": WINDOW, "summary_model": "digest", "archive_dir": str(archive)}
    config = {
        "model_list": [
            standin_deployment("agent", standin.url, "standin-agent", compact=compact),
            anthropic_deployment("claude", standin.root_url, "standin-claude", compact=compact),
        ],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    with ProxyProcess(config) as running:
        yield running


def chat_case(name: str) -> tuple[Planted, list[int]]:
    planted = plant(load_transcript(name), "chat", name[:12])
    return planted, replay_points(planted.entries)


def anthropic_case(name: str) -> tuple[Planted, list[int]]:
    data = load_transcript(name, "anthropic")
    planted = plant(data["messages"], "anthropic", name[:12], data.get("system"))
    return planted, anthropic_replay_points(planted.entries)


def responses_case(name: str) -> tuple[Planted, list[int]]:
    chat = plant(load_transcript(name), "chat", name[:12])
    items = chat_to_responses(chat.entries)
    planted = Planted(items, relocate(chat.facts, items))
    return planted, responses_replay_points(items)


def forwarded_of(wire: str, body: dict[str, Any]) -> list[Any]:
    """What the model reads besides tools: the entries and the system prompt / instructions."""
    if wire == "chat":
        return list(body["messages"])
    if wire == "anthropic":
        return [body.get("system") or "", *body["messages"]]
    return [body.get("instructions") or "", *body["input"]]


CASES: list[tuple[str, str, str, Callable[[str], tuple[Planted, list[int]]]]] = [
    ("chat", "agent", "sweagent_ctf_web_i_got_id.json", chat_case),
    ("chat", "agent", "openhands_ponylang__ponyc-4593.json", chat_case),
    ("anthropic", "claude", "claude_code_subagent_afc096d.json", anthropic_case),
    ("responses", "agent", "sweagent_fc_marshmallow-1867.json", responses_case),
]


@pytest.mark.parametrize(("wire", "model", "name", "case"), CASES, ids=[c[2].split(".")[0] for c in CASES])
def test_pinned_instructions_and_facts_reach_the_provider_after_compaction(
    standin: Any, retention_proxy: ProxyProcess, wire: str, model: str, name: str, case: Any
) -> None:
    planted, ends = case(name)
    retention, first = Retention(), None
    extra = {"system": planted.system} if wire == "anthropic" and planted.system else {}
    for turn, end in enumerate(ends, start=1):
        sent = send(standin, retention_proxy, wire, model, planted.entries[:end], **extra)
        assert pairing_problems(sent.forwarded_entries, WIRES[wire]) == []
        forwarded = forwarded_of(wire, sent.forwarded)
        if first is None and compacted(forwarded, sent.headers):
            first = turn
        if first is not None:
            retention.add(turn, planted.facts, end, forwarded)
    assert first is not None, "the replay never compacted: the test would measure nothing"
    assert retention.sent["constraint"] and retention.sent["instruction"]
    for kind in KINDS:
        share = retention.share(kind)
        assert share is None or share >= TARGETS[kind], (kind, share, retention.missing[:5])


def test_without_pinning_the_task_is_summarized_away(standin: Any, tmp_path: Path) -> None:
    """The same replay with ``pinned_budget: 0`` loses the constraint: what the test above measures is
    the pinning, not a window too large to compact anything."""
    compact = {
        "context_window": WINDOW,
        "summary_model": "digest",
        "archive_dir": str(tmp_path),
        "pinned_budget": 0,
        "user_message_budget": 0,
    }
    config = {
        "model_list": [standin_deployment("agent", standin.url, "standin-agent", compact=compact)],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    planted, ends = chat_case("sweagent_ctf_web_i_got_id.json")
    retention = Retention()
    with ProxyProcess(config) as unpinned:
        for turn, end in enumerate(ends, start=1):
            forwarded = send(standin, unpinned, "chat", "agent", planted.entries[:end]).forwarded["messages"]
            if compacted(forwarded):
                retention.add(turn, planted.facts, end, forwarded)
    assert retention.sent["constraint"] and retention.share("constraint", outside=True) == 0.0

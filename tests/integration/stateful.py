"""A Claude Code session replayed turn by turn through real proxies, in the store's world: the
stateful tests' kit (one proxy or several replicas, any shared Redis)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from compact_hook.core.items import SUMMARY_PREFIX
from tests.integration.harness import SUMMARY_MARKER, ProxyProcess, standin_deployment
from tests.integration.wire_clients import ChatTurn, Replay, send_chat
from tests.support import load_transcript, replay_points

WINDOW = 20_000
THRESHOLD = int(0.92 * WINDOW)
TRANSCRIPT = load_transcript("claude_code_fa812bfe_pre_compact.json")
POINTS = replay_points(TRANSCRIPT)
REPLAYED = POINTS[:90:2]
"""Replays send every other turn of the first 90 (up to 3.5 windows): four or more compaction events."""


def stateful_config(standin: Any, tmp: Any, prepare: bool = False, **general: Any) -> dict[str, Any]:
    """The stand-in agent in the store's world; ``prepare``: compactions prepared ahead (off: the
    summary calls are counted per turn); ``general``: the proxy's ``general_settings``."""
    compact = {
        "context_window": WINDOW,
        "summary_max_tokens": 1000,
        "archive_dir": str(tmp),
        "retry_backoff_seconds": 0,
        # remembering compactions in isolation: no cheap tiers (test_tiers_proxy.py covers those)
        "tool_output_policy": "none",
        "clear_tool_results": False,
        "user_message_budget": 0,
        "prepare": prepare,
    }
    config: dict[str, Any] = {
        "model_list": [standin_deployment("agent", standin.url, "standin-agent", compact=compact)],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    if general:
        config["general_settings"] = general
    return config


class ChatReplay(Replay[ChatTurn]):
    @property
    def events(self) -> list[ChatTurn]:
        return [t for t in self.turns if t.headers.get("x-compact-cache") in ("miss", "shared")]


def replay_through(standin: Any, proxies: list[ProxyProcess], points: list[int] = REPLAYED) -> ChatReplay:
    """The session's turns at ``points``, sent to ``proxies`` in turn."""
    result = ChatReplay()
    for number, end in enumerate(points):
        result.turns.append(send_chat(standin, proxies[number % len(proxies)], "agent", TRANSCRIPT[:end]))
    return result


WORKERS_POINTS = POINTS[::4][:30]
"""30 requests across the whole session (~104K tokens): several compactions at ``WINDOW``."""


def workers_config(standin: Any) -> dict[str, Any]:
    """A compacting chat group at ``WINDOW`` with the README's defaults otherwise (as a new user's)."""
    compact = {"context_window": WINDOW, "retry_backoff_seconds": 0}
    return {
        "model_list": [standin_deployment("agent", standin.url, "standin-workers", compact=compact)],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
        "router_settings": {"num_retries": 0},
    }


@dataclass(frozen=True)
class SummaryTrail:
    """What a replay cost in summary calls, and the summary each request forwarded (None: none)."""

    summary_calls: int
    summaries: list[str | None]

    @property
    def changes(self) -> int:
        """Requests whose summary differs from the previous request's (the first summary counts)."""
        return sum(
            now != before for before, now in zip([None, *self.summaries[:-1]], self.summaries, strict=True)
        )

    @property
    def distinct(self) -> int:
        return len({summary for summary in self.summaries if summary is not None})


def replay_apart(standin: Any, proxy: ProxyProcess, points: list[int] = WORKERS_POINTS) -> SummaryTrail:
    """The session's turns at ``points``, each on a connection of its own (any worker may take it)."""
    standin.reset()
    summaries: list[str | None] = []
    for end in points:
        before = len(standin.chat_requests)
        body = {"model": "agent", "messages": TRANSCRIPT[:end]}
        with httpx.Client(timeout=300, headers={"Connection": "close", **proxy.auth_headers}) as client:
            answer = client.post(f"{proxy.base_url}/chat/completions", json=body)
        assert answer.status_code == 200, answer.text[:500]
        new = [r["body"] for r in standin.chat_requests[before:]]
        [main] = [b for b in new if SUMMARY_MARKER not in json.dumps(b["messages"])]
        found = [
            m["content"] for m in main["messages"] if str(m.get("content", "")).startswith(SUMMARY_PREFIX)
        ]
        summaries.append(found[0] if found else None)
    calls = sum(SUMMARY_MARKER in json.dumps(r["body"]["messages"]) for r in standin.chat_requests)
    return SummaryTrail(calls, summaries)

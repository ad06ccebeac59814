"""A Claude Code session replayed turn by turn through real proxies, in the store's world: the
stateful tests' kit (one proxy or several replicas, any shared Redis)."""

from __future__ import annotations

from typing import Any

from tests.integration.harness import ProxyProcess, standin_deployment
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

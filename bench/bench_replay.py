"""A whole Claude Code session replayed through real proxies, per wire format: with the store, and without.

    .venv/bin/python bench/bench_replay.py [--window 20000] [--formats chat,anthropic,responses]

The session (claude_code_fa812bfe_pre_compact.json) is sent turn by turn — the history up to each
point where the client calls the model — with each surface's official SDK: chat completions (288
messages), Anthropic /v1/messages (253 messages, to an ``anthropic/`` deployment, counted with the
Claude tokenizer) and Responses (402 input items). Two LiteLLM proxies run side by side, identical
except that one has the store switched off (``COMPACT_STORE=off``). For each: compaction events,
summary calls, total tokens forwarded upstream, and the hook's own time per turn
(``x-compact-duration-ms``) at steady state (turns served from the store) and over all turns.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compact_hook.wires import ANTHROPIC, CHAT, RESPONSES  # noqa: E402
from tests.integration.harness import (  # noqa: E402
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    standin_deployment,
)
from tests.integration.wire_clients import Sent, send  # noqa: E402
from tests.support import (  # noqa: E402
    anthropic_replay_points,
    chat_to_responses,
    load_transcript,
    replay_points,
    responses_replay_points,
    tokens_of,
)

CHAT_SESSION = load_transcript("claude_code_fa812bfe_pre_compact.json")
SESSIONS: dict[str, tuple[Any, list[Any], list[int], str, str]] = {
    "chat": (CHAT, CHAT_SESSION, replay_points(CHAT_SESSION), "agent", "o200k_base"),
    "anthropic": (
        ANTHROPIC,
        (claude := load_transcript("claude_code_fa812bfe_pre_compact.json", "anthropic")["messages"]),
        anthropic_replay_points(claude),
        "agent-claude",
        "claude",
    ),
    "responses": (
        RESPONSES,
        (items := chat_to_responses(CHAT_SESSION)),
        responses_replay_points(items),
        "agent",
        "o200k_base",
    ),
}


def config(upstream: StandinUpstream, window: int, archive: str) -> dict[str, Any]:
    compact = {
        "context_window": window,
        "summary_max_tokens": 1000,
        "archive_dir": archive,
        # the store in isolation: cheap tiers off (bench_tiers.py measures those)
        "tool_output_policy": "none",
        "clear_tool_results": False,
        "user_message_budget": 0,
    }
    return {
        "model_list": [
            standin_deployment("agent", upstream.url, "standin-agent", compact=compact),
            anthropic_deployment("agent-claude", upstream.root_url, "standin-agent-claude", compact=compact),
        ],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


class Tally:
    def __init__(self) -> None:
        self.events = 0
        self.summary_calls = 0
        self.forwarded_tokens = 0
        self.steady_ms: list[float] = []
        self.all_ms: list[float] = []

    def add(self, sent: Sent, tokens: int) -> None:
        cache = sent.headers.get("x-compact-cache", "none")
        duration = float(sent.headers.get("x-compact-duration-ms", "0"))
        self.events += cache in ("miss", "shared")
        self.summary_calls += sent.summary_calls
        self.forwarded_tokens += tokens
        self.all_ms.append(duration)
        if cache == "hit":
            self.steady_ms.append(duration)

    def row(self, wire: str, label: str) -> str:
        return (
            f"| {wire} | {label} | {self.events} | {self.summary_calls} | {self.forwarded_tokens:,} "
            f"| {statistics.median(self.steady_ms or [0]):.2f} | {percentile(self.steady_ms, 0.99):.2f} "
            f"| {statistics.median(self.all_ms):.2f} | {percentile(self.all_ms, 0.99):.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=int, default=20_000)
    parser.add_argument("--archive", default="/tmp/compact-bench-archive")
    parser.add_argument("--formats", default="chat,anthropic,responses")
    args = parser.parse_args()
    rows: list[str] = []
    notes: list[str] = []
    with StandinUpstream() as upstream:
        cfg = config(upstream, args.window, args.archive)
        with ProxyProcess(cfg) as on, ProxyProcess(cfg, env={"COMPACT_STORE": "off"}) as off:
            for wire in args.formats.split(","):
                format_, entries, points, model, tokenizer = SESSIONS[wire]
                key = "input" if wire == "responses" else "messages"
                sent_tokens = sum(tokens_of({key: entries[:end]}, format_, tokenizer) for end in points)
                notes.append(f"{wire}: {len(points)} turns, {sent_tokens:,} tokens sent by the client in all")
                tallies = {"store on (in-process)": Tally(), "store off": Tally()}
                for end in points:
                    for tally, proxy in zip(tallies.values(), (on, off), strict=True):
                        turn = send(upstream, proxy, wire, model, entries[:end])
                        tally.add(turn, tokens_of({key: turn.forwarded_entries}, format_, tokenizer))
                rows.extend(tally.row(wire, label) for label, tally in tallies.items())
    print(f"window {args.window:,}; " + "; ".join(notes))
    print(
        "| format | proxy | compaction events | summary calls | tokens forwarded | hook ms median (steady) "
        "| p99 (steady) | median (all turns) | p99 (all turns) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

"""A whole Claude Code session replayed through real proxies: with the compaction store, and without.

    .venv/bin/python bench/bench_replay.py [--window 20000]

The 288-message session (claude_code_fa812bfe_pre_compact.json) is sent turn by turn — the
history up to each point where the client calls the model — to two LiteLLM proxies running
side by side, identical except that one has the store switched off (``COMPACT_STORE=off``).
For each: compaction events, summary calls, total tokens forwarded upstream, and the hook's
own time per turn (``x-compact-duration-ms``) at steady state (turns served from the store)
and over all turns.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compact_hook import count_tokens  # noqa: E402
from tests.integration.harness import SUMMARY_MARKER, ProxyProcess, StandinUpstream, standin_deployment  # noqa: E402
from tests.support import load_transcript, replay_points  # noqa: E402

TRANSCRIPT = load_transcript("claude_code_fa812bfe_pre_compact.json")


def config(upstream: str, window: int, archive: str) -> dict[str, Any]:
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
        "model_list": [standin_deployment("agent", upstream, "standin-agent", compact=compact)],
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

    def add(self, headers: dict[str, str], forwarded: list[dict[str, Any]], summaries: int) -> None:
        cache = headers.get("x-compact-cache", "none")
        duration = float(headers.get("x-compact-duration-ms", "0"))
        self.events += cache in ("miss", "shared")
        self.summary_calls += summaries
        self.forwarded_tokens += count_tokens(forwarded)
        self.all_ms.append(duration)
        if cache == "hit":
            self.steady_ms.append(duration)

    def row(self, label: str) -> str:
        return (
            f"| {label} | {self.events} | {self.summary_calls} | {self.forwarded_tokens:,} "
            f"| {statistics.median(self.steady_ms or [0]):.2f} | {percentile(self.steady_ms, 0.99):.2f} "
            f"| {statistics.median(self.all_ms):.2f} | {percentile(self.all_ms, 0.99):.2f} |"
        )


def turn(
    upstream: StandinUpstream, proxy: ProxyProcess, messages: list[dict[str, Any]], tally: Tally
) -> None:
    before = len(upstream.chat_requests)
    client = openai.OpenAI(api_key=proxy.master_key, base_url=proxy.base_url, max_retries=0, timeout=300)
    raw = client.chat.completions.with_raw_response.create(model="agent", messages=messages)  # type: ignore[arg-type]
    new = [r["body"] for r in upstream.chat_requests[before:]]
    summaries = [b for b in new if SUMMARY_MARKER in json.dumps(b["messages"])]
    [main] = [b for b in new if b not in summaries]
    tally.add(dict(raw.headers), main["messages"], len(summaries))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=int, default=20_000)
    parser.add_argument("--archive", default="/tmp/compact-bench-archive")
    args = parser.parse_args()
    points = replay_points(TRANSCRIPT)
    original_tokens = sum(count_tokens(TRANSCRIPT[:end]) for end in points)
    tallies = {"store on (in-process)": Tally(), "store off": Tally()}
    with StandinUpstream() as upstream:
        cfg = config(upstream.url, args.window, args.archive)
        with ProxyProcess(cfg) as on, ProxyProcess(cfg, env={"COMPACT_STORE": "off"}) as off:
            proxies = {"store on (in-process)": on, "store off": off}
            for end in points:
                for label, proxy in proxies.items():
                    turn(upstream, proxy, TRANSCRIPT[:end], tallies[label])
    print(
        f"{len(points)} turns, window {args.window:,}; "
        f"tokens the client sent over all turns: {original_tokens:,}"
    )
    print(
        "| proxy | compaction events | summary calls | tokens forwarded | hook ms median (steady) "
        "| p99 (steady) | median (all turns) | p99 (all turns) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, tally in tallies.items():
        print(tally.row(label))


if __name__ == "__main__":
    main()

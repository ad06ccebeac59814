"""What a summary model that is down costs each turn: with the circuit breaker, and without it.

    .venv/bin/python bench/bench_breaker.py [--conversations 12]

One real proxy, two compacting model groups side by side: both summarize with a model that always
fails (HTTP 500), both with the default retries (2, backoff 1 s); one has the default breaker
(3 consecutive failures), the other a breaker that never opens (``breaker_failures: 1000000``).
``--conversations`` different conversations, each over the window, are sent to each group in turn.
Reported per group: summary attempts made, and the latency of the turns after the third (when the
breaker has opened), mean and worst. Every request must answer 200 (the digest stands in).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.harness import ProxyProcess, StandinUpstream, standin_deployment  # noqa: E402
from tests.integration.wire_clients import call  # noqa: E402
from tests.support import load_transcript, replay_points  # noqa: E402

GROUPS = {"with breaker": "agent-breaker", "without breaker": "agent-no-breaker"}


def config(upstream: StandinUpstream, archive: str) -> dict[str, Any]:
    def compact(**extra: Any) -> dict[str, Any]:
        settings = {"context_window": 16_000, "summary_model": "down", "archive_dir": archive, **extra}
        return {"compact": settings}

    return {
        "model_list": [
            standin_deployment("agent-breaker", upstream.url, "standin-agent-a", **compact()),
            standin_deployment(
                "agent-no-breaker", upstream.url, "standin-agent-b", **compact(breaker_failures=1_000_000)
            ),
            standin_deployment("down", upstream.url, "standin-fail-down"),
        ],
        "router_settings": {"num_retries": 0},
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=12)
    args = parser.parse_args()
    messages = load_transcript("claude_code_fa812bfe_pre_compact.json")
    long = messages[: replay_points(messages)[-1]]
    with StandinUpstream() as upstream, ProxyProcess(config(upstream, "/tmp/bench-breaker-archive")) as proxy:
        rows = []
        for label, group in GROUPS.items():
            since = len(upstream.requests)
            latencies = []
            for number in range(args.conversations):
                variant = [{"role": "user", "content": f"{label} conversation {number}"}, *long[1:]]
                start = time.perf_counter()
                headers, _ = call(proxy, "chat", group, variant)
                latencies.append((time.perf_counter() - start) * 1000)
            attempts = sum(
                1 for r in upstream.requests[since:] if "fail-down" in (r["body"] or {}).get("model", "")
            )
            after = latencies[3:]
            rows.append(
                (label, attempts, statistics.mean(after), max(after), headers.get("x-compact-reason"))
            )
    print(
        f"{args.conversations} conversations over the window, "
        "summary model always failing (2 retries, 1 s backoff)"
    )
    print(f"{'':18} {'summary attempts':>17} {'turns 4+: mean ms':>18} {'worst ms':>9}  last reason")
    for label, attempts, mean, worst, reason in rows:
        print(f"{label:18} {attempts:>17} {mean:>18.0f} {worst:>9.0f}  {reason}")
    ratio = rows[0][2] / rows[1][2]
    print(f"latency of turns 4+, with / without the breaker: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

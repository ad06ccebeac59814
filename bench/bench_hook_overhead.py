"""Hook overhead on requests under the threshold: the same proxy with and without compact_hook.

    .venv/bin/python bench/bench_hook_overhead.py [--requests 150]

Starts the stand-in upstream and two real LiteLLM proxies side by side (identical configs but
for the callback), then sends the same requests to both, interleaved, and compares client-side
latency medians. Two workloads: a short 10-message chat, and the 105K-token Claude Code
transcript under a 1M-token window (counted every turn, never compacted: the worst case for
per-request cost, served warm from the count cache as in a real session). Truncation is off
here so both proxies forward the same bytes: the figure is the hook's cost alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.harness import ProxyProcess, StandinUpstream, standin_deployment  # noqa: E402

TRANSCRIPT = ROOT / "tests/data/transcripts/openai/claude_code_fa812bfe_pre_compact.json"


def config(upstream_url: str, with_hook: bool) -> dict[str, Any]:
    compact = {"compact": {"context_window": 1_000_000, "tool_output_policy": "none"}}
    result: dict[str, Any] = {
        "model_list": [standin_deployment("bench", upstream_url, "standin-bench", **compact)],
        "router_settings": {"num_retries": 0},
    }
    if with_hook:
        result["litellm_settings"] = {"callbacks": "compact_hook.proxy_handler_instance"}
    return result


def timed_post(
    client: httpx.Client, proxy: ProxyProcess, body: bytes, hook_ms: list[float] | None = None
) -> float:
    start = time.perf_counter()
    response = client.post(
        f"{proxy.base_url}/chat/completions",
        content=body,
        headers={**proxy.auth_headers, "content-type": "application/json"},
    )
    elapsed = (time.perf_counter() - start) * 1000
    response.raise_for_status()
    if hook_ms is not None and "x-compact-duration-ms" in response.headers:
        hook_ms.append(float(response.headers["x-compact-duration-ms"]))
    return elapsed


def compare(name: str, messages: list[dict[str, Any]], proxies: dict[str, ProxyProcess], n: int) -> None:
    body = json.dumps({"model": "bench", "messages": messages}).encode()
    samples: dict[str, list[float]] = {label: [] for label in proxies}
    hook_ms: list[float] = []
    with httpx.Client(timeout=60) as client:
        for proxy in proxies.values():  # warm-up: imports, connection pools, count cache
            for _ in range(5):
                timed_post(client, proxy, body)
        for _ in range(n):
            for label, proxy in proxies.items():
                samples[label].append(timed_post(client, proxy, body, hook_ms))
    without, with_hook = (statistics.median(samples[k]) for k in ("without hook", "with hook"))
    p90 = {k: statistics.quantiles(v, n=10)[-1] for k, v in samples.items()}
    print(
        f"| {name} | {len(messages)} | {without:.2f} | {with_hook:.2f} | {with_hook - without:+.2f} "
        f"| {p90['without hook']:.2f} | {p90['with hook']:.2f} | {statistics.median(hook_ms):.3f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=150)
    args = parser.parse_args()
    short = [{"role": "system", "content": "You are terse."}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20} for i in range(9)
    ]
    long = json.loads(TRANSCRIPT.read_text(encoding="utf-8"))
    with StandinUpstream() as upstream:
        with (
            ProxyProcess(config(upstream.url, False)) as plain,
            ProxyProcess(config(upstream.url, True)) as hooked,
        ):
            proxies = {"without hook": plain, "with hook": hooked}
            print(f"{args.requests} interleaved requests per proxy; latency in ms, client side")
            print(
                "| workload | messages | median without | median with | added | p90 without | p90 with "
                "| hook's own time (median, x-compact-duration-ms) |"
            )
            print("|---|---|---|---|---|---|---|---|")
            compare("short chat", short, proxies, args.requests)
            compare("105K-token transcript, under threshold", long, proxies, args.requests)


if __name__ == "__main__":
    main()

"""Hook overhead under the threshold, per wire format: the same proxy with and without compact_hook.

    .venv/bin/python bench/bench_hook_overhead.py [--requests 150] [--against ../other-checkout]

Starts the stand-in upstream and two real LiteLLM proxies side by side (identical configs but for the
callback), then sends the same requests to both, interleaved, and compares client-side latency medians.
For each surface — chat completions, Anthropic /v1/messages (an ``anthropic/`` deployment), Responses —
two workloads: a short 10-message conversation, and the Claude Code session (105K tokens) under a
1M-token window: counted every turn, never compacted — the worst case for per-request cost, served
warm from the count cache as in a real session. Truncation is off so both proxies forward the same
bytes: the figure is the hook's cost alone. Every request carries an agent's tool (``bash``), as an
agent's do: with ``recall`` on (the default) the hook's proxy offers its recall tool beside it.
``--against``: a third proxy with another checkout's hook (its ``PYTHONPATH``), in the same rounds:
both hooks side by side on the same machine at the same moment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.harness import (  # noqa: E402
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    standin_deployment,
)
from tests.support import chat_to_responses, load_transcript  # noqa: E402

COMPACT = {"compact": {"context_window": 1_000_000, "tool_output_policy": "none"}}
RESERVE = {"max_tokens": 256}
BASH = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
TOOLS = {
    "chat": [
        {"type": "function", "function": {"name": "bash", "description": "Run a command", "parameters": BASH}}
    ],
    "anthropic": [{"name": "bash", "description": "Run a command", "input_schema": BASH}],
    "responses": [{"type": "function", "name": "bash", "description": "Run a command", "parameters": BASH}],
}
ROUTES = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}


def config(upstream: StandinUpstream, with_hook: bool) -> dict[str, Any]:
    result: dict[str, Any] = {
        "model_list": [
            standin_deployment("bench", upstream.url, "standin-quarter-bench", **COMPACT),
            anthropic_deployment(
                "bench-claude", upstream.root_url, "standin-quarter-bench-claude", **COMPACT
            ),
        ],
        "router_settings": {"num_retries": 0},
    }
    if with_hook:
        result["litellm_settings"] = {"callbacks": "compact_hook.proxy_handler_instance"}
    return result


def bodies() -> dict[tuple[str, str], dict[str, Any]]:
    """(format, workload) → request body."""
    short_chat = [{"role": "system", "content": "You are terse."}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20} for i in range(9)
    ]
    short_claude = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20} for i in range(9)
    ]
    chat = load_transcript("claude_code_fa812bfe_pre_compact.json")
    claude = load_transcript("claude_code_fa812bfe_pre_compact.json", "anthropic")["messages"]
    found: dict[tuple[str, str], dict[str, Any]] = {
        ("chat", "short"): {"model": "bench", "messages": short_chat},
        ("chat", "Claude Code session"): {"model": "bench", "messages": chat},
        ("anthropic", "short"): {"model": "bench-claude", "max_tokens": 256, "messages": short_claude},
        ("anthropic", "Claude Code session"): {
            "model": "bench-claude",
            "max_tokens": 256,
            "messages": claude,
        },
        ("responses", "short"): {"model": "bench", "input": chat_to_responses(short_chat)},
        ("responses", "Claude Code session"): {"model": "bench", "input": chat_to_responses(chat)},
    }
    return {key: {**body, "tools": TOOLS[key[0]]} for key, body in found.items()}


def timed_post(
    client: httpx.Client, proxy: ProxyProcess, route: str, body: bytes, hook_ms: list[float] | None = None
) -> float:
    start = time.perf_counter()
    response = client.post(
        f"{proxy.url}{route}",
        content=body,
        headers={**proxy.auth_headers, "content-type": "application/json"},
    )
    elapsed = (time.perf_counter() - start) * 1000
    response.raise_for_status()
    if hook_ms is not None and "x-compact-duration-ms" in response.headers:
        hook_ms.append(float(response.headers["x-compact-duration-ms"]))
    return elapsed


def compare(wire: str, workload: str, data: dict[str, Any], proxies: dict[str, ProxyProcess], n: int) -> str:
    """One row: the workload sent to every proxy in turn, ``n`` times; each hooked proxy's median
    latency, what it adds over the proxy without the hook, and the hook's own time."""
    body = json.dumps(data).encode()
    route = ROUTES[wire]
    samples: dict[str, list[float]] = {label: [] for label in proxies}
    hook_ms: dict[str, list[float]] = {label: [] for label in proxies}
    with httpx.Client(timeout=60) as client:
        for proxy in proxies.values():  # warm-up: imports, connection pools, count cache
            for _ in range(5):
                timed_post(client, proxy, route, body)
        for _ in range(n):
            for label, proxy in proxies.items():
                samples[label].append(timed_post(client, proxy, route, body, hook_ms[label]))
    without = statistics.median(samples[WITHOUT])
    cells = [f"{without:.2f}"]
    for label in list(proxies)[1:]:
        median = statistics.median(samples[label])
        cells += [f"{median:.2f}", f"{median - without:+.2f}", f"{statistics.median(hook_ms[label]):.3f}"]
    entries = len(data.get("messages") or data.get("input") or [])
    return f"| {wire} | {workload} | {entries} | " + " | ".join(cells) + " |"


WITHOUT = "without hook"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--against", type=Path, help="another checkout's hook, in a third proxy")
    args = parser.parse_args()
    with StandinUpstream() as upstream, contextlib.ExitStack() as stack:
        proxies = {
            WITHOUT: stack.enter_context(ProxyProcess(config(upstream, False))),
            "with hook": stack.enter_context(ProxyProcess(config(upstream, True))),
        }
        if args.against is not None:
            checkout = {"PYTHONPATH": str(args.against.resolve())}  # started anew: a fork has ours imported
            other = ProxyProcess(config(upstream, True), env=checkout, fork=False)
            proxies[f"`{args.against}`"] = stack.enter_context(other)
        workloads = bodies().items()
        rows = [compare(wire, workload, data, proxies, args.requests) for (wire, workload), data in workloads]
    print(f"{args.requests} interleaved requests per proxy and workload; latency in ms, client side")
    hooked = list(proxies)[1:]
    head = ["median without"] + [
        f"{h} {what}" for h in hooked for what in ("median", "added", "hook's own time")
    ]
    print("| format | workload | entries | " + " | ".join(head) + " |")
    print("|---" * (3 + len(head)) + "|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

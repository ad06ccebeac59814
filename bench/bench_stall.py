"""How long one pathological request stalls everyone else: the same proxy with and without compact_hook.

    .venv/bin/python bench/bench_stall.py [--probes-every 0.02]

Two real proxies side by side. For each pathological request — 8,000 short user messages that all
carry an interrupt marker (nothing can be summarized: everything must be fitted), a single 4 MB tool
output (truncated), a 1.2M-token history against a 16K window (the summary-call cap), a Responses
request carrying our compaction item 10,000 times (a Codex client's, made by the proxy) — it is sent to a
compacting model while a second client probes another model on the same proxy every 20 ms; and a
first contact (issue 63): a ~200K-token history new to the proxy, under a window it fits (counted
whole, nothing compacted: what every session's next turn is to a replica that just restarted). Reported:
the pathological request's own time, and the worst probe latency while it was in flight (the stall
every other request on that proxy saw), with and without the hook, and their ratio (target ≤ 1.5).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_first_contact import histories, own  # noqa: E402
from tests.integration.harness import ProxyProcess, StandinUpstream, standin_deployment  # noqa: E402
from tests.support import load_transcript  # noqa: E402


def config(upstream: StandinUpstream, with_hook: bool) -> dict[str, Any]:
    compact = {
        "compact": {"context_window": 16_000, "summary_context_window": 16_000, "retry_backoff_seconds": 0}
    }
    result: dict[str, Any] = {
        "model_list": [
            standin_deployment("agent", upstream.url, "standin-agent", **compact),
            standin_deployment("probe", upstream.url, "standin-probe"),
            standin_deployment("newcomer", upstream.url, "standin-newcomer", compact=FITS),
        ],
        "router_settings": {"num_retries": 0},
    }
    if with_hook:
        result["litellm_settings"] = {"callbacks": "compact_hook.proxy_handler_instance"}
    return result


FITS = {"context_window": 400_000}
"""The first contact's group: its ~200K tokens fit, so the hook counts them and forwards them whole."""


def first_contact() -> dict[str, Any]:
    """A session's ~200K tokens the proxy never saw (each entry's text its own: nothing counted before)."""
    history = own(histories("chat", 200_000, 1)[0], "first contact", shared=False)
    return {"model": "newcomer", "messages": history}


def pathological() -> dict[str, list[dict[str, Any]]]:
    markers = [{"role": "user", "content": f"[Request interrupted by user] turn {i}"} for i in range(8000)]
    output = "\n".join(f"line {i}: some long build output that keeps going and going" for i in range(70_000))
    big_output: list[dict[str, Any]] = [
        {"role": "user", "content": "build it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "b", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "b", "content": output},
        {"role": "user", "content": "and?"},
    ]
    session = load_transcript("claude_code_fa812bfe_pre_compact.json")
    huge = [m for _ in range(12) for m in session if m["role"] != "system"]
    huge.append({"role": "user", "content": "go on"})
    return {
        "8,000 interrupt-marker messages": markers,
        f"one {len(output) / 1e6:.1f} MB tool output": big_output,
        f"{len(huge):,}-message history (~1.2M tokens), 16K window": huge,
    }


def codex_flood(proxy: ProxyProcess) -> dict[str, Any]:
    """Codex's next request carrying our compaction item 10,000 times: the item made by the proxy's
    own answer to a trigger whose turn in progress (~200 KB of tool output) its memento keeps, so
    each expansion parses that much (a made-up item of our form where the proxy has no hook)."""
    history = [
        m for m in load_transcript("claude_code_fa812bfe_pre_compact.json")[:60] if m["role"] == "user"
    ]
    items = [{"type": "message", "role": "user", "content": str(m["content"])[:2000]} for m in history]
    output = "\n".join(f"line {i}: what the tool printed, a build log that goes on" for i in range(300))
    for n in range(10):  # the turn in progress, kept verbatim in the memento (~200 KB)
        items.append({"type": "function_call", "call_id": f"c{n}", "name": "shell", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": output})
    trigger = {"model": "agent", "input": [*items, {"type": "compaction_trigger"}], "stream": False}
    with httpx.Client(timeout=300) as client:
        answer = client.post(f"{proxy.base_url}/responses", json=trigger, headers=proxy.auth_headers)
    answered = answer.json().get("output") if answer.status_code == 200 else None
    found = [o for o in answered or [] if isinstance(o, dict) and o.get("type") == "compaction"]
    item = found[0] if found else {"type": "compaction", "encrypted_content": "compact_hook:" + "a" * 22}
    return {"model": "agent", "input": [item] * 10_000 + [{"role": "user", "content": "go on"}]}


def measure(
    proxy: ProxyProcess, request: list[dict[str, Any]] | dict[str, Any], every: float
) -> tuple[float, float, int]:
    """(pathological request ms, worst probe ms while it ran, probes sent). ``request``: chat messages,
    or a whole body (Responses' ``input``, or chat's ``messages`` for another model)."""
    path = "/responses" if isinstance(request, dict) and "input" in request else "/chat/completions"
    body = json.dumps(
        {"model": "agent", "messages": request} if isinstance(request, list) else request
    ).encode()
    probe = json.dumps({"model": "probe", "messages": [{"role": "user", "content": "ping"}]}).encode()
    headers = {**proxy.auth_headers, "content-type": "application/json"}
    running = threading.Event()
    running.set()
    worst: list[float] = []

    def probes() -> None:
        with httpx.Client(timeout=300) as client:
            while running.is_set():
                start = time.perf_counter()
                client.post(f"{proxy.base_url}/chat/completions", content=probe, headers=headers)
                worst.append((time.perf_counter() - start) * 1000)
                time.sleep(every)

    with httpx.Client(timeout=600) as client:
        client.post(f"{proxy.base_url}/chat/completions", content=probe, headers=headers)  # warm
        thread = threading.Thread(target=probes)
        thread.start()
        time.sleep(0.2)
        start = time.perf_counter()
        response = client.post(f"{proxy.base_url}{path}", content=body, headers=headers)
        took = (time.perf_counter() - start) * 1000
        running.clear()
        thread.join()
    if response.status_code != 200:
        print(f"  (the pathological request answered {response.status_code})")
    return took, max(worst), len(worst)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--probes-every", type=float, default=0.02)
    args = parser.parse_args()
    rows = []
    with StandinUpstream() as upstream:
        with ProxyProcess(config(upstream, False)) as plain, ProxyProcess(config(upstream, True)) as hooked:
            for name, messages in pathological().items():
                base = measure(plain, messages, args.probes_every)
                with_hook = measure(hooked, messages, args.probes_every)
                rows.append((name, base, with_hook))
            name = "Codex's compaction item 10,000 times (Responses)"
            base = measure(plain, codex_flood(plain), args.probes_every)
            rows.append((name, base, measure(hooked, codex_flood(hooked), args.probes_every)))
            newcomer = first_contact()
            name = "a ~200K-token history new to the proxy, fitting its window"
            rows.append(
                (
                    name,
                    measure(plain, newcomer, args.probes_every),
                    measure(hooked, newcomer, args.probes_every),
                )
            )
    print("| pathological request | its time without / with hook | worst probe: without | with | ratio |")
    print("|---|---|---|---|---|")
    for name, (took, stall, _), (took_hook, stall_hook, _) in rows:
        ratio = stall_hook / stall if stall else float("inf")
        times = f"{took:,.0f} / {took_hook:,.0f} ms"
        print(f"| {name} | {times} | {stall:,.0f} ms | {stall_hook:,.0f} ms | {ratio:.2f} |")


if __name__ == "__main__":
    main()

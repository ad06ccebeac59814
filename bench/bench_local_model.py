"""A session replayed turn by turn through a real proxy in front of llama.cpp's own server
(SmolLM2-135M-Instruct, ``tools/llama_server.py``), the README's settings and nothing else: the
server's window (4,096 tokens a slot by default) as ``max_input_tokens``, the same server as the
summary model. Issue 61's table, per wire: requests, refusals that reached the client, refusals in
all (each one the hook retried), summaries written by the model and applied, summary failures, the
largest request forwarded against the window.

    .venv/bin/python bench/bench_local_model.py [--wires chat,anthropic,responses] [--turns 20]
        [--window 4096] [--proxy-window N]

``--proxy-window``: the window the proxy is told (``max_input_tokens``) when it differs from the
server's: a larger one makes the server refuse, and the hook recover. Minutes on 2 cores: the model
writes its summaries at ~40 tokens a second here.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.harness import ProxyProcess, anthropic_deployment, free_port, standin_deployment
from tests.integration.llama_server import LlamaServer
from tests.integration.wire_clients import call
from tests.support import (
    anthropic_replay_points,
    chat_to_responses,
    load_transcript,
    replay_points,
    responses_replay_points,
)

SESSIONS = {
    "chat": ("openhands_ponylang__ponyc-4593.json", "openai"),
    "anthropic": ("claude_code_subagent_afc096d.json", "anthropic"),
    "responses": ("openhands_ponylang__ponyc-4593.json", "responses"),
}
MAX_TOKENS = 64
RETRIED = re.compile(r"was too long for the provider; retried at (\d+) tokens \(window (\d+)\)")


@dataclass
class Row:
    """One wire's replay."""

    wire: str
    requests: int = 0
    client_errors: list[str] = field(default_factory=list)
    retried: list[tuple[int, int]] = field(default_factory=list)
    refused_twice: int = 0
    """Refusals on the turn after a refused one."""
    last_refused: bool = False
    written: int = 0
    applied: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    largest: int = 0
    seconds: float = 0.0


def session(wire: str) -> tuple[list[Any], list[int], dict[str, Any]]:
    name, form = SESSIONS[wire]
    if form == "responses":
        items = chat_to_responses(load_transcript(name))
        return items, responses_replay_points(items), {}
    if form == "anthropic":
        data = load_transcript(name, "anthropic")
        messages = data["messages"] if isinstance(data, dict) else data
        system = data.get("system") if isinstance(data, dict) else None
        return messages, anthropic_replay_points(messages), {"system": system} if system else {}
    messages = load_transcript(name)
    return messages, replay_points(messages), {}


def replay(proxy: ProxyProcess, wire: str, turns: int) -> Row:
    row, started = Row(wire), time.monotonic()
    entries, points, extra = session(wire)
    model = "local-claude" if wire == "anthropic" else "local"
    seen_log = len(proxy.log_text())
    for end in points[:turns]:
        row.requests += 1
        try:
            limit = {"max_output_tokens" if wire == "responses" else "max_tokens": MAX_TOKENS}
            headers, _ = call(proxy, wire, model, entries[:end], **limit, **extra)
        except Exception as error:  # what the client got: the provider's refusal, if it reached it
            row.client_errors.append(type(error).__name__)
            continue
        log = proxy.log_text()
        retried = [(int(a), int(b)) for a, b in RETRIED.findall(log[seen_log:])]
        seen_log = len(log)
        row.retried += retried
        row.refused_twice += bool(retried) and row.last_refused
        row.last_refused = bool(retried)
        summarizer, cache = headers.get("x-compact-summarizer"), headers.get("x-compact-cache")
        row.written += cache == "miss" and summarizer == "model"
        row.applied += summarizer == "model"
        if headers.get("x-compact-reason") == "summary_failed":
            row.failures[headers.get("x-compact-summary-failure") or "?"] += 1
        row.largest = max(row.largest, int(headers.get("x-compact-tokens-after") or 0))
    row.seconds = time.monotonic() - started
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wires", default="chat,anthropic,responses")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--window", type=int, default=4096, help="the server's context a slot")
    parser.add_argument("--proxy-window", type=int, default=None, help="the window the proxy is told")
    args = parser.parse_args()
    told = args.proxy_window or args.window
    readme = {"compact": {"summary_model": "local-summary"}, "max_input_tokens": told}
    rows = []
    with LlamaServer(ctx=args.window) as llama:
        config = {
            "model_list": [
                standin_deployment("local", llama.url, "smollm2", **readme),
                anthropic_deployment("local-claude", llama.root_url, "smollm2", **readme),
                standin_deployment("local-summary", llama.url, "smollm2", max_input_tokens=args.window),
            ],
            "router_settings": {"num_retries": 0},
            "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
        }
        with ProxyProcess(config, env={"COMPACT_METRICS_PORT": str(free_port())}) as proxy:
            for wire in args.wires.split(","):
                rows.append(replay(proxy, wire, args.turns))
                print(f"{wire}: {rows[-1]}", file=sys.stderr, flush=True)
            said = [line for line in proxy.log_text().splitlines() if "compact_hook:" in line]
            print("\n".join(said[-60:]), file=sys.stderr)
    print(
        f"server window {args.window}, proxy told {told}, {args.turns} turns a wire, max_tokens {MAX_TOKENS}"
    )
    print(
        "| wire | requests | refusals reaching the client | refusals in all | summaries written / applied "
        "| refused again next turn | summary failures (then) | largest forwarded / window | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        failures = ", ".join(f"{count} {kind}" for kind, count in row.failures.items()) or "0"
        refused = len(row.retried) + len(row.client_errors)
        cells = (
            row.wire,
            row.requests,
            len(row.client_errors),
            refused,
            f"{row.written} / {row.applied}",
            row.refused_twice,
            failures,
            f"{row.largest} / {told}",
            f"{row.seconds:.0f}",
        )
        print("| " + " | ".join(str(cell) for cell in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Resident memory of the proxy, idle and under steady traffic: the same proxy with and without compact_hook.

    .venv/bin/python bench/bench_memory.py [--conversations 1000]

Two real proxies side by side. Each receives the same traffic: ``--conversations`` distinct
conversations (a SWE-agent session whose task text differs per conversation), two turns each — the
turn at which it compacts and a later one served from the store — so the count cache, the store, the
truncation cache and the archive log all fill. RSS is the sum over the proxy's process group, read
from /proc, idle after start-up and after each quarter of the traffic.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.harness import ProxyProcess, StandinUpstream, standin_deployment  # noqa: E402
from tests.support import load_transcript, replay_points  # noqa: E402

TRANSCRIPT = load_transcript("sweagent_fc_marshmallow-1867.json")


def config(upstream: StandinUpstream, archive: str, with_hook: bool) -> dict[str, Any]:
    compact = {"compact": {"context_window": 6000, "archive_dir": archive, "retry_backoff_seconds": 0}}
    result: dict[str, Any] = {
        "model_list": [standin_deployment("agent", upstream.url, "standin-agent", **compact)],
        "router_settings": {"num_retries": 0},
    }
    if with_hook:
        result["litellm_settings"] = {"callbacks": "compact_hook.proxy_handler_instance"}
    return result


def group_rss_mb(pid: int) -> float:
    """Resident set of every process in ``pid``'s process group (the proxy and any workers)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pid:
                continue
            for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1024


def conversation(number: int) -> list[list[dict[str, Any]]]:
    messages = [dict(m) for m in TRANSCRIPT]
    first = next(k for k, m in enumerate(messages) if m["role"] == "user")
    messages[first] = {**messages[first], "content": f"[conversation {number}] {messages[first]['content']}"}
    points = replay_points(messages)
    return [messages[: points[-3]], messages[: points[-1]]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--archive", default="/tmp/compact-bench-memory-archive")
    args = parser.parse_args()
    quarters = [args.conversations * k // 4 for k in range(1, 5)]
    rows: dict[str, list[float]] = {}
    with StandinUpstream() as upstream:
        with (
            ProxyProcess(config(upstream, args.archive, False)) as plain,
            ProxyProcess(config(upstream, args.archive, True)) as hooked,
        ):
            time.sleep(5)  # tokenizer preload and start-up settle
            proxies = {"without hook": plain, "with hook": hooked}
            rows = {label: [group_rss_mb(proxy.pid or 0)] for label, proxy in proxies.items()}
            with httpx.Client(timeout=120) as client:
                for number in range(args.conversations):
                    for turn in conversation(number):
                        body = json.dumps({"model": "agent", "messages": turn, "user": f"c{number}"})
                        for proxy in proxies.values():
                            response = client.post(
                                f"{proxy.base_url}/chat/completions",
                                content=body,
                                headers={**proxy.auth_headers, "content-type": "application/json"},
                            )
                            response.raise_for_status()
                    if number + 1 in quarters:
                        for label, proxy in proxies.items():
                            rows[label].append(group_rss_mb(proxy.pid or 0))
    print(f"RSS of the proxy (MB), idle and after each quarter of {args.conversations} conversations")
    print("| proxy | idle | " + " | ".join(f"after {n}" for n in quarters) + " |")
    print("|---|---|" + "---|" * len(quarters))
    for label, values in rows.items():
        print(f"| {label} | " + " | ".join(f"{value:,.0f}" for value in values) + " |")


if __name__ == "__main__":
    main()

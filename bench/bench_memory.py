"""Resident memory of the proxy, idle and under steady traffic: the same proxy with and without compact_hook.

    .venv/bin/python bench/bench_memory.py [--conversations 1000] [--setup stand-in|demo|three-tokenizers]

Two real proxies side by side, started with ``litellm --config`` as a user starts one (not forked
from the test launcher), identical but for the callback. Each receives the same traffic:
``--conversations`` distinct conversations (a SWE-agent session whose task text differs per
conversation), two turns each — the turn at which it compacts and a later one served from the store —
so the count cache, the store, the truncation cache and the archive log all fill. RSS is the sum over
the proxy's process group, read from /proc, idle after start-up and after each quarter of the traffic;
the last column is the difference, the figure issue 26 bounds at +100 MB.

Setups (the stand-in provider behind every deployment):

- ``stand-in``: one compacting deployment, counted with o200k_base.
- ``demo``: the models of ``litellm_config.yaml`` (what ``make run`` serves: o200k_base for the
  OpenAI and Gemini groups, the Claude tokenizer for the Anthropic ones), the demo groups pointed at
  the bench's stand-in; traffic alternates ``demo`` and ``demo-claude``.
- ``three-tokenizers``: three compacting deployments counted with o200k_base, cl100k_base and the
  Claude tokenizer; traffic goes round the three.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.harness import ProxyProcess, StandinUpstream, standin_deployment  # noqa: E402
from tests.support import load_transcript, replay_points  # noqa: E402

TRANSCRIPT = load_transcript("sweagent_fc_marshmallow-1867.json")
DEMO_STANDIN = "http://127.0.0.1:4001"
THREE = ("o200k_base", "cl100k_base", "claude")


def compact(archive: str, **extra: Any) -> dict[str, Any]:
    return {"compact": {"context_window": 6000, "archive_dir": archive, "retry_backoff_seconds": 0, **extra}}


def model_list(setup: str, upstream: StandinUpstream, archive: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The deployments of a setup, and the model groups the traffic goes round."""
    if setup == "stand-in":
        return [standin_deployment("agent", upstream.url, "standin-agent", **compact(archive))], ["agent"]
    if setup == "three-tokenizers":
        groups = [f"agent-{name}" for name in THREE]
        return [
            standin_deployment(group, upstream.url, "standin-agent", **compact(archive, tokenizer=name))
            for group, name in zip(groups, THREE, strict=True)
        ], groups
    demo = yaml.safe_load((ROOT / "litellm_config.yaml").read_text())["model_list"]
    models = copy.deepcopy(demo)
    for entry in models:
        params = entry["litellm_params"]
        base = params.get("api_base")
        if isinstance(base, str) and base.startswith(DEMO_STANDIN):
            params["api_base"] = upstream.root_url + base.removeprefix(DEMO_STANDIN)
        info = entry.get("model_info", {}).get("compact")
        if isinstance(info, dict):
            info["archive_dir"] = archive
    return models, ["demo", "demo-claude"]


def config(
    setup: str, upstream: StandinUpstream, archive: str, with_hook: bool
) -> tuple[dict[str, Any], list[str]]:
    models, groups = model_list(setup, upstream, archive)
    result: dict[str, Any] = {"model_list": models, "router_settings": {"num_retries": 0}}
    if with_hook:
        result["litellm_settings"] = {"callbacks": "compact_hook.proxy_handler_instance"}
    return result, groups


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
    parser.add_argument("--setup", choices=["stand-in", "demo", "three-tokenizers"], default="stand-in")
    parser.add_argument("--archive", default="/tmp/compact-bench-memory-archive")
    args = parser.parse_args()
    quarters = [args.conversations * k // 4 for k in range(1, 5)]
    rows: dict[str, list[float]] = {}
    with StandinUpstream() as upstream:
        plain_config, groups = config(args.setup, upstream, args.archive, False)
        hooked_config, _ = config(args.setup, upstream, args.archive, True)
        with (
            ProxyProcess(plain_config, fork=False) as plain,
            ProxyProcess(hooked_config, fork=False) as hooked,
        ):
            time.sleep(5)  # tokenizer preload and start-up settle
            proxies = {"without hook": plain, "with hook": hooked}
            rows = {label: [group_rss_mb(proxy.pid or 0)] for label, proxy in proxies.items()}
            with httpx.Client(timeout=120) as client:
                for number in range(args.conversations):
                    group = groups[number % len(groups)]
                    for turn in conversation(number):
                        body = json.dumps({"model": group, "messages": turn, "user": f"c{number}"})
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
    added = [hooked - plain for plain, hooked in zip(rows["without hook"], rows["with hook"], strict=True)]
    print(
        f"RSS of the proxy (MB), setup {args.setup}, idle and after each quarter of "
        f"{args.conversations} conversations"
    )
    print("| proxy | idle | " + " | ".join(f"after {n}" for n in quarters) + " |")
    print("|---|---|" + "---|" * len(quarters))
    for label, values in [*rows.items(), ("added by compact_hook", added)]:
        print(
            f"| {label} | "
            + " | ".join(
                f"{value:+,.0f}" if label.startswith("added") else f"{value:,.0f}" for value in values
            )
            + " |"
        )
    print(f"most added: {max(added):+,.0f} MB (goal: at most +100)")


if __name__ == "__main__":
    main()

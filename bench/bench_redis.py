"""Two replicas sharing state through each Redis topology: summary calls against compaction events.

    .venv/bin/python bench/bench_redis.py

Real servers started here (``tests/integration/redis_server.py``): one redis-server, a 3-master
Redis Cluster, a master and replica watched by two sentinels. For each setup two proxy replicas
with compact_hook share the Redis — named by ``COMPACT_REDIS_URL`` or through LiteLLM's own
settings (``general_settings.coordination_redis``) — and a Claude Code session is sent turn by
turn, alternating replicas (every other turn of its first 60, a 20,000-token window, the cheap
tiers off: ``tests/integration/stateful.py``), with the summary made at the trigger and prepared
ahead. The last setup kills one cluster node for the middle third of the turns and restarts it.

Measured per setup: compaction events (distinct summaries that reached the provider), summary
calls (with a node down: before + while down + after), turns that failed, and from each replica's
metrics the store's errors, fallbacks (calls answered by the in-process store) and outages (Redis
set aside as unreachable), summed. With no node down, the same split is 1 + 1 + 2.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.harness import SUMMARY_MARKER, ProxyProcess, StandinUpstream, free_port  # noqa: E402
from tests.integration.redis_server import RedisClusterServer, RedisSentinelServer, RedisServer  # noqa: E402
from tests.integration.stateful import POINTS, TRANSCRIPT, stateful_config  # noqa: E402
from tests.integration.wire_clients import ChatTurn, send_chat  # noqa: E402
from tests.support import metric_samples, metric_value, summaries_in  # noqa: E402

TURNS = POINTS[:60:2]
STORE_METRICS = ("store_errors", "store_fallbacks", "store_outages")


def replicas(
    standin: StandinUpstream, env: dict[str, str], general: dict[str, Any], prepare: bool
) -> list[ProxyProcess]:
    config = stateful_config(standin, tempfile.mkdtemp(prefix="bench-redis-"), prepare, **general)
    return [ProxyProcess(config, env={**env, "COMPACT_METRICS_PORT": str(free_port())}) for _ in range(2)]


def store_counts(proxies: list[ProxyProcess]) -> dict[str, float]:
    totals = dict.fromkeys(STORE_METRICS, 0.0)
    for proxy in proxies:
        port = proxy.extra_env["COMPACT_METRICS_PORT"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            samples = metric_samples(response.read().decode())
        for name in STORE_METRICS:
            totals[name] += metric_value(samples, f"compact_hook_{name}_total")
    return totals


def run(
    label: str,
    standin: StandinUpstream,
    shared: tuple[dict[str, str], dict[str, Any]],
    prepare: bool,
    during: dict[int, Callable[[], None]] | None = None,
) -> dict[str, Any]:
    """The turns through two replicas; ``during``: what to do before the turn of that number."""
    env, general = shared
    turns: list[ChatTurn] = []
    failed = 0
    with ExitStack() as stack:
        proxies = [stack.enter_context(proxy) for proxy in replicas(standin, env, general, prepare)]
        standin.reset()
        marks: list[int] = []
        for number, end in enumerate(TURNS):
            if number in (during or {}):
                marks.append(summary_calls(standin))
                (during or {})[number]()
            try:
                turns.append(send_chat(standin, proxies[number % 2], "agent", TRANSCRIPT[:end]))
            except Exception:
                failed += 1
        counts = store_counts(proxies)
    events = {summary for turn in turns for summary in summaries_in(turn.forwarded)}
    calls = summary_calls(standin)
    phases = [b - a for a, b in zip([0, *marks], [*marks, calls], strict=True)]
    return {
        "setup": label,
        "prepare": prepare,
        "events": len(events),
        "calls": calls if len(phases) == 1 else f"{calls} ({' + '.join(map(str, phases))})",
        "failed": failed,
        **counts,
    }


def summary_calls(standin: StandinUpstream) -> int:
    return sum(SUMMARY_MARKER in json.dumps(r["body"]["messages"]) for r in standin.chat_requests)


def stop_for_a_while(cluster: RedisClusterServer) -> None:
    """One master stopped, and time for the others to see it (the cluster then refuses commands:
    it needs every slot covered)."""
    cluster.stop_node(1)
    time.sleep(3)


def main() -> None:
    rows = []
    with (
        StandinUpstream() as standin,
        RedisServer() as single,
        RedisClusterServer() as cluster,
        RedisSentinelServer() as sentinel,
    ):
        coordination = {
            "cluster": {"startup_nodes": cluster.startup_nodes},
            "sentinel": {"sentinel_nodes": sentinel.sentinel_nodes, "service_name": sentinel.SERVICE},
        }
        setups: list[tuple[str, dict[str, str], dict[str, Any]]] = [
            ("one server, COMPACT_REDIS_URL", {"COMPACT_REDIS_URL": single.url}, {}),
            ("cluster, COMPACT_REDIS_URL", {"COMPACT_REDIS_URL": cluster.url}, {}),
            ("cluster, LiteLLM's settings", {}, {"coordination_redis": coordination["cluster"]}),
            ("sentinel, COMPACT_REDIS_URL", {"COMPACT_REDIS_URL": sentinel.url}, {}),
            ("sentinel, LiteLLM's settings", {}, {"coordination_redis": coordination["sentinel"]}),
        ]
        for prepare in (False, True):
            for label, env, general in setups:
                for server in (single, cluster, sentinel):
                    server.flush()
                rows.append(run(label, standin, (env, general), prepare))
                print(rows[-1], file=sys.stderr)
        cluster.flush()
        third = len(TURNS) // 3
        node_down = {third: lambda: stop_for_a_while(cluster), 2 * third: lambda: cluster.start_node(1)}
        label = "cluster, a node down for a third of the turns"
        rows.append(run(label, standin, ({"COMPACT_REDIS_URL": cluster.url}, {}), False, node_down))
    print(
        "| setup | summaries | compaction events | summary calls | failed turns | store errors | fallbacks |",
        end="",
    )
    print(" outages |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        when = "prepared ahead" if row["prepare"] else "at the trigger"
        print(
            f"| {row['setup']} | {when} | {row['events']} | {row['calls']} | {row['failed']} | "
            f"{row['store_errors']:.0f} | {row['store_fallbacks']:.0f} | {row['store_outages']:.0f} |"
        )


if __name__ == "__main__":
    main()

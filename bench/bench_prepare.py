"""What the compaction turns of a session wait: summary made on the turn (blocking) vs prepared ahead.

    .venv/bin/python bench/bench_prepare.py [--window 12000] [--summary-seconds 2] [--pause 1]

One real proxy, a stand-in provider whose summary model takes ``--summary-seconds`` to answer,
and for each wire format two model groups identical but for ``prepare`` (``false``: the turn that
reaches the trigger makes the summary; default: it is prepared from ``prepare_ratio``). The Claude
Code session is replayed on both modes at once, one format after the other, turn by turn with the
official SDKs, each agent pausing ``--pause`` seconds between turns (its tools running). Reported
per format and mode: compaction events, summary calls the provider saw, the hook's own time
(``x-compact-duration-ms``: what a turn waits for compaction, summary included) on compaction
turns (median, max) and on the other turns (max), the longest turn as a share of the summary
time, and the wall latency compaction turns added over the median turn without an event.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.harness import (  # noqa: E402
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    standin_deployment,
)
from tests.integration.wire_clients import call  # noqa: E402
from tests.support import claude_code_sessions  # noqa: E402

SESSIONS = claude_code_sessions()
MODES = {"blocking": {"prepare": False}, "prepared": {}}


def group(wire: str, mode: str) -> str:
    return f"{wire}-{mode}"


def config(upstream: StandinUpstream, window: int, archive: str) -> dict[str, Any]:
    models = []
    for wire in SESSIONS:
        for mode, extra in MODES.items():
            name = group(wire, mode)
            settings = {
                "context_window": window,
                "archive_dir": archive,
                "summary_model": f"sum-{name}",
                "summary_context_window": 400_000,
                "summary_max_tokens": 800,
                **extra,
            }
            deployment = anthropic_deployment if wire == "anthropic" else standin_deployment
            base = upstream.root_url if wire == "anthropic" else upstream.url
            models.append(deployment(name, base, f"standin-{name}", compact=settings))
            models.append(deployment(f"sum-{name}", base, f"standin-slow-sum-{name}"))
    return {
        "model_list": models,
        "router_settings": {"num_retries": 0},
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }


@dataclass
class Session:
    wire: str
    mode: str
    seconds: list[float] = field(default_factory=list)
    hook_ms: list[float] = field(default_factory=list)
    events: list[bool] = field(default_factory=list)


def run(proxy: ProxyProcess, wire: str, mode: str, pause: float, turns: int) -> Session:
    entries, points = SESSIONS[wire]
    session = Session(wire, mode)
    for number, end in enumerate(points[:turns]):
        started = time.monotonic()
        headers, _ = call(proxy, wire, group(wire, mode), entries[:end], stream=number % 2 == 1)
        session.seconds.append(time.monotonic() - started)
        session.hook_ms.append(float(headers.get("x-compact-duration-ms", "0")))
        compacted = headers.get("x-compact-compacted") == "true"
        session.events.append(compacted and headers.get("x-compact-cache") in ("miss", "prepared", "shared"))
        time.sleep(pause)
    return session


def summary_calls(upstream: StandinUpstream, name: str) -> int:
    return sum(1 for r in upstream.requests if (r["body"] or {}).get("model") == f"standin-slow-sum-{name}")


def row(session: Session, calls: int, summary_seconds: float) -> str:
    """The hook's own time is the wait a turn owes to compaction (the summary included); the
    wall latency added over the median plain turn also holds the proxy's noise (two agents on
    two cores)."""
    on_events = [ms for ms, event in zip(session.hook_ms, session.events, strict=True) if event] or [0.0]
    plain = [s for s, event in zip(session.seconds, session.events, strict=True) if not event]
    baseline = statistics.median(plain)
    added = [s - baseline for s, event in zip(session.seconds, session.events, strict=True) if event] or [0.0]
    others = [ms for ms, event in zip(session.hook_ms, session.events, strict=True) if not event]
    worst = max(session.hook_ms)
    return (
        f"| {session.wire} | {session.mode} | {sum(session.events)} | {calls} "
        f"| {statistics.median(on_events):,.0f} | {max(on_events):,.0f} | {max(others):,.0f} "
        f"| {worst / 1000 / summary_seconds:.2f} | {statistics.median(added) * 1000:,.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=int, default=12_000)
    parser.add_argument("--summary-seconds", type=float, default=2.0)
    parser.add_argument("--pause", type=float, default=1.0)
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--archive", default="/tmp/compact-bench-archive")
    args = parser.parse_args()
    with StandinUpstream(slow_seconds=args.summary_seconds) as upstream:
        with ProxyProcess(config(upstream, args.window, args.archive)) as proxy:
            for wire, (entries, points) in SESSIONS.items():  # warm up: tokenizers, clients
                for mode in MODES:
                    call(proxy, wire, group(wire, mode), entries[: points[0]])
            sessions: list[Session] = []
            for wire in SESSIONS:  # one format at a time, its two modes side by side
                with ThreadPoolExecutor(max_workers=len(MODES)) as pool:
                    futures = [pool.submit(run, proxy, wire, mode, args.pause, args.turns) for mode in MODES]
                    sessions.extend(future.result() for future in futures)
            time.sleep(args.summary_seconds + 0.5)  # let the last preparations land, to count them
            calls = {(s.wire, s.mode): summary_calls(upstream, group(s.wire, s.mode)) for s in sessions}
    print(
        f"window {args.window:,}; summary model {args.summary_seconds:g} s; agent pause {args.pause:g} s; "
        f"{len(sessions[0].seconds)}+ turns per session"
    )
    print(
        "| format | mode | compaction events | summary calls | hook ms on compaction turns, median "
        "| max | hook ms on other turns, max | longest turn / summary time "
        "| wall ms added on compaction turns, median |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for session in sessions:
        print(row(session, calls[(session.wire, session.mode)], args.summary_seconds))


if __name__ == "__main__":
    main()

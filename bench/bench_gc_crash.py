"""How often the proxy dies under a two-tenant session, by who runs the garbage collector.

    .venv/bin/python bench/bench_gc_crash.py [--rounds 10]

Each round starts a real proxy once with ``COMPACT_GC=interpreter`` and once with ``auto`` (the loop
collects before CPython 3.12), alternating, and plays ``test_tenants_proxy``'s session: tenant B's
agent session turn by turn (every other turn streamed) with tenant A's image and throttled requests
between. Streams leave LiteLLM's ``CustomStreamWrapper`` in cycles; its finalizer sets context
variables, which frees the context a ``ContextVar.set`` is copying when the interpreter collects
inside it (CPython gh-148891). Prints each run's end and, per mode, how many runs the proxy died in
(SIGSEGV) or failed otherwise. Not a timing: a count of crashes, each run ~25 s.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration import test_tenants_proxy as tenants  # noqa: E402
from tests.integration.harness import ProxyProcess, StandinUpstream, free_port  # noqa: E402

MODES = ("interpreter", "auto")


def run_once(standin: StandinUpstream, mode: str) -> str:
    """``ok``, ``SIGSEGV`` (the proxy died of it) or the failure the client saw."""
    config = tenants.config(standin, Path(tempfile.mkdtemp(prefix="gc-crash-")), 4_000)
    env = {"COMPACT_METRICS_PORT": str(free_port()), "COMPACT_GC": mode}
    proxy = ProxyProcess(config, env=env, fork=False).start()  # as `litellm --config` runs, not forked
    try:
        tenants.tenant_b(proxy, between=lambda number: tenants.tenant_a(proxy, number))
    except Exception as exc:  # the proxy died, or answered an error
        return "SIGSEGV" if ended(proxy) == -signal.SIGSEGV else type(exc).__name__
    finally:
        proxy.stop()
    return "ok"


def ended(proxy: ProxyProcess) -> int | None:
    """The proxy's exit status, once it has one (a few seconds at most after it died)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        status = proxy._proc.poll() if proxy._proc is not None else None
        if status is not None:
            return status
        time.sleep(0.1)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    ends: dict[str, Counter[str]] = {mode: Counter() for mode in MODES}
    with StandinUpstream() as standin:
        for number in range(args.rounds):
            for mode in MODES:
                end = run_once(standin, mode)
                ends[mode][end] += 1
                print(f"round {number + 1}, COMPACT_GC={mode}: {end}", flush=True)
    print(f"\nPython {sys.version.split()[0]}, {args.rounds} runs per mode")
    print("| COMPACT_GC | runs | the proxy died (SIGSEGV) | other failures | ok |")
    print("|---|---|---|---|---|")
    for mode, counted in ends.items():
        other = sum(count for end, count in counted.items() if end not in ("ok", "SIGSEGV"))
        print(f"| {mode} | {args.rounds} | {counted['SIGSEGV']} | {other} | {counted['ok']} |")


if __name__ == "__main__":
    main()

"""The throughput the hook leaves a proxy, as CPU instructions: bench_load's question, without its noise.

    .venv/bin/python bench/bench_proxy_instructions.py [--against ../other-checkout] [--sessions 10]

A saturated proxy is bound by its process's CPU: the requests/s it keeps with the hook on is, to the
loop's share of the machine, the inverse of the CPU a request costs (``bench/bench_load.py`` prints both
and they agree to ~1%). On a shared 2-core machine that CPU drifts by ±8% from round to round — more
than the hook's whole share — so here it is counted instead: the real proxy of bench_load (one
LiteLLM proxy, a ``hooked`` group with a 32K window and a ``plain`` one without a ``compact`` block, on
bench_load's stand-in in its own process) runs under valgrind's callgrind, instrumentation off while
it starts and one pass warms both groups, then on for S sessions × 12 turns of the Claude Code history
sent to each group (the sessions at once, as bench_load sends them; ``callgrind_control`` dumps the
count after each group). Every instruction of the process is counted — LiteLLM's, the collector's,
the threads' — so what the hook makes LiteLLM do counts too. Plain over hooked instructions a request
is the throughput the hook leaves; the same checkout gives the same figure to ~0.5% (the sessions
interleave as the stand-in answers).

``--against`` counts another checkout's proxy the same way (its ``compact_hook`` imported by the
proxy) and gives this checkout's hooked instructions over that one's. About 8 minutes a checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import bench_load  # noqa: E402
from tests.integration.harness import ProxyProcess, litellm_executable  # noqa: E402

GROUPS = ("plain", "hooked")
TURNS = 12


class Counted(ProxyProcess):
    """The proxy under callgrind, counting nothing until told (``callgrind_control``); ``cache``:
    with callgrind's cache simulation (its misses too)."""

    def __init__(self, config: dict[str, object], out: Path, checkout: Path, cache: bool = False) -> None:
        env = {"PYTHONPATH": str(checkout), "PYTHONHASHSEED": "0"}
        super().__init__(config, env=env, fork=False, startup_timeout=900)
        self.out, self.cache = out, cache

    def _command(self) -> list[str]:
        valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self.out}"]
        if self.cache:
            valgrind.append("--cache-sim=yes")
        return [*valgrind, sys.executable, str(litellm_executable()), *super()._command()[1:]]

    def control(self, *command: str) -> None:
        subprocess.run(["callgrind_control", *command, str(self.pid)], check=True, capture_output=True)


async def send(proxy: ProxyProcess, group: str, sessions: int, label: str) -> None:
    """S sessions at once, 12 turns each (bench_load's requests)."""
    histories = bench_load.sessions("chat", TURNS)
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(timeout=900, limits=limits) as client:

        async def one(session: int) -> None:
            for history in histories:
                content = bench_load.body("chat", group, history, f"{label} session {session}")
                headers = {**proxy.auth_headers, "content-type": "application/json"}
                route = f"{proxy.url}/v1/chat/completions"
                response = await client.post(route, content=content, headers=headers)
                response.raise_for_status()

        await asyncio.gather(*(one(s) for s in range(sessions)))


def cost(dump: Path) -> tuple[int, int]:
    """The dump's instructions, and its estimated cycles where it simulated the caches: callgrind's
    own estimate, an instruction plus 10 for each first-level miss and 100 for each last-level one
    (without the simulation, the instructions again)."""
    text = dump.read_text()
    events = re.search(r"^events: (.+)$", text, re.MULTILINE)
    totals = re.search(r"^totals: (.+)$", text, re.MULTILINE)
    if events is None or totals is None:
        raise RuntimeError(f"no totals in {dump}")
    found = dict(zip(events[1].split(), map(int, totals[1].split()), strict=False))
    first = sum(found.get(name, 0) for name in ("I1mr", "D1mr", "D1mw"))
    last = sum(found.get(name, 0) for name in ("ILmr", "DLmr", "DLmw"))
    return found["Ir"], found["Ir"] + 10 * first + 100 * last


def count(checkout: Path, sessions: int, folder: Path, cache: bool = False) -> dict[str, float]:
    """Instructions a request the proxy spends on each group, with ``checkout``'s hook (``cache``: its
    estimated cycles instead)."""
    standin, url = bench_load.start_standin()
    out = folder / f"callgrind-{checkout.name}.out"
    config = bench_load.config("chat", url, Path(tempfile.mkdtemp(prefix="archive-", dir=folder)))
    figures: dict[str, float] = {}
    try:
        proxy = Counted(config, out, checkout, cache)
        with proxy:
            for group in GROUPS:
                asyncio.run(send(proxy, group, sessions, "warm"))
            proxy.control("--instr=on")
            for number, group in enumerate(GROUPS, start=1):
                proxy.control("--zero")
                asyncio.run(send(proxy, group, sessions, "counted"))
                proxy.control("--dump")
                figures[group] = cost(Path(f"{out}.{number}"))[cache] / (sessions * TURNS)
    finally:
        standin.terminate()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", type=Path, help="another checkout, counted the same way")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="keep callgrind's dumps here (for callgrind_annotate)")
    parser.add_argument(
        "--cache", action="store_true", help="simulate the caches: estimated cycles, not instructions"
    )
    args = parser.parse_args()
    checkouts = [ROOT, *([args.against.resolve()] if args.against else [])]
    unit = "estimated cycles" if args.cache else "instructions"
    print(f"| checkout | plain, {unit} a request | hooked | throughput left (plain / hooked) |")
    print("|---|---|---|---|")
    hooked = []
    with tempfile.TemporaryDirectory(prefix="bench-proxy-instructions-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        for checkout in checkouts:
            figures = count(checkout, args.sessions, folder, args.cache)
            hooked.append(figures["hooked"])
            plain, on = figures["plain"] / 1e6, figures["hooked"] / 1e6
            print(f"| `{checkout}` | {plain:.2f} M | {on:.2f} M | **{plain / on:.3f}** |", flush=True)
    if args.against:
        print(f"\nHooked, this checkout over `{checkouts[1]}`: **{hooked[0] / hooked[1]:.3f}**")


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    main()

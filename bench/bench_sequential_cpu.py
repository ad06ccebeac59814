"""What a hooked request costs the proxy's event loop, one request at a time: bench_load's question
without a saturated machine's noise.

    .venv/bin/python bench/bench_sequential_cpu.py [--rounds 2] [--sessions 10]

bench_load's proxy and requests (a ``hooked`` group with a 32K window, a ``plain`` one without a
``compact`` block, on its stand-in in its own process), sent one at a time: each turn of each session
to one group and then the other (the order alternating), after a round that warms both. For each
request, the CPU the proxy's main thread — its event loop — spent from the request to 15 ms after the
response (the success log runs then), from its ``schedstat`` (nanoseconds). Nothing else is in flight,
so what differs between the groups is what the hooked request made the loop do: the hook's own work,
and anything it makes LiteLLM or the collector do. Requests/s under load follow the loop's CPU a
request (``bench_load.py`` prints both); here the two groups' CPU a request comes without the ±5% a
shared machine moves a saturated run by, though each request starts colder than under load (a whole
request of LiteLLM's between two of ours). What a stage costs: switch it off in the proxies
(``PYTHONPATH=bench/ablation ABLATE=engine``, see ``bench/ablation/sitecustomize.py``). Prints; saves
nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import bench_load  # noqa: E402
from tests.integration.harness import ProxyProcess  # noqa: E402

GROUPS = ("hooked", "plain")
AFTER_SECONDS = 0.015
"""After each response: LiteLLM's success log (ours in it) runs once the client has its answer."""


def spent(client: httpx.Client, proxy: ProxyProcess, body: bytes) -> float:
    """The loop's CPU over one request and what runs after its response, ms."""
    before = bench_load.loop_cpu(proxy)
    response = client.post(
        f"{proxy.url}/v1/chat/completions",
        content=body,
        headers={**proxy.auth_headers, "content-type": "application/json"},
    )
    response.raise_for_status()
    time.sleep(AFTER_SECONDS)
    return (bench_load.loop_cpu(proxy) - before) * 1000


def measured(proxy: ProxyProcess, rounds: int, sessions: int) -> dict[str, dict[int, list[float]]]:
    """Each group's CPU a request, by turn, over ``rounds`` after the warming one."""
    histories = bench_load.sessions("chat", 12)
    found: dict[str, dict[int, list[float]]] = {group: {} for group in GROUPS}
    with httpx.Client(timeout=120) as client:
        for number in range(rounds + 1):
            for session in range(sessions):
                for turn, history in enumerate(histories):
                    order = GROUPS if (session + turn) % 2 == 0 else GROUPS[::-1]
                    for group in order:
                        body = bench_load.body("chat", group, history, f"round {number} session {session}")
                        ms = spent(client, proxy, body)
                        if number > 0:
                            found[group].setdefault(turn, []).append(ms)
    return found


def report(found: dict[str, dict[int, list[float]]]) -> str:
    every = {group: [ms for values in turns.values() for ms in values] for group, turns in found.items()}
    hooked, plain = statistics.mean(every["hooked"]), statistics.mean(every["plain"])
    by_turn = [
        statistics.median(found["hooked"][turn]) - statistics.median(found["plain"][turn])
        for turn in sorted(found["hooked"])
    ]
    return "\n".join(
        [
            f"{len(every['hooked'])} requests a group, one at a time; the event loop's CPU a request: "
            f"hooked {hooked:.3f} ms, plain {plain:.3f} ms, the hooked one's extra {hooked - plain:+.3f} ms "
            f"(plain over hooked **{plain / hooked:.3f}**)",
            "extra by turn (medians): " + ", ".join(f"{extra:+.2f}" for extra in by_turn),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=10)
    args = parser.parse_args()
    standin, url = bench_load.start_standin()
    try:
        with tempfile.TemporaryDirectory() as archive:
            with ProxyProcess(bench_load.config("chat", url, Path(archive))) as proxy:
                found = measured(proxy, args.rounds, args.sessions)
    finally:
        standin.terminate()
        standin.wait()
    print(report(found))


if __name__ == "__main__":
    main()

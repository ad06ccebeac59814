"""First contact: conversations new to the proxy arriving at once, among ongoing ones (issue 63).

    .venv/bin/python bench/bench_first_contact.py [--new 40] [--ongoing 40] [--tokens 20000]
                                                  [--wire chat] [--rounds 2] [--shared]
    .venv/bin/python bench/bench_first_contact.py --restart [--store redis] [--tokens 100000]

**Burst.** One proxy, two model groups on one stand-in (as ``bench_load.py``): ``hooked`` compacts
(a window of twice the sessions' size, at least 32K), ``plain`` has no ``compact`` block. In each
round, for each group (the order alternating): ``ongoing`` sessions the proxy already knows (their
first turn sent before, untimed) send their next three turns one after the other, while ``new``
conversations of ~``tokens`` tokens arrive at once, each then sending its next turn. Every
request of the burst is timed by the client. Each session's text is its own (every message
tagged with it): nothing a new conversation sends was counted before, as after a restart or for
agents on different tasks. ``--shared``: only the first message is tagged (``bench_load``'s
sessions: the rest's counts are shared).

**Restart.** ``ongoing`` sessions of ~``tokens`` tokens each send two turns through each group
(untimed); the proxy is stopped and started again on the same store (``--store``: ``redis`` a
real redis-server; ``file`` the machine's file; ``memory`` nothing kept); then every session's next
turn is sent at once, one group after the other (hooked first, then plain), and timed.

Reported, hooked against plain of the same run: p50 and p99 of every timed request, of the first
contacts (a conversation's first request to this proxy process) and of the rest, requests/s
over the burst, and the hook's own time (``x-compact-duration-ms``) on a first contact. Results:
``bench/results/first_contact.md`` (appended) and printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_load import ROUTES, body, config, loop_cpu, p, profiler, reported, route, start_standin  # noqa: E402
from compact_hook import count_tokens  # noqa: E402
from tests.integration.harness import ProxyProcess, free_port  # noqa: E402
from tests.integration.redis_server import RedisServer  # noqa: E402
from tests.support import load_transcript  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "first_contact.md"
TRANSCRIPT = "claude_code_fa812bfe_pre_compact.json"
ONGOING_TURNS = 3
"""Turns each ongoing session sends during a burst."""
GROUPS = ("hooked", "plain")
WARM = [{"role": "user", "content": "hello"}]
"""A request that is no session's: LiteLLM's first to each group made before the clock starts."""


@dataclass
class Timed:
    group: str
    first: bool
    """The conversation's first request to this proxy process."""
    ms: float
    hook_ms: float | None
    prepared: bool = False
    """The hook started preparing the conversation's compaction (a summary call in the background)."""


@dataclass
class Run:
    group: str
    seconds: float
    samples: list[Timed] = field(default_factory=list)
    loop: float = 0.0
    """CPU seconds of the proxy's event loop (its main thread) over the timed requests."""
    threads: float = 0.0
    """CPU seconds of all the proxy's threads (the loop's and those it hands work to)."""


def process_cpu(proxy: ProxyProcess) -> float:
    """CPU seconds of all the proxy's threads (``/proc``: user and system time, in clock ticks)."""
    fields = Path(f"/proc/{proxy.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def measured(run: Run, proxy: ProxyProcess) -> Iterator[None]:
    """``run``'s wall time and the proxy's CPU (its loop's, all its threads') over the block."""
    loop, threads, began = loop_cpu(proxy), process_cpu(proxy), time.perf_counter()
    yield
    run.seconds = time.perf_counter() - began
    run.loop, run.threads = loop_cpu(proxy) - loop, process_cpu(proxy) - threads


def ends(messages: list[dict[str, Any]]) -> list[int]:
    """Where an agent's request ends: after a user or tool entry that no tool entry follows."""
    return [
        i + 1
        for i, m in enumerate(messages)
        if m["role"] in ("user", "tool") and (i + 1 == len(messages) or messages[i + 1]["role"] != "tool")
    ]


def transcript(wire: str) -> list[dict[str, Any]]:
    """The Claude Code session: chat entries, or Anthropic's for ``/v1/messages``."""
    if wire == "anthropic":
        return list(load_transcript(TRANSCRIPT, "anthropic")["messages"])
    return list(load_transcript(TRANSCRIPT))


def histories(wire: str, tokens: int, turns: int) -> list[list[dict[str, Any]]]:
    """``turns`` requests of one session: the first at ~``tokens`` tokens, each next one adding the
    agent's next step. Past the transcript's ~105K tokens it is sent again after itself (the copy
    tagged apart, so it is new text)."""
    whole = transcript(wire)
    session = list(whole)
    copies = 1
    while count_tokens(session) < tokens * 1.3:
        session += [tagged(entry, f"copy {copies}") for entry in whole]
        copies += 1
    cuts = ends(session)
    start = min(range(len(cuts)), key=lambda k: abs(count_tokens(session[: cuts[k]]) - tokens))
    return [session[:cut] for cut in cuts[start : start + turns]]


def tagged(entry: dict[str, Any], label: str) -> dict[str, Any]:
    """``entry`` with ``label`` before each of its texts: the same shape, new text."""
    entry = copy.deepcopy(entry)
    content = entry.get("content")
    if isinstance(content, str):
        entry["content"] = f"[{label}] {content}"
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                block["text"] = f"[{label}] {block['text']}"
            elif isinstance(block, dict) and isinstance(block.get("content"), str):
                block["content"] = f"[{label}] {block['content']}"
    return entry


def own(history: list[dict[str, Any]], label: str, shared: bool) -> list[dict[str, Any]]:
    """The session's text made its own: every message tagged, or only the first (``shared``)."""
    if shared:
        return history
    return [history[0], *(tagged(entry, label) for entry in history[1:])]


class Sessions:
    """Each session's requests, made once (tagging 200K tokens of text is the client's work, not
    the proxy's: done before the clock starts)."""

    def __init__(self, args: argparse.Namespace, turns: int) -> None:
        self.args, self.base = args, histories(args.wire, args.tokens, turns)

    def requests(self, group: str, label: str) -> list[bytes]:
        tag = f"{label} {group}"
        mine = [own(history, tag, self.args.shared) for history in self.base]
        return [body(self.args.wire, group, history, tag) for history in mine]


async def send(client: httpx.AsyncClient, proxy: ProxyProcess, path: str, content: bytes) -> httpx.Response:
    """One request to ``path`` (``route``: the wire's, and for Google the group's)."""
    response = await client.post(
        f"{proxy.url}{path}",
        content=content,
        headers={**proxy.auth_headers, "content-type": "application/json"},
    )
    if response.status_code != 200:
        raise RuntimeError(f"{response.status_code} {response.text[:2000]}")
    return response


async def timed(
    client: httpx.AsyncClient,
    proxy: ProxyProcess,
    wire: str,
    requests: list[bytes],
    group: str,
    first: bool = False,
) -> list[Timed]:
    """The requests one after the other; only the first may be a first contact."""
    out, path = [], route(wire, group)
    for number, content in enumerate(requests):
        start = time.perf_counter()
        response = await send(client, proxy, path, content)
        ms = (time.perf_counter() - start) * 1000
        hook = response.headers.get("x-compact-duration-ms")
        prepared = response.headers.get("x-compact-prepare") == "started"
        out.append(Timed(group, first and number == 0, ms, float(hook) if hook else None, prepared))
    return out


@contextlib.asynccontextmanager
async def client_for(sessions: int) -> Any:
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        yield client


async def burst(args: argparse.Namespace, proxy: ProxyProcess, group: str, label: str, made: Sessions) -> Run:
    """The ongoing sessions' next turns while the new ones arrive at once."""
    ongoing = [made.requests(group, f"{label} ongoing {s}") for s in range(args.ongoing)]
    new = [made.requests(group, f"{label} new {s}")[:2] for s in range(args.new)]
    async with client_for(args.ongoing + args.new) as client:
        for start in range(0, args.ongoing, 8):  # the ongoing sessions' first turn: untimed
            path = route(args.wire, group)
            await asyncio.gather(*(send(client, proxy, path, o[0]) for o in ongoing[start : start + 8]))
        run = Run(group, 0.0)
        with measured(run, proxy):
            found = await asyncio.gather(
                *(timed(client, proxy, args.wire, o[1 : 1 + ONGOING_TURNS], group) for o in ongoing),
                *(timed(client, proxy, args.wire, n, group, first=True) for n in new),
            )
    run.samples = [sample for samples in found for sample in samples]
    return run


async def bursts(args: argparse.Namespace, proxy: ProxyProcess) -> list[Run]:
    made = Sessions(args, 1 + ONGOING_TURNS)
    runs = []
    for number in range(args.rounds):
        order = ("plain", "hooked") if number % 2 == 0 else ("hooked", "plain")
        for group in (g for g in order if args.only in (None, g)):
            done = await burst(args, proxy, group, f"round {number}", made)
            runs.append(done)
            print(f"round {number} {group}: {len(done.samples)} requests in {done.seconds:.1f} s", flush=True)
    return runs


@contextlib.contextmanager
def store(kind: str) -> Iterator[dict[str, str]]:
    """The proxy's environment for a store that outlives it (or not: ``memory``)."""
    if kind == "redis":
        with RedisServer() as redis:
            yield {"COMPACT_REDIS_URL": redis.url, "COMPACT_STORE": "redis"}
    elif kind == "file":
        with tempfile.TemporaryDirectory(prefix="first-contact-store-") as folder:
            yield {"COMPACT_STORE": "file", "COMPACT_STORE_DIR": folder}
    else:
        yield {"COMPACT_STORE": "memory"}


async def restart(args: argparse.Namespace, found: dict[str, Any], env: dict[str, str]) -> list[Run]:
    """Every session two turns in, the proxy restarted, every session's next turn at once."""
    made, port = Sessions(args, 3), free_port()
    sessions = {g: [made.requests(g, f"restart {s}") for s in range(args.ongoing)] for g in GROUPS}
    with ProxyProcess(found, port=port, env=env) as proxy:
        async with client_for(args.ongoing) as client:
            for group, requests in sessions.items():
                for start in range(0, args.ongoing, 8):
                    batch = requests[start : start + 8]
                    await asyncio.gather(*(timed(client, proxy, args.wire, r[:2], group) for r in batch))
    runs = []
    with ProxyProcess(found, port=port, env=env) as proxy:
        async with client_for(args.ongoing) as client:
            for group in sessions:  # LiteLLM's own first requests (its clients made): before the clock
                await send(client, proxy, route(args.wire, group), body(args.wire, group, WARM, "warm"))
            for group, requests in sessions.items():
                runs.append(await at_once(client, proxy, args.wire, group, [r[2:3] for r in requests]))
                print(f"after the restart, {group}: {runs[-1].seconds:.1f} s", flush=True)
    return runs


async def at_once(
    client: httpx.AsyncClient, proxy: ProxyProcess, wire: str, group: str, requests: list[list[bytes]]
) -> Run:
    """Each session's requests, all sessions at once: each one's first a first contact."""
    run = Run(group, 0.0)
    with measured(run, proxy):
        done = await asyncio.gather(*(timed(client, proxy, wire, r, group, first=True) for r in requests))
    run.samples = [sample for samples in done for sample in samples]
    return run


def row(name: str, hooked: list[float], plain: list[float]) -> str:
    if not hooked or not plain:
        return f"| {name} | {len(hooked)} | | | | |"
    h50, h99, p50, p99 = p(hooked, 0.5), p(hooked, 0.99), p(plain, 0.5), p(plain, 0.99)
    return (
        f"| {name} | {len(hooked)} | {h50:.0f} / {p50:.0f} ({h50 / p50:.2f}) | "
        f"{h99:.0f} / {p99:.0f} (**{h99 / p99:.2f}**) | {max(hooked):.0f} / {max(plain):.0f} |"
    )


def table(runs: list[Run], args: argparse.Namespace) -> str:
    samples = {g: [s for r in runs if r.group == g for s in r.samples] for g in GROUPS}
    rate = {g: len(samples[g]) / sum(r.seconds for r in runs if r.group == g) for g in samples}

    def ms(group: str, first: bool | None = None) -> list[float]:
        return [s.ms for s in samples[group] if first is None or s.first is first]

    def median(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    def cpu(group: str, kind: str) -> float:
        spent = sum(r.loop if kind == "loop" else r.threads for r in runs if r.group == group)
        return 1000 * spent / len(samples[group])

    own_ms = [s.hook_ms for s in samples["hooked"] if s.first and s.hook_ms is not None]
    rest_ms = [s.hook_ms for s in samples["hooked"] if not s.first and s.hook_ms is not None]
    case = (
        f"restart on the {args.store} store: {args.ongoing} sessions' next turn at once"
        if args.restart
        else f"burst: {args.new} new conversations at once among {args.ongoing} ongoing, {args.rounds} rounds"
    )
    shared = ", text shared across sessions (`--shared`)" if args.shared else ", each session's text its own"
    return "\n".join(
        [
            f"### {time.strftime('%Y-%m-%d %H:%M')} — {case}; {args.wire}, ~{args.tokens:,} tokens a "
            f"session{shared}, window {window(args):,}, {os.cpu_count()} cores",
            "",
            "| requests | n | p50 ms hooked / plain (ratio) | p99 ms hooked / plain (ratio) | slowest |",
            "|---|---|---|---|---|",
            row("all", ms("hooked"), ms("plain")),
            row("first contacts", ms("hooked", True), ms("plain", True)),
            row("the others", ms("hooked", False), ms("plain", False)),
            "",
            f"Requests/s hooked over plain: **{rate['hooked'] / rate['plain']:.3f}** "
            f"({rate['hooked']:.1f} / {rate['plain']:.1f}). The hook's own time on a first contact: "
            f"median {median(own_ms):.1f} ms, p99 {p(own_ms, 0.99):.1f} ms; on the others median "
            f"{median(rest_ms):.2f} ms, p99 {p(rest_ms, 0.99):.2f} ms. Compactions prepared ahead (a "
            f"summary call each, in the background): {sum(s.prepared for s in samples['hooked'])}.",
            "",
            f"The proxy's CPU a request, hooked / plain: its event loop {cpu('hooked', 'loop'):.1f} / "
            f"{cpu('plain', 'loop'):.1f} ms (**{cpu('hooked', 'loop') / cpu('plain', 'loop'):.2f}**: what a "
            f"saturated loop is bound by), all its threads {cpu('hooked', 'threads'):.1f} / "
            f"{cpu('plain', 'threads'):.1f} ms ({cpu('hooked', 'threads') / cpu('plain', 'threads'):.2f}: "
            "the rest is our counting, at a lower priority, on the cores the loop leaves).",
            "",
        ]
    )


def window(args: argparse.Namespace) -> int:
    return int(args.window or max(32_000, 2 * args.tokens))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--new", type=int, default=40)
    parser.add_argument("--ongoing", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--wire", choices=sorted(ROUTES), default="chat")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window", type=int, help="the hooked group's (default: twice the sessions', ≥ 32K)")
    parser.add_argument("--shared", action="store_true", help="only the first message of a session its own")
    parser.add_argument("--restart", action="store_true", help="the restart case instead of the burst")
    parser.add_argument("--store", choices=("redis", "file", "memory"), default="redis")
    parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument(
        "--only", choices=GROUPS, help="one group's bursts (a profile of it alone, for profile_table.py)"
    )
    parser.add_argument(
        "--profile", type=Path, help="py-spy's raw stacks of the proxy (a burst), written here"
    )
    args = parser.parse_args()
    standin, url = start_standin()
    try:
        with tempfile.TemporaryDirectory() as archive:
            found = config(args.wire, url, Path(archive), window(args))
            if args.restart:
                with store(args.store) as env:
                    runs = asyncio.run(restart(args, found, env))
            else:
                with ProxyProcess(found) as proxy:
                    spy = profiler(proxy, args.profile) if args.profile else None
                    runs = asyncio.run(bursts(args, proxy))
                    if spy is not None:
                        spy.send_signal(signal.SIGINT)
                        spy.wait()
    finally:
        standin.terminate()
        standin.wait()
    if args.only:
        print(f"{args.only}: {sum(len(r.samples) for r in runs)} requests")
        return
    reported(table(runs, args), RESULTS, save=not args.no_save)


if __name__ == "__main__":
    main()

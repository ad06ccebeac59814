"""The hook under load: one real proxy, two model groups on one stand-in — compacting and not.

    .venv/bin/python bench/bench_load.py [--sessions 40] [--turns 12] [--rounds 3] [--wire chat]
                                         [--bare | --noise]

One LiteLLM proxy with compact_hook in its callbacks serves two model groups on the same stand-in
provider: ``hooked`` (a ``compact`` block, ``context_window`` 32K) and ``plain`` (none: the hook's
pass-through path only). C sessions at once, each its own conversation, send T turns one after the
other: a real agent history (the Claude Code session, 288 entries) from its request at ~20K tokens
on, one agent request after another, so the hooked group clears and compacts on the way. Each
round sends all sessions to one group, then to the other (the order alternating round by round),
and the proxy's two cores are saturated throughout. Reported per group: requests/s (requests over
the round's wall time), p50 and p99 of the client's latency, and for the hooked group the turns
that compact apart from those that do not — set against the plain group's same (session, turn).

``--noise``: neither group has a ``compact`` block — two plain groups: the ratios this bench gives
when nothing differs between them, its noise, to read the others against.

``--bare``: the plain group's rounds go to a second proxy with no compact_hook in its callbacks at
all — what an operator runs without us: the hook's proxy-wide effects (its garbage collector, its
hooks on every request) are then counted too. One proxy works at a time, as with the groups.

The stand-in runs in its own process (``tools/standin_upstream.py``) billing a quarter of the
characters, so neither it nor the load generator takes the GIL from the other. Results:
``bench/results/load.md`` (appended) and printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compact_hook import count_tokens  # noqa: E402
from tests.integration.harness import (  # noqa: E402
    ProxyProcess,
    anthropic_deployment,
    free_port,
    gemini_deployment,
    standin_deployment,
)
from tests.support import chat_to_google, chat_to_responses, load_transcript  # noqa: E402

WINDOW = 32_000
FIRST = 20_000
ROUTES = {
    "chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
    "google": "/v1beta/models/{model}:generateContent",
}
"""Each wire's path on the proxy (Google's names the model group in it: ``route``)."""
RESULTS = ROOT / "bench" / "results" / "load.md"
COMPACTING = ("miss", "shared", "prepared")


@dataclass
class Sample:
    group: str
    session: int
    turn: int
    ms: float
    cache: str = "none"
    hook_ms: float | None = None
    prepare: str = ""

    @property
    def compacts(self) -> bool:
        """A compaction applied on this turn: a summary made (waited for), or one prepared ahead."""
        return self.cache in COMPACTING


@dataclass
class Round:
    group: str
    seconds: float
    samples: list[Sample] = field(default_factory=list)
    cpu: float = 0.0
    """CPU seconds the proxy's main thread (its event loop) spent on the round."""

    @property
    def rate(self) -> float:
        return len(self.samples) / self.seconds

    @property
    def cpu_ms(self) -> float:
        """The loop's CPU milliseconds per request."""
        return 1000 * self.cpu / len(self.samples)


def cut_points(messages: list[dict[str, Any]], turns: int) -> list[int]:
    """T prefix lengths, each where an agent's next request ends (after a user or tool entry): the
    first at ~FIRST tokens (the session joins with its history), then one request after another, as
    the agent made them (each adds its reply and its tools' results)."""
    ends = [
        i + 1
        for i, m in enumerate(messages)
        if m["role"] in ("user", "tool")
        and (i + 1 == len(messages) or messages[i + 1]["role"] not in ("tool",))
    ]
    first = min(range(len(ends)), key=lambda k: abs(count_tokens(messages[: ends[k]]) - FIRST))
    return ends[first : first + turns]


def route(wire: str, group: str) -> str:
    return ROUTES[wire].format(model=group)


def body(wire: str, group: str, entries: list[dict[str, Any]], label: str) -> bytes:
    """One request: the entries with ``label`` making the conversation its own."""
    first = dict(entries[0])
    first["content"] = (
        f"[{label}] {first['content']}" if isinstance(first["content"], str) else first["content"]
    )
    entries = [first, *entries[1:]]
    if wire == "chat":
        return json.dumps({"model": group, "messages": entries, "max_tokens": 256}).encode()
    if wire == "responses":
        return json.dumps(
            {"model": group, "input": chat_to_responses(entries), "max_output_tokens": 256}
        ).encode()
    if wire == "google":  # the model is in the path; contents as the Google GenAI SDK sends them
        return json.dumps(
            {"contents": chat_to_google(entries), "generationConfig": {"maxOutputTokens": 256}}
        ).encode()
    return json.dumps({"model": group, "messages": entries, "max_tokens": 256}).encode()


def sessions(wire: str, turns: int) -> list[list[dict[str, Any]]]:
    """The history each turn sends (chat entries, or Anthropic's for ``/v1/messages``)."""
    chat = load_transcript("claude_code_fa812bfe_pre_compact.json")
    cuts = cut_points(chat, turns)
    if wire != "anthropic":
        return [chat[:cut] for cut in cuts]
    claude = load_transcript("claude_code_fa812bfe_pre_compact.json", "anthropic")["messages"]
    scale = len(claude) / len(chat)
    ends = [i + 1 for i, m in enumerate(claude) if m["role"] == "user"]
    return [claude[: min(ends, key=lambda e, c=cut: abs(e - c * scale))] for cut in cuts]  # type: ignore[misc]


def config(
    wire: str, standin: str, archive: Path, window: int = WINDOW, hook: bool = True, noise: bool = False
) -> dict[str, Any]:
    compact = {} if noise else {"compact": {"context_window": window, "archive_dir": str(archive)}}
    if wire == "anthropic":
        root = standin.removesuffix("/v1")
        deployments = [
            anthropic_deployment("hooked", root, "standin-quarter-hooked", **compact),
            anthropic_deployment("plain", root, "standin-quarter-plain"),
        ]
    elif wire == "google":
        root = standin.removesuffix("/v1")
        deployments = [
            gemini_deployment("hooked", root, "gemini-2.5-standin-quarter-hooked", **compact),
            gemini_deployment("plain", root, "gemini-2.5-standin-quarter-plain"),
        ]
    else:
        deployments = [
            standin_deployment("hooked", standin, "standin-quarter-hooked", **compact),
            standin_deployment("plain", standin, "standin-quarter-plain"),
        ]
    found: dict[str, Any] = {"model_list": deployments, "router_settings": {"num_retries": 0}}
    if hook:  # ``--bare``'s second proxy has none: what an operator runs without us
        found["litellm_settings"] = {"callbacks": "compact_hook.proxy_handler_instance"}
    return found


async def session(
    client: httpx.AsyncClient, proxy: ProxyProcess, path: str, requests: list[bytes], who: tuple[str, int]
) -> list[Sample]:
    samples = []
    for turn, content in enumerate(requests):
        start = time.perf_counter()
        response = await client.post(
            f"{proxy.url}{path}",
            content=content,
            headers={**proxy.auth_headers, "content-type": "application/json"},
        )
        ms = (time.perf_counter() - start) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"{who} turn {turn}: {response.status_code} {response.text[:2000]}")
        headers = response.headers
        hook = headers.get("x-compact-duration-ms")
        cache = headers.get("x-compact-cache", "none")
        hook_ms = float(hook) if hook else None
        samples.append(Sample(who[0], who[1], turn, ms, cache, hook_ms, headers.get("x-compact-prepare", "")))
    return samples


async def one_round(args: argparse.Namespace, proxy: ProxyProcess, group: str, number: int) -> Round:
    path = route(args.wire, group)
    histories = sessions(args.wire, args.turns)
    requests = [
        [body(args.wire, group, history, f"round {number} session {s}") for history in histories]
        for s in range(args.sessions)
    ]
    limits = httpx.Limits(max_connections=args.sessions, max_keepalive_connections=args.sessions)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        start = time.perf_counter()
        found = await asyncio.gather(
            *(session(client, proxy, path, requests[s], (group, s)) for s in range(args.sessions))
        )
        seconds = time.perf_counter() - start
    return Round(group, seconds, [sample for samples in found for sample in samples])


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def table(rounds: list[Round], args: argparse.Namespace) -> str:
    by = {g: [r for r in rounds if r.group == g] for g in ("plain", "hooked")}
    rate = {g: sum(len(r.samples) for r in rs) / sum(r.seconds for r in rs) for g, rs in by.items()}
    samples = {g: [s for r in rs for s in r.samples] for g, rs in by.items()}
    hooked = samples["hooked"]
    quiet = {
        (r, s.session, s.turn) for r, rd in enumerate(by["hooked"]) for s in rd.samples if not s.compacts
    }
    plain_same = [
        s.ms for r, rd in enumerate(by["plain"]) for s in rd.samples if (r, s.session, s.turn) in quiet
    ]
    quiet_ms = [s.ms for s in hooked if not s.compacts]
    compacting = [s for s in hooked if s.compacts]
    summary_ms = [s.ms for s in compacting]
    waited = sum(s.cache != "prepared" for s in compacting)
    all_ms = {g: [s.ms for s in v] for g, v in samples.items()}
    hook_own = [s.hook_ms for s in hooked if s.hook_ms is not None]
    paired, cpu = per_round(by), loop_share(by)
    lines = [
        f"### {time.strftime('%Y-%m-%d %H:%M')} — {args.wire}, "
        f"{args.sessions} sessions × {args.turns} turns, {args.rounds} rounds per group (alternating), "
        f"window {args.window:,}, {os.cpu_count()} cores" + NOISE[args.noise],
        "",
        "| | requests | requests/s | p50 ms | p99 ms |",
        "|---|---|---|---|---|",
        f"| plain ({PLAIN[args.bare]}) | {len(all_ms['plain'])} | {rate['plain']:.1f} | "
        f"{p(all_ms['plain'], 0.5):.0f} | {p(all_ms['plain'], 0.99):.0f} |",
        f"| hooked, all turns | {len(all_ms['hooked'])} | {rate['hooked']:.1f} "
        f"(**{rate['hooked'] / rate['plain']:.3f}**) | {p(all_ms['hooked'], 0.5):.0f} | "
        f"{p(all_ms['hooked'], 0.99):.0f} |",
        f"| hooked, turns that do not compact | {len(quiet_ms)} | | {p(quiet_ms, 0.5):.0f} | "
        f"{p(quiet_ms, 0.99):.0f} (**{p(quiet_ms, 0.99) / p(plain_same, 0.99):.3f}** of plain's same turns: "
        f"{p(plain_same, 0.99):.0f}) |",
        f"| hooked, turns that compact ({waited} waited for a summary, the rest prepared ahead) "
        f"| {len(summary_ms)} | | {p(summary_ms, 0.5):.0f} | {p(summary_ms, 0.99):.0f} |",
        "",
        f"The hook's own time (`x-compact-duration-ms`, hooked): median "
        f"{statistics.median(hook_own or [math.nan]):.2f} ms, p99 {p(hook_own, 0.99):.2f} ms. "
        "Compacted turns keep less of the history, so the upstream reads less. "
        "Summaries prepared ahead (a summary call each, in the background): "
        f"{sum(s.prepare == 'started' for s in hooked)}.",
        "",
        f"Hooked against plain round by round (the two groups back to back: what drifts over a run "
        f"cancels): {', '.join(f'{r:.3f}' for r in paired)}; median **{statistics.median(paired):.3f}**.",
        "",
        f"The event loop (the proxy's main thread, the one a saturated proxy is bound by), CPU per request: "
        f"plain {cpu[0]:.2f} ms, hooked {cpu[1]:.2f} ms — the throughput the loop allows, hooked over plain: "
        f"**{cpu[0] / cpu[1]:.3f}**.",
        "",
        *by_turn(samples),
    ]
    return "\n".join(lines)


def by_turn(samples: dict[str, list[Sample]]) -> list[str]:
    """The hooked group turn by turn (issue 63's table): turn 0 is each conversation's first request
    to the proxy, its whole history new to it; the plain group's p50 and p99 over all its turns."""
    hooked = samples["hooked"]
    turns = sorted({s.turn for s in hooked})
    ms = {t: [s.ms for s in hooked if s.turn == t] for t in turns}
    later = turns[1:]
    plain = [s.ms for s in samples["plain"]]
    lines = ["| turn (hooked) | median ms | slowest ms |", "|---|---|---|"]
    first = ms[turns[0]]
    lines.append(f"| 0 (new to the proxy) | {statistics.median(first):.0f} | {max(first):.0f} |")
    if later:
        medians = [statistics.median(ms[t]) for t in later]
        slowest = [max(ms[t]) for t in later]
        span = f"{min(medians):.0f}–{max(medians):.0f} | {min(slowest):.0f}–{max(slowest):.0f}"
        lines.append(f"| 1–{later[-1]} | {span} |")
    lines += [f"| plain group, all turns | {p(plain, 0.5):.0f} (p50) | {p(plain, 0.99):.0f} (p99) |", ""]
    return lines


NOISE = {False: "", True: " — `--noise`: neither group compacts (what the ratios are when nothing differs)"}
PLAIN = {False: "no `compact` block", True: "a proxy without compact_hook, `--bare`"}


def per_round(by: dict[str, list[Round]]) -> list[float]:
    """Each round's hooked requests/s over its plain requests/s."""
    return [h.rate / p.rate for h, p in zip(by["hooked"], by["plain"], strict=True)]


def loop_share(by: dict[str, list[Round]]) -> tuple[float, float]:
    """The loop's CPU per request, plain and hooked (all rounds' CPU over all their requests)."""
    plain, hooked = (
        1000 * sum(r.cpu for r in by[g]) / sum(len(r.samples) for r in by[g]) for g in ("plain", "hooked")
    )
    return plain, hooked


def profiler(proxy: ProxyProcess, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling the proxy (its threads too) until interrupted: ``bench/profile_table.py`` reads it."""
    spy = Path(sys.executable).parent / "py-spy"
    command = [
        str(spy),
        "record",
        "--pid",
        str(proxy.pid),
        "--format",
        "raw",
        "--rate",
        "200",
        "-o",
        str(out),
    ]
    return subprocess.Popen(
        [*command, "--threads", "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def start_standin() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "standin_upstream.py"), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    process.stdout.readline()  # "stand-in upstream listening on …"
    return process, f"http://127.0.0.1:{port}/v1"


def loop_cpu(proxy: ProxyProcess) -> float:
    """CPU seconds of the proxy's main thread, which runs its event loop: what a saturated proxy's
    throughput is bound by, and — unlike requests/s on a shared machine — what other work on the
    machine barely moves. From its ``schedstat`` (nanoseconds: fine enough for one request,
    ``bench_sequential_cpu.py``)."""
    assert proxy.pid is not None, "the proxy is running"
    return int(Path(f"/proc/{proxy.pid}/task/{proxy.pid}/schedstat").read_text().split()[0]) / 1e9


async def run(args: argparse.Namespace, proxies: dict[str, ProxyProcess]) -> list[Round]:
    """The rounds, each group's sent to its proxy (``--bare``: plain's to a proxy without the hook)."""
    rounds = []
    for number in range(args.rounds):
        order: tuple[str, ...] = ("plain", "hooked") if number % 2 == 0 else ("hooked", "plain")
        order = tuple(group for group in order if args.only in (None, group))
        for group in order:
            proxy = proxies[group]
            before = loop_cpu(proxy)
            done = await one_round(args, proxy, group, number)
            done.cpu = loop_cpu(proxy) - before
            rounds.append(done)
            print(
                f"round {number} {group}: {done.rate:.1f} requests/s, "
                f"the loop's CPU {done.cpu_ms:.2f} ms a request",
                flush=True,
            )
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wire", choices=sorted(ROUTES), default="chat")
    parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument(
        "--window", type=int, default=WINDOW, help="the hooked group's window: smaller, more turns compact"
    )
    parser.add_argument("--profile", type=Path, help="py-spy's collapsed stacks of the proxy, written here")
    parser.add_argument(
        "--only", choices=("plain", "hooked"), help="one group's rounds (a profile of it alone), no table"
    )
    parser.add_argument(
        "--bare", action="store_true", help="plain's rounds to a second proxy, without compact_hook at all"
    )
    parser.add_argument(
        "--noise", action="store_true", help="no `compact` block on either group: the ratios of no difference"
    )
    args = parser.parse_args()
    standin, url = start_standin()
    try:
        with tempfile.TemporaryDirectory() as archive, contextlib.ExitStack() as stack:
            proxy = stack.enter_context(
                ProxyProcess(config(args.wire, url, Path(archive), args.window, noise=args.noise))
            )
            proxies = {"hooked": proxy, "plain": proxy}
            if args.bare:
                bare = config(args.wire, url, Path(archive), args.window, hook=False)
                proxies["plain"] = stack.enter_context(ProxyProcess(bare))
            warm = argparse.Namespace(**{**vars(args), "sessions": 4})
            for group, target in proxies.items():
                asyncio.run(one_round(warm, target, group, -1))
            spy = profiler(proxy, args.profile) if args.profile else None
            rounds = asyncio.run(run(args, proxies))
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait()
    finally:
        standin.terminate()
        standin.wait()
    if args.only:
        print(f"{args.only}: {sum(len(r.samples) for r in rounds)} requests")
        return
    reported(table(rounds, args), RESULTS, save=not args.no_save)


def reported(text: str, results: Path, save: bool) -> None:
    """A bench's table printed, and appended to its results file unless told not to."""
    print(text)
    if save:
        with results.open("a", encoding="utf-8") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()

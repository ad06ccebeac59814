"""The hook's own time per request, in process: no HTTP, no proxy — the pre-call hook alone.

    .venv/bin/python bench/profile_hook.py [--requests 200] [--profile] [--only anthropic]
    .venv/bin/python bench/profile_hook.py --load [--profile]

For each wire (chat, Anthropic Messages, Responses) and workload (a short conversation, the Claude
Code session of bench_hook_overhead.py: 288 entries, 105K tokens, under a 1M window, never
compacted), the request body is parsed from its JSON afresh for every call, as the proxy hands the
hook a new ``data`` each time, and ``CompactHook.async_pre_call_hook`` is timed against a real
``litellm.Router`` (no provider is called: nothing is summarized). Prints the median and p90 in ms;
``--profile`` adds cProfile's top functions by cumulative time for each row. Compare two checkouts
side by side with ``farm-bench`` or by running this from each (a ratio, not an absolute: machines differ).

``--load``: instead, ``bench/bench_load.py``'s hooked requests (40 sessions × 12 turns of the Claude
Code history from ~20K tokens, a 32K window: cleared as they grow), once to warm the counts, then
timed (the CPU time of each, ``time.process_time``: what the proxy's loop pays) — ``--profile`` gives
the functions by cumulative time. Each request goes through every hook the proxy calls for it
(``served``): the pre-call hook, the response headers, and the success log with the usage the
stand-in bills (what a saturated proxy pays the hook a request).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tools"))

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
from standin_upstream import CHAT, billed_input  # noqa: E402

from bench import bench_load  # noqa: E402
from bench.bench_hook_overhead import bodies  # noqa: E402
from compact_hook.proxy import server  # noqa: E402
from compact_hook.proxy.hook import CompactHook  # noqa: E402
from compact_hook.settings.model import CompactConfig  # noqa: E402

CALL_TYPES = {"chat": "acompletion", "anthropic": "anthropic_messages", "responses": "aresponses"}
COMPACT = {"context_window": 1_000_000, "tool_output_policy": "none"}
LOAD = {"context_window": bench_load.WINDOW, "archive_dir": tempfile.mkdtemp(prefix="profile-hook-")}
"""bench_load's hooked group."""


def router(compact: dict[str, Any]) -> Any:
    def group(name: str, model: str) -> dict[str, Any]:
        return {
            "model_name": name,
            "litellm_params": {"model": model, "api_base": "http://127.0.0.1:9/v1", "api_key": "none"},
            "model_info": {"compact": compact},
        }

    return litellm.Router(
        model_list=[group("bench", "openai/standin"), group("bench-claude", "anthropic/standin")]
    )


async def timed(hook: CompactHook, raw: bytes, call_type: str, n: int) -> list[float]:
    times = []
    for _ in range(n):
        data = json.loads(raw)
        data["litellm_call_id"] = "bench"
        start = time.perf_counter()
        await hook.async_pre_call_hook(None, None, data, call_type)
        times.append((time.perf_counter() - start) * 1000)
    return times


def load_requests(label: str, sessions: int = 40) -> list[bytes]:
    """bench_load's hooked sessions, one after the other (the chat wire)."""
    histories = bench_load.sessions("chat", 12)
    return [
        bench_load.body("chat", "bench", history, f"{label} session {number}")
        for number in range(sessions)
        for history in histories
    ]


def usage_logged(data: dict[str, Any]) -> dict[str, Any]:
    """What LiteLLM's success log hands the hook for a forwarded chat request: the request's
    metadata, and the usage the stand-in bills it (a quarter of its characters)."""
    billed = billed_input(CHAT, {"model": "standin-quarter-hooked", "messages": data["messages"]})
    usage = {"prompt_tokens": billed, "completion_tokens": 20}
    return {
        "litellm_params": {"metadata": data.get("metadata", {}), "model": "openai/standin"},
        "standard_logging_object": {"metadata": {"usage_object": usage}},
    }


async def served(hook: CompactHook, data: dict[str, Any], call_type: str, between: Any = None) -> None:
    """One request through every hook the proxy calls for it: the pre-call hook, the response
    headers, the success log. ``between``: called before and after each call (a profiler's switch,
    callgrind's), so what is built here in the provider's place is not counted."""
    switch = between or (lambda: None)
    data.setdefault("metadata", {})["model_group"] = data["model"]
    switch()
    await hook.async_pre_call_hook(None, None, data, call_type)
    await hook.async_post_call_response_headers_hook(data, None, None)
    switch()
    logged = usage_logged(data)
    switch()
    await hook.async_log_success_event(logged, None, None, None)
    switch()


class Stopwatch:
    """CPU time (``time.process_time``) summed between pairs of ``toggle`` calls, and a profiler
    switched with it."""

    def __init__(self, profiler: cProfile.Profile | None = None) -> None:
        self.profiler, self.total, self._since = profiler, 0.0, None

    def toggle(self) -> None:
        now = time.process_time()
        if self._since is None:
            self._since = now
            if self.profiler is not None:
                self.profiler.enable()
            return
        if self.profiler is not None:
            self.profiler.disable()
        self.total += now - self._since
        self._since = None


async def load(hook: CompactHook, label: str, profiler: cProfile.Profile | None = None) -> list[float]:
    """bench_load's hooked sessions, one after the other, each request served whole: its CPU
    time, ms (the usage built for the success log not counted)."""
    times = []
    for number, raw in enumerate(load_requests(label)):
        data = json.loads(raw)
        data["litellm_call_id"] = f"{label}-{number}"
        watch = Stopwatch(profiler)
        await served(hook, data, "acompletion", watch.toggle)
        times.append(watch.total * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--only", help="a wire's name: only its rows")
    parser.add_argument("--load", action="store_true", help="bench_load's hooked requests instead")
    args = parser.parse_args()
    spy = router(LOAD if args.load else COMPACT)
    server.proxy_router = lambda: spy  # type: ignore[assignment]
    hook = CompactHook(CompactConfig())
    if args.load:
        asyncio.run(load(hook, "warm"))
        profiler = cProfile.Profile() if args.profile else None
        times = asyncio.run(load(hook, "timed", profiler))
        median, mean = statistics.median(times), statistics.mean(times)
        print(f"{len(times)} requests: median {median:.3f} ms, mean {mean:.3f} ms")
        if profiler is not None:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(40)
            print(out.getvalue())
        return
    print("| wire | workload | median ms | p90 ms |")
    print("|---|---|---|---|")
    for (wire, workload), body in bodies().items():
        if args.only and wire != args.only:
            continue
        raw = json.dumps(body).encode()
        asyncio.run(timed(hook, raw, CALL_TYPES[wire], 5))  # warm: imports, the count cache
        profiler = cProfile.Profile() if args.profile else None
        if profiler is not None:
            profiler.enable()
        times = asyncio.run(timed(hook, raw, CALL_TYPES[wire], args.requests))
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"| {wire} | {workload} | {statistics.median(times):.3f} | {p90:.3f} |", flush=True)
        if profiler is not None:
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
            print(out.getvalue())


if __name__ == "__main__":
    main()

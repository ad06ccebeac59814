"""The pre-call hook's cost as CPU instructions: a figure the machine's speed does not move.

    .venv/bin/python bench/bench_instructions.py [--against ../other-checkout] [--sessions 10]

Wall and CPU times on a shared 2-core machine drift by tens of percent from one run to the next (the
same checkout measured 0.66 and 1.16 ms a request minutes apart), which buries a change of 10%. So
this counts the instructions the hook executes under valgrind's callgrind (Debian's ``valgrind``;
``gcc`` builds the few lines that switch its counting on and off), only inside
``CompactHook.async_pre_call_hook``: the same code and inputs give the same count to 0.01%.

Workloads, as ``bench/profile_hook.py`` runs them in process against a real ``litellm.Router``: ``load``
— ``bench/bench_load.py``'s hooked requests (S sessions × 12 turns of the Claude Code history from
~20K tokens, a 32K window: cleared as they grow), after one pass that warms the count cache, each
through every hook the proxy calls for it (``profile_hook.served``: the pre-call hook, the response
headers, the success log); and the Claude Code session of ``bench/bench_hook_overhead.py`` (288
entries, never compacted) on each wire, the pre-call hook alone.
``--against`` counts another checkout's ``compact_hook`` the same way, on this bench's requests, and
gives the ratio, this over that.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOGGLE_C = """#include <valgrind/callgrind.h>
void start(void) { CALLGRIND_START_INSTRUMENTATION; }
void toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""
WORKLOADS = ("load", "chat", "anthropic", "responses")
SESSION_REQUESTS = 20


def build_toggle(folder: Path) -> Path:
    """The shared library the child calls around each hook call (callgrind's client requests)."""
    source, library = folder / "toggle.c", folder / "libtoggle.so"
    source.write_text(TOGGLE_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def count(checkout: Path, workload: str, sessions: int, library: Path, folder: Path) -> tuple[int, int]:
    """Instructions inside the hook, and the requests they were counted over, for one workload."""
    out = folder / f"callgrind-{checkout.name}-{workload}.out"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--collect-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--child",
        workload,
        "--sessions",
        str(sessions),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0", "BENCH_CHECKOUT": str(checkout), "BENCH_TOGGLE": str(library)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{checkout} {workload}: {done.stderr[-2000:]}")
    requests = sessions * 12 if workload == "load" else SESSION_REQUESTS
    return int(found[1]), requests


def child(workload: str, sessions: int) -> None:
    """Under callgrind: run the workload, counting only inside the hook. The checkout's
        ``compact_hook`` is imported first; the workloads and ``served`` come from this bench's own
        ``profile_hook`` (loaded from its file), so every checkout is counted on the same requests. Our
    log lines are made as in the proxy (INFO, rate-limited): a line made and dropped costs too."""
    checkout = Path(os.environ["BENCH_CHECKOUT"])
    sys.path.insert(0, str(checkout))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import importlib.util

    from compact_hook.proxy import server
    from compact_hook.proxy.hook import CompactHook
    from compact_hook.settings.model import CompactConfig

    spec = importlib.util.spec_from_file_location("profile_hook", ROOT / "bench" / "profile_hook.py")
    assert spec is not None and spec.loader is not None
    profile_hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile_hook)

    toggle = ctypes.CDLL(os.environ["BENCH_TOGGLE"])
    spy = profile_hook.router(profile_hook.LOAD if workload == "load" else profile_hook.COMPACT)
    server.proxy_router = lambda: spy
    hook = CompactHook(CompactConfig())

    async def send(raws: list[tuple[bytes, str]], counted: bool) -> None:
        switch = toggle.toggle if counted else None
        for number, (raw, call_type) in enumerate(raws):
            data = json.loads(raw)
            data["litellm_call_id"] = f"bench-{number}"
            if workload == "load":  # every hook the proxy calls for the request
                await profile_hook.served(hook, data, call_type, switch)
                continue
            if switch is not None:
                switch()
            await hook.async_pre_call_hook(None, None, data, call_type)
            if switch is not None:
                switch()

    if workload == "load":
        warm = [(raw, "acompletion") for raw in profile_hook.load_requests("warm", sessions)]
        counted = [(raw, "acompletion") for raw in profile_hook.load_requests("counted", sessions)]
    else:
        body = profile_hook.bodies()[(workload, "Claude Code session")]
        raw = (json.dumps(body).encode(), profile_hook.CALL_TYPES[workload])
        warm, counted = [raw] * 5, [raw] * SESSION_REQUESTS
    asyncio.run(send(warm, counted=False))
    toggle.start()
    asyncio.run(send(counted, counted=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", type=Path, help="another checkout, counted the same way")
    parser.add_argument("--sessions", type=int, default=10, help="the load workload's sessions")
    parser.add_argument("--only", choices=WORKLOADS, action="append", help="these workloads alone")
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.sessions)
        return
    checkouts = [ROOT, *([args.against.resolve()] if args.against else [])]
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as temporary:
        folder = Path(temporary)
        library = build_toggle(folder)
        print("| workload | " + " | ".join(f"`{c}` instructions a request" for c in checkouts), end="")
        print(" | ratio |" if args.against else " |")
        print("|---" * (len(checkouts) + 1 + bool(args.against)) + "|")
        for workload in args.only or WORKLOADS:
            figures = []
            for checkout in checkouts:
                instructions, requests = count(checkout, workload, args.sessions, library, folder)
                figures.append(instructions / requests)
            row = " | ".join(f"{f / 1e6:.3f} M" for f in figures)
            ratio = f" | **{figures[0] / figures[1]:.3f}** |" if args.against else " |"
            print(f"| {workload} | {row}{ratio}", flush=True)


if __name__ == "__main__":
    main()

"""Where the hook's time goes: py-spy's collapsed stacks of a proxy, as a table per function.

    .venv/bin/python bench/profile_table.py PROFILE [--top 25]

``PROFILE`` is ``py-spy record --format raw`` output (``bench/bench_load.py --profile PROFILE``). A
sample is the hook's when any of its frames is compact_hook's; each is charged to the innermost
compact_hook frame on its stack (what it called — the tokenizer, json, hashing — counts as its own).
The table gives each function's share of the hook's samples, and the hook's share of all samples.

    .venv/bin/python bench/profile_table.py HOOKED --against PLAIN --requests N

Two profiles of the same number of requests, each group alone (``bench_load.py --only hooked`` and
``--only plain``): what the hooked group costs more, by function — anyone's, LiteLLM's too, counted
inclusively (a sample counts for every function on its stack once) — in samples per request. What
the hook's presence makes LiteLLM do shows here, where the hook's own frames do not reach.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^:()]*)(?::\d+)?\)$")


def ours(frame: str) -> str | None:
    """``module.function`` of a compact_hook frame, None for anyone else's."""
    match = FRAME.match(frame.strip())
    if match is None or "compact_hook/" not in match["file"]:
        return None
    module = match["file"].split("compact_hook/", 1)[1].removesuffix(".py").replace("/", ".")
    return f"{module}.{match['function']}"


def read(path: Path) -> tuple[Counter[str], int, int]:
    """Samples per innermost compact_hook function, the hook's samples, and all samples."""
    charged: Counter[str] = Counter()
    hook = every = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples = int(count)
        every += samples
        names = [name for name in map(ours, stack.split(";")) if name is not None]
        if names:
            hook += samples
            charged[names[-1]] += samples
    return charged, hook, every


def named(frame: str) -> str:
    """``file:function`` of any frame, the line left out (a function counts once, wherever it was)."""
    match = FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    short = "/".join(match["file"].split("/")[-2:])
    return f"{short}:{match['function']}"


def inclusive(path: Path) -> tuple[Counter[str], int]:
    """Samples on whose stack each function is (once per sample), and all samples."""
    counted: Counter[str] = Counter()
    every = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        every += int(count)
        for name in set(map(named, stack.split(";"))):
            counted[name] += int(count)
    return counted, every


def against(hooked: Path, plain: Path, requests: int, top: int) -> None:
    more, every = inclusive(hooked)
    less, base = inclusive(plain)
    print(f"all samples per request: hooked {every / requests:.2f}, plain {base / requests:.2f}")
    print("| function (inclusive) | hooked per request | plain per request | more |")
    print("|---|---|---|---|")
    rows = sorted(more.keys() | less.keys(), key=lambda name: less[name] - more[name])
    for name in rows[:top]:
        print(
            f"| `{name}` | {more[name] / requests:.2f} | {less[name] / requests:.2f} | "
            f"{(more[name] - less[name]) / requests:+.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--against", type=Path, help="the plain group's profile, alone")
    parser.add_argument("--requests", type=int, default=0, help="requests in each profile")
    args = parser.parse_args()
    if args.against is not None:
        against(args.profile, args.against, max(1, args.requests), args.top)
        return
    charged, hook, every = read(args.profile)
    print(f"the hook: {hook:,} of {every:,} samples ({hook / max(1, every):.1%}) of the proxy's threads")
    print("| function (innermost of ours) | share of the hook's samples |")
    print("|---|---|")
    for name, samples in charged.most_common(args.top):
        print(f"| `{name}` | {samples / max(1, hook):.1%} |")


if __name__ == "__main__":
    main()

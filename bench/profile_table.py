"""Where the hook's time goes: py-spy's collapsed stacks of a proxy, as a table per function.

    .venv/bin/python bench/profile_table.py PROFILE [--top 25]

``PROFILE`` is ``py-spy record --format raw`` output (``bench/bench_load.py --profile PROFILE``). A
sample is the hook's when any of its frames is compact_hook's; each is charged to the innermost
compact_hook frame on its stack (what it called — the tokenizer, json, hashing — counts as its own).
The table gives each function's share of the hook's samples, and the hook's share of all samples.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    charged, hook, every = read(args.profile)
    print(f"the hook: {hook:,} of {every:,} samples ({hook / max(1, every):.1%}) of the proxy's threads")
    print("| function (innermost of ours) | share of the hook's samples |")
    print("|---|---|")
    for name, samples in charged.most_common(args.top):
        print(f"| `{name}` | {samples / max(1, hook):.1%} |")


if __name__ == "__main__":
    main()

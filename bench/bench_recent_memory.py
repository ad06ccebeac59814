"""What a conversation kept for its next request holds in memory, against what it is charged.

    .venv/bin/python bench/bench_recent_memory.py

``state.recent`` bounds its conversations by what ``core.known`` charges each: a fixed part, each entry,
its copy, each item parsed. This measures the same with ``tracemalloc`` — a Claude Code session of 288
entries (its copies and their strings, which the copies keep alive once the request that brought them is
gone; then its items parsed), and a flood of one-entry conversations — and prints both, side by side.
"""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compact_hook.core.fingerprint import fingerprint  # noqa: E402
from compact_hook.state.recent import Recent  # noqa: E402
from compact_hook.wires import CHAT  # noqa: E402
from compact_hook.wires.command import is_command  # noqa: E402
from tests.support import load_transcript  # noqa: E402

FLOOD = 1_000


def held(make: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes allocated and still held by what ``make`` returns (the request it read from freed)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    made = make()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename")), made


def session() -> tuple[Recent, Any]:
    """A session learned from a request parsed from its JSON, the request then dropped."""
    recent = Recent()
    text = json.dumps(load_transcript("claude_code_fa812bfe_pre_compact.json"))
    entries = json.loads(text)
    known = recent.learn(recent.compare(("t", "chat", "g", "s"), entries), fingerprint, is_command)
    del entries
    return recent, known


def main() -> None:
    size = len(json.dumps(load_transcript("claude_code_fa812bfe_pre_compact.json")).encode())
    kept, (recent, known) = held(session)
    print("| what | held (tracemalloc) | charged | charged / held |")
    print("|---|---|---|---|")
    print(
        f"| a Claude Code session, 288 entries, {size:,} bytes of JSON | {kept:,} | {known.weight:,} | "
        f"{known.weight / kept:.2f} |"
    )
    parsed, _ = held(lambda: [known.item(i, CHAT.item) for i in range(len(known.copies))])
    whole = kept + parsed
    print(
        f"| the same, its 288 items parsed (charged with the entries) | {whole:,} | {known.weight:,} | "
        f"{known.weight / whole:.2f} |"
    )
    flood = Recent()

    def fill() -> Recent:
        for n in range(FLOOD):
            entries = [{"role": "user", "content": f"hello {n}"}]
            flood.learn(flood.compare((f"t{n % 4}", "chat", "g", f"s{n}"), entries), fingerprint, is_command)
        return flood

    kept, _ = held(fill)
    print(f"| {FLOOD:,} one-entry conversations | {kept:,} | {flood.bytes:,} | {flood.bytes / kept:.2f} |")
    assert recent is not None


if __name__ == "__main__":
    main()

"""What each tier buys: every shared transcript replayed with the tiers switched on one by one.

    .venv/bin/python bench/bench_tiers.py

Each transcript is replayed turn by turn (the history up to each point where the client
calls the model) through a ``Compactor`` with an in-process store, four times:

* summary only     - tool_output_policy none, clearing off, user_message_budget 0, on_overflow passthrough
* + truncation     - tool outputs over tool_output_max_tokens cut head+tail
* + clearing       - old tool results cleared in remembered batches
* all tiers        - + users' messages kept (user_message_budget 20,000), on_overflow fit

The window is scaled to the transcript (a third of its size, 4K..32K tokens) so that every
transcript compacts; tool_output_max_tokens = min(5000, window/8), clear_at_least =
min(5000, window/10). The summarizer is a deterministic stand-in answering 400 words.
Reported per transcript: summary calls, and tokens forwarded summed over all turns.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compact_hook import CompactConfig, count_tokens  # noqa: E402
from compact_hook.engine import Compactor  # noqa: E402
from compact_hook.store import MemoryStore  # noqa: E402
from tests.fakes import InMemoryArchive  # noqa: E402
from tests.support import load_transcript, openai_transcripts, replay_points  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "summary only": {
        "tool_output_policy": "none",
        "clear_tool_results": False,
        "user_message_budget": 0,
        "on_overflow": "passthrough",
    },
    "+ truncation": {"clear_tool_results": False, "user_message_budget": 0, "on_overflow": "passthrough"},
    "+ clearing": {"user_message_budget": 0, "on_overflow": "passthrough"},
    "all tiers": {},
}
SUMMARY = " ".join(f"fact{i}" for i in range(400))


async def summarize(messages: list[dict[str, Any]]) -> str:
    return SUMMARY


async def replay(transcript: list[dict[str, Any]], config: CompactConfig) -> tuple[int, int]:
    compactor = Compactor(MemoryStore(10_000, 86_400))
    calls = tokens = 0
    for end in replay_points(transcript):
        result = await compactor.compact(
            transcript[:end], config, summarize, "bench", scope=b"bench", archive=InMemoryArchive()
        )
        calls += result.summary_calls
        tokens += count_tokens(result.messages)
    return calls, tokens


async def main() -> None:
    print("| transcript | window | " + " | ".join(f"{v}: calls / tokens" for v in VARIANTS) + " |")
    print("|---|---|" + "---|" * len(VARIANTS))
    for name in openai_transcripts():
        transcript = load_transcript(name)
        window = max(4000, min(32_000, count_tokens(transcript) // 3))
        base = {
            "context_window": window,
            "summary_max_tokens": 1000,
            "tool_output_max_tokens": min(5000, window // 8),
            "clear_at_least": min(5000, window // 10),
            "retry_backoff_seconds": 0,
        }
        cells = []
        for overrides in VARIANTS.values():
            calls, tokens = await replay(transcript, CompactConfig(**{**base, **overrides}))
            cells.append(f"{calls} / {tokens:,}")
        print(f"| {name.removesuffix('.json')} | {window:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    asyncio.run(main())

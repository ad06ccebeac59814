"""What each tier buys: every shared transcript replayed with the tiers switched on one by one.

    .venv/bin/python bench/bench_tiers.py

Each transcript — the chat ones, and the Anthropic ones in their own format — is replayed turn
by turn (the history up to each point where the client calls the model) through a ``Compactor``
with an in-process store, four times:

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

from compact_hook import CompactConfig  # noqa: E402
from compact_hook.engine import Compactor, CompactRequest  # noqa: E402
from compact_hook.state.store import MemoryStore  # noqa: E402
from compact_hook.wires import ANTHROPIC, CHAT, Conversation, WireFormat  # noqa: E402
from tests.fakes import InMemoryArchive  # noqa: E402
from tests.support import (  # noqa: E402
    TRANSCRIPTS,
    anthropic_replay_points,
    load_transcript,
    openai_transcripts,
    replay_points,
    tokens_of,
)

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


async def replay(wire: WireFormat, entries: list[Any], config: CompactConfig) -> tuple[int, int]:
    compactor = Compactor(MemoryStore(10_000, 86_400))
    calls = tokens = 0
    points = anthropic_replay_points(entries) if wire is ANTHROPIC else replay_points(entries)
    key, tokenizer = ("messages", "claude") if wire is ANTHROPIC else ("messages", "o200k_base")
    for end in points:
        conversation = wire.parse({key: entries[:end]})
        assert isinstance(conversation, Conversation)
        request = CompactRequest(
            conversation, config, summarize, "bench", scope=b"bench", archive=InMemoryArchive()
        )
        result = await compactor.compact(request)
        calls += result.summary_calls
        tokens += tokens_of({key: result.messages}, wire, tokenizer)
    return calls, tokens


def transcripts() -> list[tuple[str, WireFormat, list[Any]]]:
    found: list[tuple[str, WireFormat, list[Any]]] = [
        (name, CHAT, load_transcript(name)) for name in openai_transcripts()
    ]
    for path in sorted((TRANSCRIPTS / "anthropic").glob("*.json")):
        found.append((path.name, ANTHROPIC, load_transcript(path.name, "anthropic")["messages"]))
    return found


async def main() -> None:
    print("| transcript | format | window | " + " | ".join(f"{v}: calls / tokens" for v in VARIANTS) + " |")
    print("|---|---|---|" + "---|" * len(VARIANTS))
    for name, wire, entries in transcripts():
        tokenizer = "claude" if wire is ANTHROPIC else "o200k_base"
        window = max(4000, min(32_000, tokens_of({"messages": entries}, wire, tokenizer) // 3))
        base = {
            "context_window": window,
            "summary_max_tokens": 1000,
            "tool_output_max_tokens": min(5000, window // 8),
            "clear_at_least": min(5000, window // 10),
            "retry_backoff_seconds": 0,
            "tokenizer": tokenizer,
        }
        cells = []
        for overrides in VARIANTS.values():
            calls, tokens = await replay(wire, entries, CompactConfig(**{**base, **overrides}))
            cells.append(f"{calls} / {tokens:,}")
        label = name.removesuffix(".json")
        print(f"| {label} | {wire.name} | {window:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    asyncio.run(main())

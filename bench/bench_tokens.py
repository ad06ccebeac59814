"""Token-counting cost: cold, warm (two new messages), and the alternatives, in one run.

    .venv/bin/python bench/bench_tokens.py [--repeat 15]

Inputs: the shared Claude Code transcript (claude_code_fa812bfe_pre_compact.json) and a
~200K-token history made by concatenating the shared transcripts. Each figure is the median
of ``--repeat`` runs. "cold" is a fresh counter (tokenizer already loaded, empty cache);
"warm" is the next turn: the same history plus two new messages, counter already warm. The last
two columns are the ratios issue 26 sets goals for: cold against tiktoken encoding the same strings
(one thread, ``encode`` per string), warm against LiteLLM's ``token_counter``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
import tiktoken  # noqa: E402

from compact_hook.core.counting import item_strings, request_total  # noqa: E402
from compact_hook.engine.library import parse_chat  # noqa: E402
from compact_hook.state.tokenizers import HFTokenCounter, load_tokenizer  # noqa: E402
from compact_hook.wires import CHAT, Conversation  # noqa: E402

TRANSCRIPTS = ROOT / "tests" / "data" / "transcripts" / "openai"
os.environ.setdefault(
    "TIKTOKEN_CACHE_DIR", str(Path(litellm.__file__).parent / "litellm_core_utils" / "tokenizers")
)


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def load(name: str) -> list[dict[str, Any]]:
    return json.loads((TRANSCRIPTS / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def conversation(messages: list[dict[str, Any]]) -> Conversation:
    parsed = parse_chat(messages)
    assert isinstance(parsed, Conversation)
    return parsed


def count(counter: HFTokenCounter, messages: list[dict[str, Any]]) -> int:
    """What the hook does per request: parse, fingerprint, count what is new, total."""
    parsed = conversation(messages)
    return request_total(0, counter.count(parsed.prints(), lambda i: item_strings(parsed.item(i))))


async def acount(counter: HFTokenCounter, messages: list[dict[str, Any]]) -> int:
    parsed = conversation(messages)
    return request_total(0, await counter.acount(parsed.prints(), lambda i: item_strings(parsed.item(i))))


def history_of(tokens: int, counter: HFTokenCounter) -> list[dict[str, Any]]:
    """Concatenated shared transcripts (system messages dropped) until ``tokens`` is reached."""
    messages: list[dict[str, Any]] = []
    names = sorted(p.name for p in TRANSCRIPTS.glob("*.json"))
    while count(counter, messages) < tokens:
        for name in names:
            messages += [m for m in load(name) if m["role"] != "system"]
            if count(counter, messages) >= tokens:
                break
    return messages


def measure(label: str, history: list[dict[str, Any]], repeat: int) -> dict[str, Any]:
    new = [
        {"role": "user", "content": "Two new messages arrive."},
        {"role": "assistant", "content": "Noted."},
    ]
    encoding = tiktoken.get_encoding("o200k_base")
    strings = [s for m in history for s in item_strings(CHAT.item(m))[0]]
    warm = HFTokenCounter("o200k_base")
    tokens = count(warm, history)
    row = {
        "input": label,
        "messages": len(history),
        "tokens": tokens,
        "cold_ms": median_ms(lambda: count(HFTokenCounter("o200k_base"), history), repeat),
        "cold_off_loop_ms": median_ms(
            lambda: asyncio.run(acount(HFTokenCounter("o200k_base"), history)), repeat
        ),
        "warm_ms": median_ms(lambda: count(warm, history + new), repeat),
        "litellm_token_counter_ms": median_ms(
            lambda: litellm.token_counter(model="gpt-4o", messages=history), repeat
        ),
        "tiktoken_ms": median_ms(
            lambda: [encoding.encode(s, disallowed_special=()) for s in strings], repeat
        ),
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    start = time.perf_counter()
    load_tokenizer("o200k_base")
    load_ms = (time.perf_counter() - start) * 1000
    counter = HFTokenCounter("o200k_base")
    rows = [
        measure(
            "claude_code_fa812bfe_pre_compact", load("claude_code_fa812bfe_pre_compact.json"), args.repeat
        ),
        measure("200K-token history", history_of(200_000, counter), args.repeat),
    ]
    print(f"o200k_base tokenizer load (once per process): {load_ms:.0f} ms")
    for row in rows:
        row["cold_vs_tiktoken"] = row["cold_ms"] / row["tiktoken_ms"]
        row["warm_vs_token_counter"] = row["warm_ms"] / row["litellm_token_counter_ms"]
    header = list(rows[0])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")
    print(
        "goals: cold count at most 1.0x tiktoken's time on the same text; warm count at most 1/30 of "
        "LiteLLM's token_counter (0.033x)"
    )


if __name__ == "__main__":
    main()

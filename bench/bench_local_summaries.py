"""What the local model writes when asked for a summary, judged as the hook judges it.

llama.cpp's own server (``tools/llama_server.py``: SmolLM2-135M-Instruct, 4,096 tokens) is sent our
summary request (``engine.summary.summarize.summary_request``) of the first ten messages of each of
four recorded sessions, with ``summary_max_tokens`` as derived for a 4K summary model (806); each
answer is judged by ``core.summary_check.fault_of``, as the engine judges it before applying it, and
scored as the retention bench scores what reached the provider: the file paths and error lines planted in
those messages (``tests/retention.py``) that it holds word for word, beside the digest of the same
messages (``core.digest``, what stands in when the answer is refused).

    .venv/bin/python bench/bench_local_summaries.py ['{"temperature": 0, "repeat_penalty": 1.3}']

The optional argument: sampling parameters added to each request (llama.cpp's own names). About two
minutes on an idle 2-core machine.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compact_hook.core.digest import digest
from compact_hook.core.summary_check import fault_of
from compact_hook.core.transcript import transcript_entries
from compact_hook.engine.summary.summarize import asked, summary_request
from tests.integration.llama_server import LlamaServer
from tests.retention import plant
from tests.support import items_of, load_transcript

SESSIONS = (
    "openhands_ponylang__ponyc-4593.json",
    "sweagent_fc_marshmallow-1867.json",
    "tau_bench_airline_gpt4o_task2_trial1.json",
    "claude_code_fa812bfe_pre_compact.json",
)
MAX_TOKENS = 806
"""``summary_max_tokens`` derived for a summary model of 4,096 tokens."""
CHUNK_CHARS = 5_000
MIDDLE = slice(1, 12)
"""The messages summarized: the first ten after the system prompt (and a planted reminder)."""
SCORED = ("path", "error")
"""What a summary must carry itself (the constraint and reminders are pinned: kept word for word)."""


def ask(url: str, messages: list[dict[str, Any]], sampling: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"model": "smollm2", "messages": messages, "max_tokens": MAX_TOKENS, **sampling})
    request = urllib.request.Request(
        f"{url}/chat/completions", body.encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as answer:
        found: dict[str, Any] = json.load(answer)
        return found


def main() -> int:
    sampling = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    print(f"sampling {sampling or 'the server default'}, max_tokens {MAX_TOKENS}")
    print("| session | seconds | prompt / written tokens | verdict | facts kept: answer / digest | begins |")
    print("|---|---|---|---|---|---|")
    kept = [0, 0, 0]
    with LlamaServer(ctx=4096) as llama:
        for name in SESSIONS:
            planted = plant(load_transcript(name), "chat", "bench")
            middle = items_of(planted.entries[MIDDLE])
            facts = [
                f.text for f in planted.facts if f.kind in SCORED and MIDDLE.start <= f.entry < MIDDLE.stop
            ]
            chunk = "\n\n".join(transcript_entries(middle))[:CHUNK_CHARS]
            started = time.monotonic()
            answer = ask(llama.url, summary_request(chunk, None), sampling)
            text = answer["choices"][0]["message"]["content"] or ""
            fault, usage = fault_of(text, asked()), answer["usage"]
            digested = digest(middle, MAX_TOKENS * 3)
            scores = (len(facts), sum(f in text for f in facts), sum(f in digested for f in facts))
            kept = [a + b for a, b in zip(kept, scores, strict=True)]
            begins = " ".join(text.split())[:60].replace("|", "\\|")
            print(
                f"| {name} | {time.monotonic() - started:.0f} | {usage['prompt_tokens']} / "
                f"{usage['completion_tokens']} | {fault.value if fault else 'a summary'} | "
                f"{scores[1]} / {scores[2]} of {scores[0]} | {begins} |",
                flush=True,
            )
    print(f"| all | | | | {kept[1]} / {kept[2]} of {kept[0]} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the local model writes when asked for a summary, judged as the hook judges it.

llama.cpp's own server (``tools/llama_server.py``: SmolLM2-135M-Instruct, 4,096 tokens) is sent our
summary request (``engine.summary.summarize.summary_request``) of the first ten messages of each of
four recorded sessions, with ``summary_max_tokens`` as derived for a 4K summary model (806); each
answer is judged by ``core.summary_check.fault_of``, as the engine judges it before applying it.

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

from compact_hook.core.summary_check import fault_of
from compact_hook.core.transcript import transcript_entries
from compact_hook.engine.summary.summarize import asked, summary_request
from tests.integration.llama_server import LlamaServer
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
    print("| session | seconds | prompt / written tokens | verdict | begins |")
    print("|---|---|---|---|---|")
    with LlamaServer(ctx=4096) as llama:
        for name in SESSIONS:
            messages = load_transcript(name)
            chunk = "\n\n".join(transcript_entries(items_of(messages[1:12])))[:CHUNK_CHARS]
            started = time.monotonic()
            answer = ask(llama.url, summary_request(chunk, None), sampling)
            text = answer["choices"][0]["message"]["content"] or ""
            fault = fault_of(text, asked())
            usage = answer["usage"]
            begins = " ".join(text.split())[:60].replace("|", "\\|")
            print(
                f"| {name} | {time.monotonic() - started:.0f} | {usage['prompt_tokens']} / "
                f"{usage['completion_tokens']} | {fault.value if fault else 'a summary'} | {begins} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

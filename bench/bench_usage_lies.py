"""Usage that lies: the real CLIs through a real proxy against stand-ins reporting usage as servers do.

    .venv/bin/python bench/bench_usage_lies.py

Claude Code, Codex CLI and Gemini CLI (30 tool turns each, ``tests/integration/agent_clients.py``),
with truthful usage and with each mode of ``tools/billing.py`` (``usage-tail``: the tokens after the
cached prefix, Ollama 0.30; ``usage-msgtail``: system and tools and the messages after the cached
prefix of them; ``usage-zero``: 0 when cached; ``usage-cap``: at most a context smaller than the window,
the rest cut silently; ``usage-msgs``: the messages only); and Claude Code at a 24K window with a
4,000-token reserve (its system and tools ~40% of it) against both cache shapes. Per run: the largest
forwarded request over the window (our tokenizer's count, the reply reserve included), summaries
applied and summary calls, requests the capped server cut, and what the hook said of the usage
(``compact_hook_count_samples_total``).

Runs against whichever compact_hook the proxies import: this checkout, or another's with this file,
``tools/billing.py``, ``tools/standin_upstream.py`` and ``tests/integration/agent_clients.py`` copied
there and run from it, for a side-by-side.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.agent_clients import (  # noqa: E402
    CLAUDE_CODE,
    CLAUDE_CODE_24K,
    CODEX,
    GEMINI_CLI,
    USAGE_MODES,
    ClientFacts,
    lying,
    problems,
    run_each,
)

CLIS = (CLAUDE_CODE, CODEX, GEMINI_CLI)


def row(mode: str, facts: ClientFacts) -> str:
    said = ", ".join(f"{int(n)} {outcome}" for outcome, n in sorted(facts.samples.items()) if n)
    name = facts.client.name.rsplit(", usage", 1)[0]
    return (
        f"| {mode} | {name} | {facts.largest / facts.client.window:.2f} | "
        f"{facts.applied} / {facts.summary_calls} | {facts.truncated if mode == 'cap' else '—'} | "
        f"{'ok' if not problems(facts) else 'FAILED'} | {said} |"
    )


def main() -> None:
    chosen = (*CLIS, *(lying(client, mode) for mode in USAGE_MODES for client in CLIS))
    chosen += (CLAUDE_CODE_24K, *(lying(CLAUDE_CODE_24K, mode) for mode in ("tail", "msgtail")))
    columns = ("usage", "client", "largest forwarded / window", "summaries applied / calls")
    columns += ("cut by the server", "checks", "usage said")
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|")
    for facts in run_each(chosen):
        mode = next((m for m in USAGE_MODES if facts.client.name.endswith(f"usage {m}")), "truthful")
        print(row(mode, facts), flush=True)


if __name__ == "__main__":
    main()

"""Counts the provider agrees with: real sessions through a real proxy to stand-ins that bill unlike us.

    .venv/bin/python bench/bench_billing.py [--turns 60]

The replays of ``tests/integration/test_billing_proxy.py`` (``tests/integration/billing.py``), as a
table: the recorded Claude Code sessions (Claude Code 2.1.330's system prompt and tools, a 40K
window, an 8K reply reserve) to stand-ins billing as Claude 3 – Opus 4.6 and as Opus 4.8 and later
count (ctok), refusing over the window with Anthropic's error; the main session in chat, Responses
and ``generateContent`` shape (after pi's, Codex's and Gemini CLI's captured system prompts and
tools, a 32K window, the cheap tiers off) to stand-ins billing 1.25× and 0.8× what we count. Per
replay: requests the provider refused as too long, the largest billed request over the window,
compaction events, and ``x-compact-tokens-after`` against the bill — on a conversation's first
request (a prior, or the group's estimate) and from its second on (largest and median error).

Runs against whichever compact_hook the proxies import: this checkout, or another one's with
``PYTHONPATH=<checkout>`` (and this checkout's ``tools/`` and ``tests/integration/billing.py``
copied there) for a side-by-side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.billing import (  # noqa: E402
    BILLS,
    CLAUDE,
    WIRES,
    Replay,
    Session,
    billing_config,
    claude_code_sessions,
    replay,
    wire_session,
)
from tests.integration.harness import ProxyProcess, StandinUpstream  # noqa: E402


def row(wire: str, billed_as: str, session: str, done: Replay) -> str:
    errors = done.errors()
    later = [abs(error) for error in errors[1:]]
    return (
        f"| {wire} | {billed_as} | {session} | {len(done.turns)} | {done.refusals} | "
        f"{done.largest / done.limit:.3f} | {done.compactions} | {errors[0]:+.1%} | "
        f"{max(later):.1%} | {statistics.median(later):.2%} |"
    )


def cases(turns: int) -> list[tuple[str, str, str, str, Session]]:
    """(wire, billed as, model group, session name, session)."""
    found = []
    for family in CLAUDE:
        for name, session in claude_code_sessions().items():
            short = name.removeprefix("claude_code_").removesuffix(".json")
            found.append(("anthropic", f"Claude {family}", f"claude-{family}", short, session))
    for wire in WIRES:
        for bill in BILLS:
            found.append(
                (wire, f"{bill}x ours", f"{wire}-{bill}", "fa812bfe_pre_compact", wire_session(wire, turns))
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=60, help="turns of each chat, Responses, Google replay")
    args = parser.parse_args()
    rows = []
    with (
        StandinUpstream() as upstream,
        ProxyProcess(billing_config(upstream, Path(tempfile.mkdtemp(prefix="billing-")))) as proxy,
    ):
        for wire, billed_as, group, name, session in cases(args.turns):
            rows.append(row(wire, billed_as, name, replay(upstream, [proxy], wire, group, session)))
            print(rows[-1], flush=True)
    print(
        "\n| wire | billed as | session | turns | refused | largest billed / window | compactions "
        "| first request off by | later: largest error | later: median error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

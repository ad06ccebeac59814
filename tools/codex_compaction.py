"""Codex's own compaction through the proxy: Codex CLI (clients/package.json) with its remote compaction on
— the built-in provider (``openai_base_url``) and a custom provider declaring ``remote_compaction = "v2"`` —
against a native Responses deployment, a chat-only one and an Anthropic one, 30 tool turns each with
``model_auto_compact_token_limit`` low enough for several Codex compactions.

    .venv/bin/python tools/codex_compaction.py

One table: exit, turns, Codex's compactions (its ``compaction_trigger`` requests, each answered by the
proxy), summary calls, summaries that reached the provider, requests that reached it carrying our
compaction item unexpanded (must be 0), orphans. Exit status 1 when anything is wrong (``problems``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.agent_clients import (  # noqa: E402
    CODEX_COMPACTING,
    DEPLOYMENTS,
    ClientFacts,
    on_deployment,
    problems,
    run_each,
)


def main() -> int:
    chosen = tuple(on_deployment(client, where) for client in CODEX_COMPACTING for where in DEPLOYMENTS)
    console = Console(width=200)
    with console.status(f"{len(chosen)} Codex runs through the proxy, one at a time…"):
        runs: list[ClientFacts] = list(run_each(chosen))
    table = Table(title=f"Codex {chosen[0].version}: its own compaction served by the proxy (30 tool turns)")
    columns = ("provider setup, deployment", "exit", "turns", "Codex compactions", "summary calls")
    columns += ("summaries reached the provider", "our item unexpanded upstream", "orphans", "verdict")
    for column in columns:
        table.add_column(column, justify="left" if column.startswith("provider") else "right")
    for facts in runs:
        table.add_row(
            facts.client.name.removeprefix("Codex CLI, "),
            str(facts.completed.exit_code),
            str(facts.turns),
            str(facts.client_compactions),
            str(facts.summary_calls),
            str(facts.applied),
            str(facts.opaque_forwarded),
            str(facts.orphans),
            "FAILED" if problems(facts) else "ok",
        )
    console.print(table)
    for facts in runs:
        for problem in problems(facts):
            console.print(f"{facts.client.name}: {problem}")
    return 1 if any(problems(facts) for facts in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

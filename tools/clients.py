"""`make clients`: the real agent CLIs (Claude Code, Codex CLI, Gemini CLI, Qwen Code, opencode, pi) through a
real proxy with compact_hook, one table.

    .venv/bin/python tools/clients.py [--client NAME ...] [--capture DIR] [--window N] [--usage MODE ...]

Claude Code runs twice: npm's and the newer one the Agent SDK's Linux package ships (its `claude` binary).
Each CLI (installed by `make clients-install` at the versions pinned in clients/package.json) runs 30
tool turns against the stand-in's scripted agent through a proxy whose windows are small enough to
compact several times; the table says what reached the provider: compaction events (distinct summaries
forwarded, each one applied) against the summary calls paid for. Exit status 1 when anything is wrong
(the same checks as tests/integration/test_clients_proxy.py). ``--capture DIR`` also writes the first
and the last request body each CLI sent (as it sent them, before the proxy) to DIR: that is how the
captures in tests/data/clients/ were made. ``--usage MODE`` (``tail``, ``zero``, ``cap``, ``msgs``; any
number) runs the chosen CLIs against stand-ins whose usage lies as servers do (``tools/billing.py``)
instead: the usage must be set aside (said, and counted by ``compact_hook_count_samples_total``) and every
forwarded request still within the window by our own count.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.agent_clients import (  # noqa: E402
    CLIENTS,
    USAGE_MODES,
    ClientFacts,
    lying,
    problems,
    run_each,
    standing,
)

PIPED_WIDTH = 200


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--client", choices=[client.name for client in CLIENTS], action="append")
    parser.add_argument("--capture", type=Path, help="write each CLI's first and last request body here")
    parser.add_argument(
        "--usage",
        choices=USAGE_MODES,
        action="append",
        help="run against a stand-in whose usage lies this way (any number: each a run of its own)",
    )
    parser.add_argument(
        "--window",
        type=int,
        help="every chosen client's context window (default: each its own)",
    )
    args = parser.parse_args()
    chosen = tuple(client for client in CLIENTS if not args.client or client.name in args.client)
    if args.window is not None:
        chosen = tuple(dataclasses.replace(client, window=args.window) for client in chosen)
    if args.usage:
        chosen = tuple(lying(client, mode) for mode in args.usage for client in chosen)
    console = Console()
    if not console.is_terminal:
        console = Console(width=PIPED_WIDTH)
    missing = [str(client.executable) for client in chosen if not client.executable.exists()]
    if missing:
        console.print(f"[red]not installed:[/red] {', '.join(missing)} — run `make clients-install`")
        return 2
    with console.status(f"{len(chosen)} CLI runs through the proxy, one at a time…"):
        runs = list(run_each(chosen))
    console.print(_table(runs))
    if args.capture is not None:
        _capture(runs, args.capture)
    for facts in runs:
        for problem in problems(facts):
            console.print(f"[red]{facts.client.name}:[/red] {problem}")
    return 1 if any(problems(facts) for facts in runs) else 0


def _capture(runs: list[ClientFacts], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for facts in runs:
        for label, body in (("first", facts.sent[0]), ("last", facts.sent[-1])) if facts.sent else ():
            variant = "" if facts.client.group.endswith("-agent") else f"-{facts.client.group}"
            name = f"{facts.client.binary}-{facts.client.version}{variant}-{label}.json"
            (folder / name).write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")


def _table(runs: list[ClientFacts]) -> Table:
    table = Table(title="The agent CLIs through the proxy (stand-in provider, scripted 30-turn tool loop)")
    for column in (
        "client",
        "version",
        "wire",
        "exit",
        "turns",
        "requests",
        "summaries applied",
        "summary calls",
        "client's own compactions",
        "recalls",
        "first / largest / window",
        "orphans",
        "usage: learned / set aside",
        "thinking kept / removed",
        "seconds",
        "verdict",
    ):
        table.add_column(column, justify="left" if column in ("client", "wire", "verdict") else "right")
    for facts in runs:
        client = facts.client
        thinking = (
            f"{facts.thinking_forwarded} / {facts.thinking_removed}"
            if client.wire.format.bound_thinking
            else "—"
        )
        table.add_row(
            client.name,
            client.version,
            client.path,
            str(facts.completed.exit_code),
            str(facts.turns),
            str(len(facts.sent)),
            str(facts.applied),
            str(facts.summary_calls),
            str(facts.client_compactions),
            str(facts.recalls),
            f"{facts.first_size:,} / {facts.largest:,} / {client.window:,}",
            str(facts.orphans),
            _usage(facts),
            thinking,
            f"{facts.completed.seconds:.1f}",
            f"[{'red' if problems(facts) else 'green'}]{standing(facts)}[/]",
        )
    return table


def _usage(facts: ClientFacts) -> str:
    """What the group's responses' usage was (``compact_hook_count_samples_total``): learned, and set
    aside by reason."""
    samples = facts.samples
    aside = ", ".join(
        f"{int(value)} {outcome}"
        for outcome, value in sorted(samples.items())
        if outcome != "learned" and value
    )
    return f"{int(samples.get('learned', 0))} / {aside or '0'}"


if __name__ == "__main__":
    sys.exit(main())

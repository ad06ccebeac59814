"""``compact-hook`` / ``python -m compact_hook``: parse the command line and run one command.

Every error a user can cause (a bad file, a bad setting, a proxy that is not there) ends in one
line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from compact_hook.errors import CompactError
from compact_hook.settings.summary import DEFAULT_ARCHIVE_DIR

PIPED_WIDTH = 160


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="compact-hook", description="compact_hook for operators")
    commands = root.add_subparsers(dest="command", required=True)
    for add in (_reading, _replay, _archive, _config):
        add(commands)
    return root


def _reading(commands: Any) -> None:
    """``count`` and ``check``: a request read, no model called."""
    count = commands.add_parser("count", help="tokens of a request by part")
    count.add_argument("file", type=Path)
    count.add_argument("--model", default="gpt-4o", help="picks the tokenizer the proxy would use")
    count.add_argument("--tokenizer", help="o200k_base, cl100k_base, claude, or a tokenizer.json")
    count.add_argument(
        "--ratio",
        type=float,
        help="the provider's tokens per one of ours, for its column (default: the model's measured prior)",
    )
    count.add_argument("--line", type=int, help="JSONL: which request (1-based; default the longest)")

    check = commands.add_parser("check", help="dry run: what the proxy would do (no model call)")
    check.add_argument("file", type=Path)
    check.add_argument("--config", type=Path, required=True)
    check.add_argument("--model", required=True)
    check.add_argument("--line", type=int)


def _replay(commands: Any) -> None:
    """``replay``: a conversation sent turn by turn through a proxy."""
    replay = commands.add_parser("replay", help="send a conversation turn by turn through a proxy")
    replay.add_argument("file", type=Path)
    replay.add_argument("--proxy", required=True, help="e.g. http://127.0.0.1:4000")
    replay.add_argument("--model", required=True)
    replay.add_argument("--key", default=os.environ.get("LITELLM_MASTER_KEY", ""))
    replay.add_argument("--plot", type=Path, help="write a .png or .svg of sent vs forwarded tokens")
    replay.add_argument(
        "--config", type=Path, help="litellm_config.yaml: trigger and window lines on the plot"
    )
    replay.add_argument("--turns", type=int, help="replay at most this many turns")
    replay.add_argument("--line", type=int)


def _archive(commands: Any) -> None:
    """``archive``: what was summarized away, browsed."""
    archive = commands.add_parser("archive", help="browse what was summarized away")
    archive.add_argument("--dir", type=Path, default=Path(DEFAULT_ARCHIVE_DIR))
    actions = archive.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("ls", help="list entries")
    listing.add_argument("session", nargs="?")
    show = actions.add_parser("show", help="an entry's audit and messages")
    show.add_argument("entry")
    show.add_argument("--json", action="store_true", help="the raw audit and messages")
    named = actions.add_parser("handles", help="the handles (recall 048213) of the tool outputs archived")
    named.add_argument("session", nargs="?")
    recall = actions.add_parser("recall", help="the tool output a handle names, word for word")
    recall.add_argument("handle")
    recall.add_argument("--session")
    prune = actions.add_parser("prune", help="delete entries older than --max-age-days")
    prune.add_argument("--max-age-days", type=float, required=True)


def _config(commands: Any) -> None:
    """``config validate``: the proxy's start-up validation."""
    config = commands.add_parser("config", help="configuration")
    actions = config.add_subparsers(dest="action", required=True)
    validate = actions.add_parser("validate", help="the proxy's start-up validation, without starting it")
    validate.add_argument("file", type=Path)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no fetch of LiteLLM's model map
    console = Console()
    if not console.is_terminal:  # piped or captured: wide enough that table cells keep whole values
        console = Console(width=PIPED_WIDTH)
    try:
        return run(args, console)
    except (CompactError, ValueError, OSError) as exc:
        message = " ".join(str(exc).split())  # one line, whatever the exception's text holds
        print(f"compact-hook: error: {message}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace, console: Console) -> int:
    """Run the command: the function of ``cli.commands`` that bears its name."""
    from compact_hook.cli import commands

    handler: Callable[[argparse.Namespace, Console], int] = getattr(commands, args.command)
    return handler(args, console)


if __name__ == "__main__":
    sys.exit(main())

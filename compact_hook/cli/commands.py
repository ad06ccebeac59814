"""One function per command: read the arguments, call the pieces, print."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from rich.console import Console

from compact_hook.cli import archive as archive_view
from compact_hook.cli.check import dry_run, report
from compact_hook.cli.count import Shown, count_parts, count_table
from compact_hook.cli.inputs import load, resolve, validate
from compact_hook.core.calibration import family_prior
from compact_hook.core.limits import Limits
from compact_hook.state.archive import prune
from compact_hook.state.tokenizers import counter_for, tokenizer_name_for_model


def count(args: argparse.Namespace, console: Console) -> int:
    loaded = load(args.file, args.line)
    name = args.tokenizer or tokenizer_name_for_model(args.model)
    prior = family_prior(args.model, name)
    if args.ratio is not None:
        shown = Shown(loaded.wire.name, name, args.ratio, "--ratio")
    elif prior != 1.0:
        shown = Shown(loaded.wire.name, name, prior, f"the measured prior for {args.model}")
    else:
        shown = Shown(loaded.wire.name, name, 1.0, f"no prior for {args.model}")
    console.print(count_table(count_parts(loaded, counter_for(name)), shown))
    return 0


def check(args: argparse.Namespace, console: Console) -> int:
    loaded = load(args.file, args.line)
    checked = asyncio.run(dry_run(loaded, resolve(args.config, args.model)))
    console.print(report(checked, loaded.wire.name))
    return 0


def replay(args: argparse.Namespace, console: Console) -> int:
    from compact_hook.cli.plot import plot
    from compact_hook.cli.replay import replay as run_replay
    from compact_hook.cli.replay import sender, turn_table

    loaded = load(args.file, args.line)
    turns = run_replay(loaded, sender(loaded, args.proxy, args.key, args.model), args.turns)
    console.print(turn_table(turns))
    events = sum(turn.event for turn in turns)
    calls = sum(turn.summary_calls for turn in turns)
    console.print(f"{events} compaction event(s), {calls} summary call(s) on the request path")
    if args.plot is not None:
        settings = resolve(args.config, args.model) if args.config else None
        limits = Limits.of(settings, None, 0) if settings else None
        window = settings.context_window if settings else None
        rows = [(turn.sent, turn.forwarded, turn.event) for turn in turns]
        plot(rows, limits.compact if limits else None, window, args.plot)
        console.print(f"plot: {args.plot}")
    return 0


def archive(args: argparse.Namespace, console: Console) -> int:
    root = args.dir
    if args.action == "ls":
        console.print(archive_view.listing(root, args.session))
    elif args.action == "show":
        path = archive_view.find_entry(root, args.entry)
        if args.json:
            messages = json.loads(path.read_text(encoding="utf-8"))
            shown = {"path": str(path), "audit": archive_view.audit_of(path), "messages": messages}
            print(json.dumps(shown, indent=2, ensure_ascii=False))
        else:
            console.print(archive_view.show(path))
    elif args.action == "handles":
        console.print(archive_view.handles(root, args.session))
    elif args.action == "recall":
        sys.stdout.write(archive_view.recalled(root, args.handle, args.session))
    else:
        removed = prune(root, args.max_age_days)
        console.print(f"removed {removed} file(s) older than {args.max_age_days:g} days under {root}")
    return 0


def config(args: argparse.Namespace, console: Console) -> int:
    compacting = validate(args.file)
    console.print(
        f"{args.file}: valid; compaction on for {len(compacting)} model(s): {', '.join(compacting) or '-'}"
    )
    return 0

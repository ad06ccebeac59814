"""``archive ls | show | prune``: what was summarized away, and what the model saw instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from compact_hook.cli.inputs import InputError
from compact_hook.core.pairing import pair
from compact_hook.core.recall import Original, Originals
from compact_hook.state.archive import archive_files, audit_path
from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES

WIRES = {wire.name: wire for wire in (CHAT, ANTHROPIC, RESPONSES, GOOGLE)}


def audit_of(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(audit_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def listing(root: Path, session: str | None) -> Table:
    table = Table(title=f"archive {root}")
    for column in ("tenant", "session", "entry", "removal", "entries", "tokens before → after", "created"):
        table.add_column(column)
    for path in archive_files(root, session):
        audit = audit_of(path) or {}
        table.add_row(
            path.parent.parent.name if path.parent.parent != root else "-",
            path.parent.name,
            path.name,
            str(audit.get("removal", "?")),
            str(audit.get("entry_count", "?")),
            f"{audit.get('tokens_before', '?')} → {audit.get('tokens_after', '?')}"
            if audit
            else "(no audit)",
            str(audit.get("created", "")),
        )
    return table


def find_entry(root: Path, entry: str) -> Path:
    """An entry by its path (absolute, or relative to the archive) or its file name."""
    for candidate in (Path(entry), root / entry):
        if candidate.is_file():
            return candidate
    matches = [path for path in archive_files(root) if path.name == entry or path.name == entry + ".json"]
    if len(matches) != 1:
        raise InputError(f"no single archive entry {entry!r} under {root} ({len(matches)} found)")
    return matches[0]


def show(path: Path) -> RenderableType:
    audit = audit_of(path)
    messages = json.loads(path.read_text(encoding="utf-8"))
    parts: list[RenderableType] = [Text(str(path), style="bold")]
    if audit is None:
        parts.append(Text("(no audit beside this entry)"))
    else:
        meta = Table(show_header=False)
        for key, value in audit.items():
            if key != "summary":
                meta.add_row(key, json.dumps(value) if isinstance(value, dict | list) else str(value))
        parts += [
            meta,
            Text("what the model saw instead:", style="bold"),
            Markdown(audit.get("summary") or "-"),
        ]
    parts.append(Text(f"archived entries ({len(messages)}):", style="bold"))
    for index, message in enumerate(messages):
        parts.append(Text(f"[{index}] " + json.dumps(message, ensure_ascii=False)[:500]))
    return Group(*parts)


def archived_originals(root: Path, session: str | None) -> list[tuple[Path, str, Original]]:
    """Every tool output the archive holds, with its handle (``core.recall``): what the summaries
    of these conversations name as ``recall <handle>``."""
    found: list[tuple[Path, str, Original]] = []
    for path in archive_files(root, session):
        wire = WIRES.get(str(((audit_of(path) or {}).get("origin") or {}).get("wire", "")))
        try:
            items = (
                [wire.item(entry) for entry in json.loads(path.read_text(encoding="utf-8"))] if wire else []
            )
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # not an entry we can read: `archive show` shows it as it is
        found += [
            (path, handle, original) for handle, original in Originals.of(items, pair(items).tool_of).items()
        ]
    return found


def handles(root: Path, session: str | None) -> Table:
    table = Table(title=f"handles in archive {root}")
    for column in ("handle", "session", "entry", "tool", "chars", "begins"):
        table.add_column(column)
    for path, handle, original in archived_originals(root, session):
        begins = original.text.strip().splitlines()[0][:60] if original.text.strip() else ""
        table.add_row(handle, path.parent.name, path.name, original.tool, str(len(original.text)), begins)
    return table


def recalled(root: Path, handle: str, session: str | None) -> str:
    """The original a handle names, word for word, from the archive."""
    for _, found, original in archived_originals(root, session):
        if found == handle:
            return original.text
    raise InputError(f"no tool output with handle {handle!r} under {root}")

"""The configuration reference: the two tables of docs/configuration.md, from the settings' declarations.

Default, meaning and what leaving a setting unset means come from each field of ``CompactConfig``
and ``ProcessConfig`` (``compact_hook.settings.setting``). ``scripts/config_reference.py`` writes the tables
into docs/configuration.md between their markers, and a test fails when the two disagree.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from compact_hook.settings.checks import ENV_PREFIX
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from compact_hook.settings.setting import SETTING, Setting

MARKERS = {
    "compact": ("<!-- config-reference:compact -->", "<!-- /config-reference:compact -->"),
    "process": ("<!-- config-reference:process -->", "<!-- /config-reference:process -->"),
}


def compact_table() -> str:
    """The ``model_info.compact`` keys: key, default, meaning."""
    rows = [_row(f"`{field.name}`", field) for field in dataclasses.fields(CompactConfig)]
    return "\n".join(["| key | default | meaning |", "|---|---|---|", *rows])


def process_table() -> str:
    """The process-wide ``COMPACT_*`` environment variables: variable, default, meaning."""
    rows = [_row(f"`{ENV_PREFIX}{field.name.upper()}`", field) for field in dataclasses.fields(ProcessConfig)]
    return "\n".join(["| variable | default | meaning |", "|---|---|---|", *rows])


def tables() -> dict[str, str]:
    return {"compact": compact_table(), "process": process_table()}


def with_tables(readme: str) -> str:
    """``readme`` with each table between its markers replaced by the generated one."""
    for name, table in tables().items():
        start, end = MARKERS[name]
        before, found, rest = readme.partition(start)
        if not found or end not in rest:
            raise ValueError(f"README has no {start} ... {end} markers")
        readme = f"{before}{start}\n{table}\n{end}{rest.partition(end)[2]}"
    return readme


def write_readme(path: Path) -> bool:
    """Rewrite the README's tables; True if anything changed."""
    text = path.read_text(encoding="utf-8")
    updated = with_tables(text)
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return updated != text


def _row(name: str, field: dataclasses.Field[Any]) -> str:
    declared: Setting = field.metadata[SETTING]
    default = _default_text(field.default)
    unset = declared.unset
    shown = unset.said if default is None and unset is not None else f"{default}{declared.suffix}"
    return f"| {name} | {shown} | {declared.meaning} |"


def _default_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(f'"{item}"' for item in value) + "]`"
    text = str(value)
    home = str(Path.home())
    if text.startswith(home + "/"):
        text = "~" + text[len(home) :]
    return f"`{text}`"

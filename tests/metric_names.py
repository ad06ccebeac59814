"""The metric names the hook exports and those a PromQL expression reads: what keeps the alert rules
and the dashboard on metrics that exist (a renamed metric must not leave a rule or a panel empty)."""

from __future__ import annotations

import re
from pathlib import Path

METRICS = Path(__file__).resolve().parents[1] / "compact_hook" / "proxy" / "metrics.py"


def exported() -> set[str]:
    """Every ``compact_hook_<name>`` the hook declares, without the prefix."""
    text = METRICS.read_text()
    declared = re.findall(r'(?:counter|_counter|_gauge)\(\s*"(\w+)"', text)
    return set(declared) | set(re.findall(r'f"\{PREFIX\}_(\w+)"', text))


def read_by(expr: str) -> set[str]:
    """The metrics an expression reads, without the prefix and the exposition's suffixes."""
    return {re.sub(r"_(total|bucket|count)$", "", name) for name in re.findall(r"compact_hook_(\w+)", expr)}

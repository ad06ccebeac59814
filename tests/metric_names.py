"""The metric names the hook exports and those a PromQL expression reads: what keeps the alert rules
and the dashboard on metrics that exist (a renamed metric must not leave a rule or a panel empty)."""

from __future__ import annotations

import re
from pathlib import Path

OBSERVE = Path(__file__).resolve().parents[1] / "compact_hook" / "proxy" / "observe"
METRICS = (OBSERVE / "metrics.py", OBSERVE / "collectors.py")
"""Where the hook declares its metrics: per request, and what the engine counts (read at scrape time)."""


def exported() -> set[str]:
    """Every ``compact_hook_<name>`` the hook declares, without the prefix."""
    text = "\n".join(path.read_text() for path in METRICS)
    declared = re.findall(r'(?:counter|_counter|_gauge)\(\s*"(\w+)"', text)
    return set(declared) | set(re.findall(r'f"\{PREFIX\}_(\w+)"', text))


def read_by(expr: str) -> set[str]:
    """The metrics an expression reads, without the prefix and the exposition's suffixes."""
    return {re.sub(r"_(total|bucket|count)$", "", name) for name in re.findall(r"compact_hook_(\w+)", expr)}


ROOT = Path(__file__).resolve().parents[1]
BOARD = ROOT / "deploy" / "grafana" / "compact_hook.json"
RULES = ROOT / "deploy" / "prometheus" / "compact_hook.rules.yml"


def panel_exprs() -> dict[str, list[str]]:
    """Each panel's queries by the panel's title (the checked-in dashboard)."""
    import json

    board = json.loads(BOARD.read_text())
    return {p["title"]: [t["expr"] for t in p["targets"]] for p in board["panels"] if p.get("targets")}


def rule_exprs() -> list[str]:
    """Every alert rule's expression (the shipped rules)."""
    import yaml

    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def selectors(expr: str) -> list[tuple[str, list[str]]]:
    """The series an expression reads: each exposition name (``compact_hook_…``) with the ``outcome``
    values it selects (empty: any outcome)."""
    found = []
    for name, matchers in re.findall(r"(compact_hook_\w+)(?:\{([^}]*)\})?", expr):
        outcomes: list[str] = []
        for label, operator, value in re.findall(r'(\w+)\s*(=~|=)\s*"([^"]*)"', matchers or ""):
            if label == "outcome":
                outcomes += value.split("|") if operator == "=~" else [value]
        found.append((name, outcomes))
    return found

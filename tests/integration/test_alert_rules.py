"""The alert rules operators load (``deploy/prometheus/``): valid for Prometheus, firing on the
synthetic trouble of their test file and silent on the healthy run — by promtool, the Prometheus
project's own checker (Debian's ``prometheus`` package, installed by ``make system-deps``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.metric_names import exported, read_by

pytestmark = pytest.mark.integration

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    assert found, "promtool is installed by `make system-deps` (Debian's prometheus package)"
    return subprocess.run([found, *args], cwd=RULES, capture_output=True, text=True, timeout=120)


def test_the_rules_are_valid_and_fire_on_trouble_only() -> None:
    checked = promtool("check", "rules", "compact_hook.rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout
    tested = promtool("test", "rules", "compact_hook.rules.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_rule_reads_metrics_the_hook_exports_and_has_a_runbook_line() -> None:
    """A renamed metric must not leave a rule watching nothing."""
    rules = yaml.safe_load((RULES / "compact_hook.rules.yml").read_text())["groups"][0]["rules"]
    known = exported()
    runbook = (RULES.parents[1] / "docs" / "operations.md").read_text()
    for rule in rules:
        used = read_by(rule["expr"])
        assert used and used <= known, (rule["alert"], used - known)
        assert f"`{rule['alert']}`" in runbook, rule["alert"]

"""docs/configuration.md's tables are generated from the code: they cannot drift apart."""

import dataclasses
import re
from pathlib import Path

import pytest

from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from compact_hook.settings.reference import compact_table, process_table, with_tables
from compact_hook.settings.setting import declared

README = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_setting_is_declared_with_its_meaning() -> None:
    for cls in (CompactConfig, ProcessConfig):
        settings = declared(cls)  # a field declared without setting() has no entry: KeyError
        assert list(settings) == [field.name for field in dataclasses.fields(cls)]
        assert all(rules.meaning.strip() for rules in settings.values())


def test_the_readme_holds_the_tables_the_code_generates() -> None:
    text = README.read_text(encoding="utf-8")
    assert with_tables(text) == text, "run: .venv/bin/python scripts/config_reference.py"
    assert compact_table() in text and process_table() in text


def test_defaults_in_the_tables_are_the_codes() -> None:
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.*?) \|", compact_table(), re.M))
    assert rows["trigger_ratio"] == f"`{CompactConfig().trigger_ratio}`"
    assert rows["protected_tools"] == '`["manage_todo_list"]`'
    assert rows["context_window"] == "router's `max_input_tokens`"  # a None default says what it means
    env = dict(re.findall(r"^\| `(COMPACT_[A-Z_]+)` \| (.*?) \|", process_table(), re.M))
    assert env["COMPACT_PREPARE_QUEUE"] == f"`{ProcessConfig().prepare_queue}`"


def test_a_readme_without_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="markers"):
        with_tables("# no tables here\n")

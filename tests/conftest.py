"""Fixtures shared by every test (the fakes themselves live in ``tests.fakes``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.fakes import InMemoryArchive, WordCounter  # noqa: E402


@pytest.fixture(autouse=True)
def clean_compact_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("COMPACT_"):
            monkeypatch.delenv(name)


@pytest.fixture
def archive() -> InMemoryArchive:
    return InMemoryArchive()


@pytest.fixture
def words() -> WordCounter:
    return WordCounter()


@pytest.fixture
def tmp_archive_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "archive"

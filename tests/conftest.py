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


@pytest.fixture(autouse=True)
def fresh_log_rate_limits() -> None:
    """Each test starts with the log rate limit's burst unused: it is process-wide, so lines
    other tests in the same worker logged must not silence the ones a test asserts on."""
    import logging

    from compact_hook.proxy.logs import PACKAGE, RateLimit

    for name in [PACKAGE, *logging.Logger.manager.loggerDict]:
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            for found in logging.getLogger(name).filters:
                if isinstance(found, RateLimit):
                    found.reset()


@pytest.fixture
def archive() -> InMemoryArchive:
    return InMemoryArchive()


@pytest.fixture
def words() -> WordCounter:
    return WordCounter()


@pytest.fixture
def tmp_archive_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "archive"

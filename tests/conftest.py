"""Fixtures shared by every test (the fakes themselves live in ``tests.fakes``)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.fakes import InMemoryArchive, WordCounter  # noqa: E402

TESTS = Path(__file__).resolve().parent
EDGE_IMPORT = re.compile(
    r"^\s*(?:from|import) (?:litellm|compact_hook\.proxy|compact_hook\.cli|tests\.routers)\b", re.MULTILINE
)
"""A unit test module that imports any of these (anywhere in it) goes through LiteLLM: it runs on
the newest LiteLLM of our range too (``make test-newest`` runs the tests marked ``edge``); the pure
core's tests do not depend on LiteLLM's version."""


LONGEST_FIRST = (
    "test_workers_proxy.py",
    "test_clients_proxy.py",
    "test_billing_proxy.py",
    "test_billing_wires_proxy.py",
    "test_redis_topologies_proxy.py",
    "test_formats_proxy.py",
    "test_stateful_proxy.py",
    "test_prepare_proxy.py",
    "test_tiers_proxy.py",
    "test_hardening_proxy.py",
)
"""The test files that take longest (a minute or more of one worker each, ``--durations``), run
first: xdist hands whole files (``--dist loadfile``) to the workers in collection order, and one
of these started last keeps the suite waiting on one worker while the other has nothing left."""


EDGE_MARK = re.compile(r"\bpytest\.mark\.edge\b")


def _may_be_edge(path: Path) -> bool:
    """Whether a test module can hold a test marked ``edge`` (by its text: no import needed)."""
    text = path.read_text(encoding="utf-8")
    if path.parent == TESTS / "unit":
        return EDGE_IMPORT.search(text) is not None
    return EDGE_MARK.search(text) is not None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m edge`` (``make test-newest``) does not import the modules it would deselect whole: their
    imports and assertion rewriting were most of its collection (12 of 27 s, each worker)."""
    if config.getoption("markexpr", "") != "edge" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return True if not _may_be_edge(collection_path.resolve()) else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under ``integration/`` is marked ``integration`` (``-m "not integration"`` skips
    real processes); a unit module that goes through LiteLLM is marked ``edge``; the longest files
    come first (``LONGEST_FIRST``)."""
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
    edge: dict[Path, bool] = {}
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(TESTS / "integration"):
            item.add_marker(pytest.mark.integration)
        elif path.parent == TESTS / "unit":
            if path not in edge:
                edge[path] = _may_be_edge(path)
            if edge[path]:
                item.add_marker(pytest.mark.edge)


@pytest.fixture(autouse=True)
def clean_compact_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ``COMPACT_*`` from outside; the file store's default folder is the test's own (a hook
    built with the default settings shares a file with no other test)."""
    for name in list(os.environ):
        if name.startswith("COMPACT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture(autouse=True)
def fresh_log_rate_limits() -> None:
    """Each test starts with the log rate limit's burst unused: it is process-wide, so lines
    other tests in the same worker logged must not silence the ones a test asserts on."""
    import logging

    from compact_hook.proxy.lifecycle.logs import PACKAGE, RateLimit

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

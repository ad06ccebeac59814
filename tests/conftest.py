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
                edge[path] = EDGE_IMPORT.search(path.read_text(encoding="utf-8")) is not None
            if edge[path]:
                item.add_marker(pytest.mark.edge)


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

"""Fixtures the hook's unit tests share: a real router serving the test model groups (our summary
calls spied on), and its provider faked with respx."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import litellm
import pytest
import respx

from compact_hook.proxy import server
from tests.routers import SUMMARY, UPSTREAM, completion, model_groups, spy_router


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    litellm.disable_aiohttp_transport = True
    spy = spy_router(model_groups(tmp_path / "archive"))
    monkeypatch.setattr(server, "proxy_router", lambda: spy)
    return spy


@pytest.fixture
def mocked_upstream() -> Iterator[respx.Route]:
    """The provider behind the router, faked with respx: every chat completion answers ``SUMMARY``."""
    with respx.mock(assert_all_called=False) as mock:
        yield mock.post(f"{UPSTREAM}/chat/completions").mock(
            return_value=httpx.Response(200, json=completion(SUMMARY))
        )


EDGE_IMPORT = re.compile(
    r"^\s*(?:from|import) (?:litellm|compact_hook\.proxy|compact_hook\.cli|tests\.routers)\b", re.MULTILINE
)
"""A unit test module that imports any of these (anywhere in it) goes through LiteLLM: it runs on
the newest LiteLLM of our range too (``make test-newest`` runs the tests marked ``edge``); the pure
core's tests do not depend on LiteLLM's version."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    touches: dict[Path, bool] = {}
    for item in items:
        path = item.path
        if path.parent.name != "unit":
            continue
        if path not in touches:
            touches[path] = EDGE_IMPORT.search(path.read_text(encoding="utf-8")) is not None
        if touches[path]:
            item.add_marker(pytest.mark.edge)

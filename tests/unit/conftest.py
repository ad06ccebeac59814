"""Fixtures the hook's unit tests share: a real router serving the test model groups (our summary
calls spied on), and its provider faked with respx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import litellm
import pytest
import respx

from compact_hook.proxy import server
from tests.fakes import ScriptedRouter
from tests.routers import SUMMARY, UPSTREAM, completion, model_groups, spy_router


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    litellm.disable_aiohttp_transport = True
    spy = spy_router(model_groups(tmp_path / "archive"))
    monkeypatch.setattr(server, "proxy_router", lambda: spy)
    return spy


@pytest.fixture
def recall_router(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Installs a ``ScriptedRouter`` with the given replies as the router the recall rounds call."""
    from compact_hook.proxy.recall import rounds

    def install(*replies: Any) -> ScriptedRouter:
        spy = ScriptedRouter(*replies)
        monkeypatch.setattr(rounds, "proxy_router", lambda: spy)
        return spy

    return install


@pytest.fixture
def mocked_upstream() -> Iterator[respx.Route]:
    """The provider behind the router, faked with respx: every chat completion answers ``SUMMARY``."""
    with respx.mock(assert_all_called=False) as mock:
        yield mock.post(f"{UPSTREAM}/chat/completions").mock(
            return_value=httpx.Response(200, json=completion(SUMMARY))
        )

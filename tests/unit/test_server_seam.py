"""The seam to LiteLLM's proxy (``proxy/server.py``): the router's deployments and group info,
whichever API the installed LiteLLM has, and never a member it deprecates.

A ``DeprecationWarning`` raised from ``compact_hook`` code is an error in this suite
(``pyproject.toml``), so on a LiteLLM that deprecates the old members (1.109+) these tests fail
if the seam calls them.
"""

from __future__ import annotations

import warnings
from typing import Any

import litellm
import pytest

from compact_hook.proxy import server
from compact_hook.proxy.request.models import ModelSettings
from compact_hook.settings.model import CompactConfig


def two_group_router() -> Any:
    return litellm.Router(
        model_list=[
            {
                "model_name": "agent",
                "litellm_params": {"model": "openai/gpt-4o", "api_key": "x"},
                "model_info": {"compact": {}, "max_input_tokens": 50_000},
            },
            {"model_name": "other", "litellm_params": {"model": "anthropic/claude-opus-5-5", "api_key": "x"}},
        ]
    )


def test_deployments_and_group_info_come_from_the_router_without_a_deprecated_member() -> None:
    r = two_group_router()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = server.deployments(r, "agent")
        info = server.group_info(r, "agent")
        missing = server.deployments(r, "nobody")
    assert [d["litellm_params"]["model"] for d in found] == ["openai/gpt-4o"]
    assert getattr(info, "max_input_tokens", None) == 50_000
    assert missing == []
    assert [w for w in caught if issubclass(w.category, DeprecationWarning)] == []


def test_router_settings_are_read_without_a_deprecated_attribute() -> None:
    fallbacks = [{"agent": ["other"]}]
    r = litellm.Router(model_list=two_group_router().model_list, context_window_fallbacks=fallbacks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert server.router_setting(r, "context_window_fallbacks") == fallbacks
        assert server.router_setting(r, "fallbacks") in (None, [])
    assert [w for w in caught if issubclass(w.category, DeprecationWarning)] == []


def test_model_settings_resolve_a_group_through_the_seam() -> None:
    resolved = ModelSettings(CompactConfig()).resolve(two_group_router(), "agent")
    assert resolved is not None and resolved.context_window == 50_000


def test_the_proxy_globals_are_none_without_a_running_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(__import__("sys").modules, server.PROXY_MODULE, raising=False)
    assert server.proxy_router() is None and server.proxy_global("redis_usage_cache") is None

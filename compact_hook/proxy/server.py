"""The running LiteLLM proxy as we see it — the one place that reads its globals or asks its
router anything: which router, a group's deployments and info, its settings, a completion.

LiteLLM 1.109 moved deployment and group lookups behind ``router.registry()`` and deprecated the
old members (``get_model_list``, ``get_model_group_info``: they warn, and are to be deleted).
Which API a router has is decided by what it offers (``registry``), never by a version string,
so every release in our range takes the newest path it has.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

PROXY_MODULE = "litellm.proxy.proxy_server"


def proxy_global(name: str) -> Any:
    """A global of the proxy this process runs (``llm_router``, ``redis_usage_cache``,
    ``user_config_file_path``), or ``None`` (not set yet, or compact_hook used without the proxy).
    Read each time: the proxy rebinds them on a config reload."""
    proxy_server = sys.modules.get(PROXY_MODULE)
    return getattr(proxy_server, name, None) if proxy_server is not None else None


def proxy_router() -> Any:
    """The proxy's router (``None`` before it is built)."""
    return proxy_global("llm_router")


def deployments(router: Any, group: str) -> list[Mapping[str, Any]]:
    """The group's deployments (aliases and wildcards resolved as the router resolves them)."""
    registry = _registry(router)
    found: Sequence[Any] | None = (
        registry.deployments(group) if registry is not None else router.get_model_list(model_name=group)
    )
    return [d for d in found or () if isinstance(d, Mapping)]


def group_info(router: Any, group: str) -> object | None:
    """LiteLLM's ``ModelGroupInfo`` of the group (``max_input_tokens`` among it), or ``None``."""
    registry = _registry(router)
    info: object | None = (
        registry.group(group) if registry is not None else router.get_model_group_info(group)
    )
    return info


def router_setting(router: Any, name: str) -> object | None:
    """One of the router's settings (``fallbacks``, ``context_window_fallbacks``), ``None`` unset:
    from its ``settings()`` snapshot where it has one (1.109+ deprecates the attributes)."""
    settings = getattr(type(router), "settings", None)
    source = router.settings() if callable(settings) else router
    return getattr(source, name, None)


async def complete(router: Any, **request: Any) -> Any:
    """A completion through the router (its deployments, keys, fallbacks, spend tracking)."""
    return await router.acompletion(**request)


def _registry(router: Any) -> Any:
    registry = getattr(type(router), "registry", None)
    return router.registry() if callable(registry) else None

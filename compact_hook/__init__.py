"""compact_hook: context compaction for long-running agents, as a LiteLLM proxy plugin.

``proxy_handler_instance`` is loaded on first access, so the library API (counting,
``compact_messages``) does not import the proxy.
"""

from __future__ import annotations

from typing import Any

from compact_hook.engine.library import compact_messages, count_tokens, should_compact
from compact_hook.engine.result import CompactResult, CompactStats
from compact_hook.settings.model import CompactConfig

__all__ = [
    "CompactConfig",
    "CompactResult",
    "CompactStats",
    "compact_messages",
    "count_tokens",
    "proxy_handler_instance",
    "should_compact",
]


def __getattr__(name: str) -> Any:
    if name == "proxy_handler_instance":
        from compact_hook.proxy.hook import proxy_handler_instance

        return proxy_handler_instance
    raise AttributeError(f"module 'compact_hook' has no attribute {name!r}")

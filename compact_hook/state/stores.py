"""Which store a process uses, from its settings: in-process, Redis (ours or LiteLLM's), or none.

One main store (conversation states, notes, locks) and one for compactions prepared ahead of their
trigger, on the same backend under their own keys.
"""

from __future__ import annotations

import logging
from typing import Any

from compact_hook.process_config import ProcessConfig
from compact_hook.state.store import CompactionStore, MemoryStore, RedisStore, TieredStore

logger = logging.getLogger(__name__)

PREPARED_NAMESPACE = "prepared"
PREPARED_SHARE = 4
"""The prepared store holds at most a quarter of the entries and bytes the main store may."""


def build_store(config: ProcessConfig, litellm_redis: Any = None) -> CompactionStore | None:
    """The store the settings ask for; ``litellm_redis`` is LiteLLM's own ``RedisCache``, if any.

    Our ``redis_url`` wins over LiteLLM's Redis; with neither, ``auto`` means in-process.
    """
    local = MemoryStore(config.store_max_entries, config.store_ttl_seconds, max_bytes=config.store_max_bytes)
    return _build(config, litellm_redis, local, "")


def build_prepared_store(config: ProcessConfig, litellm_redis: Any = None) -> CompactionStore | None:
    """Where compactions prepared ahead of their trigger wait: the same backend, its own keys."""
    local = MemoryStore(
        max(1, config.store_max_entries // PREPARED_SHARE),
        config.store_ttl_seconds,
        max_bytes=max(1024, config.store_max_bytes // PREPARED_SHARE),
    )
    return _build(config, litellm_redis, local, PREPARED_NAMESPACE)


def _build(
    config: ProcessConfig, litellm_redis: Any, local: MemoryStore, namespace: str
) -> CompactionStore | None:
    if config.store == "off":
        return None
    if config.store == "memory":
        return local
    client = _redis_client(config, litellm_redis)
    if client is None:
        if config.store == "redis" and not namespace:
            logger.warning("compact_hook: store 'redis' but no Redis configured; using the in-process store")
        return local
    shared = RedisStore(client, config.store_ttl_seconds, namespace)
    return TieredStore(shared, local, config.redis_timeout_seconds)


def _redis_client(config: ProcessConfig, litellm_redis: Any) -> Any:
    if config.redis_url:
        import redis.asyncio

        return redis.asyncio.from_url(config.redis_url)
    if litellm_redis is not None and hasattr(litellm_redis, "init_async_client"):
        return litellm_redis.init_async_client()
    return None

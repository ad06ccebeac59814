"""Which stores a process uses, from its settings: Redis (ours or LiteLLM's), the file store shared
by the processes of one machine, in-process, or none.

One main store (conversation states, notes, locks) and one for compactions prepared ahead of their
trigger, on the same backend under their own keys, through one Redis client. The choice is logged
once, with the Redis topology (one server, a cluster, a Sentinel-managed master) and where it was
configured, so an operator can see what each replica shares through.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compact_hook.settings.process import ProcessConfig
from compact_hook.state import file_store, redis_clients
from compact_hook.state.file_store import FILE, FileStore, Limits
from compact_hook.state.redis_clients import SharedRedis
from compact_hook.state.store import CompactionStore, MemoryStore, RedisStore
from compact_hook.state.tiered import TieredStore

logger = logging.getLogger(__name__)

PREPARED_NAMESPACE = "prepared"
PREPARED_SHARE = 4
"""The prepared store holds at most a quarter of the entries and bytes the main store may."""


@dataclass(frozen=True, slots=True)
class Stores:
    """The main store and the prepared one (None: remember nothing)."""

    main: CompactionStore | None
    prepared: CompactionStore | None
    description: str


def build_stores(config: ProcessConfig, litellm_redis: Any = None) -> Stores:
    """The stores the settings ask for; ``litellm_redis`` is LiteLLM's own ``RedisCache``, if any.

    Our ``redis_url`` wins over LiteLLM's Redis; with neither, ``auto`` means the file store: the
    proxy's worker processes (and the ones that replace them) share one memory.
    """
    main = MemoryStore(
        config.store_max_entries,
        config.store_ttl_seconds,
        max_bytes=config.store_max_bytes,
        tenant_bytes=config.store_tenant_record_bytes,
    )
    prepared = MemoryStore(
        max(1, config.store_max_entries // PREPARED_SHARE),
        config.store_ttl_seconds,
        max_bytes=max(1024, config.store_max_bytes // PREPARED_SHARE),
    )
    if config.store == "off":
        return _said(Stores(None, None, "none (store: off): every turn over the threshold pays a summary"))
    if config.store == "memory":
        return _said(Stores(main, prepared, "in-process (this process alone)"))
    shared = _shared_redis(config, litellm_redis) if config.store != "file" else None
    if shared is None:
        if config.store == "redis":
            logger.warning("compact_hook: store 'redis' but no Redis configured; using the file store")
        return _said(_file_stores(config, main, prepared))
    description = (
        f"Redis, {shared.topology.value} ({shared.where}), from {shared.source}; "
        "the in-process store while Redis is unreachable"
    )
    ttl, timeout, topology = config.store_ttl_seconds, config.redis_timeout_seconds, shared.topology
    watch = redis_clients.sentinel_watch(shared)
    quota = config.store_tenant_record_bytes
    shared_main = RedisStore(shared.client, ttl, "", topology, tenant_bytes=quota)
    main_store = TieredStore(shared_main, main, timeout, watch=watch)
    shared_prepared = RedisStore(shared.client, ttl, PREPARED_NAMESPACE, topology)
    prepared_store = TieredStore(shared_prepared, prepared, timeout, watch=watch)
    return _said(Stores(main_store, prepared_store, description))


def _file_stores(config: ProcessConfig, main: MemoryStore, prepared: MemoryStore) -> Stores:
    """The file store in front of the in-process one: the proxy's processes on this machine share it;
    a file that cannot serve is answered from memory (``TieredStore``), never opened here on the
    event loop."""
    folder = Path(config.store_dir) if config.store_dir else file_store.default_folder()
    limits = Limits(
        config.store_ttl_seconds,
        config.store_max_entries,
        config.store_max_bytes,
        config.store_tenant_record_bytes,
    )
    prepared_limits = Limits(
        config.store_ttl_seconds, prepared.max_entries, prepared.max_bytes, config.store_tenant_record_bytes
    )
    timeout = config.redis_timeout_seconds
    main_store = over_file(FileStore(folder, limits), main, timeout)
    prepared_store = over_file(FileStore(folder, prepared_limits, PREPARED_NAMESPACE), prepared, timeout)
    where = folder / file_store.FILE_NAME
    description = f"a file shared by this machine's proxy processes ({where}); in process while it fails"
    return Stores(main_store, prepared_store, description)


def over_file(file: FileStore, memory: MemoryStore, timeout: float) -> TieredStore:
    """The file over memory; the writes the file queues report their faults to the tiered store."""
    tiered = TieredStore(file, memory, timeout, kind=FILE)
    file.on_fault = tiered.fault
    return tiered


def _said(stores: Stores) -> Stores:
    logger.info("compact_hook: store: %s", stores.description)
    return stores


def _shared_redis(config: ProcessConfig, litellm_redis: Any) -> SharedRedis | None:
    if config.redis_url:
        return redis_clients.from_url(config.redis_url)
    if litellm_redis is not None and hasattr(litellm_redis, "init_async_client"):
        return redis_clients.of_litellm(litellm_redis.init_async_client())
    return None

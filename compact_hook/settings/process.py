"""Process-wide settings: one frozen, validated object read from ``COMPACT_*`` variables.

The compaction store (one serves all models), background preparation, the archive's age,
metrics and logging. Each setting is declared once, on its field (``compact_hook.settings.setting``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from compact_hook.settings.checks import check_choice, environ_values
from compact_hook.settings.setting import Unset, check_declared, setting
from compact_hook.state.redis_clients import check_url

StoreBackend = Literal["auto", "memory", "file", "redis", "off"]
GcMode = Literal["auto", "loop", "interpreter"]
DEFAULT_STORE_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_TENANT_RECORD_BYTES = 8 * 1024 * 1024
DEFAULT_LOCK_TTL_SECONDS = 300.0
DEFAULT_LOCK_WAIT_SECONDS = 120.0
DEFAULT_FAILURE_TTL_SECONDS = 60.0
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class ProcessConfig:
    """Process-wide settings (``COMPACT_STORE``, ``COMPACT_REDIS_URL``, ``COMPACT_LOG_LEVEL``, ...)."""

    store: StoreBackend = setting(
        "auto",
        (
            "where compactions are remembered: `auto` (Redis if configured, else `file`), `file` (one "
            "SQLite file in `store_dir`, shared by the proxy's worker processes and kept across restarts), "
            "`memory` (each process its own), `redis`, `off` (remember nothing: every turn over the "
            "threshold pays a new summary)"
        ),
    )
    redis_url: str | None = setting(
        None,
        (
            "our own Redis: one server (`redis://redis:6379/0`), a cluster given one or more of its nodes "
            "(`redis+cluster://node1:7000,node2:7000`) or a master behind sentinels "
            "(`redis+sentinel://sentinel1:26379,sentinel2:26379/service-name`); `rediss` for TLS. **Wins "
            "over LiteLLM's Redis**; unset, the Redis LiteLLM itself is configured with (`REDIS_HOST`/"
            "`REDIS_PORT`, `litellm_settings.cache_params` of type redis — with `redis_startup_nodes` for "
            "a cluster, `sentinel_nodes` and `service_name` for Sentinel — "
            "`general_settings.coordination_redis`) is used"
        ),
        non_empty=True,
        unset=Unset("unset"),
    )
    store_dir: str | None = setting(
        None,
        (
            "the folder of the file store (`store: file`, or `auto` without Redis); local to the machine "
            "and private to the proxy's user (made 0700, the file 0600)"
        ),
        non_empty=True,
        unset=Unset("`$XDG_STATE_HOME/compact_hook`, else `~/.local/state/compact_hook`"),
    )
    store_max_entries: int = setting(
        10_000, "bound of the in-process store (LRU) and of the file store, in entries", at_least=1
    )
    store_max_bytes: int = setting(
        DEFAULT_STORE_MAX_BYTES,
        "bound of the in-process store and of the file store, in bytes (summaries are most of it)",
        at_least=1024,
        suffix=" (64 MiB)",
    )
    store_tenant_record_bytes: int = setting(
        DEFAULT_TENANT_RECORD_BYTES,
        (
            "most a tenant (a key or team) may hold in the store's records — what the compaction items "
            "we give Codex stand for — in process and in Redis; past it, that tenant's own oldest "
            "records go, never another's (a record larger than it alone is not kept)"
        ),
        at_least=1024,
        suffix=" (8 MiB)",
    )
    store_ttl_seconds: int = setting(
        86_400, "lifetime of a remembered compaction (in process, in the file store and in Redis)", at_least=1
    )
    redis_timeout_seconds: float = setting(0.5, "per Redis call; slower counts as down", at_least=0.001)
    lock_ttl_seconds: float = setting(
        DEFAULT_LOCK_TTL_SECONDS,
        'expiry of a replica\'s "I am summarizing this" lock, so a crashed holder blocks no one for long',
        at_least=0.001,
    )
    lock_wait_seconds: float = setting(
        DEFAULT_LOCK_WAIT_SECONDS,
        "how long a replica waits for another's summary before making it itself",
        at_least=0,
    )
    failure_ttl_seconds: float = setting(
        DEFAULT_FAILURE_TTL_SECONDS,
        (
            "a failed summary is remembered this long (per conversation, shared by replicas): later turns "
            "and waiting replicas do not repeat it"
        ),
        at_least=0,
    )
    prepare_concurrency: int = setting(
        4, "compactions prepared in the background at once, per proxy process", at_least=1
    )
    prepare_queue: int = setting(
        16,
        (
            "more that may wait for a slot; beyond it the oldest waiting one of the tenant with most waiting "
            "is dropped (that conversation's trigger then makes its summary itself)"
        ),
        at_least=0,
    )
    archive_max_age_days: float | None = setting(
        None,
        (
            "archive entries (and their audits) older than this many days are deleted, checked at most once "
            "an hour by each proxy process that writes there; `compact-hook archive prune` does it by hand"
        ),
        at_least=0.001,
        unset=Unset("unset (kept forever)"),
    )
    metrics_port: int | None = setting(
        None,
        (
            "serve the Prometheus metrics on this port too (see *Metrics*): for proxies without LiteLLM's "
            "`prometheus` callback, whose `/metrics` serves them anyway"
        ),
        at_least=1,
        at_most=65535,
        unset=Unset("unset"),
    )
    metrics_host: str = setting(
        "127.0.0.1", "address `COMPACT_METRICS_PORT` listens on (`0.0.0.0` in a container)"
    )
    log_level: str = setting("INFO", "level of the `compact_hook` logger (stderr of the proxy)")
    gc: GcMode = setting(
        "auto",
        (
            "who runs Python's cyclic garbage collector in the proxy: `loop` (between event-loop callbacks), "
            "`interpreter` (inside whichever allocation crosses its threshold), `auto` (`loop` before "
            "CPython 3.12, where a collection inside a `ContextVar.set` can crash the proxy — see "
            "*Operations*)"
        ),
    )

    def __post_init__(self) -> None:
        check_declared(self)
        check_choice("log_level", self.log_level.upper(), LOG_LEVELS)
        check_url("redis_url", self.redis_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProcessConfig:
        """``COMPACT_STORE``, ``COMPACT_REDIS_URL``, ``COMPACT_LOG_LEVEL``, ..."""
        return cls(**environ_values(cls, environ))

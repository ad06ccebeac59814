"""Settings: two frozen, validated objects (per model, per process), built from YAML or ``COMPACT_*``.

Precedence (highest first): a model's ``model_info.compact`` block, then ``COMPACT_*``
environment variables, then the defaults below. Every mistake raises ``ValueError``
naming the offending key, so a bad ``litellm_config.yaml`` fails proxy start-up loudly
instead of silently compacting with a setting nobody asked for. Checking and reading the
environment (its one place) are in ``compact_hook.settings_checks``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from compact_hook.core.pricing import Prices
from compact_hook.settings_checks import (
    check_below_trigger,
    check_choice,
    check_fraction,
    check_non_empty,
    check_range,
    check_types,
    environ_values,
    field_types,
    from_yaml,
)

DEFAULT_TRIGGER_RATIO = 0.92
DEFAULT_TAIL_RETENTION_RATIO = 0.25
DEFAULT_SUMMARY_MAX_TOKENS = 4096
DEFAULT_SUMMARY_TIMEOUT_SECONDS = 120.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_SUMMARY_DEADLINE_SECONDS = 60.0
DEFAULT_MAX_SUMMARY_CALLS = 12
DEFAULT_RETRY_BACKOFF_SECONDS = 1.0
DEFAULT_ARCHIVE_DIR = str(Path("~/.local/state/compact_hook/archive").expanduser())
DEFAULT_TOOL_OUTPUT_MAX_TOKENS = 5_000
DEFAULT_CLEAR_TRIGGER_RATIO = 0.7
DEFAULT_KEEP_TOOL_RESULTS = 3
DEFAULT_CLEAR_AT_LEAST = 5_000
DEFAULT_PROTECTED_TOOLS = ("manage_todo_list",)
DEFAULT_USER_MESSAGE_BUDGET = 20_000
DEFAULT_PINNED_PATTERNS = (
    "<system-reminder>",
    "# AGENTS.md instructions",
    "<user_instructions>",
    "<environment_context>",
    "CLAUDE.md",
)
"""Text clients inject to instruct the agent (Claude Code, Codex): a user message holding one is pinned."""
DEFAULT_PINNED_SHARE = 0.1
ToolOutputPolicy = Literal["tokens", "bytes", "none"]
NormalizeMode = Literal["changed", "always"]
OverflowMode = Literal["fit", "passthrough"]
StoreBackend = Literal["auto", "memory", "redis", "off"]
MIN_TOOL_OUTPUT_TOKENS = 100
DIGEST = "digest"
"""``summary_model: digest``: summarize with the built-in deterministic digest, no LLM call."""
DEFAULT_STORE_MAX_ENTRIES = 10_000
DEFAULT_STORE_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_STORE_TTL_SECONDS = 86_400
DEFAULT_REDIS_TIMEOUT_SECONDS = 0.5
DEFAULT_LOCK_TTL_SECONDS = 300.0
DEFAULT_LOCK_WAIT_SECONDS = 120.0
DEFAULT_FAILURE_TTL_SECONDS = 60.0
DEFAULT_BREAKER_FAILURES = 3
DEFAULT_BREAKER_COOLDOWN_SECONDS = 60.0
DEFAULT_BREAKER_MAX_COOLDOWN_SECONDS = 960.0
DEFAULT_LEARNED_WINDOW_TTL_SECONDS = 86_400.0
DEFAULT_PREPARE_RATIO = 0.75
DEFAULT_CACHE_TTL_SECONDS = 300.0
"""The providers' default prompt-cache lifetime (Anthropic's 5-minute cache; OpenAI keeps 5-10 minutes)."""
DEFAULT_PREPARE_CONCURRENCY = 4
DEFAULT_PREPARE_QUEUE = 16

PRICE_KEYS = ("price_input", "price_cache_write", "price_cache_read", "price_output")


@dataclass(frozen=True)
class CompactConfig:
    """Per-model compaction settings.

    ``context_window`` may stay ``None`` here: the proxy hook fills it from the router's
    ``max_input_tokens``; used directly, an unknown window means "never compact".
    ``summary_model`` ``None`` means "the same model group as the request".
    ``tokenizer`` ``None`` means "pick by model name" (see ``tokens.tokenizer_name_for_model``);
    otherwise ``o200k_base``, ``cl100k_base``, ``claude`` or a path to a ``tokenizer.json``.
    ``thinking_prefix_check`` ``None`` means "by the deployment's model name" in the proxy
    (``formats.anthropic.runs_prefix_check``) and "yes" used directly.
    The cheap tiers (truncation, clearing), protected content and the fit guarantee are
    documented with their keys in docs/configuration.md.
    """

    enabled: bool = True
    context_window: int | None = None
    trigger_ratio: float = DEFAULT_TRIGGER_RATIO
    tail_retention_ratio: float | None = None
    summary_model: str | None = None
    summary_max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS
    summary_timeout_seconds: float = DEFAULT_SUMMARY_TIMEOUT_SECONDS
    summary_deadline_seconds: float = DEFAULT_SUMMARY_DEADLINE_SECONDS
    max_summary_calls: int = DEFAULT_MAX_SUMMARY_CALLS
    summary_context_window: int | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_backoff_seconds: float = DEFAULT_RETRY_BACKOFF_SECONDS
    archive_dir: str = DEFAULT_ARCHIVE_DIR
    tokenizer: str | None = None
    tool_output_max_tokens: int = DEFAULT_TOOL_OUTPUT_MAX_TOKENS
    tool_output_policy: ToolOutputPolicy = "tokens"
    clear_tool_results: bool = True
    clear_trigger_ratio: float | None = None
    keep_tool_results: int = DEFAULT_KEEP_TOOL_RESULTS
    clear_at_least: int = DEFAULT_CLEAR_AT_LEAST
    protected_tools: tuple[str, ...] = DEFAULT_PROTECTED_TOOLS
    user_message_budget: int = DEFAULT_USER_MESSAGE_BUDGET
    pinned_patterns: tuple[str, ...] = DEFAULT_PINNED_PATTERNS
    pinned_budget: int | None = None
    normalize: NormalizeMode = "changed"
    on_overflow: OverflowMode = "fit"
    breaker_failures: int = DEFAULT_BREAKER_FAILURES
    breaker_cooldown_seconds: float = DEFAULT_BREAKER_COOLDOWN_SECONDS
    breaker_max_cooldown_seconds: float = DEFAULT_BREAKER_MAX_COOLDOWN_SECONDS
    recover: bool = True
    learned_window_ttl_seconds: float = DEFAULT_LEARNED_WINDOW_TTL_SECONDS
    prepare: bool = True
    prepare_ratio: float | None = None
    thinking_prefix_check: bool | None = None
    cost_aware: bool = True
    cache_ttl_seconds: float = DEFAULT_CACHE_TTL_SECONDS
    price_input: float | None = None
    price_cache_write: float | None = None
    price_cache_read: float | None = None
    price_output: float | None = None

    def __post_init__(self) -> None:
        check_types(self)
        self._check_tiers()
        if self.prepare_ratio is not None:
            check_fraction("prepare_ratio", self.prepare_ratio, allow_one=False)
            check_below_trigger(
                "prepare_ratio",
                self.prepare_ratio,
                self.trigger_ratio,
                strict=True,
                why="a compaction is prepared before the turn that needs it",
            )
        check_range("context_window", self.context_window, low=1)
        check_range("summary_context_window", self.summary_context_window, low=1)
        check_fraction("trigger_ratio", self.trigger_ratio, allow_one=True)
        if self.tail_retention_ratio is not None:
            check_fraction("tail_retention_ratio", self.tail_retention_ratio, allow_one=False)
            check_below_trigger(
                "tail_retention_ratio",
                self.tail_retention_ratio,
                self.trigger_ratio,
                strict=True,
                why="otherwise a compaction cannot get under the trigger",
            )
        check_range("summary_max_tokens", self.summary_max_tokens, low=1)
        check_range("summary_timeout_seconds", self.summary_timeout_seconds, low=0.001)
        check_range("summary_deadline_seconds", self.summary_deadline_seconds, low=0.001)
        check_range("max_summary_calls", self.max_summary_calls, low=1)
        check_range("max_retries", self.max_retries, low=0)
        check_range("retry_backoff_seconds", self.retry_backoff_seconds, low=0)
        check_range("breaker_failures", self.breaker_failures, low=1)
        check_range("breaker_cooldown_seconds", self.breaker_cooldown_seconds, low=0.001)
        check_range(
            "breaker_max_cooldown_seconds",
            self.breaker_max_cooldown_seconds,
            low=self.breaker_cooldown_seconds,
        )
        check_range("learned_window_ttl_seconds", self.learned_window_ttl_seconds, low=1)
        check_range("cache_ttl_seconds", self.cache_ttl_seconds, low=0.001)
        for name in PRICE_KEYS:
            check_range(name, getattr(self, name), low=0)
        if (self.price_input is None) != (self.price_output is None):
            raise ValueError("price_input: set with price_output (USD per million tokens), or neither")
        check_non_empty("archive_dir", self.archive_dir)
        check_non_empty("summary_model", self.summary_model)
        check_non_empty("tokenizer", self.tokenizer)

    def _check_tiers(self) -> None:
        check_range("tool_output_max_tokens", self.tool_output_max_tokens, low=MIN_TOOL_OUTPUT_TOKENS)
        if self.clear_trigger_ratio is not None:
            check_fraction("clear_trigger_ratio", self.clear_trigger_ratio, allow_one=True)
            check_below_trigger(
                "clear_trigger_ratio",
                self.clear_trigger_ratio,
                self.trigger_ratio,
                strict=False,
                why="clearing is the cheaper tier and comes first",
            )
        check_range("keep_tool_results", self.keep_tool_results, low=0)
        check_range("clear_at_least", self.clear_at_least, low=1)
        check_range("user_message_budget", self.user_message_budget, low=0)
        for name in self.protected_tools:
            check_non_empty("protected_tools", name)
        for pattern in self.pinned_patterns:
            check_non_empty("pinned_patterns", pattern)
        check_range("pinned_budget", self.pinned_budget, low=0)

    @property
    def clear_ratio(self) -> float:
        """``clear_trigger_ratio``, or by default 0.7 — never above the trigger, which it follows."""
        if self.clear_trigger_ratio is not None:
            return self.clear_trigger_ratio
        return min(DEFAULT_CLEAR_TRIGGER_RATIO, self.trigger_ratio)

    @property
    def tail_ratio(self) -> float:
        """``tail_retention_ratio``, or by default 0.25 — at most half the trigger, which it follows."""
        if self.tail_retention_ratio is not None:
            return self.tail_retention_ratio
        return min(DEFAULT_TAIL_RETENTION_RATIO, self.trigger_ratio / 2)

    @property
    def prepare_at(self) -> float:
        """``prepare_ratio``, or by default 0.75 — below the trigger it prepares for (at most 85% of
        it, so a lowered trigger still leaves the summary time to be made)."""
        if self.prepare_ratio is not None:
            return self.prepare_ratio
        return min(DEFAULT_PREPARE_RATIO, round(self.trigger_ratio * 0.85, 4))

    @property
    def prices(self) -> Prices | None:
        """The prices set here (USD per million tokens: a cache write or read unset costs as input)."""
        if self.price_input is None or self.price_output is None:
            return None
        write = self.price_input if self.price_cache_write is None else self.price_cache_write
        read = self.price_input if self.price_cache_read is None else self.price_cache_read
        return Prices.per_million(self.price_input, write, read, self.price_output)

    @property
    def uses_digest(self) -> bool:
        """Summaries come from the built-in digest, not from a model."""
        return self.summary_model == DIGEST

    @property
    def prepares(self) -> bool:
        """Compactions are prepared in the background (a digest costs nothing to make at the trigger)."""
        return self.prepare and not self.uses_digest

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any], base: CompactConfig | None = None) -> CompactConfig:
        """Build from a ``model_info["compact"]`` block layered over ``base`` (or the defaults)."""
        if not isinstance(settings, Mapping):
            raise ValueError(f"compact: must be a mapping of settings, got {type(settings).__name__}")
        known = field_types(cls)
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown setting (known: {', '.join(sorted(known))})")
        values = {key: from_yaml(value, field_types(cls)[key]) for key, value in settings.items()}
        return dataclasses.replace(base or cls(), **values)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CompactConfig:
        """Defaults overridden by ``COMPACT_<SETTING>`` variables, e.g. ``COMPACT_TRIGGER_RATIO=0.8``."""
        return cls(**environ_values(cls, environ))


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class ProcessConfig:
    """Process-wide settings: the compaction store (one serves all models) and logging.

    ``store``: ``auto`` uses Redis when ``redis_url`` is set or LiteLLM itself has Redis
    configured, else the in-process store; ``memory`` and ``redis`` force one; ``off``
    remembers nothing (every turn over the threshold makes a new summary, and nothing is
    prepared). ``redis_url`` (ours) wins over LiteLLM's Redis settings.
    ``prepare_concurrency``: background summaries (prepared compactions) running at once in this
    process; ``prepare_queue``: how many more may wait (beyond it the oldest waiting one of the
    tenant with most waiting is dropped: it only costs that turn its wait).
    ``archive_max_age_days``: archive entries older than that are deleted (checked at most once
    an hour by each proxy process that writes there); unset keeps them forever.
    ``metrics_port``: serve our Prometheus metrics on that port (at ``metrics_host``) — for
    proxies without LiteLLM's ``prometheus`` callback, whose ``/metrics`` serves them anyway.
    """

    store: StoreBackend = "auto"
    redis_url: str | None = None
    store_max_entries: int = DEFAULT_STORE_MAX_ENTRIES
    store_max_bytes: int = DEFAULT_STORE_MAX_BYTES
    store_ttl_seconds: int = DEFAULT_STORE_TTL_SECONDS
    redis_timeout_seconds: float = DEFAULT_REDIS_TIMEOUT_SECONDS
    lock_ttl_seconds: float = DEFAULT_LOCK_TTL_SECONDS
    lock_wait_seconds: float = DEFAULT_LOCK_WAIT_SECONDS
    failure_ttl_seconds: float = DEFAULT_FAILURE_TTL_SECONDS
    prepare_concurrency: int = DEFAULT_PREPARE_CONCURRENCY
    prepare_queue: int = DEFAULT_PREPARE_QUEUE
    archive_max_age_days: float | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        check_types(self)
        check_choice("log_level", self.log_level.upper(), LOG_LEVELS)
        if self.store == "redis" and self.redis_url is not None:
            check_non_empty("redis_url", self.redis_url)
        check_range("store_max_entries", self.store_max_entries, low=1)
        check_range("store_max_bytes", self.store_max_bytes, low=1024)
        check_range("store_ttl_seconds", self.store_ttl_seconds, low=1)
        check_range("redis_timeout_seconds", self.redis_timeout_seconds, low=0.001)
        check_range("lock_ttl_seconds", self.lock_ttl_seconds, low=0.001)
        check_range("lock_wait_seconds", self.lock_wait_seconds, low=0)
        check_range("failure_ttl_seconds", self.failure_ttl_seconds, low=0)
        check_range("prepare_concurrency", self.prepare_concurrency, low=1)
        check_range("prepare_queue", self.prepare_queue, low=0)
        check_range("archive_max_age_days", self.archive_max_age_days, low=0.001)
        check_range("metrics_port", self.metrics_port, low=1)
        if self.metrics_port is not None and self.metrics_port > 65535:
            raise ValueError(f"metrics_port: must be at most 65535, got {self.metrics_port}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProcessConfig:
        """``COMPACT_STORE``, ``COMPACT_REDIS_URL``, ``COMPACT_LOG_LEVEL``, ..."""
        return cls(**environ_values(cls, environ))

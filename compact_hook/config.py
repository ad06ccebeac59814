"""Settings: one frozen, validated object, and the one place environment variables are read.

Precedence (highest first): a model's ``model_info.compact`` block, then ``COMPACT_*``
environment variables, then the defaults below. Every mistake raises ``ValueError``
naming the offending key, so a bad ``litellm_config.yaml`` fails proxy start-up loudly
instead of silently compacting with a setting nobody asked for.
"""

from __future__ import annotations

import dataclasses
import os
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from compact_hook.core.pricing import Prices

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

ENV_PREFIX = "COMPACT_"
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
        _check_types(self)
        self._check_tiers()
        if self.prepare_ratio is not None:
            _check_fraction("prepare_ratio", self.prepare_ratio, allow_one=False)
            _check_below_trigger(
                "prepare_ratio",
                self.prepare_ratio,
                self.trigger_ratio,
                strict=True,
                why="a compaction is prepared before the turn that needs it",
            )
        _check_range("context_window", self.context_window, low=1)
        _check_range("summary_context_window", self.summary_context_window, low=1)
        _check_fraction("trigger_ratio", self.trigger_ratio, allow_one=True)
        if self.tail_retention_ratio is not None:
            _check_fraction("tail_retention_ratio", self.tail_retention_ratio, allow_one=False)
            _check_below_trigger(
                "tail_retention_ratio",
                self.tail_retention_ratio,
                self.trigger_ratio,
                strict=True,
                why="otherwise a compaction cannot get under the trigger",
            )
        _check_range("summary_max_tokens", self.summary_max_tokens, low=1)
        _check_range("summary_timeout_seconds", self.summary_timeout_seconds, low=0.001)
        _check_range("summary_deadline_seconds", self.summary_deadline_seconds, low=0.001)
        _check_range("max_summary_calls", self.max_summary_calls, low=1)
        _check_range("max_retries", self.max_retries, low=0)
        _check_range("retry_backoff_seconds", self.retry_backoff_seconds, low=0)
        _check_range("breaker_failures", self.breaker_failures, low=1)
        _check_range("breaker_cooldown_seconds", self.breaker_cooldown_seconds, low=0.001)
        _check_range(
            "breaker_max_cooldown_seconds",
            self.breaker_max_cooldown_seconds,
            low=self.breaker_cooldown_seconds,
        )
        _check_range("learned_window_ttl_seconds", self.learned_window_ttl_seconds, low=1)
        _check_range("cache_ttl_seconds", self.cache_ttl_seconds, low=0.001)
        for name in PRICE_KEYS:
            _check_range(name, getattr(self, name), low=0)
        if (self.price_input is None) != (self.price_output is None):
            raise ValueError("price_input: set with price_output (USD per million tokens), or neither")
        _check_non_empty("archive_dir", self.archive_dir)
        _check_non_empty("summary_model", self.summary_model)
        _check_non_empty("tokenizer", self.tokenizer)

    def _check_tiers(self) -> None:
        _check_range("tool_output_max_tokens", self.tool_output_max_tokens, low=MIN_TOOL_OUTPUT_TOKENS)
        if self.clear_trigger_ratio is not None:
            _check_fraction("clear_trigger_ratio", self.clear_trigger_ratio, allow_one=True)
            _check_below_trigger(
                "clear_trigger_ratio",
                self.clear_trigger_ratio,
                self.trigger_ratio,
                strict=False,
                why="clearing is the cheaper tier and comes first",
            )
        _check_range("keep_tool_results", self.keep_tool_results, low=0)
        _check_range("clear_at_least", self.clear_at_least, low=1)
        _check_range("user_message_budget", self.user_message_budget, low=0)
        for name in self.protected_tools:
            _check_non_empty("protected_tools", name)
        for pattern in self.pinned_patterns:
            _check_non_empty("pinned_patterns", pattern)
        _check_range("pinned_budget", self.pinned_budget, low=0)

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
        known = _field_types(cls)
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown setting (known: {', '.join(sorted(known))})")
        values = {key: _from_yaml(value, _field_types(cls)[key]) for key, value in settings.items()}
        return dataclasses.replace(base or cls(), **values)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CompactConfig:
        """Defaults overridden by ``COMPACT_<SETTING>`` variables, e.g. ``COMPACT_TRIGGER_RATIO=0.8``."""
        return cls(**_environ_values(cls, environ))


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
        _check_types(self)
        _check_choice("log_level", self.log_level.upper(), LOG_LEVELS)
        if self.store == "redis" and self.redis_url is not None:
            _check_non_empty("redis_url", self.redis_url)
        _check_range("store_max_entries", self.store_max_entries, low=1)
        _check_range("store_max_bytes", self.store_max_bytes, low=1024)
        _check_range("store_ttl_seconds", self.store_ttl_seconds, low=1)
        _check_range("redis_timeout_seconds", self.redis_timeout_seconds, low=0.001)
        _check_range("lock_ttl_seconds", self.lock_ttl_seconds, low=0.001)
        _check_range("lock_wait_seconds", self.lock_wait_seconds, low=0)
        _check_range("failure_ttl_seconds", self.failure_ttl_seconds, low=0)
        _check_range("prepare_concurrency", self.prepare_concurrency, low=1)
        _check_range("prepare_queue", self.prepare_queue, low=0)
        _check_range("archive_max_age_days", self.archive_max_age_days, low=0.001)
        _check_range("metrics_port", self.metrics_port, low=1)
        if self.metrics_port is not None and self.metrics_port > 65535:
            raise ValueError(f"metrics_port: must be at most 65535, got {self.metrics_port}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProcessConfig:
        """``COMPACT_STORE``, ``COMPACT_REDIS_URL``, ``COMPACT_LOG_LEVEL``, ..."""
        return cls(**_environ_values(cls, environ))


def _environ_values(cls: type, environ: Mapping[str, str] | None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, hint in _field_types(cls).items():
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = _parse_env(ENV_PREFIX + name.upper(), raw, hint)
    try:
        cls(**values)
    except ValueError as exc:
        raise ValueError(f"environment ({ENV_PREFIX}*): {exc}") from exc
    return values


_TYPE_CACHE: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    if cls not in _TYPE_CACHE:
        _TYPE_CACHE[cls] = get_type_hints(cls)
    return _TYPE_CACHE[cls]


def _check_types(config: Any) -> None:
    hints = _field_types(type(config))
    for field in dataclasses.fields(config):
        _check_type(field.name, getattr(config, field.name), hints[field.name])


def _allowed_types(hint: Any) -> tuple[type, ...]:
    if get_origin(hint) in (Union, types.UnionType):
        return tuple(arg for arg in get_args(hint))
    return (hint,)


def _from_yaml(value: Any, hint: Any) -> Any:
    """YAML has lists, not tuples: accept a list where a tuple of strings is expected."""
    return tuple(value) if get_origin(hint) is tuple and isinstance(value, list) else value


def _check_below_trigger(name: str, value: float, trigger: float, *, strict: bool, why: str) -> None:
    if value > trigger or (strict and value == trigger):
        bound = "be below" if strict else "not exceed"
        raise ValueError(f"{name}: must {bound} trigger_ratio ({trigger}), got {value}; {why}")


def _check_choice(name: str, value: object, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(choices)}, got {value!r}")


def _check_type(name: str, value: Any, hint: Any) -> None:
    if get_origin(hint) is Literal:
        _check_choice(name, value, get_args(hint))
        return
    if get_origin(hint) is tuple:
        if not (isinstance(value, tuple) and all(isinstance(item, str) for item in value)):
            raise ValueError(f"{name}: expected a list of strings, got {value!r}")
        return
    allowed = _allowed_types(hint)
    if value is None and type(None) in allowed:
        return
    if isinstance(value, bool) and bool not in allowed:
        raise ValueError(f"{name}: expected {_describe(allowed)}, got a boolean ({value!r})")
    if isinstance(value, int) and not isinstance(value, bool) and float in allowed:
        return
    if not isinstance(value, tuple(t for t in allowed if t is not type(None))):
        raise ValueError(f"{name}: expected {_describe(allowed)}, got {type(value).__name__} ({value!r})")


def _describe(allowed: tuple[type, ...]) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in allowed)


def _check_range(name: str, value: float | None, *, low: float) -> None:
    if value is not None and value < low:
        raise ValueError(f"{name}: must be at least {low}, got {value!r}")


def _check_fraction(name: str, value: float, *, allow_one: bool) -> None:
    ok = 0 < value <= 1 if allow_one else 0 < value < 1
    if not ok:
        upper = "1]" if allow_one else "1)"
        raise ValueError(f"{name}: must be a fraction in (0, {upper}, got {value!r}")


def _check_non_empty(name: str, value: str | None) -> None:
    if value is not None and not value.strip():
        raise ValueError(f"{name}: must not be empty")


def _parse_env(var: str, raw: str, hint: Any) -> Any:
    text = raw.strip()
    if get_origin(hint) is tuple:
        return tuple(item.strip() for item in text.split(",") if item.strip())
    allowed = _allowed_types(hint)
    if type(None) in allowed and text.lower() in ("", "none", "null"):
        return None
    try:
        if bool in allowed:
            return _parse_bool(text)
        if int in allowed:
            return int(text)
        if float in allowed:
            return float(text)
    except ValueError as exc:
        raise ValueError(f"{var}: cannot read {raw!r} as {_describe(allowed)}") from exc
    return text


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)

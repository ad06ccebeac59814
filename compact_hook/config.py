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
from typing import Any, Union, get_args, get_origin, get_type_hints

DEFAULT_TRIGGER_RATIO = 0.92
DEFAULT_TAIL_RETENTION_RATIO = 0.25
DEFAULT_SUMMARY_MAX_TOKENS = 4096
DEFAULT_SUMMARY_TIMEOUT_SECONDS = 120.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_RETRY_BACKOFF_SECONDS = 1.0
DEFAULT_ARCHIVE_DIR = str(Path("~/.local/state/compact_hook/archive").expanduser())

ENV_PREFIX = "COMPACT_"


@dataclass(frozen=True)
class CompactConfig:
    """Per-model compaction settings.

    ``context_window`` may stay ``None`` here: the proxy hook fills it from the router's
    ``max_input_tokens``; used directly, an unknown window means "never compact".
    ``summary_model`` ``None`` means "the same model group as the request".
    ``tokenizer`` ``None`` means "pick by model name" (see ``tokens.tokenizer_name_for_model``);
    otherwise ``o200k_base``, ``cl100k_base``, ``claude`` or a path to a ``tokenizer.json``.
    """

    enabled: bool = True
    context_window: int | None = None
    trigger_ratio: float = DEFAULT_TRIGGER_RATIO
    tail_retention_ratio: float = DEFAULT_TAIL_RETENTION_RATIO
    summary_model: str | None = None
    summary_max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS
    summary_timeout_seconds: float = DEFAULT_SUMMARY_TIMEOUT_SECONDS
    summary_context_window: int | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_backoff_seconds: float = DEFAULT_RETRY_BACKOFF_SECONDS
    archive_dir: str = DEFAULT_ARCHIVE_DIR
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            _check_type(field.name, getattr(self, field.name), _field_types()[field.name])
        _check_range("context_window", self.context_window, low=1)
        _check_range("summary_context_window", self.summary_context_window, low=1)
        _check_fraction("trigger_ratio", self.trigger_ratio, allow_one=True)
        _check_fraction("tail_retention_ratio", self.tail_retention_ratio, allow_one=False)
        if self.tail_retention_ratio >= self.trigger_ratio:
            raise ValueError(
                f"tail_retention_ratio: must be below trigger_ratio ({self.trigger_ratio}), "
                f"got {self.tail_retention_ratio}; otherwise a compaction cannot get under the trigger"
            )
        _check_range("summary_max_tokens", self.summary_max_tokens, low=1)
        _check_range("summary_timeout_seconds", self.summary_timeout_seconds, low=0.001)
        _check_range("max_retries", self.max_retries, low=0)
        _check_range("retry_backoff_seconds", self.retry_backoff_seconds, low=0)
        _check_non_empty("archive_dir", self.archive_dir)
        _check_non_empty("summary_model", self.summary_model)
        _check_non_empty("tokenizer", self.tokenizer)

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any], base: CompactConfig | None = None) -> CompactConfig:
        """Build from a ``model_info["compact"]`` block layered over ``base`` (or the defaults)."""
        if not isinstance(settings, Mapping):
            raise ValueError(f"compact: must be a mapping of settings, got {type(settings).__name__}")
        unknown = sorted(set(settings) - set(_field_types()))
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown setting (known: {', '.join(sorted(_field_types()))})")
        return dataclasses.replace(base or cls(), **dict(settings))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CompactConfig:
        """Defaults overridden by ``COMPACT_<SETTING>`` variables, e.g. ``COMPACT_TRIGGER_RATIO=0.8``."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, hint in _field_types().items():
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is not None:
                values[name] = _parse_env(ENV_PREFIX + name.upper(), raw, hint)
        try:
            return cls(**values)
        except ValueError as exc:
            raise ValueError(f"environment ({ENV_PREFIX}*): {exc}") from exc


_TYPE_CACHE: dict[str, Any] = {}


def _field_types() -> dict[str, Any]:
    if not _TYPE_CACHE:
        _TYPE_CACHE.update(get_type_hints(CompactConfig))
    return _TYPE_CACHE


def _allowed_types(hint: Any) -> tuple[type, ...]:
    if get_origin(hint) in (Union, types.UnionType):
        return tuple(arg for arg in get_args(hint))
    return (hint,)


def _check_type(name: str, value: Any, hint: Any) -> None:
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
    allowed = _allowed_types(hint)
    text = raw.strip()
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

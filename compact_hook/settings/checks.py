"""Checking and reading settings: types, ranges and fractions, YAML's lists, ``COMPACT_*`` text.

Every mistake raises ``ValueError`` naming the offending key (``compact_hook.settings.model`` builds its
two settings objects with these).
"""

from __future__ import annotations

import dataclasses
import os
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

ENV_PREFIX = "COMPACT_"


def environ_values(cls: type, environ: Mapping[str, str] | None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, hint in field_types(cls).items():
        var = ENV_PREFIX + name.upper()
        if (raw := environ.get(var)) is not None:
            values[name] = _parse_env(var, raw, hint)
    try:
        cls(**values)
    except ValueError as exc:
        raise ValueError(f"environment ({ENV_PREFIX}*): {exc}") from exc
    return values


_TYPE_CACHE: dict[type, dict[str, Any]] = {}


def field_types(cls: type) -> dict[str, Any]:
    if cls not in _TYPE_CACHE:
        _TYPE_CACHE[cls] = get_type_hints(cls)
    return _TYPE_CACHE[cls]


def check_types(config: Any) -> None:
    hints = field_types(type(config))
    for field in dataclasses.fields(config):
        _check_type(field.name, getattr(config, field.name), hints[field.name])


def _allowed_types(hint: Any) -> tuple[type, ...]:
    if get_origin(hint) in (Union, types.UnionType):
        return get_args(hint)
    return (hint,)


def yaml_values(cls: type, settings: Mapping[str, Any]) -> dict[str, Any]:
    """A YAML block's settings for ``cls``: known keys only, lists read as tuples."""
    if not isinstance(settings, Mapping):
        raise ValueError(f"compact: must be a mapping of settings, got {type(settings).__name__}")
    known = field_types(cls)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown setting (known: {', '.join(sorted(known))})")
    return {key: _from_yaml(value, known[key]) for key, value in settings.items()}


def _from_yaml(value: Any, hint: Any) -> Any:
    """YAML has lists, not tuples: accept a list where a tuple of strings is expected."""
    return tuple(value) if get_origin(hint) is tuple and isinstance(value, list) else value


def check_choice(name: str, value: object, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(choices)}, got {value!r}")


def _check_type(name: str, value: Any, hint: Any) -> None:
    if get_origin(hint) is Literal:
        check_choice(name, value, get_args(hint))
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


def check_range(name: str, value: float | None, *, low: float) -> None:
    if value is not None and value < low:
        raise ValueError(f"{name}: must be at least {low}, got {value!r}")


def check_fraction(name: str, value: float, *, allow_one: bool) -> None:
    ok = 0 < value <= 1 if allow_one else 0 < value < 1
    if not ok:
        upper = "1]" if allow_one else "1)"
        raise ValueError(f"{name}: must be a fraction in (0, {upper}, got {value!r}")


def check_non_empty(name: str, value: str | None) -> None:
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

"""One setting, declared once: default, meaning, check, scope and "left unset" rule on its field.

``CompactConfig`` and ``ProcessConfig`` declare each field with :func:`setting`; everything else
is derived from that declaration: validation (:func:`check_declared`), the environment variables
(``settings.checks.environ_values``), the tables of docs/configuration.md
(``compact_hook.settings.reference``), the settings that scope a stored compaction
(:func:`scope_settings`) and the value a setting left unset stands for (:func:`resolved`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compact_hook.settings.checks import (
    check_fraction,
    check_non_empty,
    check_range,
    check_types,
)

SETTING = "compact_hook.settings.setting"


class Fraction(enum.Enum):
    """A share of the window: ``OPEN`` is (0, 1), ``CLOSED`` is (0, 1]."""

    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class Below:
    """Must stay below ``trigger_ratio`` (``strict``) or not exceed it, and ``why``."""

    why: str
    strict: bool = True

    def check(self, name: str, value: float, trigger: float) -> None:
        if value > trigger or (self.strict and value == trigger):
            bound = "be below" if self.strict else "not exceed"
            raise ValueError(f"{name}: must {bound} trigger_ratio ({trigger}), got {value}; {self.why}")


@dataclass(frozen=True, slots=True)
class Unset:
    """What leaving the setting unset (``None``) means: said in the docs, and computed by ``rule``
    (``None`` where something outside the settings decides, e.g. the router's window)."""

    said: str
    rule: Callable[[Any], Any] | None = None


@dataclass(frozen=True, slots=True)
class Setting:
    meaning: str
    at_least: float | str | None = None
    """A number, or the name of another setting whose value this one must reach."""
    at_most: float | None = None
    fraction: Fraction | None = None
    below_trigger: Below | None = None
    non_empty: bool = False
    """A string (or each string of a list) must not be blank."""
    scope: bool = False
    """Changes what a stored compaction looks like, so it is part of the store's scope hash."""
    unset: Unset | None = None
    suffix: str = ""
    """Said after the default in the docs (e.g. " (64 MiB)")."""


def setting(default: Any, meaning: str, **rules: Any) -> Any:
    """A dataclass field whose metadata is its :class:`Setting`."""
    return dataclasses.field(default=default, metadata={SETTING: Setting(meaning, **rules)})


_DECLARED: dict[type, dict[str, Setting]] = {}


def declared(cls: type) -> dict[str, Setting]:
    """Every field's declaration, in field order (read once per class: requests build settings)."""
    if cls not in _DECLARED:
        _DECLARED[cls] = {field.name: field.metadata[SETTING] for field in dataclasses.fields(cls)}
    return _DECLARED[cls]


def check_declared(config: Any) -> None:
    """Types first, then each field's own rules; a mistake raises ``ValueError`` naming the key."""
    check_types(config)
    for name, rules in declared(type(config)).items():
        _check(config, name, getattr(config, name), rules)


def resolved(config: Any, name: str) -> Any:
    """The setting's value, or what it stands for when left unset."""
    value = getattr(config, name)
    rules = declared(type(config))[name]
    if value is None and rules.unset is not None and rules.unset.rule is not None:
        return rules.unset.rule(config)
    return value


def scope_settings(cls: type) -> tuple[str, ...]:
    """The settings declared ``scope=True``, in field order."""
    return tuple(name for name, rules in declared(cls).items() if rules.scope)


def _check(config: Any, name: str, value: Any, rules: Setting) -> None:
    if value is None:
        return
    if rules.non_empty:
        for text in value if isinstance(value, tuple) else (value,):
            check_non_empty(name, text)
    if rules.fraction is not None:
        check_fraction(name, value, allow_one=rules.fraction is Fraction.CLOSED)
    if rules.below_trigger is not None:
        rules.below_trigger.check(name, value, config.trigger_ratio)
    if rules.at_least is not None:
        low = rules.at_least
        check_range(name, value, low=getattr(config, low) if isinstance(low, str) else low)
    if rules.at_most is not None and value > rules.at_most:
        raise ValueError(f"{name}: must be at most {rules.at_most:g}, got {value}")

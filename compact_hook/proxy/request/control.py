"""What the request, its key and its team ask of compaction: a mode, a focus, settings.

Sources, highest precedence first: the request header ``x-compact``, the request's metadata
``compact`` (``metadata`` on chat, ``litellm_metadata`` on /v1/messages and /v1/responses),
the virtual key's ``metadata.compact``, the team's ``metadata.compact``, then the model's own
settings. A value is ``"force"``, ``"off"``, ``"auto"`` or ``{"mode": ..., "focus": ...}``;
a key's or team's mapping may also override model settings (``{"trigger_ratio": 0.8}``) —
a request's may not: only operators change settings. Anything malformed is ignored (and
logged), never an error: the request goes on as if it had not been said.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compact_hook.core.outcomes import Mode
from compact_hook.settings.model import CompactConfig

logger = logging.getLogger(__name__)

HEADER = "x-compact"
SETTING_KEY = "compact"
MAX_FOCUS_CHARS = 500
CONTROL_KEYS = frozenset({"mode", "focus"})


@dataclass(frozen=True, slots=True)
class Control:
    mode: Mode = Mode.AUTO
    focus: str = ""
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def settings(self, config: CompactConfig) -> CompactConfig:
        """The model's settings with the key's and team's overrides; invalid ones are ignored."""
        if not self.overrides:
            return config
        try:
            return CompactConfig.from_dict(self.overrides, config)
        except (ValueError, TypeError) as exc:
            logger.warning("compact_hook: key/team compact settings ignored: %s", exc)
            return config


@dataclass(frozen=True, slots=True)
class _Said:
    """One source's say: any of them may be missing."""

    mode: Mode | None = None
    focus: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)


def control_of(data: Mapping[str, Any], metadata_key: str, user_api_key_dict: Any) -> Control:
    """The request's control, the first source to say each thing winning (nothing said, the most
    common case: the default, made once)."""
    said = (
        _header(data),
        _metadata_value(data.get(metadata_key)),
        _metadata_value(getattr(user_api_key_dict, "metadata", None)),
        _metadata_value(getattr(user_api_key_dict, "team_metadata", None)),
    )
    if said == UNSAID:
        return DEFAULT
    sources = [_parse(value, operator=index >= OPERATORS) for index, value in enumerate(said)]
    mode = next((s.mode for s in sources if s.mode is not None), Mode.AUTO)
    focus = next((s.focus for s in sources if s.focus is not None), "")
    # the team's overrides first, the key's over them
    overrides = {key: value for source in reversed(sources) for key, value in source.overrides.items()}
    return Control(mode, focus, overrides)


DEFAULT = Control()
UNSAID = (None, None, None, None)
"""Nothing said by the header, the request's metadata, the key or the team (in that order)."""
OPERATORS = 2
"""Where the sources operators set begin (the key's, the team's): only they may override settings."""


def with_command(control: Control, focus: str) -> Control:
    """``/compact [focus]``: force, with the command's focus (if it gave one)."""
    return dataclasses.replace(control, mode=Mode.FORCE, focus=_clean_focus(focus) or control.focus)


def _header(data: Mapping[str, Any]) -> object:
    request = data.get("proxy_server_request")
    headers = request.get("headers") if isinstance(request, Mapping) else None
    items = headers.items() if isinstance(headers, Mapping) else ()
    return next((value for name, value in items if isinstance(name, str) and name.lower() == HEADER), None)


def _metadata_value(metadata: object) -> object:
    return metadata.get(SETTING_KEY) if isinstance(metadata, Mapping) else None


def _parse(value: object, operator: bool) -> _Said:
    if value is None:
        return _Said()
    if isinstance(value, str):
        return _Said(mode=_mode(value))
    if not isinstance(value, Mapping):
        logger.info("compact_hook: ignored a compact control of type %s", type(value).__name__)
        return _Said()
    focus = value.get("focus")
    overrides = {k: v for k, v in value.items() if k not in CONTROL_KEYS} if operator else {}
    return _Said(
        mode=_mode(value["mode"]) if "mode" in value else None,
        focus=_clean_focus(focus) if isinstance(focus, str) else None,
        overrides=overrides,
    )


def _mode(value: object) -> Mode | None:
    if isinstance(value, str):
        try:
            return Mode(value.strip().lower())
        except ValueError:
            pass
    logger.info("compact_hook: ignored compact mode %.40r (use force, off or auto)", value)
    return None


def _clean_focus(text: str) -> str:
    """Printable, one paragraph, bounded: it goes into the summary request."""
    return " ".join(text.split())[:MAX_FOCUS_CHARS]

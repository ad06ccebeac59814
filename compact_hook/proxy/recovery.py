"""Recovering from a provider's "too long": learn its real limit, compact to it, retry once.

LiteLLM 1.106.2 gives us one way to retry a request after the provider refused it: a
fallback. Every request to a compacting model carries a per-request fallback to its own
group marked with our secret (``RETRY_KEY``); the deployment hook of that retry sees the mark,
learns the limit from the error the router recorded, compacts the request to it (forced) and
lets it go. Chat and /v1/messages raise ``ContextWindowExceededError``, which
``context_window_fallbacks`` catch; /v1/responses raises a plain ``BadRequestError``, so there
the mark rides in ``fallbacks`` and a retry of any other error re-raises that error unchanged.

The limit learned is remembered per model group in the store (replicas share it) for
``learned_window_ttl_seconds``, and later requests to the group use it as their window.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compact_hook.proxy import server
from compact_hook.proxy.router_summarizer import INTERNAL_TOKEN
from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)

RETRY_KEY = "compact_hook_retry"
SAFETY = 0.95
"""The learned window is this share of the limit (in our tokens): tokenizers disagree a little."""
UNKNOWN_SHRINK = 0.8
"""With no limit in the error, the learned window is this share of what was sent."""
NOTE_PREFIX = b"window:"
REFRESH_SECONDS = 5.0
MAX_SNAPSHOTS = 64
"""Each is taken by the retry right after its failure: a few suffice, and exceptions can be large."""

CONTEXT_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "exceeds the context window",
    "context window",
    "context limit",
    "input is too long",
    "too many tokens",
)
LIMIT_PATTERNS = (
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens.*?(?:resulted in|requested) (?P<sent>\d+) tokens"
    ),
    re.compile(r"prompt is too long: (?P<sent>\d+) tokens > (?P<limit>\d+) maximum"),
    re.compile(r"(?P<sent>\d+) \+ \d+ > (?P<limit>\d+)"),
    re.compile(r"maximum context length is (?P<limit>\d+) tokens"),
)


@dataclass(frozen=True, slots=True)
class Overflow:
    """What a context-length error says: the limit and the size the provider counted (if it does)."""

    limit: int | None = None
    sent: int | None = None

    @classmethod
    def parse(cls, text: str) -> Overflow:
        for pattern in LIMIT_PATTERNS:
            match = pattern.search(text)
            if match is not None:
                found = match.groupdict()
                return cls(int(found["limit"]), int(found["sent"]) if found.get("sent") else None)
        return cls()

    def window(self, counted: int) -> int:
        """The window, in our tokens, that would have fitted: ``counted`` is our count of what was sent."""
        if self.limit is not None and self.sent:
            return max(1, int(self.limit * counted / self.sent * SAFETY))
        if self.limit is not None:
            return max(1, int(min(self.limit, counted) * SAFETY))
        return max(1, int(counted * UNKNOWN_SHRINK))


def is_context_error(exception: object) -> bool:
    if type(exception).__name__ == "ContextWindowExceededError":
        return True
    text = str(exception).lower()
    return any(phrase in text for phrase in CONTEXT_PHRASES)


def last_failure(kwargs: Mapping[str, Any]) -> str:
    """The error text of the attempt a fallback follows (the router's breadcrumbs)."""
    for key in ("litellm_metadata", "metadata"):
        metadata = kwargs.get(key)
        previous = metadata.get("previous_models") if isinstance(metadata, Mapping) else None
        if isinstance(previous, Sequence) and previous and isinstance(previous[-1], Mapping):
            return str(previous[-1].get("exception_string") or "")
    return ""


def is_retry(kwargs: dict[str, Any]) -> bool:
    """Pop our mark (whoever put it there: it must never reach the provider); True if it is ours."""
    return bool(kwargs.pop(RETRY_KEY, None) == INTERNAL_TOKEN)


def attach_fallbacks(data: dict[str, Any], group: str, router: Any, call_type: str) -> None:
    """Give the request a retry to its own group, ahead of the fallbacks the operator configured.

    Not when the client chose its own fallbacks or disabled them: that is its call.
    """
    if data.get("disable_fallbacks") or "fallbacks" in data or "context_window_fallbacks" in data:
        return
    retry = {"model": group, RETRY_KEY: INTERNAL_TOKEN}
    if call_type == "aresponses":
        configured = _targets(server.setting(router, "fallbacks"), group)
        data["fallbacks"] = [retry, *({"model": t} if isinstance(t, str) else t for t in configured)]
    else:
        configured = _targets(server.setting(router, "context_window_fallbacks"), group)
        data["context_window_fallbacks"] = [{group: [retry, *configured]}]


def _targets(fallbacks: object, group: str) -> list[Any]:
    """The operator's fallbacks for ``group`` (``[{group: [targets]}]``)."""
    if not isinstance(fallbacks, list):
        return []
    for entry in fallbacks:
        if isinstance(entry, Mapping) and isinstance(entry.get(group), list):
            return list(entry[group])
    return []


class LearnedWindows:
    """Per model group, the window a provider taught us; read through a short in-process memo."""

    def __init__(self, store: CompactionStore | None) -> None:
        self.store = store
        self._memo: dict[str, tuple[float, int | None]] = {}

    async def get(self, group: str) -> int | None:
        found = self._memo.get(group)
        if found is not None and time.monotonic() - found[0] < REFRESH_SECONDS:
            return found[1]
        note = await self.store.get_note(NOTE_PREFIX + group.encode()) if self.store is not None else None
        window = int(note) if note is not None and note.isdigit() else None
        self._memo[group] = (time.monotonic(), window)
        return window

    async def learn(self, group: str, window: int, ttl: float) -> int:
        """Remember ``window`` (or a smaller one already known) for ``ttl`` seconds."""
        known = await self.get(group)
        window = min(window, known) if known is not None else window
        self._memo[group] = (time.monotonic(), window)
        if self.store is not None:
            await self.store.set_note(NOTE_PREFIX + group.encode(), str(window), ttl)
        logger.warning(
            "compact_hook: model %r rejected a request as too long; window now %d tokens", group, window
        )
        return window


class Snapshots:
    """The error each failed attempt raised, by call id, so a retry we must not make can re-raise it."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, BaseException] = OrderedDict()

    def add(self, call_id: object, exception: BaseException) -> None:
        if isinstance(call_id, str):
            self._items[call_id] = exception
            while len(self._items) > MAX_SNAPSHOTS:
                self._items.popitem(last=False)

    def pop(self, call_id: object) -> BaseException | None:
        return self._items.pop(call_id, None) if isinstance(call_id, str) else None

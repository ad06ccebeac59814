"""What a provider's "too long" teaches: its real limit, in our tokens, per model group.

The error is parsed for the limit and the size the provider counted (each provider words it
its own way); the window that would have fitted is remembered per model group in the store
(replicas share it) for ``learned_window_ttl_seconds``, and later requests to the group use it
as their window.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)

SAFETY = 0.95
"""The learned window is this share of the limit (in our tokens): tokenizers disagree a little."""
UNKNOWN_SHRINK = 0.8
"""With no limit in the error, the learned window is this share of what was sent."""
NOTE_PREFIX = b"window:"
REFRESH_SECONDS = 5.0
CONTEXT_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "exceeds the context window",
    "context window",
    "context limit",
    "input is too long",
    "too many tokens",
    "exceeds the maximum number of tokens",
    "contextwindowexceedederror",
)
LIMIT_PATTERNS = (
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens.*?(?:resulted in|requested) (?P<sent>\d+) tokens"
    ),
    re.compile(r"prompt is too long: (?P<sent>\d+) tokens > (?P<limit>\d+) maximum"),
    re.compile(
        r"input token count \((?P<sent>\d+)\) exceeds the maximum number of tokens allowed \((?P<limit>\d+)\)"
    ),
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

"""What a provider's "too long" teaches: its real limit, in our tokens, per model group.

The error is parsed for the limit and the size the provider counted (each provider words it
its own way); the window that would have fitted is remembered per model group in the store
(replicas share it) for ``learned_window_ttl_seconds``, and later requests to the group use it
as their window.
"""

from __future__ import annotations

import logging
import time

from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)

NOTE_PREFIX = b"window:"
REFRESH_SECONDS = 5.0


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

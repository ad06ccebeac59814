"""What providers teach us per model group: its real window, and how its count compares with ours.

- A provider's "too long" is parsed for its limit (each provider words it its own way); a limit
  below the configured window is remembered per model group in the store (replicas share it) for
  ``learned_window_ttl_seconds``, and later requests to the group use it as their window.
- Every response's usage, set against our count of what we forwarded, teaches the group's count
  ratio (``core.calibration.RatioStats``): learned from this replica's responses, published to the
  store every few seconds for the others and for a restart, read from it while this replica has
  heard none. A conversation's first requests are counted at it (later ones at their own,
  ``engine.run``); a move of more than ``SAY_MOVE`` is logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from compact_hook.core.calibration import CountRatio, RatioSource, RatioStats
from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)

NOTE_PREFIX = b"window:"
RATIO_PREFIX = b"ratio:"
REFRESH_SECONDS = 5.0
"""How long a replica reads what the store says before asking it again."""
PUBLISH_SECONDS = 5.0
"""How often a replica writes its estimate of a group's ratio to the store (at most)."""
SAY_MOVE = 0.03
"""A group's ratio moving by more than this (3%) since it was last logged is logged."""


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


@dataclass(frozen=True, slots=True)
class Learned:
    """What one response taught a group: its estimate now, and whether the response counted (an
    outlier does not)."""

    stats: RatioStats
    counted: bool


class LearnedRatios:
    """Per model group, the provider's tokens per one of ours, from its responses' usage."""

    def __init__(self, store: CompactionStore | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.clock = store, clock
        self._local: dict[str, RatioStats] = {}
        self._published: dict[str, float] = {}
        self._shared: dict[str, tuple[float, RatioStats | None]] = {}
        self._said: dict[str, float] = {}

    async def ratio(self, group: str, prior: float) -> CountRatio:
        """The group's estimate, or ``prior`` while nobody has heard it bill anything."""
        stats = self._local.get(group) or await self._from_store(group)
        return CountRatio(stats.ratio, RatioSource.MODEL_GROUP) if stats is not None else CountRatio(prior)

    async def learn(self, group: str, ratio: float, prior: float, ttl: float) -> Learned:
        """One response's ratio (``core.calibration.sample``) into the group's estimate."""
        known = self._local.get(group) or await self._from_store(group) or RatioStats()
        stats, counted = known.after(ratio)
        self._local[group] = stats
        if counted:
            self._say(group, stats, prior)
        now = self.clock()
        if self.store is not None and now - self._published.get(group, -PUBLISH_SECONDS) >= PUBLISH_SECONDS:
            self._published[group] = now
            await self.store.set_note(RATIO_PREFIX + group.encode(), stats.to_text(), ttl)
        return Learned(stats, counted)

    async def _from_store(self, group: str) -> RatioStats | None:
        found = self._shared.get(group)
        if found is not None and self.clock() - found[0] < REFRESH_SECONDS:
            return found[1]
        note = await self.store.get_note(RATIO_PREFIX + group.encode()) if self.store is not None else None
        stats = RatioStats.from_text(note) if note is not None else None
        self._shared[group] = (self.clock(), stats)
        return stats

    def _say(self, group: str, stats: RatioStats, prior: float) -> None:
        """Log the estimate when it has moved by more than ``SAY_MOVE`` since last said (from the
        prior, the first time)."""
        said = self._said.get(group, prior)
        if abs(stats.ratio / said - 1) <= SAY_MOVE:
            return
        self._said[group] = stats.ratio
        logger.warning(
            "compact_hook: model group %r: the provider counts %.3f tokens per one of ours (was %.3f; "
            "spread ±%.1f%% over %d responses); its windows and figures follow",
            group,
            stats.ratio,
            said,
            100 * stats.spread,
            stats.samples,
        )

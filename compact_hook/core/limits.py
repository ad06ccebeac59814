"""The token limits of one request, counting everything the model reads.

The window holds the items *and* what we never change — tool definitions, an Anthropic
``system``, Responses ``instructions``, response-format schemas — and must leave room for
the reply the request asks for. Triggers compare the whole total; budgets for what a
compaction keeps are shares of the room the items have (window minus output reserve minus
the fixed context), so a request with 20K tokens of tool definitions keeps a tail that fits.

The window, the reserve and every budget in the settings are the provider's tokens; the engine
counts in ours. ``Limits`` holds them in ours, converted with the request's ``CountRatio``
(``core.calibration``): comparing our count with the window in our tokens is comparing the
provider's count with its window.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from compact_hook.core.calibration import IDENTITY, CountRatio
from compact_hook.settings.model import DEFAULT_PINNED_SHARE, MIN_TOOL_OUTPUT_TOKENS, CompactConfig
from compact_hook.settings.setting import resolved

TARGET_SHARE = 0.85
"""A compaction aims below this share of the trigger, leaving the next turns room to grow
before the trigger is reached again (no compaction every turn)."""
MIN_TAIL_BUDGET = 256


@dataclass(frozen=True, slots=True)
class Limits:
    """``clear`` / ``compact``: totals at which tiers 2 and 3 start. ``window``: the most we may
    forward (context window minus output reserve). ``room``: what the items may use of it.
    ``prepare``: the total from which tier 3's compaction is prepared in the background
    (``compact`` when preparation is off: never below the trigger). All in our tokens, converted
    from the provider's with ``ratio``."""

    clear: int
    compact: int
    window: int
    room: int
    prepare: int = 0
    no_room: bool = False
    """The output reserve and what the model reads besides the items (system, tools) fill the
    whole context window: compacting could only leave nothing, so the request is forwarded as sent."""
    ratio: CountRatio = IDENTITY

    @classmethod
    def of(
        cls, config: CompactConfig, reserve: int | None, fixed: int, ratio: CountRatio = IDENTITY
    ) -> Limits | None:
        """None when the context window is unknown (then we never compact). ``fixed``: our count
        of what the model reads besides the items. Remembered: every request asks, a conversation's
        the same way until something in it changes (the settings resolve their defaults each time)."""
        return _limits(config, reserve, fixed, ratio)

    @classmethod
    def _of(cls, config: CompactConfig, reserve: int | None, fixed: int, ratio: CountRatio) -> Limits | None:
        if config.context_window is None:
            return None
        provider = config.context_window
        ours = ratio.ours
        window = ours(max(1, provider - (reserve or 0)))
        compact = min(ours(config.trigger_ratio * provider), window)
        clear = (
            ours(resolved(config, "clear_trigger_ratio") * provider) if config.clear_tool_results else compact
        )
        prepare = ours(resolved(config, "prepare_ratio") * provider) if config.prepares else compact
        return cls(
            clear=min(clear, compact),
            compact=compact,
            window=window,
            room=max(1, window - fixed),
            prepare=min(prepare, compact),
            no_room=(reserve or 0) + ratio.billed(fixed) >= provider,
            ratio=ratio,
        )

    @property
    def engage(self) -> int:
        """Below this total nothing but tier 1 can apply: no clearing, no preparing, no compacting."""
        return min(self.clear, self.prepare)

    @property
    def target(self) -> int:
        """What a compaction aims to leave at most: well under the trigger."""
        return max(1, int(self.compact * TARGET_SHARE))

    def tail_budget(self, config: CompactConfig) -> int:
        """Tokens of the newest units kept verbatim by a compaction."""
        return _tail(config, self.room)

    def keep_budget(self, config: CompactConfig) -> int:
        """Tokens of users' own messages kept verbatim, capped at the tail's: keeping must not
        defeat compacting."""
        return min(self.ours(config.user_message_budget), self.tail_budget(config))

    def pinned_budget(self, config: CompactConfig) -> int:
        """Tokens of pinned messages (the task, injected instructions) kept through compaction:
        ``pinned_budget``, or by default a tenth of the room the items have."""
        if config.pinned_budget is not None:
            return self.ours(config.pinned_budget)
        return int(DEFAULT_PINNED_SHARE * self.room)

    def ours(self, tokens: int) -> int:
        """A budget of the settings (the provider's tokens) in ours; 0 stays 0."""
        return self.ratio.ours_of(tokens) if tokens > 0 else 0


@functools.lru_cache(maxsize=4096)
def _limits(config: CompactConfig, reserve: int | None, fixed: int, ratio: CountRatio) -> Limits | None:
    return Limits._of(config, reserve, fixed, ratio)


@functools.lru_cache(maxsize=4096)
def output_limit(config: CompactConfig, reserve: int | None, fixed: int) -> int | None:
    """Tokens (ours) one tool output may keep: ``tool_output_max_tokens``, but never more than the
    tail's budget — in a small window one 5,000-token output would otherwise fill the tail alone,
    and every compaction would land over the trigger again. At the model's prior ratio
    (``count_ratio``), never the learned one: an output is cut at the same place every turn, however
    the learned ratio moves (a cut that moved would change the forwarded prefix). None: the window
    is unknown."""
    if config.context_window is None:
        return None
    prior = CountRatio(config.count_ratio or 1.0)
    room = max(1, prior.ours(max(1, config.context_window - (reserve or 0))) - fixed)
    ours = prior.ours_of
    return min(ours(config.tool_output_max_tokens), max(ours(MIN_TOOL_OUTPUT_TOKENS), _tail(config, room)))


def _tail(config: CompactConfig, room: int) -> int:
    return max(1, int(resolved(config, "tail_retention_ratio") * room))

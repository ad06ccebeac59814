"""The token limits of one request, counting everything the model reads.

The window holds the items *and* what we never change — tool definitions, an Anthropic
``system``, Responses ``instructions``, response-format schemas — and must leave room for
the reply the request asks for. Triggers compare the whole total; budgets for what a
compaction keeps are shares of the room the items have (window minus output reserve minus
the fixed context), so a request with 20K tokens of tool definitions keeps a tail that fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from compact_hook.config import DEFAULT_PINNED_SHARE, MIN_TOOL_OUTPUT_TOKENS, CompactConfig
from compact_hook.setting import resolved

TARGET_SHARE = 0.85
"""A compaction aims below this share of the trigger, leaving the next turns room to grow
before the trigger is reached again (no compaction every turn)."""
MIN_TAIL_BUDGET = 256


@dataclass(frozen=True, slots=True)
class Limits:
    """``clear`` / ``compact``: totals at which tiers 2 and 3 start. ``window``: the most we may
    forward (context window minus output reserve). ``room``: what the items may use of it.
    ``prepare``: the total from which tier 3's compaction is prepared in the background
    (``compact`` when preparation is off: never below the trigger)."""

    clear: int
    compact: int
    window: int
    room: int
    prepare: int = 0
    no_room: bool = False
    """The output reserve and what the model reads besides the items (system, tools) fill the
    whole context window: compacting could only leave nothing, so the request is forwarded as sent."""

    @classmethod
    def of(cls, config: CompactConfig, reserve: int | None, fixed: int) -> Limits | None:
        """None when the context window is unknown (then we never compact)."""
        if config.context_window is None:
            return None
        window = max(1, config.context_window - (reserve or 0))
        compact = min(max(1, int(config.trigger_ratio * config.context_window)), window)
        clear = (
            max(1, int(resolved(config, "clear_trigger_ratio") * config.context_window))
            if config.clear_tool_results
            else compact
        )
        prepare = (
            max(1, int(resolved(config, "prepare_ratio") * config.context_window))
            if config.prepares
            else compact
        )
        return cls(
            clear=min(clear, compact),
            compact=compact,
            window=window,
            room=max(1, window - fixed),
            prepare=min(prepare, compact),
            no_room=(reserve or 0) + fixed >= config.context_window,
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
        return max(1, int(resolved(config, "tail_retention_ratio") * self.room))

    def output_limit(self, config: CompactConfig) -> int:
        """Tokens one tool output may keep: ``tool_output_max_tokens``, but never more than the
        tail's budget — in a small window one 5,000-token output would otherwise fill the tail
        alone, and every compaction would land over the trigger again."""
        return min(config.tool_output_max_tokens, max(MIN_TOOL_OUTPUT_TOKENS, self.tail_budget(config)))

    def keep_budget(self, config: CompactConfig) -> int:
        """Tokens of users' own messages kept verbatim, capped at the tail's: keeping must not
        defeat compacting."""
        return min(config.user_message_budget, self.tail_budget(config))

    def pinned_budget(self, config: CompactConfig) -> int:
        """Tokens of pinned messages (the task, injected instructions) kept through compaction:
        ``pinned_budget``, or by default a tenth of the room the items have."""
        if config.pinned_budget is not None:
            return config.pinned_budget
        return int(DEFAULT_PINNED_SHARE * self.room)

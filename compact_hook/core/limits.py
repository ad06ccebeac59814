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

What a provider teaches — a smaller window (its refusal, a bill pinned at a ceiling), a count ratio
(its bills) — is evidence, not truth, and reaches every request of a tenant. So it is used here, in
one place, under one rule: **nothing learned makes us forward more than we would with nothing
learned, nor stops us compacting.** Every limit is at most its value at the configured window and
the prior ratio (a count learned below the prior shows in the figures, never in what we forward),
and a learned window or count that would leave the conversation no room is not used. "Forwarded as
sent for want of room" (``no_room``) is said only of the configured window.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from dataclasses import dataclass

from compact_hook.core.calibration import IDENTITY, CountRatio
from compact_hook.settings.model import DEFAULT_PINNED_SHARE, MIN_TOOL_OUTPUT_TOKENS, CompactConfig
from compact_hook.settings.setting import resolved

TARGET_SHARE = 0.85
"""A compaction aims below this share of the trigger, leaving the next turns room to grow
before the trigger is reached again (no compaction every turn)."""
MIN_TAIL_BUDGET = 256


MIN_CONVERSATION = 1_024
"""The least room (the provider's tokens) what was learned must leave the conversation beside the
reply's reserve and the fixed part (system, tools): about a summary and the latest turn. A learned
window or count that leaves less is evidence against itself — a bill of the fixed part plus what was
new read as a server's ceiling, a count gone wild — and is not used (``Unused``). At most half of what
the configured window leaves, for windows too small for that."""


class Unused(enum.Enum):
    """What was learned and not used for a request's limits: it left the conversation no room."""

    WINDOW = "window"
    """The learned window (a refusal's, a bill pinned at a ceiling): the configured one stands."""
    COUNT = "count"
    """The learned count ratio as well: the prior counts the request."""


@dataclass(frozen=True, slots=True)
class Limits:
    """``clear`` / ``compact``: totals at which tiers 2 and 3 start. ``window``: the most we may
    forward (context window minus output reserve). ``room``: what the items may use of it.
    ``prepare``: the total from which tier 3's compaction is prepared in the background
    (``compact`` when preparation is off: never below the trigger). All in our tokens, converted
    from the provider's with ``ratio``.

    What was learned — a window, a count ratio — only ever lowers them: each is at most what it is
    with nothing learned, the configured window at the prior (``Limits.of``). The one invariant the
    hook keeps about what it learns from outside: nothing learned makes it forward more, nor stops
    it compacting (a learned value that would leave no room is ``unused``)."""

    clear: int
    compact: int
    window: int
    room: int
    prepare: int = 0
    no_room: bool = False
    """The output reserve and what the model reads besides the items (system, tools) fill the
    whole *configured* context window at the prior: compacting could only leave nothing, so the
    request is forwarded as sent. Never said of a learned window or count."""
    ratio: CountRatio = IDENTITY
    unused: Unused | None = None
    """What was learned and set aside for these limits (None: all of it used, or nothing learned)."""

    @classmethod
    def of(
        cls,
        config: CompactConfig,
        reserve: int | None,
        fixed: int,
        ratio: CountRatio = IDENTITY,
        learned: int | None = None,
    ) -> Limits | None:
        """None when the context window is unknown (then we never compact). ``fixed``: our count
        of what the model reads besides the items; ``ratio``: the request's count ratio (learned,
        or the prior); ``learned``: a window a provider taught (None: none). Remembered: every
        request asks, a conversation's the same way until something in it changes."""
        return _limits(config, reserve, fixed, ratio, learned)

    @classmethod
    def _of(
        cls, config: CompactConfig, reserve: int | None, fixed: int, ratio: CountRatio, learned: int | None
    ) -> Limits | None:
        """The limits at what was learned, each kept at most at its value with nothing learned."""
        configured = config.context_window
        if configured is None:
            return None
        bound = cls._at(config, configured, reserve, fixed, CountRatio(config.count_ratio or 1.0))
        if bound.no_room:  # the configured window cannot hold the fixed part: forwarded as sent
            return bound
        least = least_room(configured, reserve, bound.ratio.billed(fixed))
        window, unused = min(learned or configured, configured), None
        if _room(window, reserve, ratio.billed(fixed)) < least:
            window, unused = configured, Unused.WINDOW
        if _room(window, reserve, ratio.billed(fixed)) < least:
            ratio, unused = bound.ratio, Unused.COUNT
        found = cls._at(config, window, reserve, fixed, ratio)
        return dataclasses.replace(found.within(bound), unused=unused)

    @classmethod
    def _at(
        cls, config: CompactConfig, provider: int, reserve: int | None, fixed: int, ratio: CountRatio
    ) -> Limits:
        """The limits of a ``provider``-token window at ``ratio``."""
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

    def within(self, bound: Limits) -> Limits:
        """Each limit at most ``bound``'s: what was learned may compact earlier, never later."""
        return dataclasses.replace(
            self,
            clear=min(self.clear, bound.clear),
            compact=min(self.compact, bound.compact),
            window=min(self.window, bound.window),
            room=min(self.room, bound.room),
            prepare=min(self.prepare, bound.prepare),
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
def _limits(
    config: CompactConfig, reserve: int | None, fixed: int, ratio: CountRatio, learned: int | None
) -> Limits | None:
    return Limits._of(config, reserve, fixed, ratio, learned)


def least_room(configured: int | None, reserve: int | None, fixed: int) -> int:
    """The least room (the provider's tokens) what was learned must leave the conversation beside
    ``reserve`` and the ``fixed`` part in a ``configured`` window (``MIN_CONVERSATION``; None: unknown)."""
    if configured is None:
        return MIN_CONVERSATION
    return min(MIN_CONVERSATION, _room(configured, reserve, fixed) // 2)


def _room(window: int, reserve: int | None, fixed: int) -> int:
    """What a ``window`` leaves the conversation beside the reserve and the fixed part (all the
    provider's tokens)."""
    return window - (reserve or 0) - fixed


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

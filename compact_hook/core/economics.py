"""When changing a conversation's prefix pays: the cost-aware timing of clearing, preparing and compacting.

An agent re-sends its whole history every turn; with a warm prompt cache that history is billed at
the cache-read price (a tenth of input on most models). Every change we make to the prefix — a
clearing batch, a compaction — is billed once more as a cache *write* from the change on, and a
summary costs its own call. So a change pays when what it removes, carried over the turns still to
come, outweighs that premium and the summary:

- **Clearing a batch** of old tool results saves ``saved`` tokens on every later turn until the next
  compaction, and costs the rewrite premium on everything after the batch's first result — with a
  warm cache that takes dozens of turns to pay back, so it waits for the cache to go cold (the next
  turn pays the write anyway), or for the compaction that rewrites the prefix regardless. Once a
  conversation is being cleared, a batch under the clearing threshold goes when it pays the same way
  (the results still among the newest at the first batch, often the largest, are not carried until
  the conversation grows back to the threshold).
- **Compacting** costs a fixed part per event (the summary's output and prompt, the premium on the
  rewritten prefix) and carries the rest of the conversation at the read price. Between compactions
  the carried context grows by ``growth`` per turn, so the steady-state cost per turn is lowest when
  events are ``sqrt(2 × fixed × growth / carry)`` tokens apart; a conversation that is that far past
  its compacted size compacts now — never later than the hard trigger, which the engine keeps — if
  the turns likely still to come (as many as have been, between ``MIN_HORIZON`` and
  ``MAX_HORIZON``) pay it back.
- **Preparing** a summary ahead is worth it only when the conversation is a couple of turns from
  the point where it compacts; earlier, a session that ends first leaves it unused.

Nothing here is known until the provider has reported a conversation's cache (``Warmth.UNKNOWN``):
then every decision is the one made without cost awareness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from compact_hook.core.notes import Warmth
from compact_hook.core.pricing import Prices

MIN_HORIZON = 4
MAX_HORIZON = 16
"""Turns assumed still to come: as many as have been (a session that has run for 10 turns is, on
average, about as far from its end), at least ``MIN_HORIZON`` and at most ``MAX_HORIZON`` — a
saving further off is too uncertain to pay a summary for now (replayed sessions that ended soon
after such a compaction paid more than they saved)."""
PREPARE_TURNS = 2.0
"""A summary is prepared when the conversation is this many turns (at its growth) from compacting."""
SUMMARY_PROMPT_TOKENS = 600
"""The summary request's own instructions, beside the transcript it summarizes."""


@dataclass(frozen=True, slots=True)
class Economy:
    """What a decision weighs: the model's and the summary model's prices, what the cache holds,
    how fast the conversation grows and how long it has run."""

    prices: Prices
    summary: Prices
    warmth: Warmth
    growth: float
    turns: int
    summary_tokens: int

    @property
    def known(self) -> bool:
        return self.warmth is not Warmth.UNKNOWN

    @property
    def carry(self) -> float:
        """What one token of history costs on every later turn."""
        return self.prices.input if self.warmth is Warmth.UNCACHED else self.prices.cache_read

    @property
    def premium(self) -> float:
        """What changing the prefix costs per token it rewrites, beyond the turn's own price: only a
        warm cache loses anything (a cold one is written again anyway, an absent one never was)."""
        return self.prices.rewrite_premium if self.warmth is Warmth.WARM else 0.0

    @property
    def horizon(self) -> int:
        """Turns likely still to come."""
        return min(MAX_HORIZON, max(MIN_HORIZON, self.turns))

    def summary_cost(self, middle: int) -> float:
        """One summary call: the transcript and instructions in, the summary out."""
        summary = self.summary
        return summary.input * (middle + SUMMARY_PROMPT_TOKENS) + summary.output * self.summary_tokens

    def fixed_cost(self, compacted: int) -> float:
        """What a compaction event costs whatever its size: the summary's own output and prompt (a
        summary call reading as much as it writes), and the premium on the prefix it rewrites."""
        return self.summary_cost(self.summary_tokens) + self.premium * compacted

    def gap(self, compacted: int) -> int:
        """Tokens between compaction events at the lowest cost per turn (see the module docstring)."""
        carry = self.carry
        if carry <= 0 or self.growth <= 0:
            return 2**62
        return int(math.sqrt(2 * self.fixed_cost(compacted) * self.growth / carry))


def clearing_batch(economy: Economy, kept: int) -> int:
    """How many tokens of old results to let accumulate before clearing them, while the cache is
    warm: each batch rewrites what follows its first result (``kept`` tokens) at the write premium,
    and until it comes the results are carried at the read price, so batches of
    ``sqrt(2 × premium × kept × growth / carry)`` cost least per turn (the economic order
    quantity). 0 where a rewrite costs nothing extra (cold, uncached, unknown)."""
    if not economy.known or economy.premium == 0 or economy.carry <= 0:
        return 0
    return int(math.sqrt(2 * economy.premium * max(0, kept) * max(0.0, economy.growth) / economy.carry))


def clearing_pays(economy: Economy, saved: int, kept: int) -> bool:
    """Clear a batch of ``saved`` tokens now (see ``clearing_batch``)."""
    return saved >= clearing_batch(economy, kept)


def change_pays(economy: Economy, removed: int, rewritten: int) -> bool:
    """A prefix change removing ``removed`` tokens and rewriting ``rewritten``: paid back over the
    turns likely still to come?"""
    return economy.carry * removed * economy.horizon >= economy.premium * rewritten


class Way(Enum):
    """Past ``prepare_ratio``, where a summary is due: the cheaper way under the trigger."""

    SUMMARY = "summary"
    """The summary is prepared (clearing leaves too much, or costs more)."""
    CLEAR = "clear"
    """Everything clearing may clear goes now, as one batch."""
    HOLD = "hold"
    """Clearing is the cheaper way, but not yet: while the provider holds the prefix warm a batch
    now is followed by another when the next results arrive — two rewrites where one batch, at the
    trigger, clears both — and no summary is prepared meanwhile. Also where nothing is due yet."""


def cheaper_way(economy: Economy, rewritten: int, cleared: int, compacted: int, middle: int) -> Way:
    """Clearing everything or the summary: clearing's rewrite (``rewritten`` tokens) and what it leaves
    (``cleared``) carried over the turns likely still to come, against the summary's call (it reads
    ``middle``), its rewrite and what it leaves (``compacted``) carried as long. The cheaper clearing
    goes now only where a rewrite costs nothing extra (a cold or absent cache); else it holds
    (``Way.HOLD``)."""
    horizon = economy.horizon
    clearing = economy.premium * rewritten + economy.carry * cleared * horizon
    summary = economy.summary_cost(middle) + economy.premium * compacted + economy.carry * compacted * horizon
    if clearing > summary:
        return Way.SUMMARY
    return Way.CLEAR if economy.premium == 0 else Way.HOLD


def compacts_early(economy: Economy, total: int, compacted: int, middle: int) -> bool:
    """Compact now, under the trigger: far enough past the compacted size that events at this
    spacing cost least per turn, and paid back over the turns likely still to come — the summary
    reads the ``middle`` as the client sent it, results we cleared included — (a cold cache adds
    what the smaller prefix saves on the write this very turn)."""
    if not economy.known:
        return False
    removed = total - compacted
    if removed <= 0 or removed < economy.gap(compacted):
        return False
    now = economy.prices.cache_write * removed if economy.warmth is Warmth.COLD else 0.0
    benefit = now + economy.carry * removed * economy.horizon
    cost = economy.summary_cost(max(middle, removed)) + economy.premium * compacted
    return benefit >= cost


def worth_preparing(economy: Economy, total: int, compact_at: int) -> bool:
    """Prepare a summary ahead only for a conversation a couple of turns from compacting."""
    if not economy.known or economy.growth <= 0:
        return True
    turns_left = (compact_at - total) / economy.growth
    return turns_left <= min(PREPARE_TURNS, float(economy.horizon))


def estimated_saving(prices: Prices, warmth: Warmth, removed: int, rewritten: int) -> float:
    """USD a request saved against forwarding it as sent: the ``removed`` tokens at the price they
    would have been billed — written again on a cold cache, at full input where nothing is cached,
    else read (the lowest, when we do not know) — less the premium on the ``rewritten`` tokens of a
    prefix it changed while the cache was warm. Negative when the change cost more than it saved
    this turn (it pays back over the next ones)."""
    rate = {Warmth.COLD: prices.cache_write, Warmth.UNCACHED: prices.input}.get(warmth, prices.cache_read)
    premium = prices.rewrite_premium * rewritten if warmth is Warmth.WARM else 0.0
    return removed * rate - premium

"""Money: what a provider charges per token, and what a request's tokens cost.

Providers bill four kinds of tokens differently: uncached input, input written to the prompt
cache (Anthropic charges 1.25× input for a 5-minute write; OpenAI nothing extra), input read
from it (a tenth of input, or a quarter or half on some models) and output. Every change we make
to a conversation's prefix turns cached reads back into writes, so compaction is priced here in
those terms, never in tokens alone.
"""

from __future__ import annotations

from dataclasses import dataclass

PER_MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per token of each kind."""

    input: float
    cache_write: float
    cache_read: float
    output: float

    @classmethod
    def per_million(cls, input: float, cache_write: float, cache_read: float, output: float) -> Prices:
        return cls(
            input / PER_MILLION, cache_write / PER_MILLION, cache_read / PER_MILLION, output / PER_MILLION
        )

    def scaled(self, ratio: float) -> Prices:
        """Per token of a count that is ``1 / ratio`` of the provider's (``core.calibration``)."""
        if ratio == 1.0:
            return self
        return Prices(
            self.input * ratio, self.cache_write * ratio, self.cache_read * ratio, self.output * ratio
        )

    @property
    def rewrite_premium(self) -> float:
        """What writing a token to the cache costs beyond reading it (the price of a changed prefix)."""
        return max(0.0, self.cache_write - self.cache_read)


@dataclass(frozen=True, slots=True)
class Usage:
    """A request's tokens as the provider billed them: input split by cache, and output."""

    uncached: int = 0
    cache_write: int = 0
    cache_read: int = 0
    output: int = 0

    @property
    def input(self) -> int:
        return self.uncached + self.cache_write + self.cache_read

    def cost(self, prices: Prices) -> float:
        return (
            self.uncached * prices.input
            + self.cache_write * prices.cache_write
            + self.cache_read * prices.cache_read
            + self.output * prices.output
        )

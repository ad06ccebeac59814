"""How many tokens the provider counts for each one we count: priors, and what its bills teach.

Our tokenizer's count is an estimate. Claude's tokenizer is not public (the ``claude`` one we ship
is the old published one: Claude 3 to Opus 4.6 count ~1.09× it, Opus 4.7 on ~1.4×), and Gemini,
Qwen, DeepSeek or Llama deployments are counted with o200k. The provider's usage is the truth:
every response says what it counted, and set against our count of exactly what we forwarded it
gives a ratio (``CountRatio``: the provider's tokens per one of ours). The engine counts in our
tokens — a count cached per entry, a cut that never moves — and converts the window, the
thresholds and every figure it shows with the request's ratio, so every decision and figure is in
the provider's tokens. Where it comes from, best first (``RatioSource``):

- **the provider's refusal** of this very request ("prompt is too long: 52000 tokens > …"), on the
  retry it makes (``proxy.feedback.recovery``);
- **the conversation's** last billed request against our count of it (``engine.economy.prompt_cache``),
and what
  it grew by since its first cost at the provider: what is new since is counted at that margin, the
  part that stays the same (system, tools, what the provider adds) as it was billed;
- **the tenant's** estimate over its recent responses in the model group (``RatioStats``), for a
  conversation's first requests, or the group's (the tenants' median) for a tenant with none;
- **a prior**: ``count_ratio`` where the operator set one, else the family's measured ratio
  (``family_prior``), else 1.

A response teaches nothing when its usage is missing, zero or absurd (``sample``), nor when it
is far from what the tenant has shown (``RatioStats.after``: until it persists, when the deployment
behind the group has changed), nor when it does not describe the prompt (``core.evidence``, which
also bounds every learned ratio below: ``Trust``).
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import NamedTuple

MIN_COUNTED = 256
"""A request we counted smaller than this teaches nothing: fixed framing dominates it."""
LOWEST, HIGHEST = 0.2, 5.0
"""A ratio outside these is a provider's usage gone wrong (or not its own), never a tokenizer's."""
MIN_SPAN = 2048
"""A conversation's margin is measured over at least this much growth (our tokens)."""
MIN_SAMPLES = 3
"""A group's estimate rejects outliers once it rests on this many responses."""
OUTLIER = 1.5
"""A response more than this factor off the group's estimate is an outlier..."""
RESET_AFTER = 5
"""...unless this many in a row say so: then the deployment changed, and the estimate starts over."""
WEIGHT = 0.1
"""How much one response moves a group's estimate, once it rests on ten (the first ten average)."""

CLAUDE_REWORKED = (4, 7)
"""Opus 4.7 and later count with a new tokenizer (ctok's ``4.7`` / ``4.8`` families)."""
PRIORS: dict[str, tuple[float, float]] = {
    "claude": (1.10, 1.44),
    "o200k_base": (1.19, 1.49),
    "cl100k_base": (1.19, 1.50),
}
"""Per tokenizer we count with: Claude 3 – Opus 4.6's count per one of ours, and Opus 4.7 on's.
Measured with ctok 1.3.0 (an offline reconstruction of Claude's ``count_tokens``, exact on its
held-out sets) on the text of three Claude Code sessions and Claude Code 2.1.330's system prompt
and tool definitions (627K characters): the largest of the four ratios, rounded up, so a
conversation's first request is not under-counted (docs/operations.md, *Counts the provider agrees
with*)."""


class RatioSource(enum.StrEnum):
    """Where a request's ratio came from (the report's ``count_source``)."""

    PRIOR = "prior"
    """``count_ratio``, or the family's measured ratio: nothing billed yet."""
    MODEL_GROUP = "model_group"
    """The model group's estimate from its responses' usage."""
    CONVERSATION = "conversation"
    """The conversation's last billed request."""
    REFUSAL = "refusal"
    """The provider's "too long" of this request said what it counted."""


@dataclass(frozen=True, slots=True)
class CountRatio:
    """How the provider counts what we count: ``offset + value × ours`` for a whole request.

    ``value``: the provider's tokens per one of ours (at the margin: what a token more costs);
    ``offset``: what it counts that our count does not scale to (a conversation's fixed part billed
    unlike the rest: Anthropic's tool-use prompt, framing) — 0 for a group's ratio and a prior."""

    value: float = 1.0
    source: RatioSource = RatioSource.PRIOR
    offset: float = 0.0

    def billed(self, ours: int) -> int:
        """A request we count ``ours``, in the provider's tokens."""
        return max(0, int(round(self.offset + ours * self.value)))

    def ours(self, billed: float) -> int:
        """A limit on a whole request (a window, a threshold), the provider's tokens in ours (at
        least 1: a window is never empty)."""
        return max(1, int((billed - self.offset) / self.value))

    def ours_of(self, amount: float) -> int:
        """A budget within a request (a tail, a tool output), the provider's tokens in ours."""
        return max(1, int(amount / self.value))

    def effective(self, ours: int) -> float:
        """The provider's tokens per one of ours for a request we count ``ours`` (the report's)."""
        return (self.offset + ours * self.value) / ours if ours > 0 else self.value


IDENTITY = CountRatio()


def family_prior(model: str, tokenizer: str) -> float:
    """The measured ratio for a deployment's model counted with ``tokenizer`` (1 where none is known:
    a model that is not Claude, a Claude before 3, a tokenizer file of the operator's)."""
    version = claude_version(model)
    priors = PRIORS.get(tokenizer)
    if version is None or version < (3, 0) or priors is None:
        return 1.0
    earlier, later = priors
    return later if version >= CLAUDE_REWORKED else earlier


def sample(billed: int, counted: int) -> float | None:
    """What one response teaches: the provider's count over ours, or None when its usage is
    missing or zero, our count too small to tell, or the ratio absurd."""
    if counted < MIN_COUNTED or billed <= 0:
        return None
    ratio = billed / counted
    return ratio if LOWEST <= ratio <= HIGHEST else None


def conversation_ratio(last: Billed, first: Billed) -> CountRatio | None:
    """A conversation's ratio from its last billed request and its first: what it grew by between
    them cost at the provider (the margin) — the new since is counted at it, and the part that
    stays the same (system, tools, what the provider adds of its own) keeps what it was billed.
    Multiplicative until the two are ``MIN_SPAN`` apart. None when the last request teaches nothing.
    Its own, whatever its group's estimate says (``core.evidence.Trust`` bounds it below)."""
    found = sample(last.billed, last.counted)
    if found is None:
        return None
    span = last.counted - first.counted
    margin = (last.billed - first.billed) / span if span >= MIN_SPAN else 0.0
    if not LOWEST <= margin <= HIGHEST or _off(margin, found):
        return CountRatio(found, RatioSource.CONVERSATION)
    return CountRatio(margin, RatioSource.CONVERSATION, last.billed - margin * last.counted)


class Billed(NamedTuple):
    """One request: what the provider billed, and what we counted."""

    billed: int
    counted: int


def _off(ratio: float, around: float) -> bool:
    return abs(math.log(ratio / around)) > math.log(OUTLIER)


@dataclass(frozen=True, slots=True)
class RatioStats:
    """A tenant's ratio over its recent responses: a running mean and spread of the log ratio, each
    response weighing ``1 / n`` for the first ten and ``WEIGHT`` after — but never under the latest
    response that counted more (``after``)."""

    samples: int = 0
    mean: float = 0.0
    """Of the log ratio."""
    variance: float = 0.0
    """Of the log ratio."""
    outliers: int = 0
    """Consecutive responses rejected as outliers."""

    @property
    def ratio(self) -> float:
        return math.exp(self.mean)

    @property
    def spread(self) -> float:
        """One standard deviation, as a factor of the ratio (0.02: responses vary by ±2%)."""
        return math.exp(math.sqrt(self.variance)) - 1

    def after(self, ratio: float) -> tuple[RatioStats, bool]:
        """The estimate with one more response, and whether it counted. A higher count is taken at
        once (a provider that starts counting more — a group moved to a newer model — must not be
        under-counted while an average catches up); a lower one is averaged in, and one far below is
        an outlier, until ``RESET_AFTER`` in a row: then the estimate starts over from it."""
        if self.samples > 0 and ratio > self.ratio:
            raised = self._averaged(ratio)
            return RatioStats(raised.samples, math.log(ratio), raised.variance), True
        if self.samples >= MIN_SAMPLES and _off(ratio, self.ratio):
            if self.outliers + 1 < RESET_AFTER:
                return RatioStats(self.samples, self.mean, self.variance, self.outliers + 1), False
            return RatioStats(1, math.log(ratio)), True
        return self._averaged(ratio), True

    def _averaged(self, ratio: float) -> RatioStats:
        value = math.log(ratio)
        weight = max(1 / (self.samples + 1), WEIGHT)
        delta = value - self.mean
        mean = self.mean + weight * delta
        variance = (1 - weight) * (self.variance + weight * delta * delta)
        return RatioStats(self.samples + 1, mean, variance)

    def to_text(self) -> str:
        return f"{self.samples},{self.mean:.6f},{self.variance:.8f},{self.outliers}"

    @classmethod
    def from_text(cls, text: str) -> RatioStats | None:
        """None for anything that is not an estimate we wrote."""
        try:
            samples, mean, variance, outliers = text.split(",")
            found = cls(int(samples), float(mean), float(variance), int(outliers))
        except ValueError:
            return None
        sane = found.samples > 0 and LOWEST <= found.ratio <= HIGHEST and found.variance >= 0
        return found if sane else None


_FAMILY_FIRST = re.compile(r"claude-[a-z]+-(\d{1,2})(?:[-.](\d{1,2}))?(?!\d)")
"""``claude-<family>-<major>[-<minor>]`` (Claude 4 on); a date after it is not a minor version."""
_VERSION_FIRST = re.compile(r"claude-(\d{1,2})(?:[-.](\d{1,2}))?(?!\d)")
"""``claude-<major>[-<minor>]-<family>`` (Claude 3.x) and ``claude-2.1``."""


def claude_version(model: str) -> tuple[int, int] | None:
    """(major, minor) of a Claude model name; None for anything else (``claude-instant-1`` too).

    However the provider spells it: ``anthropic/claude-opus-5-5``, ``anthropic.claude-fable-5-1-v1:0``,
    ``claude-sonnet-4-5-20250929``, ``claude-sonnet-4-5@20250929``, the old ``claude-3-5-sonnet-20241022``."""
    name = model.lower()
    match = _FAMILY_FIRST.search(name) or _VERSION_FIRST.search(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2) or 0)

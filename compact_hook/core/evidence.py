"""What a response's usage is worth: evidence of how the provider counts, or not.

A provider's usage beats our tokenizer's estimate — when it describes the prompt. Not every server
does: Ollama 0.30 reported only the tokens after its cached prefix (ollama/ollama #16414), older
releases 0 when cached (#5370) or nothing (#2068); a server with a small context truncates the
prompt silently and reports what it kept (#3427); gateways count the messages and leave system and
tools out. And a request holding an image, a document or a server-side tool's result is counted by
us at a fixed estimate whatever its size, so its usage says nothing of our tokenizer. Taken at its
word, any of these collapses our count and nothing is compacted again: a backend that truncates
silently then loses the conversation's head.

So each response is judged (``judge``) before it teaches anything, against our count of what we
forwarded and against the conversation's previous response, and the verdict is what the metric
``compact_hook_count_samples_total{outcome}`` counts:

- ``unknowable`` — we forwarded content whose count we can only estimate (media, documents,
  server-side tools' results): nothing learned, nothing held against the provider;
- ``missing`` — no input reported, or zero;
- ``unusable`` — our count too small to tell (framing dominates it), or the ratio absurd (over 5);
- ``capped`` — the bill pinned at one figure while what we forward grew (truncation to a context);
- ``cached_left_out`` — the bill stopped growing with what we forward, or is about what was new
  (a cached prefix left out);
- ``fixed_left_out`` — the bill far below our count of the fixed part alone (system, tools), or
  growing with the messages from well below it (a gateway counting the messages only);
- ``below_floor`` — far below our count, for no reason we can name;
- ``learned`` / ``outlier`` — usable; whether the tenant's estimate took it is ``RatioStats``'.

The faults (``Verdict.sets_aside``) set the tenant's usage aside: its counts fall back to our
tokenizer at the prior until a response grows with what we forward, turn over turn, in proportion
(``coherent``). And whatever is learned is trusted asymmetrically (``Trust``): above the prior as
it comes — a provider that counts more than our tokenizer must never be under-counted — and below
it never past ``floor × prior``. A count too high compacts a little early; one too low loses the
conversation's head on a silent backend.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from compact_hook.core.calibration import HIGHEST, MIN_COUNTED, MIN_SPAN, Billed, CountRatio
from compact_hook.core.limits import least_room
from compact_hook.settings.model import CompactConfig

MIN_STEP = 256
"""A request must have grown by this much (our tokens) since the conversation's previous response
for the two bills to tell whether the provider's count grows with ours."""
STALL = 0.25
"""A bill that grew by less than this share of what the lowest trusted ratio predicts has stopped
growing with what we forward (a truthful provider never counts new text at a quarter of that)."""
PINNED = 0.01
"""Bills within this share of each other, a ``MIN_STEP`` apart, are one figure: a ceiling."""
PIN_STEP, PIN_EXACT = 16, 2
"""A bill within ``PIN_EXACT`` tokens of the previous one while we forward ``PIN_STEP`` more, below
our count, is a ceiling (a truthful provider bills what a turn adds, however little)."""
TAIL = 2.0
"""A bill within this many times what the request grew by (at the prior) is a bill of what was new."""
FIXED_SHARE = 0.5
"""A bill under this share of our count of the fixed part alone, at the lowest trusted ratio,
cannot have counted it."""
FIXED_KEPT = 0.25
"""A conversation's growth that leaves less than this share of its fixed part billed (the bill's
intercept against our count) was billed without it."""
CEILING_ROOM = 0.25
"""A server's context read from pinned bills must leave the conversation at least this share of the
room the configured window leaves it (beside the fixed part and the reply's reserve). Less, and every
compaction to it lands over the trigger — the summary and the newest turns alone fill it: read so, a
bill of the fixed part plus what was new (a cache over the messages, left out) had Claude Code
summarized on 26 of 31 turns. Such bills are read as the cache left out."""
VARIES = 64
"""Two turns that grew by amounts this far apart (our tokens) tell a ceiling (the same bill whatever
was new) from a left-out cache (a bill of what was new, which moves with it)."""


class Verdict(enum.StrEnum):
    """What one response's usage is, for counting (the metric's ``outcome``)."""

    LEARNED = "learned"
    """It describes the prompt and the tenant's estimate took it."""
    OUTLIER = "outlier"
    """It describes the prompt, far from the tenant's estimate: ignored until five in a row say so."""
    UNUSABLE = "unusable"
    """Our count too small to tell, or the ratio absurd."""
    UNKNOWABLE = "unknowable"
    """We forwarded content whose count we can only estimate: it teaches nothing."""
    MISSING = "missing"
    """No input reported, or zero."""
    CAPPED = "capped"
    """Pinned at a ceiling while what we forward grew: the server truncates to its context."""
    CACHED_LEFT_OUT = "cached_left_out"
    """Stopped growing with what we forward, or counts only what was new: a cached prefix left out."""
    FIXED_LEFT_OUT = "fixed_left_out"
    """Far below our count of the fixed part (system, tools) alone: only the messages counted."""
    BELOW_FLOOR = "below_floor"
    """Far below our count, past what any tokenizer we measured differs by."""
    UNCONFIRMED = "unconfirmed"
    """Usable, but the tenant's usage is set aside and this response has no previous one to show it
    grows with what we forward: not taken yet."""

    @property
    def sets_aside(self) -> bool:
        """The usage cannot describe the prompt: the tenant's counts fall back to the prior."""
        return self in SETS_ASIDE

    @property
    def usable(self) -> bool:
        return self is Verdict.LEARNED


SETS_ASIDE = frozenset(
    {Verdict.MISSING, Verdict.CAPPED, Verdict.CACHED_LEFT_OUT, Verdict.FIXED_LEFT_OUT, Verdict.BELOW_FLOOR}
)


@dataclass(frozen=True, slots=True)
class Forwarded:
    """Our count of a request as we forwarded it, which its usage is judged against."""

    counted: int = 0
    fixed: int = 0
    """Of it, what stays the same turn after turn: what the model reads besides the entries (tool
    definitions, an Anthropic ``system``, Responses ``instructions``, schemas) and the leading system
    and developer entries (Codex's AGENTS.md and permissions)."""
    estimated: bool = False
    """It holds content we count at a fixed estimate (media, documents, server-side tools' results)."""
    reserve: int = 0
    """The reply it asked room for (``max_tokens`` and its kin), in the provider's tokens."""
    window: int | None = None
    """The configured window it was forwarded under (the provider's tokens; None: unknown)."""


@dataclass(frozen=True, slots=True)
class Trust:
    """How far what a provider reports may move our count: above ``prior`` as it comes, below it
    never past ``floor × prior`` (``count_floor``)."""

    prior: float = 1.0
    floor: float = 1.0

    @property
    def lowest(self) -> float:
        """The fewest provider tokens per one of ours we ever count."""
        return self.prior * self.floor

    def ratio(self, ratio: CountRatio, ours: int) -> CountRatio:
        """``ratio`` for a request we count ``ours``, never under ``lowest``: a margin below it is
        raised to it, and so is a whole whose fixed part was billed below it."""
        lowest = self.lowest
        raised = ratio if ratio.value >= lowest else CountRatio(lowest, ratio.source, ratio.offset)
        return raised if raised.effective(max(1, ours)) >= lowest else CountRatio(lowest, ratio.source)


@dataclass(frozen=True, slots=True)
class Earlier:
    """The same conversation's responses heard before this one (its bill and our count), along
    what we forwarded (``core.notes``): the previous one, the first, and the one before the previous,
    where they were heard."""

    previous: Billed | None = None
    first: Billed | None = None
    before: Billed | None = None


@dataclass(frozen=True, slots=True)
class Judged:
    """One response's usage, judged: the verdict, what it billed, what we forwarded, and whether it
    grew with what we forward since the conversation's previous response (``coherent``)."""

    verdict: Verdict
    billed: int
    forwarded: Forwarded
    earlier: Earlier = Earlier()
    coherent: bool = False

    @property
    def ratio(self) -> float:
        return self.billed / self.forwarded.counted if self.forwarded.counted > 0 else 0.0

    @property
    def context(self) -> int | None:
        """The context a server that truncates to it keeps (``CAPPED``: the pinned bill), as a window
        with the request's reply reserve: what later requests of the tenant must fit; None otherwise."""
        return self.billed + self.forwarded.reserve if self.verdict is Verdict.CAPPED else None

    def seen(self) -> str:
        """What was seen, in words for an operator."""
        said = f"billed {self.billed:,} input tokens for a request we count {self.forwarded.counted:,}"
        if self.forwarded.fixed:
            said += f" ({self.forwarded.fixed:,} of them system, tools and leading instructions)"
        previous = self.earlier.previous
        if previous is not None:
            said += f"; its conversation's previous: {previous.billed:,} for {previous.counted:,}"
        return said


def judged(billed: int, forwarded: Forwarded, earlier: Earlier, trust: Trust) -> Judged:
    """``judge``'s verdict with what it was made of."""
    verdict = judge(billed, forwarded, earlier, trust)
    return Judged(
        verdict, billed, forwarded, earlier, verdict is Verdict.LEARNED and _stepped(forwarded, earlier)
    )


def judge(billed: int, forwarded: Forwarded, earlier: Earlier, trust: Trust) -> Verdict:
    """What a response billing ``billed`` input tokens for ``forwarded`` is worth.

    ``LEARNED`` here means usable (whether an estimate takes it is ``RatioStats.after``'s call)."""
    if forwarded.estimated:
        return Verdict.UNKNOWABLE
    if billed <= 0:
        return Verdict.MISSING
    if forwarded.counted < MIN_COUNTED:
        return Verdict.UNUSABLE
    lowest, fixed = trust.lowest, forwarded.fixed
    since = earlier.first or earlier.previous
    if since is not None and leaves_out_fixed(Billed(billed, forwarded.counted), since, fixed, trust):
        return Verdict.FIXED_LEFT_OUT
    stepped = _step(billed, forwarded, earlier, trust)
    if stepped is not None:
        return stepped
    if fixed >= MIN_COUNTED and billed < FIXED_SHARE * lowest * fixed:
        return Verdict.FIXED_LEFT_OUT
    ratio = billed / forwarded.counted
    if ratio < lowest:
        return Verdict.BELOW_FLOOR
    return Verdict.LEARNED if ratio <= HIGHEST else Verdict.UNUSABLE


def _step(billed: int, forwarded: Forwarded, earlier: Earlier, trust: Trust) -> Verdict | None:
    """The fault a turn over turn comparison shows, if any: the bill pinned, stalled, or about only
    what was new, while what we forward grew."""
    previous = earlier.previous
    if previous is None or previous.billed <= 0:
        return None
    grown, grew = forwarded.counted - previous.counted, billed - previous.billed
    below = billed < trust.lowest * forwarded.counted
    if grown >= MIN_STEP and below and billed - trust.prior * forwarded.fixed <= TAIL * trust.prior * grown:
        return Verdict.CACHED_LEFT_OUT  # the fixed part plus about what was new: the messages' cache left out
    pinned = grown >= PIN_STEP and abs(grew) <= PIN_EXACT and billed < trust.prior * forwarded.counted
    if not pinned and grown >= MIN_STEP:
        pinned = abs(grew) <= PINNED * billed and (below or grew < STALL * trust.lowest * grown)
    if pinned:  # a ceiling, or a cache left out whose new parts happen to be alike
        return Verdict.CAPPED if _a_ceiling(billed, forwarded, earlier, trust) else Verdict.CACHED_LEFT_OUT
    if grown < MIN_STEP:
        return None
    if grew < STALL * trust.lowest * grown or (below and billed <= TAIL * trust.prior * grown):
        return Verdict.CACHED_LEFT_OUT
    return None


def _a_ceiling(billed: int, forwarded: Forwarded, earlier: Earlier, trust: Trust) -> bool:
    """A pinned bill read as a server's context (which loses the head: a window to compact under)
    rather than as a cache left out (the fixed part, or nothing, plus what was new): where the two
    cannot be told apart, the reading that compacts more — but never a context that leaves the
    conversation too little room beside the fixed part to compact into (``CEILING_ROOM``; the cache
    reading sets the usage aside instead), and not where the bill moved with what was new while the
    turns' growth differed (``VARIES``): a ceiling bills the same whatever was new."""
    fixed = trust.prior * forwarded.fixed
    previous, before = earlier.previous, earlier.before
    if previous is not None and billed - fixed <= TAIL * trust.prior * (forwarded.counted - previous.counted):
        return False  # the fixed part plus about what was new: a context that holds no more is none
    room = (forwarded.window or 0) - forwarded.reserve - fixed
    if billed - fixed < max(
        least_room(forwarded.window, forwarded.reserve, round(fixed)), CEILING_ROOM * room
    ):
        return False
    if previous is None or before is None:
        return True
    varied = (forwarded.counted - previous.counted) - (previous.counted - before.counted)
    moved = billed - previous.billed
    return abs(varied) < VARIES or moved * varied <= 0 or abs(moved) < STALL * trust.lowest * abs(varied)


def _stepped(forwarded: Forwarded, earlier: Earlier) -> bool:
    """The conversation grew by at least ``MIN_STEP`` since a previous response that billed
    something: a usable response then shows its usage grows with what we forward, turn over turn, in
    proportion (``Judged.coherent``: what brings a tenant's usage back after it was set aside)."""
    previous = earlier.previous
    return previous is not None and previous.billed > 0 and forwarded.counted - previous.counted >= MIN_STEP


def leaves_out_fixed(last: Billed, first: Billed, fixed: int, trust: Trust) -> bool:
    """A conversation whose bill grows with its messages from well below its fixed part: from its
    first heard request (or its previous one) to its last, at least ``MIN_SPAN`` apart, the bill's
    intercept against our count leaves less than ``FIXED_KEPT`` of the fixed part (at the margin)
    billed — a gateway that counts the messages only."""
    span = last.counted - first.counted
    if fixed < MIN_COUNTED or span < MIN_SPAN or first.billed <= 0 or last.billed <= first.billed:
        return False
    margin = (last.billed - first.billed) / span
    if margin < trust.lowest:
        return False  # a stall, judged per step
    intercept = last.billed - margin * last.counted
    return intercept < -(1 - FIXED_KEPT) * margin * fixed


def trust_of(config: CompactConfig) -> Trust:
    """A model's trust: its prior (``count_ratio``, resolved per deployment) and ``count_floor``."""
    return Trust(config.count_ratio or 1.0, config.count_floor)


@dataclass(frozen=True, slots=True)
class Learned:
    """What one response did: its outcome, and the group's estimate after it (None: unchanged)."""

    verdict: Verdict
    group_ratio: float | None = None
    spread: float = 0.0

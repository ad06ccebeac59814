"""How a model group's provider counts against us, per tenant: evidence, not truth.

What is learned here reaches every tenant of a group and every replica (the windows providers teach:
``proxy.feedback.windows``). Every response's usage is judged (``core.evidence``) and, where it
describes the prompt, teaches the estimate of the tenant that sent it (``core.calibration.RatioStats``:
a higher count at once, a lower one only gradually and down to the floor); where it does not, that
tenant's usage is set aside — its counts fall back to the prior, said once per group and reason —
for ``ASIDE_SECONDS``, or until a response grows with what we forward again, or a refusal states
what the provider counted. A conversation's first requests are counted at its tenant's estimate,
or, for a tenant with none, at the group's: the median of a fixed sample of the tenants' estimates
(each one vote, over ``MIN_SAMPLES`` responses, at least ``MIN_TENANTS`` of them), kept between the
trusted floor and ``GROUP_CEILING`` times the prior. No tenant moves another's count: one whose
requests are odd teaches only its own estimate, and is one vote of the median. Published to the
store every few seconds (``TENANTS_KEPT`` tenants per group, by a hash of their name) for the other
replicas and a restart. Nothing here makes us forward more than the prior would (``core.limits``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from compact_hook.core.calibration import MIN_SAMPLES, CountRatio, RatioSource, RatioStats
from compact_hook.core.evidence import Judged, Learned, Trust, Verdict
from compact_hook.core.tenancy import tenant_tag
from compact_hook.engine.notices import Notices
from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)

RATIO_PREFIX = b"ratios:"
REFRESH_SECONDS = 5.0
"""How long a replica reads what the store says before asking it again."""
PUBLISH_SECONDS = 5.0
"""How often a replica writes its tenants' estimates of a group to the store (at most)."""
SAY_MOVE = 0.03
"""A group's ratio moving by more than this (3%) since it was last logged is logged."""
TENANTS_KEPT = 256
"""Per group, the tenants whose estimates the store keeps: of those heard within the record's
lifetime, the first by a hash of their name — a fixed sample of tenants, not the busiest: many busy
keys do not push the others out."""
MEDIAN_TENANTS = 32
"""The group's median is taken over the first this many eligible tenants by that hash (one vote each)."""
MIN_TENANTS = 3
"""The group's median needs this many tenants' estimates, else a new tenant starts from the prior: the
fewest for which no one tenant decides it (a median of three lies between the other two's)."""
LOCAL_TENANTS = 1_024
"""Per group, the tenants whose estimates a replica holds (the most recently heard)."""
GROUP_CEILING = 2.0
"""The group's median is kept under this many times the prior: other tenants' estimates raise a new
tenant's first count only so far (its own responses then count it)."""
ASIDE_SECONDS = 600.0
"""How long one response whose usage could not describe the prompt sets its tenant's usage aside (its
counts at the prior). A server that lies does so on every response and is set aside again by its next
one; a one-off caller whose odd bill was an accident is not held at the prior for good."""


@dataclass(frozen=True, slots=True)
class TenantCount:
    """One tenant's estimate in a group, and whether its usage is set aside (why, and until when)."""

    stats: RatioStats = RatioStats()
    aside: Verdict | None = None
    until: float = 0.0
    """When the set-aside ends (wall clock)."""
    seen: float = 0.0
    """When it was last heard (wall clock): the store keeps those heard within its record's lifetime."""

    def set_aside(self, now: float) -> bool:
        return self.aside is not None and now < self.until

    def to_text(self) -> str:
        aside = self.aside.value if self.aside else ""
        return f"{self.stats.to_text()},{aside},{self.until:.0f},{self.seen:.0f}"

    @classmethod
    def from_text(cls, text: str) -> TenantCount | None:
        """None for anything that is not an estimate we wrote (one of an earlier release, without
        ``until``, is set aside for ``ASIDE_SECONDS`` from when it was heard)."""
        fields = text.split(",")
        if len(fields) == 6:
            fields.insert(5, "")
        if len(fields) != 7:
            return None
        stats_text, (aside, until, seen) = ",".join(fields[:4]), fields[4:]
        stats = RatioStats.from_text(stats_text)
        if stats is None and stats_text != RatioStats().to_text():
            return None
        try:
            verdict = Verdict(aside) if aside else None
            heard = float(seen)
            ends = float(until) if until else heard + ASIDE_SECONDS
        except ValueError:
            return None
        if verdict is not None and not verdict.sets_aside:
            return None
        return cls(stats or RatioStats(), verdict, ends, heard)


class LearnedRatios:
    """Per model group and tenant, the provider's tokens per one of ours, from its responses' usage."""

    def __init__(
        self,
        store: CompactionStore | None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.clock, self.wall = store, clock, wall
        self.notices = Notices()
        self._local: dict[str, OrderedDict[str, TenantCount]] = {}
        self._shared: dict[str, tuple[float, dict[str, TenantCount]]] = {}
        self._published: dict[str, float] = {}
        self._said: dict[str, float] = {}
        self._medians: dict[str, tuple[float, list[float]]] = {}
        """Per group, the estimates the median is taken over and when they were: taken again when this
        replica learns or the store's tenants are read again, not on every request."""

    async def ratio(self, group: str, tenant: str, trust: Trust) -> CountRatio:
        """How a request of ``tenant`` is counted before its conversation has its own bills: the
        tenant's estimate, else the group's median, else the prior; a tenant set aside, the prior."""
        own = await self._known(group, tenant_tag(tenant))
        if own is not None and own.set_aside(self.wall()):
            return CountRatio(trust.prior)
        if own is not None and own.stats.samples > 0:
            return trust.ratio(CountRatio(own.stats.ratio, RatioSource.MODEL_GROUP), 1)
        median = await self._median(group)
        if median is None:
            return CountRatio(trust.prior)
        bounded = min(max(median, trust.lowest), GROUP_CEILING * trust.prior)
        return CountRatio(bounded, RatioSource.MODEL_GROUP)

    async def heard(self, group: str, tenant: str, judged: Judged, trust: Trust, ttl: float) -> Learned:
        """One judged response (``core.evidence.judged``) into its tenant's estimate."""
        key, now = tenant_tag(tenant), self.wall()
        known = await self._known(group, key) or TenantCount()
        verdict = judged.verdict
        if verdict.sets_aside:
            aside = dataclasses.replace(known, aside=verdict, until=now + ASIDE_SECONDS, seen=now)
            self._keep(group, key, aside)
            self._say_aside(group, judged, trust)
            await self._publish(group, ttl)
            return Learned(verdict)
        if verdict is not Verdict.LEARNED:
            return Learned(verdict)
        if known.aside is not None:
            if known.set_aside(now) and not judged.coherent:
                return Learned(Verdict.UNCONFIRMED)
            self._say_back(group, known.aside)
        stats, counted = known.stats.after(judged.ratio)
        self._keep(group, key, TenantCount(stats, seen=now))
        median = await self._median(group, least=1)
        if counted and median is not None:
            self._say_move(group, median, trust.prior)
        await self._publish(group, ttl)
        return Learned(Verdict.LEARNED if counted else Verdict.OUTLIER, median, stats.spread)

    async def _known(self, group: str, key: str) -> TenantCount | None:
        local = self._local.get(group)
        found = local.get(key) if local is not None else None
        return found if found is not None else (await self._from_store(group)).get(key)

    def _keep(self, group: str, key: str, count: TenantCount) -> None:
        self._medians.pop(group, None)
        local = self._local.setdefault(group, OrderedDict())
        local[key] = count
        local.move_to_end(key)
        while len(local) > LOCAL_TENANTS:
            local.popitem(last=False)

    async def _median(self, group: str, least: int = MIN_TENANTS) -> float | None:
        """The tenants' estimates' median (the upper middle of an even number: a count too high is
        the safe side), over a fixed sample of the tenants with ``MIN_SAMPLES`` responses whose
        usage is not set aside (``MEDIAN_TENANTS``, by their hash); None under ``least`` of them
        (``MIN_TENANTS`` where it counts a new tenant; one, for what the metric and the log show)."""
        shared = await self._from_store(group)
        taken = self._medians.get(group)
        if taken is None or taken[0] < self._shared[group][0]:
            taken = (self.clock(), _voters(({**shared, **self._local.get(group, {})}), self.wall()))
            self._medians[group] = taken
        ratios = taken[1]
        return ratios[len(ratios) // 2] if len(ratios) >= max(1, least) else None

    async def _from_store(self, group: str) -> dict[str, TenantCount]:
        found = self._shared.get(group)
        if found is not None and self.clock() - found[0] < REFRESH_SECONDS:
            return found[1]
        text = await self.store.get_record(_ratios_key(group)) if self.store is not None else None
        tenants = _parse(text) if text is not None else {}
        self._shared[group] = (self.clock(), tenants)
        return tenants

    async def _publish(self, group: str, ttl: float) -> None:
        """This replica's tenants of ``group`` into the store's: of those heard within ``ttl``, the
        first ``TENANTS_KEPT`` by their hash (at most every ``PUBLISH_SECONDS``)."""
        now = self.clock()
        if self.store is None or now - self._published.get(group, -PUBLISH_SECONDS) < PUBLISH_SECONDS:
            return
        self._published[group] = now
        self._shared.pop(group, None)  # read it afresh: other replicas wrote since
        merged = {**await self._from_store(group), **self._local.get(group, {})}
        recent = self.wall() - ttl
        kept = sorted((k, c) for k, c in merged.items() if c.seen >= recent)[:TENANTS_KEPT]
        await self.store.put_record(_ratios_key(group), "\n".join(f"{k}:{c.to_text()}" for k, c in kept), ttl)

    def _say_aside(self, group: str, judged: Judged, trust: Trust) -> None:
        if not self.notices.first((group, judged.verdict)):
            return
        logger.warning(
            "compact_hook: model group %r: the provider's usage does not describe the prompt (%s: %s); "
            "that key's or team's counts fall back to our tokenizer at the prior (%.2f per one of ours) "
            "until its usage grows with what we forward again. Said once per model group and reason; "
            "compact_hook_count_samples_total{outcome=%r} counts them",
            group,
            judged.verdict.value,
            judged.seen(),
            trust.prior,
            judged.verdict.value,
        )

    def _say_back(self, group: str, aside: Verdict) -> None:
        if self.notices.first((group, "back", aside)):
            logger.warning(
                "compact_hook: model group %r: usage set aside (%s) grows with what we forward again; "
                "its counts follow it",
                group,
                aside.value,
            )

    def _say_move(self, group: str, ratio: float, prior: float) -> None:
        """Log the group's median when it has moved by more than ``SAY_MOVE`` since last said (from
        the prior, the first time)."""
        said = self._said.get(group, prior)
        if abs(math.log(ratio / said)) <= math.log1p(SAY_MOVE):
            return
        self._said[group] = ratio
        below = (
            f"; below the prior ({prior:.2f}), its windows stay where the prior puts them: set count_ratio "
            f"to {ratio:.2f} to use them whole"
            if ratio < prior
            else ""
        )
        logger.warning(
            "compact_hook: model group %r: the provider counts %.3f tokens per one of ours (was %.3f: the "
            "median of its keys' and teams' estimates); its figures follow%s",
            group,
            ratio,
            said,
            below,
        )


def _voters(tenants: dict[str, TenantCount], now: float) -> list[float]:
    """The estimates the group's median is taken over, in order (see ``LearnedRatios._median``)."""
    voters = sorted(
        (key, count.stats.ratio)
        for key, count in tenants.items()
        if not count.set_aside(now) and count.stats.samples >= MIN_SAMPLES
    )[:MEDIAN_TENANTS]
    return sorted(ratio for _, ratio in voters)


def _ratios_key(group: str) -> bytes:
    return RATIO_PREFIX + group.encode("utf-8", "surrogatepass")


def _parse(text: str) -> dict[str, TenantCount]:
    fields = (line.partition(":") for line in text.splitlines()[:TENANTS_KEPT])
    counts = ((key, TenantCount.from_text(value)) for key, _, value in fields)
    return {key: count for key, count in counts if count is not None and len(key) == 16}

"""Prometheus metrics: what compaction did, what it cost, what it saved.

Labels are the model group, the wire format and a typed outcome only, so cardinality is
bounded by the operator's model list (never a key, a tenant or a session). A model name the
operator did not configure is labelled ``other``: a client cannot mint label values.

Per-request figures are recorded by the hook from the engine's typed result; what the engine
counts by itself (prepared compactions, Redis errors and fallbacks, breaker transitions) is read
at scrape time by a collector, so nothing is counted twice. Everything lives in
``prometheus_client``'s default registry: with LiteLLM's ``prometheus`` callback on, its
``/metrics`` serves ours too; else ``COMPACT_METRICS_PORT`` serves them on a port of our own.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from compact_hook.core.evidence import Learned, Verdict
from compact_hook.core.failures import SummaryFailure
from compact_hook.core.outcomes import ArchiveStatus, CacheStatus, Reason
from compact_hook.engine.result import CompactResult
from compact_hook.proxy.observe.collectors import PREFIX, EngineCollector, RecentCollector

logger = logging.getLogger(__name__)

OTHER = "other"
MAX_GROUPS = 1024
MAX_STARTED = 8192
"""Group and wire pairs whose counts start at 0 (configured groups × the handful of wires)."""
FALLING_BEHIND = (
    Reason.NO_ROOM,
    Reason.OVER_TRIGGER,
    Reason.CANNOT_FIT,
    Reason.SUMMARY_FAILED,
    Reason.BREAKER_OPEN,
)
"""The request outcomes ``CompactHookFallingBehind`` reads (the other outcomes appear as they come)."""
APPLIED = (CacheStatus.MISS, CacheStatus.SHARED, CacheStatus.PREPARED)
"""How a compaction a request applied was had: made now, shared by another replica, prepared ahead."""
RECALL_OUTCOMES = ("found", "not_found")
FIRST_CONTACT = {True: "true", False: "false"}
"""The ``first_contact`` label's values."""
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Outcome(enum.StrEnum):
    """What became of an engaged request (``outcome`` label), besides the ``Reason`` values."""

    COMPACTED = "compacted"
    """The forwarded request holds a summary."""
    TRIMMED = "trimmed"
    """Changed by the cheap tiers, the fit or normalization only."""
    UNCHANGED = "unchanged"
    FAILED_OPEN = "failed_open"
    """Our own error: forwarded exactly as sent."""
    ANSWERED = "answered"
    """A ``/compact`` command, answered by the proxy."""
    UNHANDLED_CALL_TYPE = "unhandled_call_type"
    """A conversation for a compacting model group on a LiteLLM call type we have no format for:
    forwarded as sent (``wire`` is the call type)."""


def outcome_of(result: CompactResult) -> str:
    """The outcome label: a ``Reason`` says most; else whether the request changed."""
    if result.reason is not None and result.reason is not Reason.BELOW_THRESHOLD:
        return result.reason.value
    if result.compacted:
        return Outcome.COMPACTED.value
    touched = result.truncated or result.cleared or result.dropped or result.normalized
    return (Outcome.TRIMMED if touched else Outcome.UNCHANGED).value


@dataclass(frozen=True, slots=True)
class Labels:
    model_group: str
    wire: str


class Metrics:
    """The hook's metrics in one registry (the default one in the proxy; a fresh one in tests)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._counting(registry)
        self._counts_against_ours(registry)
        self.engine = EngineCollector()
        registry.register(self.engine)
        self.recent = RecentCollector()
        registry.register(self.recent)
        self._groups: set[str] = set()
        self._started: set[Labels] = set()
        self._children: dict[tuple[object, ...], Any] = {}

    def _of(self, metric: Counter | Gauge | Histogram, *values: str) -> Any:
        """``metric.labels(*values)``, looked up once: ``labels`` checks and locks on every call, and
        each request records several. Bounded as the labels are (configured groups, wires, outcomes)."""
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def _counting(self, registry: CollectorRegistry) -> None:
        """What each request did, by model group and wire (and outcome where it has one)."""

        def counter(name: str, documentation: str, outcome: bool = False) -> Counter:
            labels = ("model_group", "format", "outcome") if outcome else ("model_group", "format")
            return Counter(f"{PREFIX}_{name}", documentation, labels, registry=registry)

        self.requests = counter("requests", "Requests compact_hook engaged on, by outcome", outcome=True)
        self.latency = Histogram(
            f"{PREFIX}_hook_seconds",
            "Time the pre-call hook held a request; first_contact: the conversation's first request "
            "this process saw (a burst of new sessions, a restart: all of each history is new to it)",
            ("model_group", "format", "first_contact"),
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.compactions = counter(
            "compactions", "Compactions applied: made now (miss), shared, or prepared ahead", outcome=True
        )
        self.summary_calls = counter("summary_calls", "Summary model calls on the request path")
        self.summary_failures = counter(
            "summary_failures",
            "Requests whose summary could not be made, by kind (timeout, refused, …)",
            outcome=True,
        )
        self.tokens_before = counter("tokens_before", "Tokens the clients sent (everything the model reads)")
        self.tokens_after = counter("tokens_after", "Tokens forwarded")
        self.cost_saved = counter(
            "cost_saved_usd", "Estimated USD saved against forwarding requests as sent (priced models)"
        )
        self.summary_cost = counter("summary_cost_usd", "USD the summary calls cost, prepared ones included")
        self.tokens_saved = counter("tokens_saved", "Tokens the clients sent that were not forwarded")
        self.store = counter(
            "store_lookups", "Stored compactions reused (hit) or needing a summary (miss)", outcome=True
        )
        self.archive = counter("archive_writes", "Archive writes, written or failed", outcome=True)
        self.recalls = counter(
            "recalls", "Recall calls the proxy answered: found (the original) or not_found", outcome=True
        )
        self.recall_bytes = counter("recall_bytes", "Bytes the recall answers gave back to the model")

    def _counts_against_ours(self, registry: CollectorRegistry) -> None:
        """How the providers' counts compare with ours, per model group (``proxy.feedback.ratios``)."""
        self.count_ratio = Gauge(
            f"{PREFIX}_count_ratio",
            "The provider's input tokens per token we count, per model group (its estimate from usage)",
            ("model_group",),
            registry=registry,
        )
        self.count_spread = Gauge(
            f"{PREFIX}_count_ratio_spread",
            "How much responses' ratios vary around that estimate (one standard deviation, as a share)",
            ("model_group",),
            registry=registry,
        )
        self.count_samples = Counter(
            f"{PREFIX}_count_samples",
            "Responses whose billed input was judged against our count: learned, outlier, and why the others "
            "taught nothing (unusable, unknowable, missing, capped, cached_left_out, fixed_left_out, "
            "below_floor, unconfirmed)",
            ("model_group", "outcome"),
            registry=registry,
        )

    def known_group(self, model_group: str) -> None:
        """A group the operator configured: labelled by its name from now on."""
        if len(self._groups) < MAX_GROUPS:
            self._groups.add(model_group)

    def group(self, model_group: str) -> str:
        return model_group if model_group in self._groups else OTHER

    def labels(self, model_group: str, wire: str) -> Labels:
        where = Labels(self.group(model_group), wire or OTHER)
        if where not in self._started and len(self._started) < MAX_STARTED:
            self._started.add(where)
            self._start(where)
        return where

    def _start(self, where: Labels) -> None:
        """Every count an alert or a panel reads, at 0 from a group's first request on a wire:
        Prometheus's ``rate`` and ``increase`` read a series from its first scrape, so the
        increment that created it would be lost — a group's first failed summary, its first
        compaction (the "avoid missing metrics" rule of Prometheus's instrumentation guide) — and a
        panel on a series not created yet says "No data" where the truth is 0 (no recall yet, an
        unpriced model's money)."""
        group, wire = where.model_group, where.wire
        for series in self._started_series():
            series.labels(group, wire)
        for first in FIRST_CONTACT.values():
            self.latency.labels(group, wire, first)
        for counter, outcomes in self._started_outcomes():
            for outcome in outcomes:
                counter.labels(group, wire, outcome)
        for verdict in Verdict:
            self.count_samples.labels(group, verdict.value)

    def _started_series(self) -> tuple[Counter | Histogram, ...]:
        return (
            self.summary_calls,
            self.tokens_before,
            self.tokens_after,
            self.tokens_saved,
            self.cost_saved,
            self.summary_cost,
            self.recall_bytes,
        )

    def _started_outcomes(self) -> tuple[tuple[Counter, tuple[str, ...]], ...]:
        """Each count by outcome and the outcomes a rule or panel reads of it."""
        return (
            (self.summary_failures, tuple(kind.value for kind in SummaryFailure)),
            (self.compactions, tuple(cache.value for cache in APPLIED)),
            (self.requests, tuple(reason.value for reason in FALLING_BEHIND)),
            (self.archive, tuple(status.value for status in ArchiveStatus)),
            (self.recalls, RECALL_OUTCOMES),
        )

    def observe(self, result: CompactResult, where: Labels) -> None:
        """One request the engine handled."""
        group, wire = where.model_group, where.wire
        self._of(self.requests, group, wire, outcome_of(result)).inc()
        self._of(self.tokens_before, group, wire).inc(result.input_tokens)
        self._of(self.tokens_after, group, wire).inc(result.output_tokens)
        self._of(self.tokens_saved, group, wire).inc(max(0, result.input_tokens - result.output_tokens))
        if result.summary_calls:
            self._of(self.summary_calls, group, wire).inc(result.summary_calls)
        if result.reason is Reason.SUMMARY_FAILED:
            kind = result.summary_failure or SummaryFailure.UNAVAILABLE
            self._of(self.summary_failures, group, wire, kind.value).inc()
        if result.compacted and result.cache in APPLIED:
            self._of(self.compactions, group, wire, result.cache.value).inc()
        if result.cache in (CacheStatus.HIT, CacheStatus.MISS):
            self._of(self.store, group, wire, result.cache.value).inc()
        if result.archive_status is not None:
            self._of(self.archive, group, wire, result.archive_status.value).inc()
        if result.cost_saved is not None:  # a counter only grows: what a change cost shows in the spend
            self._of(self.cost_saved, group, wire).inc(max(0.0, result.cost_saved))

    def recalled(self, found: int, missing: int, returned: int, where: Labels) -> None:
        """One reply's recall calls, answered by the proxy (``proxy.recall``)."""
        for outcome, count in zip(RECALL_OUTCOMES, (found, missing), strict=True):
            if count:
                self._of(self.recalls, where.model_group, where.wire, outcome).inc(count)
        if returned:
            self._of(self.recall_bytes, where.model_group, where.wire).inc(returned)

    def spent(self, amount: float, where: Labels) -> None:
        """A summary call's cost (on a request's path or in the background)."""
        if amount > 0:
            self._of(self.summary_cost, where.model_group, where.wire).inc(amount)

    def outcome(self, outcome: Outcome | Reason, where: Labels) -> None:
        """A request that ended without an engine result (failed open, passed through, answered)."""
        self._of(self.requests, where.model_group, where.wire, outcome.value).inc()

    def held(self, seconds: float, where: Labels, first_contact: bool) -> None:
        self._of(self.latency, where.model_group, where.wire, FIRST_CONTACT[first_contact]).observe(seconds)

    def count_sample(self, model_group: str, learned: Learned) -> None:
        """One response's usage against our count: what it was (``core.evidence.Verdict``), and the
        group's estimate after it (``proxy.feedback.ratios``)."""
        group = self.group(model_group)
        self._of(self.count_samples, group, learned.verdict.value).inc()
        if learned.group_ratio is not None:
            self._of(self.count_ratio, group).set(learned.group_ratio)
            self._of(self.count_spread, group).set(learned.spread)


_default: Metrics | None = None
_served_on: int | None = None


def default_metrics() -> Metrics:
    """The process's metrics in the default registry (created once: a registry refuses twins)."""
    global _default
    if _default is None:
        _default = Metrics()
    return _default


def serve(port: int | None, host: str) -> None:
    """Serve the default registry on ``port`` (once per process); a busy port is logged, not raised."""
    global _served_on
    if port is None or _served_on is not None:
        return
    try:
        start_http_server(port, addr=host)
    except OSError as exc:  # e.g. a second LiteLLM worker process on the same port
        logger.warning("compact_hook: metrics not served on %s:%d: %s", host, port, exc)
        return
    _served_on = port
    logger.info("compact_hook: metrics on http://%s:%d/metrics", host, port)

"""What the engine counts by itself — prepared compactions, the summary breakers, Redis errors,
fallbacks and outages — read at scrape time from the hook's compactor, so nothing is counted twice;
and what the conversations kept for their next request hold."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from compact_hook.engine.compactor import Compactor
from compact_hook.state.file_store import FILE
from compact_hook.state.recent import Recent
from compact_hook.state.tiered import TieredStore

PREFIX = "compact_hook"


class EngineCollector(Collector):
    """What the engine counts itself, read at scrape time from the hook's compactor."""

    def __init__(self) -> None:
        self.source: Callable[[], Compactor | None] = lambda: None

    def collect(self) -> Iterator[Metric]:
        compactor = self.source()
        if compactor is None:
            return
        yield from _prepared(compactor)
        yield from _breaker(compactor)
        store = compactor.store
        if isinstance(store, TieredStore):
            yield from _shared_store(store)


def _shared_store(store: TieredStore) -> Iterator[Metric]:
    """The shared store's faults (Redis or the file store alike), and which one this process uses."""
    yield _counter("store_errors", "Failed shared store calls (Redis or the file store)", store.errors)
    fallbacks = "Store calls answered by the in-process store (the shared store failed or is resting)"
    yield _counter("store_fallbacks", fallbacks, store.fallbacks)
    outages = "Times the shared store was found unable to serve and set aside for a second"
    yield _counter("store_outages", outages, store.outages)
    if store.kind is FILE:
        yield _gauge("store_file", "1: this process shares state through the file store (no Redis)", 1)
        return
    topology = getattr(store.shared, "topology", "single")
    info = GaugeMetricFamily(
        f"{PREFIX}_store_redis", "The Redis this replica shares state through", labels=["topology"]
    )
    info.add_metric([str(topology)], 1)
    yield info


class RecentCollector(Collector):
    """What the conversations kept for their next request hold (``state.recent``), at scrape time."""

    def __init__(self) -> None:
        self.source: Callable[[], Recent | None] = lambda: None

    def collect(self) -> Iterator[Metric]:
        recent = self.source()
        if recent is None:
            return
        meaning = "Bytes the conversations kept for their next request are charged (their bound: 64 MiB)"
        yield _gauge("recent_bytes", meaning, recent.bytes)
        yield _gauge("recent_conversations", "Conversations kept for their next request", len(recent))


def _prepared(compactor: Compactor) -> Iterator[Metric]:
    if compactor.preparations is None:
        return
    stats = compactor.preparations.stats
    counts = CounterMetricFamily(
        f"{PREFIX}_prepared", "Compactions prepared in the background, by outcome", labels=["outcome"]
    )
    tally = stats.tally
    for name, value in (
        ("started", stats.started),
        ("made", tally.made),
        ("applied", tally.applied),
        ("failed", stats.failed),
        ("dropped", stats.dropped),
        ("cancelled", stats.cancelled),
    ):
        counts.add_metric([name], value)
    yield counts
    yield _gauge("prepared_unused", "Prepared summaries no trigger has applied (yet)", tally.unused)
    yield _per_session(stats.sessions_unused)
    yield _counter("prepare_summary_calls", "Summary model calls made in the background", stats.summary_calls)


def _breaker(compactor: Compactor) -> Iterator[Metric]:
    transitions = CounterMetricFamily(
        f"{PREFIX}_breaker_transitions",
        "Summary-model breakers this process opened (too many failures) or closed (a probe succeeded)",
        labels=["state"],
    )
    transitions.add_metric(["open"], compactor.breaker.opened)
    transitions.add_metric(["closed"], compactor.breaker.closed)
    yield transitions
    open_now = max(0, compactor.breaker.opened - compactor.breaker.closed)
    yield _gauge("breakers_open", "Breakers this process opened and has not seen close", open_now)


SESSION_UNUSED_BUCKETS = (1, 2, 3, 5)


def _per_session(unused: Mapping[int, int]) -> HistogramMetricFamily:
    """Each summary prepared ahead, by how many its conversation had made and not applied then
    (itself included): above 1, a conversation paid for a summary it did not use."""
    buckets = [(str(le), sum(n for k, n in unused.items() if k <= le)) for le in SESSION_UNUSED_BUCKETS]
    total = sum(unused.values())
    return HistogramMetricFamily(
        f"{PREFIX}_prepared_session_unused",
        "Summaries prepared ahead, by their conversation's prepared-and-not-applied count then",
        buckets=[*buckets, ("+Inf", total)],
        sum_value=sum(k * n for k, n in unused.items()),
    )


def _counter(name: str, meaning: str, value: float) -> CounterMetricFamily:
    """A counter family of one unlabelled sample, read at scrape time."""
    return CounterMetricFamily(f"{PREFIX}_{name}", meaning, value=value)


def _gauge(name: str, meaning: str, value: float) -> GaugeMetricFamily:
    """A gauge family of one unlabelled sample, read at scrape time."""
    return GaugeMetricFamily(f"{PREFIX}_{name}", meaning, value=value)

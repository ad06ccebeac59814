"""Metrics and LiteLLM spend savings from the hook, scraped and parsed as Prometheus would."""

from typing import Any

import httpx
import pytest
import respx
from prometheus_client import CollectorRegistry, generate_latest

from compact_hook.core.failures import SummaryFailure
from compact_hook.engine.ahead.background import Background
from compact_hook.engine.ahead.prepare import PrepareSetup
from compact_hook.engine.ahead.tally import Tally
from compact_hook.engine.compactor import Compactor
from compact_hook.proxy.hook import CompactHook
from compact_hook.proxy.observe.metrics import FALLING_BEHIND, MAX_STARTED, Metrics
from compact_hook.settings.model import CompactConfig
from compact_hook.state.store import MemoryStore
from compact_hook.state.tiered import TieredStore
from tests.fakes import BrokenStore
from tests.metric_names import panel_exprs, rule_exprs, selectors
from tests.routers import SpyRouter, completion, request
from tests.support import Samples, metric_samples, metric_value


def scrape_registry(registry: CollectorRegistry) -> Samples:
    text = generate_latest(registry).decode()
    return metric_samples(text)


value = metric_value


def hook_with_registry() -> tuple[CompactHook, CollectorRegistry]:
    registry = CollectorRegistry()
    return CompactHook(CompactConfig(), metrics=Metrics(registry)), registry


async def test_a_compaction_is_counted_by_model_group_format_and_outcome(
    router: SpyRouter,
    mocked_upstream: respx.Route,
) -> None:
    hook, registry = hook_with_registry()
    data = request()
    await hook.async_pre_call_hook(None, None, data, "acompletion")
    report = data["metadata"]["compact_hook"]
    samples = scrape_registry(registry)
    where = {"model_group": "agent", "format": "chat"}
    assert value(samples, "compact_hook_requests_total", **where, outcome="compacted") == 1
    assert value(samples, "compact_hook_tokens_before_total", **where) == report["tokens_before"]
    assert value(samples, "compact_hook_tokens_after_total", **where) == report["tokens_after"]
    saved = report["tokens_before"] - report["tokens_after"]
    assert value(samples, "compact_hook_tokens_saved_total", **where) == saved > 0
    assert value(samples, "compact_hook_compactions_total", **where, outcome="miss") == 1
    assert value(samples, "compact_hook_summary_calls_total", **where) == len(router.calls) >= 1
    assert value(samples, "compact_hook_store_lookups_total", **where, outcome="miss") == 1
    assert value(samples, "compact_hook_archive_writes_total", **where, outcome="written") == 1
    assert value(samples, "compact_hook_hook_seconds_count", **where, first_contact="true") == 1
    assert value(samples, "compact_hook_hook_seconds_count", **where, first_contact="false") == 0
    # LiteLLM's spend tracking reads the savings here (proxy/spend_tracking/compression_savings.py)
    savings = data["metadata"]["compression_savings"]
    assert {k: savings[k] for k in ("tokens_before", "tokens_after", "tokens_saved", "source")} == {
        "tokens_before": report["tokens_before"],
        "tokens_after": report["tokens_after"],
        "tokens_saved": saved,
        "source": "compact_hook",
    }
    # gpt-4o-mini is in LiteLLM's cost map: money beside the tokens, as the report and headers say it
    assert savings["cost_saved_usd"] == report["cost_saved_usd"] > 0
    assert savings["summary_cost_usd"] == report["summary_cost_usd"] > 0
    spent = value(samples, "compact_hook_summary_cost_usd_total", **where)  # the report's is to the millionth
    assert spent == pytest.approx(report["summary_cost_usd"], abs=1e-6) and spent > 0

    again = request()  # the same conversation again: no longer a first contact
    await hook.async_pre_call_hook(None, None, again, "acompletion")
    samples = scrape_registry(registry)
    assert value(samples, "compact_hook_store_lookups_total", **where, outcome="hit") == 1
    assert value(samples, "compact_hook_compactions_total", **where, outcome="miss") == 1  # reused, not made
    assert value(samples, "compact_hook_hook_seconds_count", **where, first_contact="true") == 1
    assert value(samples, "compact_hook_hook_seconds_count", **where, first_contact="false") == 1


async def test_an_answer_that_is_no_summary_is_counted_unusable_and_the_digest_compacts(
    router: SpyRouter,
    mocked_upstream: respx.Route,
) -> None:
    """The summary model answers with a loop (issue 61): the request is compacted by the digest, and
    the failure is counted with its kind, the header says it."""
    mocked_upstream.mock(
        return_value=httpx.Response(200, json=completion("You've already entered something.\n" * 60))
    )
    hook, registry = hook_with_registry()
    data = request()
    await hook.async_pre_call_hook(None, None, data, "acompletion")
    report = data["metadata"]["compact_hook"]
    assert report["summarizer"] == "digest" and report["summary_failure"] == "unusable"
    samples = scrape_registry(registry)
    where = {"model_group": "agent", "format": "chat"}
    assert value(samples, "compact_hook_summary_failures_total", **where, outcome="unusable") == 1
    assert (
        value(samples, "compact_hook_summary_calls_total", **where) == len(router.calls) == 1
    )  # of 11 chunks


def test_the_counts_rules_divide_by_start_at_zero_on_a_groups_first_request() -> None:
    """Prometheus reads a series from its first scrape: a group's first failed summary or first
    compaction, counted on the request that created the series, would never show in ``rate``."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.known_group("agent")
    where = metrics.labels("agent", "chat")
    assert where == metrics.labels("agent", "chat")
    samples = scrape_registry(registry)
    labels = {"model_group": "agent", "format": "chat"}
    for kind in SummaryFailure:
        assert value(samples, "compact_hook_summary_failures_total", **labels, outcome=kind.value) == 0
    for cache in ("miss", "shared", "prepared"):
        assert value(samples, "compact_hook_compactions_total", **labels, outcome=cache) == 0
    assert value(samples, "compact_hook_summary_calls_total", **labels) == 0
    requests = {dict(key[1])["outcome"] for key in samples if key[0] == "compact_hook_requests_total"}
    assert requests == {reason.value for reason in FALLING_BEHIND}  # the rest: as they come


LEARNED_ONLY = {"compact_hook_count_ratio"}
"""A ratio appears with the group's first learned estimate: no estimate is not a ratio of 0 (its panel
says so)."""
SHARED_THROUGH = {"compact_hook_store_file", "compact_hook_store_redis"}
"""A process shares through one of them: the panel reads either, and one is there."""


def test_every_series_a_panel_or_rule_reads_exists_from_a_groups_first_request() -> None:
    """Issue 45: on a deployment with no recall yet and unpriced models, a panel on a series created
    on first use said "No data" where the truth is 0; a rule lost the increment that created it."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    tiered = TieredStore(MemoryStore(10, 60), MemoryStore(10, 60), timeout=0.1)  # a store with Redis
    compactor = Compactor(tiered, prepare=PrepareSetup(MemoryStore(10, 60), Background(1, 1)))
    metrics.engine.source = lambda: compactor
    metrics.known_group("agent")
    metrics.labels("agent", "chat")
    samples = scrape_registry(registry)
    exprs = [expr for panel in panel_exprs().values() for expr in panel] + rule_exprs()
    missing = set()
    for name, outcomes in (found for expr in exprs for found in selectors(expr)):
        names = SHARED_THROUGH if name in SHARED_THROUGH else {name}
        present = {dict(labels).get("outcome") for series, labels in samples if series in names}
        if name not in LEARNED_ONLY and (not present or not set(outcomes) <= present):
            missing.add((name, tuple(sorted(set(outcomes) - present)) if present else "no series"))
    assert missing == set()


def test_the_zero_started_series_are_bounded() -> None:
    metrics = Metrics(CollectorRegistry())
    for number in range(MAX_STARTED + 10):
        metrics.labels("agent", f"wire{number}")
    assert len(metrics._started) == MAX_STARTED


async def test_model_names_the_operator_did_not_configure_are_never_labels(
    router: SpyRouter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hook, registry = hook_with_registry()
    for name in ("invented-1", "invented-2", "plain"):
        await hook.async_pre_call_hook(None, None, request(model=name), "acompletion")

    async def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(hook.compactor, "compact", explode)
    await hook.async_pre_call_hook(None, None, request(), "acompletion")
    await hook.async_pre_call_hook(None, None, request(model="invented-3"), "aresponses")
    text = generate_latest(registry).decode()
    assert "invented" not in text and '"plain"' not in text
    samples = scrape_registry(registry)
    failed = value(
        samples, "compact_hook_requests_total", model_group="agent", format="chat", outcome="failed_open"
    )
    assert failed == 1


async def test_a_clients_claim_of_compression_savings_is_removed(router: SpyRouter) -> None:
    hook, _ = hook_with_registry()
    forged = {"tokens_before": 10**9, "tokens_after": 0, "tokens_saved": 10**9, "source": "compact_hook"}
    for model in ("plain", "agent"):
        data = request(model=model, messages=[{"role": "user", "content": "hi"}])
        data["metadata"]["compression_savings"] = dict(forged)
        await hook.async_pre_call_hook(None, None, data, "acompletion")
        assert "compression_savings" not in data["metadata"]  # nothing saved: nothing claimed


async def test_what_the_engine_counts_itself_is_read_at_scrape_time() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    tiered = TieredStore(BrokenStore(), MemoryStore(10, 60), timeout=0.1)  # type: ignore[arg-type]
    compactor = Compactor(tiered, prepare=PrepareSetup(MemoryStore(10, 60), Background(1, 1)))
    metrics.engine.source = lambda: compactor
    await tiered.get(b"k")  # Redis fails: an error, answered by memory
    await tiered.get(b"k")  # Redis resting: answered by memory
    assert compactor.preparations is not None
    stats = compactor.preparations.stats
    stats.started, stats.tally, stats.dropped = 4, Tally(made=3, applied=1), 1
    stats.sessions_unused.update({1: 2, 2: 1})  # one conversation went on to a second unused
    compactor.breaker.opened = 2
    samples = scrape_registry(registry)
    assert value(samples, "compact_hook_store_errors_total") == 1
    assert value(samples, "compact_hook_store_fallbacks_total") == 2
    assert value(samples, "compact_hook_store_outages_total") == 1  # a connection error: set aside
    assert value(samples, "compact_hook_store_redis", topology="single") == 1
    assert value(samples, "compact_hook_prepared_total", outcome="started") == 4
    assert value(samples, "compact_hook_prepared_total", outcome="applied") == 1
    assert value(samples, "compact_hook_prepared_unused") == 2
    per_session = "compact_hook_prepared_session_unused_bucket"
    assert value(samples, per_session, le="1") == 2 and value(samples, per_session, le="2") == 3
    assert value(samples, "compact_hook_prepared_session_unused_count") == 3
    assert value(samples, "compact_hook_breaker_transitions_total", state="open") == 2
    assert value(samples, "compact_hook_breakers_open") == 2

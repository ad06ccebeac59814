"""What the provider billed, heard from LiteLLM's success log (``proxy/feedback/usage.py``): it teaches the
conversation and the model group it was counted for, and nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from compact_hook.core.calibration import CountRatio, RatioSource
from compact_hook.core.evidence import Forwarded, Trust
from compact_hook.core.notes import Notes
from compact_hook.proxy.feedback.usage import Bills
from compact_hook.proxy.marks import INTERNAL_MARKER, INTERNAL_TOKEN
from compact_hook.proxy.observe.metrics import Metrics
from compact_hook.proxy.observe.report import Report, record
from compact_hook.proxy.services import Services
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from tests.routers import SpyRouter

TRUST = Trust(1.0, 0.75)


def success(group: str, report: Report, usage: dict[str, Any]) -> dict[str, Any]:
    """LiteLLM's success-log kwargs for a request we reported on, served by ``group``."""
    params: dict[str, Any] = {"metadata": {"model_group": group}}
    record(params, "metadata", report)
    return {"litellm_params": params, "standard_logging_object": {"metadata": {"usage_object": usage}}}


def counted(ours: int, conversation: bytes = b"conversation-1", tenant: str = "team:a") -> Report:
    report = Report(tokens_after=ours)
    report.group, report.forwarded, report.conversation = "agent", Forwarded(ours), conversation
    report.tenant = tenant
    return report


async def test_a_bill_teaches_the_conversation_and_its_group_and_another_groups_teaches_nothing(
    router: SpyRouter,
) -> None:
    registry = CollectorRegistry()
    services = Services(CompactConfig(), ProcessConfig(), Metrics(registry))
    bills = Bills(services)
    services.metrics.known_group("agent")
    # Anthropic's split, as LiteLLM logs it: prompt_tokens is all the input, reads and writes included
    usage = {"prompt_tokens": 12_500, "cache_read_input_tokens": 9_000, "cache_creation_input_tokens": 500}
    await bills.heard(success("agent", counted(10_000), usage))
    note = await services.compactor.ledger.note(b"conversation-1", ())
    assert note is not None and (note.billed, note.forwarded, note.read, note.written) == (
        12_500,
        10_000,
        9_000,
        500,
    )
    ratio = await services.ratios.ratio("agent", "team:a", TRUST)
    assert ratio.source is RatioSource.MODEL_GROUP and ratio.value == pytest.approx(1.25)
    learned = {"model_group": "agent", "outcome": "learned"}
    assert registry.get_sample_value("compact_hook_count_samples_total", learned) == 1
    # served by a fallback group: not what we counted for
    await bills.heard(success("plain", counted(10_000, b"conversation-2"), {"prompt_tokens": 30_000}))
    assert await services.compactor.ledger.notes(b"conversation-2") == Notes()
    assert registry.get_sample_value("compact_hook_count_samples_total", learned) == 1
    # another tenant's request too small to tell: nothing is learned
    await bills.heard(success("agent", counted(200, b"conversation-3", "team:b"), {"prompt_tokens": 2_000}))
    unusable = {"model_group": "agent", "outcome": "unusable"}
    assert registry.get_sample_value("compact_hook_count_samples_total", unusable) == 1
    assert (await services.ratios.ratio("agent", "team:a", TRUST)).value == pytest.approx(1.25)
    # no usage: said, and the tenant's counts fall back to the prior (its usage cannot be trusted)
    await bills.heard(success("agent", counted(10_000, b"conversation-4"), {"prompt_tokens": 0}))
    missing = {"model_group": "agent", "outcome": "missing"}
    assert registry.get_sample_value("compact_hook_count_samples_total", missing) == 1
    assert await services.ratios.ratio("agent", "team:a", TRUST) == CountRatio(1.0, RatioSource.PRIOR)


async def test_our_own_summary_calls_and_unreported_requests_are_not_heard(router: SpyRouter) -> None:
    services = Services(CompactConfig(), ProcessConfig(), Metrics(CollectorRegistry()))
    bills = Bills(services)
    internal = success("agent", counted(10_000), {"prompt_tokens": 12_500})
    internal["litellm_params"]["metadata"][INTERNAL_MARKER] = INTERNAL_TOKEN
    await bills.heard(internal)
    await bills.heard({"litellm_params": {"metadata": {"model_group": "agent"}}})  # no report: not ours
    assert (await services.ratios.ratio("agent", "team:a", Trust(1.1))).source is RatioSource.PRIOR


async def test_a_bill_pinned_at_a_servers_context_sets_the_usage_aside_and_teaches_that_tenant_its_window(
    router: SpyRouter,
) -> None:
    """A server truncating silently to 12,000 tokens (the group's window: 20,000) reports what it kept: the same bill while we forward
    more. The tenant's counts go back to the prior and its window becomes the server's context (with
    the request's reply reserve); another tenant's stays as configured."""
    registry = CollectorRegistry()
    services = Services(CompactConfig(), ProcessConfig(), Metrics(registry))
    bills = Bills(services)
    services.metrics.known_group("agent")
    for ours in (11_000, 14_000, 17_000):
        report = counted(ours, b"conversation-9")
        report.forwarded = Forwarded(ours, 3_000, reserve=1_000)
        await bills.heard(success("agent", report, {"prompt_tokens": min(ours, 12_000)}))
    capped = {"model_group": "agent", "outcome": "capped"}
    assert registry.get_sample_value("compact_hook_count_samples_total", capped) == 1
    assert await services.learned.get("agent", "team:a") == 13_000
    assert await services.learned.get("agent", "team:b") is None
    assert await services.ratios.ratio("agent", "team:a", TRUST) == CountRatio(1.0)


async def test_a_request_the_proxy_answered_itself_teaches_nothing(router: SpyRouter) -> None:
    """Codex's compaction is answered by the proxy on the back of a ping the provider bills a few
    tokens for: set against our count of the whole conversation, it read as usage that left the system
    and tools out (9 responses of `make clients`' Codex run were set aside so)."""
    registry = CollectorRegistry()
    services = Services(CompactConfig(), ProcessConfig(), Metrics(registry))
    services.metrics.known_group("agent")
    report = counted(10_000)
    report["answered"] = True
    await Bills(services).heard(success("agent", report, {"prompt_tokens": 12}))
    assert (
        registry.get_sample_value(
            "compact_hook_count_samples_total", {"model_group": "agent", "outcome": "fixed_left_out"}
        )
        is None
    )
    assert await services.compactor.ledger.notes(b"conversation-1") == Notes()


async def test_a_ceiling_a_later_bill_under_it_refutes_is_forgotten(router: SpyRouter) -> None:
    """Bills pinned at 12,000 read as a server's context (the reading that compacts more). A server
    truncating to it bills all of a request that fits it; a later bill of 5,000 for a request we count
    12,000 is a cache left out, not a ceiling: the window taken from it goes."""
    services = Services(CompactConfig(context_window=20_000), ProcessConfig(), Metrics(CollectorRegistry()))
    bills = Bills(services)
    for ours, billed in ((11_000, 11_000), (14_000, 12_000), (17_000, 12_000), (12_000, 5_000)):
        report = counted(ours, b"conversation-9")
        report.forwarded = Forwarded(ours, 3_000, reserve=1_000)
        await bills.heard(success("agent", report, {"prompt_tokens": billed}))
        if ours == 17_000:
            assert await services.learned.get("agent", "team:a") == 13_000
    assert await services.learned.get("agent", "team:a") is None

"""What operators are told (``proxy/observe/telemetry.py``): reports, metrics, warnings, headers."""

import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from compact_hook.core.outcomes import Reason
from compact_hook.engine.notices import Notices
from compact_hook.engine.result import CompactResult
from compact_hook.proxy.observe import telemetry as telemetry_module
from compact_hook.proxy.observe.metrics import Metrics, Outcome
from compact_hook.proxy.observe.report import Report, record, report_in
from compact_hook.proxy.observe.telemetry import Telemetry
from compact_hook.proxy.request.caller import Engaged
from compact_hook.proxy.request.control import Control
from compact_hook.wires import CHAT, RESPONSES
from compact_hook.wires.base import Rejected
from tests.support import metric_samples, metric_value


def telemetry() -> tuple[Telemetry, CollectorRegistry]:
    registry = CollectorRegistry()
    notices = Notices()
    return Telemetry(Metrics(registry), lambda: notices), registry


def samples(registry: CollectorRegistry) -> Any:
    from prometheus_client import generate_latest

    return metric_samples(generate_latest(registry).decode())


def test_a_rejected_request_is_a_warning_once_per_group_and_reason_and_info_each_time(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        telemetry_module.logger, "filters", []
    )  # the process-wide rate limit: other tests' lines
    told, registry = telemetry()
    told.metrics.known_group("agent")
    caplog.set_level(logging.INFO, logger="compact_hook")
    for n in range(3):
        data: dict[str, Any] = {"model": "agent", "litellm_metadata": {}, "litellm_call_id": f"c{n}"}
        told.rejected(data, RESPONSES, "agent", Rejected(Reason.CLIENT_MANAGED, "previous_response_id"))
        report = report_in(data)
        assert report is not None and report["reason"] == "client_managed"
    told.rejected({"model": "agent"}, RESPONSES, "agent", Rejected(Reason.MALFORMED, "x"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [w.args[2] for w in warnings] == ["client_managed", "malformed"]  # type: ignore[index]
    assert sum("passed through" in r.getMessage() for r in caplog.records) == 4
    found = samples(registry)
    labels = {"model_group": "agent", "format": "responses"}
    assert metric_value(found, "compact_hook_requests_total", **labels, outcome="client_managed") == 3


def test_held_is_measured_only_for_requests_we_reported_on() -> None:
    told, registry = telemetry()
    told.metrics.known_group("agent")
    silent: dict[str, Any] = {"model": "agent", "metadata": {}}
    told.held(silent, "acompletion", 0.0)
    assert silent == {"model": "agent", "metadata": {}}
    reported: dict[str, Any] = {"model": "agent"}
    record(reported, "metadata", Report(compacted=False))
    told.held(reported, "acompletion", 0.0)
    report = report_in(reported)
    assert report is not None and report["duration_ms"] > 0


def test_a_compaction_is_recorded_with_its_tenant_and_litellms_savings() -> None:
    told, _ = telemetry()
    data: dict[str, Any] = {"model": "agent", "metadata": {}}
    result = CompactResult([], True, input_tokens=9_000, output_tokens=3_000)
    report = told.compacted(data, CHAT, result, Engaged("agent", "session-1", "key:abc", Control()))
    assert report_in(data) is report and report.tenant == "key:abc" and report["session_id"] == "session-1"
    assert data["metadata"]["compression_savings"]["tokens_saved"] == 6_000
    assert "tenant" not in report  # an attribute, never a key spend logs would carry


def test_the_headers_never_raise_whatever_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    told, _ = telemetry()
    data: dict[str, Any] = {"metadata": {}}
    record(data, "metadata", Report(compacted=True))
    assert told.headers(data) == {"x-compact-compacted": "true"}

    def explode(report: Any) -> dict[str, str]:
        raise RuntimeError("bug")

    monkeypatch.setattr(telemetry_module, "response_headers", explode)
    assert told.headers(data) is None
    assert told.headers({"metadata": {}}) is None


def test_an_internal_failure_is_counted_as_failed_open() -> None:
    told, registry = telemetry()
    told.metrics.known_group("agent")
    told.failed_open({"model": "agent"}, "acompletion", Outcome.FAILED_OPEN)
    found = samples(registry)
    labels = {"model_group": "agent", "format": "chat", "outcome": "failed_open"}
    assert metric_value(found, "compact_hook_requests_total", **labels) == 1


def test_litellm_copying_a_requests_metadata_keeps_our_one_report() -> None:
    """A Responses call deep-copies the metadata on every request (its fallback hop): our report, and
    the conversation its recall holds, are not copied with it."""
    from litellm.litellm_core_utils.core_helpers import safe_deep_copy

    data: dict[str, Any] = {"metadata": {"user_api_key": "hashed"}}
    record(data, "metadata", Report(tokens_before=10))
    copied = safe_deep_copy(data["metadata"])
    assert copied is not data["metadata"]
    assert copied["compact_hook"] is report_in(data)

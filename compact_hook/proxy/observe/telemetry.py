"""What we tell operators about each request: its report, the metrics, and the log lines.

The report goes into the request's proxy metadata (spend logs and callbacks read it) and out as
``x-compact-*`` headers; metrics are labelled by model groups the router knows; a request
forwarded untouched for a reason is logged at INFO, and the first per model group and reason
at WARNING (a silent pass-through on every turn is how Claude Code's went unseen).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from compact_hook.core.outcomes import Reason
from compact_hook.engine.notices import Notices
from compact_hook.engine.result import CompactResult
from compact_hook.proxy.answers.codex import MAX_EXPANDED, MAX_EXPANDED_CHARS, Expansion
from compact_hook.proxy.lifecycle.logs import say
from compact_hook.proxy.observe.metrics import Labels, Metrics, Outcome
from compact_hook.proxy.observe.report import (
    Report,
    record,
    record_savings,
    rejected_report,
    report_in,
    report_of,
    response_headers,
)
from compact_hook.proxy.recall.offer import Pending
from compact_hook.proxy.request.caller import Engaged
from compact_hook.wires import Rejected, WireFormat
from compact_hook.wires.registry import format_for

logger = logging.getLogger(__name__)


class Telemetry:
    """Reports, metrics and logs for the hook's requests."""

    def __init__(self, metrics: Metrics, notices: Callable[[], Notices]) -> None:
        self.metrics = metrics
        self._notices = notices

    def labels(self, data: Mapping[str, Any], call_type: object) -> Labels:
        wire = format_for(str(call_type))
        return self.metrics.labels(str(data.get("model")), wire.name if wire is not None else "")

    def failed_open(self, data: Mapping[str, Any], call_type: object, why: Outcome | Reason) -> None:
        """The request was forwarded as sent because we could not read it, or we failed."""
        self.metrics.outcome(why, self.labels(data, call_type))

    def held(self, data: Mapping[str, Any], call_type: object, start: float) -> None:
        """How long the hook held a request it reported on (``start``: ``time.perf_counter()``)."""
        report = report_in(data)
        if report is not None:
            elapsed = time.perf_counter() - start
            report["duration_ms"] = round(elapsed * 1000, 3)
            self.metrics.held(elapsed, self.labels(data, call_type), report.first_contact)

    def unhandled(self, call_type: str, group: str) -> None:
        """A conversation on a call type we have no format for (LiteLLM's call types are a fixed
        set and the group is one the router knows: the notices and labels stay bounded)."""
        if self._notices().first(("unhandled", call_type, group)):
            logger.warning(
                "compact_hook: model group %s: %s requests are not compacted (no format for this LiteLLM "
                "call type); they are forwarded as sent and counted as outcome=unhandled_call_type",
                group,
                call_type,
            )
        self.metrics.outcome(Outcome.UNHANDLED_CALL_TYPE, self.metrics.labels(group, call_type))

    def expanded(self, data: Mapping[str, Any], group: str, expansion: Expansion) -> None:
        """Our compaction items a request carried (``proxy.answers.codex``): one the store no
        longer holds is said (the model reads a notice in its place)."""
        if expansion.lost:
            logger.warning(
                "compact_hook: request %s (%s) carried %d compaction item(s) of ours the store no longer "
                "holds (expired, or another tenant's); a notice stands in their place",
                data.get("litellm_call_id"),
                group,
                expansion.lost,
            )
        if expansion.refused:
            logger.warning(
                "compact_hook: request %s (%s) carried %d compaction item(s) under our prefix past what one "
                "request may expand (repeats, malformed handles, more than %d handles or %d characters); "
                "left out, one notice in their place",
                data.get("litellm_call_id"),
                group,
                expansion.refused,
                MAX_EXPANDED,
                MAX_EXPANDED_CHARS,
            )

    def rejected(self, data: dict[str, Any], wire: WireFormat, group: str, rejected: Rejected) -> None:
        """A request the format will not let us change, forwarded untouched. The group is one the
        router knows, so the notices cannot be grown by invented names."""
        if self._notices().first(("rejected", group, rejected.reason)):
            logger.warning(
                "compact_hook: model group %s (%s): requests forwarded untouched (%s: %s); this is said "
                "once per model group and reason, each request is logged at INFO",
                group,
                wire.name,
                rejected.reason.value,
                rejected.detail,
            )
        say(
            logger,
            logging.INFO,
            "compact_hook: request %s passed through: %s %s",
            data.get("litellm_call_id"),
            rejected.reason.value,
            rejected.detail,
        )
        record(data, wire.metadata_key, rejected_report(rejected, wire.name))
        self.metrics.outcome(rejected.reason, self.metrics.labels(group, wire.name))

    def compacted(
        self, data: dict[str, Any], wire: WireFormat, result: CompactResult, who: Engaged
    ) -> Report:
        """What the engine did, in the request's metadata (its report, LiteLLM's savings) and metrics."""
        self.metrics.observe(result, self.metrics.labels(str(data.get("model")), wire.name))
        report = report_of(result, who.session_id, wire.name)
        report.tenant, report.control, report.group = who.tenant, who.control, who.model
        record(data, wire.metadata_key, report)
        record_savings(data, wire.metadata_key, result)
        return report

    def recalled(self, data: Mapping[str, Any], pending: Pending) -> None:
        """The recall calls a reply made and the proxy answered: report fields and metrics."""
        report = report_in(data)
        if pending.failed is not None and report is not None:  # what the client got instead
            report["recall_failed"] = pending.failed.value
        if not pending.found and not pending.missing and not pending.refused:
            return
        where = self.metrics.labels(str(data.get("model")), pending.wire.name)
        self.metrics.recalled(pending.found, pending.missing, pending.returned, where)
        if report is not None:
            report.update(
                recalls=pending.found + pending.missing + pending.refused,
                recalls_not_found=pending.missing,
                recalls_refused=pending.refused,
                recall_rounds=pending.rounds,
            )

    def spender(self, group: str, wire: WireFormat) -> Callable[[float], None]:
        """Where a summary's cost is counted (its model group is the request's, known to the router)."""
        where = self.metrics.labels(group, wire.name)
        return lambda amount: self.metrics.spent(amount, where)

    def headers(self, data: Mapping[str, Any]) -> dict[str, str] | None:
        """The ``x-compact-*`` headers; never raises (a header hook that raises breaks the response)."""
        try:
            report = report_in(data)
            return response_headers(report) if report is not None else None
        except Exception:
            logger.exception("compact_hook: could not build response headers")
            return None


def log_reshaped(data: Mapping[str, Any], wire: WireFormat, model: str, result: CompactResult) -> None:
    say(
        logger,
        logging.INFO,
        "compact_hook: request %s (%s, %s) reshaped, cache %s: %d -> %d tokens, %d messages summarized, "
        "%d outputs truncated, %d results cleared, %d messages dropped, %d summary calls, archive %s",
        data.get("litellm_call_id"),
        model,
        wire.name,
        result.cache.value,
        result.input_tokens,
        result.output_tokens,
        result.stats.compacted_message_count,
        result.truncated,
        result.cleared,
        result.dropped,
        result.summary_calls,
        result.archive_path,
    )

"""What we did, for the request's metadata (logging callbacks, spend logs) and response headers.

Nothing a client sends can pass for our report: the hook strips any ``compact_hook`` (and our
internal-call marker) the client put in its metadata, and a report only counts as ours if it
is a ``Report`` — a type JSON cannot produce. Header values are printable ASCII, short, and
built only from our own fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from compact_hook.core.evidence import Forwarded
from compact_hook.core.notes import Lineage
from compact_hook.engine.result import CompactResult
from compact_hook.proxy.answers.codex import CompactionAnswer
from compact_hook.proxy.marks import METADATA_KEYS, metadata_of
from compact_hook.proxy.request.control import Control
from compact_hook.wires.base import Rejected

if TYPE_CHECKING:
    from compact_hook.proxy.recall.offer import Pending

REPORT_KEY = "compact_hook"
ANSWERED = "answered"
"""The report's key for a request the proxy answered itself (``/compact``, Codex's compaction)."""
HEADER_PREFIX = "x-compact-"
HEADER_FIELDS = (
    "compacted",
    "tokens_before",
    "tokens_after",
    "messages_summarized",
    "compaction_ratio",
    "cache",
    "summary_calls",
    "summarizer",
    "summary_failure",
    "truncated",
    "cleared",
    "dropped",
    "normalized",
    "thinking_removed",
    "duration_ms",
    "archive",
    "reason",
    "recovered",
    "prepare",
    "cost_saved_usd",
    "summary_cost_usd",
    "count_ratio",
    "count_source",
    "recalls",
)
HEADER_NAMES = tuple((name, HEADER_PREFIX + name.replace("_", "-")) for name in HEADER_FIELDS)
"""Each field with its header's name, worked out once (headers are built for every response)."""
SAVINGS_KEY = "compression_savings"
"""Where LiteLLM's spend accounting reads a request's prompt-compression savings
(``proxy/spend_tracking/compression_savings.py``): its spend reports then show ours."""
SAVINGS_SOURCE = "compact_hook"
MAX_HEADER_CHARS = 200


class Report(dict[str, Any]):
    """Our report. A ``dict`` (spend logs and callbacks serialize it as one), but its own type.

    ``tenant`` and ``control`` are attributes, not keys: the retry after a provider's "too long"
    must compact as the same tenant under the same key's and team's settings (and ``group``: the
    model group it was counted for), and that is nothing for spend logs to carry. Nor is
    ``conversation``: the key the provider's report of this request is kept under
    (``engine.economy.prompt_cache``), nor ``forwarded``: our own count of what was forwarded, which the
    provider's usage is judged against (``core.evidence``; the report's token figures are the provider's
    tokens), nor ``compaction``.
    """

    tenant: str = ""
    control: Control = Control()
    group: str = ""
    conversation: bytes = b""
    forwarded: Forwarded = Forwarded()
    lineage: Lineage = Lineage()
    """Where the request stands in its conversation (``core.notes``)."""
    compaction: CompactionAnswer | None = None
    """Our answer to Codex's compaction trigger, for the response hooks to deliver."""
    first_contact: bool = False
    """The conversation's first request this process saw (nothing known of it: every entry is read,
    fingerprinted and counted now): the hook's time on it is measured apart (``proxy.observe.metrics``)."""
    recall: Pending | None = None
    """What answering this request's recall calls needs (``proxy.recall``): taken once, by the first
    response hook (success, stream or failure) — on the request itself, never in a map a client's id
    could reach."""

    def take_recall(self) -> Pending | None:
        pending, self.recall = self.recall, None
        return pending

    def __deepcopy__(self, memo: dict[int, Any]) -> Report:
        """Itself: one report per client request, however LiteLLM copies the request's metadata. A
        Responses call deep-copies it on every request (``mid_stream_fallback_hop_kwargs``, for a
        fallback hop), and the recall the report holds is the whole conversation: 15 ms more on a
        Claude Code session than without the hook."""
        return self

    def follow(self, retried: Report) -> None:
        """This request was retried (``proxy.feedback.recovery``): its report is now the retry's."""
        self.update(retried, recovered=True)
        self.conversation, self.forwarded = retried.conversation, retried.forwarded  # ``recall`` stays
        self.lineage = retried.lineage

    @property
    def counted(self) -> int:
        """Our own count of what was forwarded."""
        return self.forwarded.counted


def report_of(result: CompactResult, session_id: str, wire: str) -> Report:
    report = Report(
        {
            "compacted": result.compacted,
            "format": wire,
            "tokens_before": result.input_tokens,
            "tokens_after": result.output_tokens,
            "session_id": session_id,
            "cache": result.cache.value,
            "summary_calls": result.summary_calls,
            "truncated": result.truncated,
            "cleared": result.cleared,
            "dropped": result.dropped,
            "normalized": result.normalized,
            "count_ratio": round(result.count_ratio.effective(result.counted), 4),
            "count_source": result.count_ratio.source.value,
        }
    )
    report.update(_when_known(result))
    report.conversation, report.forwarded, report.lineage = (
        result.conversation,
        result.forwarded,
        result.lineage,
    )
    return report


def _when_known(result: CompactResult) -> dict[str, Any]:
    """The report's fields a request has only sometimes (a compaction, an archive, a reason…)."""
    found: dict[str, Any] = {}
    if result.compacted:
        found["messages_summarized"] = result.stats.compacted_message_count
        found["compaction_ratio"] = result.stats.compaction_ratio
    if result.archive_path is not None:
        found["archive_path"] = str(result.archive_path)
    typed = {
        "archive": result.archive_status,
        "summarizer": result.summarizer,
        "reason": result.reason,
        "prepare": result.preparation,
    }
    found.update({key: value.value for key, value in typed.items() if value is not None})
    if result.prepared_unused is not None:
        found["prepared_unused"] = result.prepared_unused
    if result.summary_failure is not None:
        found["summary_failure"] = result.summary_failure.value
    if result.thinking_removed:
        found["thinking_removed"] = result.thinking_removed
    if result.cost_saved is not None:
        found["cost_saved_usd"] = usd(result.cost_saved)
    return found


def usd(amount: float) -> float:
    """Dollars as reported: to the millionth (a cent is too coarse for one request)."""
    return round(amount, 6)


def record_summary_cost(data: dict[str, Any], key: str, report: Report, spent: float) -> None:
    """What the summary calls on this request's path cost, in its report and beside LiteLLM's savings."""
    if spent <= 0:
        return
    report["summary_cost_usd"] = usd(spent)
    metadata = data.get(key)
    savings = metadata.get(SAVINGS_KEY) if isinstance(metadata, dict) else None
    if isinstance(savings, dict):
        savings["summary_cost_usd"] = usd(spent)


def rejected_report(rejected: Rejected, wire: str) -> Report:
    """A request forwarded untouched, with why (``detail``: our own words, e.g. which
    ``context_management`` edit makes the client the manager of its context)."""
    return Report(
        {"compacted": False, "format": wire, "reason": rejected.reason.value, "detail": rejected.detail}
    )


def response_headers(report: Mapping[str, Any]) -> dict[str, str]:
    headers = {}
    for name, header in HEADER_NAMES:
        value = report.get(name)
        if value is not None:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            headers[header] = header_safe(text)
    return headers


def header_safe(text: str) -> str:
    """Printable ASCII only, and short: h11 drops the connection on CR/LF, non-ASCII gives a 500.
    (ASCII's printable characters are space to ``~``: most values are, and are checked in C.)"""
    if not (text.isascii() and text.isprintable()):
        text = "".join(ch for ch in text if " " <= ch <= "~")
    return text[:MAX_HEADER_CHARS]


def scrub(data: dict[str, Any], marker: str) -> None:
    """Remove what a client may have put where our report and internal-call marker live."""
    for key in METADATA_KEYS:
        metadata = data.get(key)
        if isinstance(metadata, dict):
            metadata.pop(REPORT_KEY, None)
            metadata.pop(marker, None)
            metadata.pop(SAVINGS_KEY, None)  # a client's claim of savings is not LiteLLM's to count


def record(data: dict[str, Any], key: str, report: Report) -> None:
    """Put the report in the request's proxy metadata (never a top-level key: those go upstream)."""
    metadata = data.get(key)
    if metadata is None:
        metadata = data[key] = {}
    if isinstance(metadata, dict):
        metadata[REPORT_KEY] = report


def record_savings(data: dict[str, Any], key: str, result: CompactResult) -> None:
    """Tell LiteLLM's spend tracking what the forwarded request saved (nothing when it saved none)."""
    metadata = data.get(key)
    saved = result.input_tokens - result.output_tokens
    if not isinstance(metadata, dict) or saved <= 0:
        return
    metadata[SAVINGS_KEY] = {
        "tokens_before": result.input_tokens,
        "tokens_after": result.output_tokens,
        "tokens_saved": saved,
        "source": SAVINGS_SOURCE,
    }
    if result.cost_saved is not None:  # money beside the tokens LiteLLM's spend records count
        metadata[SAVINGS_KEY]["cost_saved_usd"] = usd(result.cost_saved)


def report_in(data: Mapping[str, Any]) -> Report | None:
    """Our report in the request, if any (whatever else sits under the key is not ours)."""
    for metadata in metadata_of(data) if isinstance(data, Mapping) else []:
        report = metadata.get(REPORT_KEY)
        if isinstance(report, Report):
            return report
    return None

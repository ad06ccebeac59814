"""What the engine is asked to do, and what it did."""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compact_hook.core.calibration import IDENTITY, CountRatio
from compact_hook.core.counting import TokenCounter
from compact_hook.core.evidence import Forwarded
from compact_hook.core.failures import SummaryFailure
from compact_hook.core.notes import Lineage
from compact_hook.core.outcomes import ArchiveStatus, CacheStatus, Mode, Preparation, Reason, Summarizer
from compact_hook.core.pricing import Prices
from compact_hook.engine.summary.summarize import Summarize
from compact_hook.settings.model import CompactConfig
from compact_hook.state.archive import Archive, Origin
from compact_hook.wires.base import Rejected
from compact_hook.wires.conversation import Conversation


@dataclass(frozen=True, slots=True)
class CompactRequest:
    """One request for the engine: the parsed conversation and how to treat it.

    ``scope`` separates stored compactions (settings, model, tenant, format: see
    ``core.chain.scope_of``); ``tenant`` separates every cache keyed by content and every archive
    folder; ``session_id`` names the archive folder (else a hash of the conversation's start);
    ``archive`` and ``counter`` replace the defaults (tests, library use). ``mode`` and ``focus``
    are the request's control (``focus`` goes into the summary request); ``restore``: look for a
    stored compaction even under the thresholds (the conversation ran ``/compact``);
    ``summary_model`` names the summary model for its circuit breaker; ``origin`` (model group,
    format, request id) goes into the archive's audit. ``prices`` / ``summary_prices``: what the
    model's and the summary model's tokens cost (None: unpriced; no money is weighed or reported).
    ``count_ratio``: the provider's tokens per one of ours as the model group knows it (its
    estimate, or its prior; ``core.calibration``) — the conversation's own, once billed, refines it.
    """

    conversation: Conversation
    config: CompactConfig
    summarize: Summarize
    session_id: str | None = None
    scope: bytes = b""
    archive: Archive | None = None
    counter: TokenCounter | None = None
    tenant: str = ""
    mode: Mode = Mode.AUTO
    focus: str = ""
    restore: bool = False
    summary_model: str = ""
    origin: Origin = Origin()
    prices: Prices | None = None
    summary_prices: Prices | None = None
    count_ratio: CountRatio = IDENTITY
    learned_window: int | None = None
    """A window below ``config.context_window`` a provider taught (``core.limits``: used only where it
    leaves the conversation room, never to forward more)."""


@dataclass(frozen=True, slots=True)
class CompactStats:
    """What a compaction did; all zeros when no summary is in the forwarded request.

    ``compaction_ratio`` is ``compacted_token_count / original_token_count`` (lower is more);
    ``compacted_message_count`` counts the client's entries replaced by the summary.
    """

    original_token_count: int = 0
    compacted_token_count: int = 0
    compaction_ratio: float = 0.0
    compacted_message_count: int = 0
    retained_message_count: int = 0


@dataclass(frozen=True, slots=True)
class CompactResult:
    """The entries to forward, and why they look the way they do.

    ``messages``: the entries (chat messages, Anthropic messages or Responses items), the
    client's own objects wherever we kept one. ``compacted``: a summary (stored or new) is
    among them. ``input_tokens`` / ``output_tokens``: everything the model reads, as received
    / as forwarded, in the provider's tokens (our count at ``count_ratio``); ``forwarded``: our own
    count of what is forwarded, which the provider's usage is judged against (``core.evidence``).
    ``reason`` says why nothing (new) was compacted (``detail`` adds words for a malformed request).
    ``truncated`` / ``cleared`` / ``dropped`` / ``normalized`` count what the cheap tiers, the fit
    guarantee and normalization changed; ``summary_calls`` counts every summary attempt this
    request made, failed ones included. ``archive_status``:
    whether what this request took out of the model's view was archived (None: nothing was).
    ``summary_failure``: why the summary could not be made, when it could not.
    ``prepared_unused``: past ``prepare_ratio``, the summaries prepared ahead for this conversation
    that no trigger has applied (yet).
    ``preparation``: where the next compaction stands, past ``prepare_ratio`` (see
    ``engine.ahead.prepare``). ``thinking_removed``: thinking blocks not forwarded because we changed
    what precedes them since they were produced (Anthropic checks; see ``core.chain.unbind``).
    ``conversation``: the key under which the provider's cache reports for this conversation are
    kept (``engine.economy.prompt_cache``; empty when not watched). ``cost_saved``: the estimated USD
    this request saved against forwarding it as sent (None: unpriced; see
    ``core.economics.estimated_saving``).
    """

    messages: list[Any]
    compacted: bool
    stats: CompactStats = field(default_factory=CompactStats)
    archive_path: Path | None = None
    input_tokens: int = 0
    reason: Reason | None = None
    detail: str = ""
    cache: CacheStatus = CacheStatus.NONE
    summary_calls: int = 0
    output_tokens: int = 0
    truncated: int = 0
    cleared: int = 0
    dropped: int = 0
    normalized: int = 0
    summarizer: Summarizer | None = None
    archive_status: ArchiveStatus | None = None
    preparation: Preparation | None = None
    summary_failure: SummaryFailure | None = None
    prepared_unused: int | None = None
    thinking_removed: int = 0
    conversation: bytes = b""
    cost_saved: float | None = None
    forwarded: Forwarded = Forwarded()
    count_ratio: CountRatio = IDENTITY
    lineage: Lineage = Lineage()
    """Where it stands in its conversation: the provider's report of it is judged against the
    conversation's earlier reports only along it (``core.notes``)."""

    @property
    def counted(self) -> int:
        """Our own count of what is forwarded."""
        return self.forwarded.counted

    def changes(self, sent: list[Any]) -> bool:
        """Whether the entries to forward differ from ``sent`` (by identity: every entry we kept
        is the client's own object, so an unchanged request is rendered nowhere)."""
        forwarded = self.messages
        if forwarded is sent:  # forwarded as sent, the list itself
            return False
        return len(forwarded) != len(sent) or any(map(operator.is_not, forwarded, sent))

    def followed_by(self, tail: list[Any]) -> CompactResult:
        """The result with the client's last turn after the entries, as sent."""
        return dataclasses.replace(self, messages=[*self.messages, *tail]) if tail else self

    @classmethod
    def passthrough(cls, entries: list[Any], rejected: Rejected) -> CompactResult:
        """A request the engine must not touch, forwarded as sent."""
        return cls(entries, False, reason=rejected.reason, detail=rejected.detail)

"""The compaction recipe: count, decide, partition, summarize, assemble, archive.

Usable without a proxy: pass any ``summarize`` coroutine. The proxy hook is one caller.
The input list and its messages are never mutated; the result is a new list holding the
very same kept message objects.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compact_hook.archive import Archive, FileArchive, conversation_session_id
from compact_hook.assemble import assemble, summary_message
from compact_hook.config import CompactConfig
from compact_hook.errors import SummarizerError
from compact_hook.fingerprint import Fingerprint
from compact_hook.messages import Message, malformed_reason
from compact_hook.partition import partition
from compact_hook.summarize import Summarize, summarize_middle
from compact_hook.tokens import TokenCounter, counter_for
from compact_hook.units import group_units

logger = logging.getLogger(__name__)

DEFAULT_TOKENIZER = "o200k_base"


@dataclass(frozen=True, slots=True)
class CompactStats:
    """What a compaction did; all zeros when nothing was compacted.

    ``compaction_ratio`` is ``compacted_token_count / original_token_count`` (lower is more).
    """

    original_token_count: int = 0
    compacted_token_count: int = 0
    compaction_ratio: float = 0.0
    compacted_message_count: int = 0
    retained_message_count: int = 0


@dataclass(frozen=True, slots=True)
class CompactResult:
    """The messages to forward, and why they look the way they do.

    ``input_tokens`` is the request's size as received, compacted or not; ``reason`` says
    why nothing was compacted (empty when it was).
    """

    messages: list[Message]
    compacted: bool
    stats: CompactStats = field(default_factory=CompactStats)
    archive_path: Path | None = None
    input_tokens: int = 0
    reason: str = ""


def counter_for_config(config: CompactConfig) -> TokenCounter:
    return counter_for(config.tokenizer or DEFAULT_TOKENIZER)


def threshold(config: CompactConfig, max_output_tokens: int | None = None) -> int | None:
    """Input tokens at which to compact, or None when the window is unknown.

    ``trigger_ratio × context_window``, lowered when the reply the request asks room for
    (``max_tokens``) would not fit beside the input.
    """
    if config.context_window is None:
        return None
    limit = max(1, int(config.trigger_ratio * config.context_window))
    if max_output_tokens:
        limit = min(limit, max(1, config.context_window - max_output_tokens))
    return limit


def should_compact(
    messages: Sequence[Message],
    config: CompactConfig,
    *,
    max_output_tokens: int | None = None,
    counter: TokenCounter | None = None,
) -> bool:
    """True when the messages reach the threshold (inclusive); False when empty or window unknown."""
    limit = threshold(config, max_output_tokens)
    if not messages or limit is None or not config.enabled or malformed_reason(messages):
        return False
    counter = counter or counter_for_config(config)
    return counter.total(counter.count_messages(messages)) >= limit


async def compact_messages(
    messages: Sequence[Message],
    config: CompactConfig,
    summarize: Summarize,
    session_id: str | None = None,
    *,
    max_output_tokens: int | None = None,
    counter: TokenCounter | None = None,
    archive: Archive | None = None,
    prints: Sequence[Fingerprint] | None = None,
) -> CompactResult:
    """Compact ``messages`` if they reach the threshold; otherwise return them as they are."""
    original = list(messages)
    problem = malformed_reason(original)
    if problem:
        return CompactResult(original, False, reason=f"malformed: {problem}")
    counter = counter or counter_for_config(config)
    counts = await counter.acount_messages(original, prints)
    total = counter.total(counts)
    limit = threshold(config, max_output_tokens)
    if not config.enabled or limit is None or not original or total < limit:
        reason = (
            "disabled" if not config.enabled else "window_unknown" if limit is None else "below_threshold"
        )
        return CompactResult(original, False, input_tokens=total, reason=reason)
    return await _compact(original, counts, total, config, summarize, session_id, counter, archive)


async def _compact(
    original: list[Message],
    counts: list[int],
    total: int,
    config: CompactConfig,
    summarize: Summarize,
    session_id: str | None,
    counter: TokenCounter,
    archive: Archive | None,
) -> CompactResult:
    assert config.context_window is not None
    tail_budget = max(1, int(config.tail_retention_ratio * config.context_window))
    part = partition(original, counts, group_units(original), tail_budget)
    if not part.middle:
        return CompactResult(original, False, input_tokens=total, reason="nothing_to_summarize")
    middle = [original[index] for index in part.middle]
    try:
        summary = await summarize_middle(middle, config, summarize, counter)
    except SummarizerError as exc:
        logger.error("compact_hook: compaction skipped, request forwarded unchanged: %s", exc)
        return CompactResult(original, False, input_tokens=total, reason="summary_failed")
    compacted = assemble(original, part, summary_message(summary))
    archive = archive or FileArchive(config.archive_dir)
    path = await archive.save(session_id or conversation_session_id(original), middle)
    after = counter.total(await counter.acount_messages(compacted))
    stats = CompactStats(
        original_token_count=total,
        compacted_token_count=after,
        compaction_ratio=round(after / total, 4) if total else 0.0,
        compacted_message_count=len(middle),
        retained_message_count=len(compacted) - 1,
    )
    return CompactResult(compacted, True, stats, path, input_tokens=total)

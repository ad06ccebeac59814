"""The last stage: the view we forward, counted and described as a ``CompactResult``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compact_hook.core.chain import Entry
from compact_hook.core.economics import Economy
from compact_hook.core.evidence import Forwarded
from compact_hook.core.failures import SummaryFailure
from compact_hook.core.notes import Lineage
from compact_hook.core.outcomes import ArchiveStatus, CacheStatus, Preparation, Reason, Summarizer
from compact_hook.engine.decision import Decision
from compact_hook.engine.economy.costs import Costs
from compact_hook.engine.guarantee import normalized
from compact_hook.engine.memory.archiving import Kept, merged
from compact_hook.engine.result import CompactResult, CompactStats
from compact_hook.engine.run import Run
from compact_hook.engine.view import View, thinking_removed


@dataclass(frozen=True, slots=True)
class Forwarding:
    """How a view came to be forwarded: the report's fields besides the tokens. Each stage
    returns a new one; nothing about the request is written anywhere else."""

    state: Entry
    cache: CacheStatus
    reason: Reason | None = None
    summary_calls: int = 0
    archive_path: Path | None = None
    dropped: int = 0
    summarizer: Summarizer | None = None
    normalized: int = 0
    preparation: Preparation | None = None
    summary_failure: SummaryFailure | None = None
    prepared_unused: int | None = None
    archived: ArchiveStatus | None = None
    """Whether what this request took out of the model's view was archived (failed once any
    write failed; None: nothing was written)."""
    prefix_changed: bool = False
    """This request changes the forwarded prefix (a compaction applied, a clearing batch): the
    provider's cache is written again from the change on."""
    economy: Economy | None = None
    """What the money figures weigh (``engine.economy.costs``)."""

    @classmethod
    def of(cls, decision: Decision) -> Forwarding:
        """The outcome a decision starts from."""
        return cls(
            decision.state,
            decision.cache,
            decision.reason,
            prefix_changed=decision.prefix_changed,
            economy=decision.economy,
        )

    def changed(self, state: Entry, cache: CacheStatus, kept: Kept, **more: Any) -> Forwarding:
        """A new state forwarded (a compaction applied, made or digested): it changes the prefix,
        and what archiving its summarized entries did counts toward the request's."""
        return dataclasses.replace(
            self,
            state=state,
            cache=cache,
            prefix_changed=True,
            archive_path=kept.path or self.archive_path,
            archived=merged(self.archived, kept),
            **more,
        )


async def finish(run: Run, view: View, outcome: Forwarding) -> CompactResult:
    """Normalize what we changed, count it, and describe it."""
    config = run.config
    done = await normalized(run, view)
    view, archived = done.view, merged(outcome.archived, done.kept)
    after = await run.tokens(view)
    if run.limits is not None and after > run.limits.window and config.on_overflow == "passthrough":
        sent = untouched(run, outcome.reason or Reason.OVER_WINDOW, summary_calls=outcome.summary_calls)
        return dataclasses.replace(sent, summary_failure=outcome.summary_failure, archive_status=archived)
    compacted = outcome.state.summary is not None
    entries = run.request.conversation.as_sent([item.raw for item in view.items], view.origins)
    rewritten = after if outcome.prefix_changed else 0
    billed = run.ratio.billed
    return CompactResult(
        entries,
        compacted,
        _stats(run, entries, after) if compacted else CompactStats(),
        outcome.archive_path,
        input_tokens=billed(run.total),
        reason=outcome.reason,
        cache=outcome.cache,
        summary_calls=outcome.summary_calls,
        output_tokens=billed(after),
        forwarded=forwarded(run, after),
        count_ratio=run.ratio,
        truncated=run.tiers.truncated_count(),
        cleared=run.tiers.cleared_count(outcome.state),
        dropped=outcome.dropped,
        normalized=outcome.normalized + done.fixes,
        summarizer=outcome.summarizer or (outcome.state.summarizer if compacted else None),
        archive_status=archived,
        preparation=outcome.preparation,
        summary_failure=outcome.summary_failure,
        prepared_unused=outcome.prepared_unused,
        thinking_removed=thinking_removed(view, outcome.state.stale_thinking, run.request.conversation),
        conversation=watched(run),
        cost_saved=Costs(run, outcome.economy).saving(run.total - after, rewritten),
        lineage=Lineage(run.prints, view.prints),
    )


def untouched(run: Run, reason: Reason | None, summary_calls: int = 0) -> CompactResult:
    """The request exactly as the client sent it."""
    entries = run.request.conversation.entries
    total = run.ratio.billed(run.total)
    return CompactResult(
        entries,
        False,
        input_tokens=total,
        output_tokens=total,
        forwarded=forwarded(run, run.total),
        count_ratio=run.ratio,
        reason=reason,
        summary_calls=summary_calls,
        conversation=watched(run),
        cost_saved=Costs(run).saving(0, 0),
        lineage=Lineage(run.prints, run.prints),
    )


def _stats(run: Run, entries: Sequence[object], after: int) -> CompactStats:
    retained = len(entries) - 1
    original = len(run.prints)
    billed = run.ratio.billed
    return CompactStats(
        original_token_count=billed(run.total),
        compacted_token_count=billed(after),
        compaction_ratio=round(after / run.total, 4) if run.total else 0.0,
        compacted_message_count=max(0, original - retained),
        retained_message_count=retained,
    )


def forwarded(run: Run, counted: int) -> Forwarded:
    """Our count of what is forwarded, as its usage is judged (``core.evidence``)."""
    reserve = run.request.conversation.reserve or 0
    fixed = run.context_tokens + sum(run.counts[: run.root_span - 1])  # the head: never changed
    return Forwarded(counted, fixed, run.estimated, reserve, run.config.context_window)


def watched(run: Run) -> bytes:
    """The key the provider's reports of this conversation are kept under (empty: not kept, see
    ``Run.watched``)."""
    return run.conversation_key if run.watched else b""

"""Archive first, then replace: what leaves the model's view is written before it leaves.

Every stage that takes something out of a request (a summary, the clearing of an output, the
fit, normalization) hands it here as ``Removed`` and gets back what the write did (``Kept``); the
stages carry it in the values they return, and the request's report says whether any write
failed (``x-compact-archive``) — never silently dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compact_hook.core.chain import Entry
from compact_hook.core.outcomes import ArchiveStatus, Removal, Summarizer
from compact_hook.engine.run import Run
from compact_hook.engine.view import View
from compact_hook.state.archive import Audit, conversation_session_id


@dataclass(frozen=True, slots=True)
class Removed:
    """Entries leaving the model's view, to archive: the client's (or our earlier summary), their
    indices in the client's list, why, and what replaces them (for the archive's audit)."""

    entries: list[object]
    origins: tuple[int, ...]
    removal: Removal
    summary: str = ""
    summarizer: Summarizer | None = None


def removed_at(run: Run, view: View, positions: Sequence[int], removal: Removal) -> Removed:
    """The view's items at ``positions`` as they are archived (see ``_archived``)."""
    origins = tuple(o for i in positions if (o := view.origins[i]) is not None)
    return Removed([_archived(run, view, i) for i in positions], origins, removal)


@dataclass(frozen=True, slots=True)
class Kept:
    """What one archive write did: where it wrote (None: nothing new to write, or it failed), and
    whether it failed — its own outcome, whatever earlier writes of the request did."""

    path: Path | None = None
    failed: bool = False

    @property
    def status(self) -> ArchiveStatus | None:
        """As the report says it (None: nothing was written)."""
        if self.failed:
            return ArchiveStatus.FAILED
        return ArchiveStatus.WRITTEN if self.path is not None else None


def merged(status: ArchiveStatus | None, kept: Kept) -> ArchiveStatus | None:
    """A request's archive status after one more write: failed once any write failed."""
    if status is ArchiveStatus.FAILED or kept.failed:
        return ArchiveStatus.FAILED
    return kept.status or status


async def keep(run: Run, removed: Removed) -> Kept:
    """Archive what leaves the model's view, before it leaves; a failure is reported.

    The same entries of the same session are written once (a request fitted every turn
    would otherwise be archived every turn); a failed write is not remembered as written.
    """
    if not removed.entries:
        return Kept()
    archives = run.memory.archives
    session = session_of(run)
    key = archives.key(run.request.tenant + "\n" + session, removed.entries)
    if archives.seen(key):
        return Kept()
    archive = run.request.archive or run.memory.folders.get(run.config.archive_dir)
    path = await archive.save(session, removed.entries, run.request.tenant, _audit(run, removed))
    if path is None:
        return Kept(failed=True)
    archives.add(key)
    return Kept(path)


async def archive_pending(run: Run, entry: Entry) -> tuple[Entry, Kept]:
    """Archive what the entry summarized but did not archive (a failed write earlier, or a
    compaction prepared ahead, applied now); the entry without that list once written."""
    if not entry.unarchived:
        return entry, Kept()
    entries = run.request.conversation.entries
    removed = Removed(
        [entries[i] for i in entry.unarchived],
        entry.unarchived,
        Removal.SUMMARIZED,
        entry.summary or "",
        entry.summarizer,
    )
    kept = await keep(run, removed)
    if kept.failed:
        return entry, kept
    return dataclasses.replace(entry, unarchived=()), kept


def _audit(run: Run, removed: Removed) -> Audit:
    origins = removed.origins
    return Audit(
        removed.removal,
        run.request.origin,
        (min(origins), max(origins)) if origins else None,
        len(removed.entries),
        sum(run.counts[i] for i in origins if i < len(run.counts)),
        run.counter.count_text(removed.summary) if removed.summary else 0,
        removed.summary,
        removed.summarizer,
    )


def session_of(run: Run) -> str:
    """The session the request's archive entries go under (the client's id, else its first entries')."""
    return run.request.session_id or conversation_session_id(run.request.conversation.entries)


def _archived(run: Run, view: View, position: int) -> object:
    """What the archive keeps of a view position: the client's own entry, or our earlier summary."""
    origin = view.origins[position]
    return view.items[position].raw if origin is None else run.request.conversation.entries[origin]

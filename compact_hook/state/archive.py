"""Archive of what compaction summarizes away, written before the compacted request leaves.

Nothing the client sent is lost: the summarized middle is kept as indented JSON at
``<archive_dir>/<tenant>/<session>/compact-<ISO-8601>-<seq>.json`` (owner-only permissions; the
tenant folder a hash of the caller's team or key, so tenants never share one), so an
operator can always recover the originals. Beside it, ``compact-<ISO-8601>-<seq>.audit.json``
answers "what did the model see instead?": why the entries left (summarized, dropped,
normalized), the summary that replaced them and who wrote it, their tokens and the summary's,
the client's entry range, model group, format, request id and the hashed tenant. A failed write
is logged and never blocks the request: losing the archive is bad, failing the user's request
for it is worse. Entries older than ``max_age_days`` are pruned (at most once an hour, by the
process writing, and by ``compact-hook archive prune``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from compact_hook.core.fingerprint import combine, fingerprint
from compact_hook.core.outcomes import Removal, Summarizer
from compact_hook.core.tenancy import tenant_tag

logger = logging.getLogger(__name__)

SESSION_ID_MAX = 96
SESSION_SEED_MESSAGES = 2
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAME = re.compile(r"^compact-.*-(\d+)\.json$")
AUDIT_SUFFIX = ".audit.json"
PRUNE_INTERVAL_SECONDS = 3600.0
DAY_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a request came from, for the audit: the proxy's model group, wire format, call id."""

    model_group: str = ""
    wire: str = ""
    request_id: str = ""


@dataclass(frozen=True, slots=True)
class Audit:
    """What an archive entry's messages were replaced by, and why.

    ``entries``: the first and last index, in the client's list, of the archived entries (an
    earlier summary of ours archived with them has no index); ``tokens_before``: what those
    client entries counted; ``tokens_after``: what replaced them (the summary; 0 when dropped).
    """

    removal: Removal
    origin: Origin = field(default_factory=Origin)
    entries: tuple[int, int] | None = None
    entry_count: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    summary: str = ""
    summarizer: Summarizer | None = None

    def to_dict(self, tenant: str) -> dict[str, Any]:
        fields = asdict(self)
        fields["entries"] = list(self.entries) if self.entries is not None else None
        return {
            "removal": self.removal.value,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "tenant": tenant_folder(tenant) if tenant else "",
            **{key: value for key, value in fields.items() if key != "removal"},
        }


class Archive(Protocol):
    async def save(
        self, session_id: str, messages: Sequence[Any], tenant: str = "", audit: Audit | None = None
    ) -> Path | None:
        """Persist ``messages`` (and ``audit`` beside them); return where, or None if it could not be done.

        ``tenant``: whose they are; tenants never share a folder.
        """


def conversation_session_id(entries: Sequence[Any]) -> str:
    """A stable id for a conversation that names none: a hash of its first entries."""
    seed = combine(fingerprint(entry) for entry in entries[:SESSION_SEED_MESSAGES])
    return "conv-" + seed.hex()[:24]


def tenant_folder(tenant: str) -> str:
    """A tenant's own folder under the archive root: a hash, so no key or team id shows on disk."""
    return "t-" + tenant_tag(tenant)


def safe_session_name(session_id: str) -> str:
    """A directory name that cannot escape the archive root, and stays recognisable."""
    cleaned = _UNSAFE.sub("_", session_id).strip("._-")[:SESSION_ID_MAX]
    if cleaned and cleaned == session_id:
        return cleaned
    digest = combine([session_id.encode("utf-8", "surrogatepass")]).hex()[:12]
    return f"{cleaned or 'session'}-{digest}"


class ArchiveLog:
    """Which (session, entries) were archived lately, bounded: each is written once, not every turn."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def key(self, session_id: str, entries: Sequence[Any]) -> bytes:
        return combine([session_id.encode("utf-8", "surrogatepass"), *(fingerprint(e) for e in entries)])

    def seen(self, key: bytes) -> bool:
        return key in self._keys

    def add(self, key: bytes) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)


class FileArchive:
    """Writes each archive with ``O_EXCL`` so concurrent compactions never overwrite one another.

    ``max_age_days``: entries older than that are pruned, at most once per ``PRUNE_INTERVAL``
    by each archive object (the hook keeps one per archive folder).
    """

    def __init__(self, root: str | Path, max_age_days: float | None = None) -> None:
        self.root = Path(root).expanduser()
        self.max_age_days = max_age_days
        self._pruned_at = float("-inf")

    async def save(
        self, session_id: str, messages: Sequence[Any], tenant: str = "", audit: Audit | None = None
    ) -> Path | None:
        try:
            path = await asyncio.to_thread(self.write, session_id, messages, tenant, audit)
        except Exception:
            logger.exception("compact_hook: archive write failed for session %r", session_id)
            return None
        await self._prune_now_and_then()
        return path

    async def _prune_now_and_then(self) -> None:
        if self.max_age_days is None or time.monotonic() - self._pruned_at < PRUNE_INTERVAL_SECONDS:
            return
        self._pruned_at = time.monotonic()
        try:
            removed = await asyncio.to_thread(prune, self.root, self.max_age_days)
        except Exception:
            logger.exception("compact_hook: archive pruning failed under %s", self.root)
            return
        if removed:
            logger.info(
                "compact_hook: pruned %d archive files older than %s days", removed, self.max_age_days
            )

    def write(
        self, session_id: str, messages: Sequence[Any], tenant: str = "", audit: Audit | None = None
    ) -> Path:
        base = self.root / tenant_folder(tenant) if tenant else self.root
        directory = base / safe_session_name(session_id)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        if base is not self.root:
            os.chmod(base, 0o700)
        payload = _dumps(list(messages))
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        sequence = _next_sequence(directory)
        while True:
            path = directory / f"compact-{stamp}-{sequence}.json"
            try:
                _write_new(path, payload)
            except FileExistsError:
                sequence += 1
                continue
            if audit is not None:
                _write_new(audit_path(path), _dumps(audit.to_dict(tenant)))
            return path


class ArchiveFolders:
    """One ``FileArchive`` per archive folder, so each prunes on its own schedule.

    Folders come from operators' settings (never from a client), so there are few; the map is
    bounded all the same.
    """

    def __init__(self, max_age_days: float | None = None, size: int = 64) -> None:
        self.max_age_days = max_age_days
        self.size = size
        self._archives: OrderedDict[str, FileArchive] = OrderedDict()

    def get(self, root: str) -> FileArchive:
        archive = self._archives.get(root)
        if archive is None:
            archive = self._archives[root] = FileArchive(root, self.max_age_days)
            while len(self._archives) > self.size:
                self._archives.popitem(last=False)
        return archive


def audit_path(path: Path) -> Path:
    """The audit file beside an archive file."""
    return path.with_name(path.name.removesuffix(".json") + AUDIT_SUFFIX)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _write_new(path: Path, payload: bytes) -> None:
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(handle, "wb") as file:
        file.write(payload)


def archive_files(root: Path, session: str | None = None) -> Iterator[Path]:
    """Every archive file (not audit) under ``root`` (or one session's), oldest name first in a session."""
    if not root.is_dir():
        return
    for path in sorted(root.rglob("compact-*.json")):
        ours = session is None or path.parent.name == session
        if ours and _NAME.match(path.name) and not path.name.endswith(AUDIT_SUFFIX):
            yield path


def prune(root: Path, max_age_days: float, now: float | None = None) -> int:
    """Delete archive files (and their audits) older than ``max_age_days``; empty folders too.

    Age is the file's modification time. Returns how many files were removed.
    """
    cutoff = (time.time() if now is None else now) - max_age_days * DAY_SECONDS
    removed = 0
    for path in list(archive_files(root)):
        if path.stat().st_mtime >= cutoff:
            continue
        for stale in (path, audit_path(path)):
            if stale.exists():
                stale.unlink()
                removed += 1
    for directory in sorted((d for d in root.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        if not any(directory.iterdir()):
            directory.rmdir()
    return removed


def _next_sequence(directory: Path) -> int:
    numbers = [int(match.group(1)) for entry in os.scandir(directory) if (match := _NAME.match(entry.name))]
    return max(numbers, default=0) + 1

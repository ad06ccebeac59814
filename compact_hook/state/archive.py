"""Archive of what compaction summarizes away, written before the compacted request leaves.

Nothing the client sent is lost: the summarized middle is kept as indented JSON at
``<archive_dir>/<tenant>/<session>/compact-<ISO-8601>-<seq>.json`` (owner-only permissions; the
tenant folder a hash of the caller's team or key, so tenants never share one), so an
operator can always recover the originals. A failed write is logged and never blocks the
request: losing the archive is bad, failing the user's request for it is worse.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from compact_hook.core.fingerprint import combine, fingerprint

logger = logging.getLogger(__name__)

SESSION_ID_MAX = 96
SESSION_SEED_MESSAGES = 2
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAME = re.compile(r"^compact-.*-(\d+)\.json$")


class Archive(Protocol):
    async def save(self, session_id: str, messages: Sequence[Any], tenant: str = "") -> Path | None:
        """Persist ``messages``; return where, or None if it could not be done.

        ``tenant``: whose they are; tenants never share a folder.
        """


def conversation_session_id(entries: Sequence[Any]) -> str:
    """A stable id for a conversation that names none: a hash of its first entries."""
    seed = combine(fingerprint(entry) for entry in entries[:SESSION_SEED_MESSAGES])
    return "conv-" + seed.hex()[:24]


def tenant_folder(tenant: str) -> str:
    """A tenant's own folder under the archive root: a hash, so no key or team id shows on disk."""
    return "t-" + combine([tenant.encode("utf-8", "surrogatepass")]).hex()[:16]


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
    """Writes each archive with ``O_EXCL`` so concurrent compactions never overwrite one another."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()

    async def save(self, session_id: str, messages: Sequence[Any], tenant: str = "") -> Path | None:
        try:
            return await asyncio.to_thread(self.write, session_id, messages, tenant)
        except Exception:
            logger.exception("compact_hook: archive write failed for session %r", session_id)
            return None

    def write(self, session_id: str, messages: Sequence[Any], tenant: str = "") -> Path:
        base = self.root / tenant_folder(tenant) if tenant else self.root
        directory = base / safe_session_name(session_id)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        if base is not self.root:
            os.chmod(base, 0o700)
        payload = json.dumps(list(messages), indent=2, ensure_ascii=False).encode("utf-8", "surrogatepass")
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        sequence = _next_sequence(directory)
        while True:
            path = directory / f"compact-{stamp}-{sequence}.json"
            try:
                handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                sequence += 1
                continue
            with os.fdopen(handle, "wb") as file:
                file.write(payload)
            return path


def _next_sequence(directory: Path) -> int:
    numbers = [int(match.group(1)) for entry in os.scandir(directory) if (match := _NAME.match(entry.name))]
    return max(numbers, default=0) + 1

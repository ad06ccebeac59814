"""The file store: one SQLite file shared by the processes of one machine, where no Redis is.

LiteLLM runs several worker processes (``--num_workers``, ``--run_gunicorn``) and recycles them
(``--max_requests_before_restart``). With each worker's own memory as the store, consecutive turns of
one conversation reach workers that remember different compactions: the history alternates between
summaries (the provider's prompt cache broken on nearly every turn) and each worker pays its own
summary. One file under a local folder, in WAL mode, is what every process of a machine can open:
compactions, leases (one summary per event, whichever worker gets the turn), notes and records live
in it with the bounds, expiry and tenant quotas the in-process store and Redis keep. SQLite over
another embedded store because it ships with Python, takes locks across processes itself, and a
file it cannot use fails a call, never the process.

Nothing waits on the event loop, and nothing makes a request wait for a turn of it — which a
saturated proxy makes every request pay (awaiting a thread for each call took the hook's median time
under ``bench/bench_load.py`` from 2 ms to 513 ms). A read runs on the loop, on a connection that
waits for nothing (a WAL file's readers never wait for its writers): tens of µs. Writes are queued
and written together at the end of the loop's turn, in one transaction on the same connection
(another process's lock defers them, never blocks); a thread writing them cost 5-9% of a saturated
proxy's throughput in GIL hand-offs. The store's own thread opens and lays out the file, takes leases
(waited for: once per compaction event) and checkpoints the WAL. The tiered store
(``tiered.TieredStore``) answers from memory whatever the file cannot: a locked, full, read-only or
corrupt file costs the sharing, never a request. The file's ``user_version`` says its layout: a file
of another layout (an older release's) is emptied and laid out anew at start-up (what it held is a
cache), and one that is not a database at all is moved aside.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from compact_hook.core.chain import Entry
from compact_hook.state.quota import charge, fits
from compact_hook.state.store import INDEX_LIMIT, MAX_NOTE_CHARS, MAX_RECORD_CHARS, best_match, entry_bytes
from compact_hook.state.tiered import Pending, SharedKind

logger = logging.getLogger(__name__)

T = TypeVar("T")
Write = tuple[tuple[bytes, ...], Callable[..., None], tuple[object, ...]]
"""A queued write: what it is about (tags), the function that writes it in a transaction, its arguments."""

LAYOUT = 1
"""The tables' layout (the file's ``user_version``); a file of another is laid out anew."""
FILE_NAME = "store.sqlite3"
BUSY_SECONDS = 0.25
"""How long a call waits on another process's write before it fails (and memory answers): writes
last a millisecond or so, so a longer wait is a process stuck holding the file."""
MAX_QUEUED = 1024
"""Writes a process may have waiting on the store's thread (a file slower than the traffic)."""
PRUNE_EVERY = 64
"""What expired goes, and notes and records are brought within their bounds, every this many writes of
one process (a count per write would cost more than the write): between sweeps they may pass the
bound by what the processes wrote since. A tenant's quota is kept at every write."""
BATCH = 64
"""Queued writes put in one transaction."""
RETRY_SECONDS = 0.002
"""How soon a batch that met another process's write lock is tried again."""
CHECKPOINT_EVERY = 256
"""Writes between two checkpoints of the WAL, on the store's thread."""
TENANT_TOTAL = "SELECT coalesce(sum(size), 0) FROM records WHERE ns = ? AND tenant = ?"
GIVE_UP = """
DELETE FROM records WHERE ns = ? AND key IN (
    SELECT key FROM (
        SELECT key, sum(size) OVER (ORDER BY written DESC, key) AS newer
        FROM records WHERE ns = ? AND tenant = ?)
    WHERE newer > ?)
"""
"""A tenant's records past its quota, oldest first: each with the size of those at least as new."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    ns TEXT NOT NULL, key BLOB NOT NULL, root BLOB NOT NULL, value TEXT NOT NULL,
    bytes INTEGER NOT NULL, expires REAL NOT NULL, written REAL NOT NULL, PRIMARY KEY (ns, key));
CREATE INDEX IF NOT EXISTS entries_root ON entries (ns, root, written);
CREATE INDEX IF NOT EXISTS entries_written ON entries (ns, written);
CREATE TABLE IF NOT EXISTS locks (
    ns TEXT NOT NULL, key BLOB NOT NULL, token TEXT NOT NULL, expires REAL NOT NULL,
    PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS notes (
    ns TEXT NOT NULL, key BLOB NOT NULL, value TEXT NOT NULL, expires REAL NOT NULL,
    written REAL NOT NULL, PRIMARY KEY (ns, key));
CREATE INDEX IF NOT EXISTS notes_written ON notes (ns, written);
CREATE TABLE IF NOT EXISTS records (
    ns TEXT NOT NULL, key BLOB NOT NULL, value TEXT NOT NULL, tenant TEXT, size INTEGER NOT NULL,
    expires REAL NOT NULL, written REAL NOT NULL, PRIMARY KEY (ns, key));
CREATE INDEX IF NOT EXISTS records_tenant ON records (ns, tenant, size);
CREATE INDEX IF NOT EXISTS records_written ON records (ns, written);
"""
TABLES = ("entries", "locks", "notes", "records")


def default_folder() -> Path:
    """``$XDG_STATE_HOME/compact_hook``, else ``~/.local/state/compact_hook``: the user's own state
    folder (made private), kept across restarts, local to the machine; not ``/tmp``, which other
    users can list, nor ``/dev/shm``, a container's 64 MB by default."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "compact_hook"


def is_outage(error: BaseException) -> bool:
    """Whether the file cannot serve now (full, read-only, corrupt, gone), rather than that one call
    met another process's write (``database is locked``: that call alone fails)."""
    if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
        return False
    return isinstance(error, (sqlite3.Error, OSError, asyncio.TimeoutError, TimeoutError))


FILE = SharedKind("file", is_outage, once=True, waits=False)
"""How the tiered store names the file store and reads its faults."""


class FileStore:
    """A ``store.CompactionStore`` in one SQLite file; ``namespace`` separates the stores sharing it
    (prepared compactions apart from applied ones under the same keys), as in Redis.

    Expiry is by the wall clock (the processes sharing the file share it). Entries are bounded in
    number and bytes, records in bytes and by each tenant's quota, the oldest written going first;
    a lock is a row with an expiry, taken in one write transaction."""

    def __init__(
        self, folder: Path, limits: Limits, namespace: str = "", clock: Callable[[], float] = time.time
    ) -> None:
        self.folder = folder
        self.limits = limits
        self.ns = namespace
        self.clock = clock
        self._connection: sqlite3.Connection | None = None
        """Opened on the store's thread by the first call (and again after the file failed)."""
        self._on_loop: sqlite3.Connection | None = None
        """The event loop's own, waiting for nothing (``_loop_connection``); opened once the file is
        laid out."""
        self._laid_out = False
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compact-store")
        self._writes = 0
        self._queue: list[Write] = []
        self._scheduled = False
        self._since = time.monotonic()
        """When the queue's first batch began waiting (for another process's lock)."""
        self._pending: Counter[bytes] = Counter()
        """What queued writes are about (``_tag``): a read of it is answered from memory meanwhile."""
        self.on_fault: Callable[[BaseException], None] = lambda _: None
        """Told of a queued write that failed (``TieredStore.fault``: counted, logged once)."""

    @property
    def connection(self) -> sqlite3.Connection:
        """The file, opened (or opened again) on the store's thread; raises what keeps it closed."""
        if self._connection is None:
            self._connection = open_file(self.folder)
        return self._connection

    async def find(self, root: bytes, chain: Sequence[bytes]) -> tuple[bytes, Entry] | None:
        rows = await self._run(
            "SELECT key, value FROM entries WHERE ns = ? AND root = ? AND expires > ? "
            "ORDER BY written DESC LIMIT ?",
            (self.ns, root, self.clock(), INDEX_LIMIT),
            _tag("root", root),
        )
        entries = {bytes(key): Entry.from_json(value) for key, value in rows}
        for _, key in best_match([(entry.span, key) for key, entry in entries.items()], chain):
            return key, entries[key]
        return None

    async def get(self, key: bytes) -> Entry | None:
        rows = await self._run(
            "SELECT value FROM entries WHERE ns = ? AND key = ? AND expires > ?",
            (self.ns, key, self.clock()),
            _tag("entry", key),
        )
        return Entry.from_json(rows[0][0]) if rows else None

    async def put(self, root: bytes, key: bytes, entry: Entry) -> None:
        self._later((_tag("root", root), _tag("entry", key)), self._put, root, key, entry)

    def _put(self, db: sqlite3.Connection, root: bytes, key: bytes, entry: Entry) -> None:
        """An entry (once per compaction: its bounds checked at once, the oldest written going)."""
        now, limits = self.clock(), self.limits
        db.execute(
            "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self.ns, key, root, entry.to_json(), entry_bytes(entry), now + limits.ttl, now),
        )
        db.execute("DELETE FROM entries WHERE ns = ? AND expires <= ?", (self.ns, now))
        count, total = db.execute(
            "SELECT count(*), coalesce(sum(bytes), 0) FROM entries WHERE ns = ?", (self.ns,)
        ).fetchone()
        if count > limits.max_entries or total > limits.max_bytes:
            self._evict(db, "entries", "bytes", (count - limits.max_entries, total - limits.max_bytes))

    def _evict(self, db: sqlite3.Connection, table: str, size: str, over: tuple[int, int]) -> None:
        """Delete ``table``'s oldest rows of this namespace until ``over`` (rows, bytes) is paid."""
        rows, size_over = over
        oldest = db.execute(
            f"SELECT key, {size} FROM {table} WHERE ns = ? ORDER BY written",  # noqa: S608
            (self.ns,),
        ).fetchall()
        gone: list[bytes] = []
        for key, held in oldest:
            if rows <= 0 and size_over <= 0:
                break
            gone.append(key)
            rows, size_over = rows - 1, size_over - held
        sql = f"DELETE FROM {table} WHERE ns = ? AND key = ?"  # noqa: S608 (our own table names)
        db.executemany(sql, [(self.ns, key) for key in gone])

    def _sweep(self, db: sqlite3.Connection) -> None:
        """Every ``PRUNE_EVERY`` writes: what expired goes, and notes and records are brought within
        their bounds (between sweeps they may pass them by what was written since)."""
        now, limits = self.clock(), self.limits
        for table in ("notes", "records", "locks"):
            db.execute(f"DELETE FROM {table} WHERE ns = ? AND expires <= ?", (self.ns, now))  # noqa: S608
        (notes,) = db.execute("SELECT count(*) FROM notes WHERE ns = ?", (self.ns,)).fetchone()
        if notes > limits.max_entries:
            self._evict(db, "notes", "0", (notes - limits.max_entries, 0))
        (records,) = db.execute(
            "SELECT coalesce(sum(size), 0) FROM records WHERE ns = ?", (self.ns,)
        ).fetchone()
        if records > limits.max_bytes:
            self._evict(db, "records", "size", (0, records - limits.max_bytes))

    async def try_lock(self, key: bytes, ttl: float) -> str | None:
        """On the store's thread, waited for (once per compaction event); what is queued (a lock's
        release) written first."""
        if self._queue and self._laid_out:
            self._write_queued()
        return await self._call(self._try_lock, key, ttl)

    def _try_lock(self, key: bytes, ttl: float) -> str | None:
        token, now = uuid.uuid4().hex, self.clock()
        with Transaction(self.connection) as db:
            db.execute("DELETE FROM locks WHERE ns = ? AND key = ? AND expires <= ?", (self.ns, key, now))
            taken = db.execute(
                "INSERT OR IGNORE INTO locks VALUES (?, ?, ?, ?)", (self.ns, key, token, now + ttl)
            ).rowcount
        return token if taken else None

    async def unlock(self, key: bytes, token: str) -> None:
        sql = "DELETE FROM locks WHERE ns = ? AND key = ? AND token = ?"
        self._later((_tag("lock", key),), self._write, sql, (self.ns, key, token))

    async def is_locked(self, key: bytes) -> bool:
        rows = await self._run(
            "SELECT 1 FROM locks WHERE ns = ? AND key = ? AND expires > ?",
            (self.ns, key, self.clock()),
            _tag("lock", key),
        )
        return bool(rows)

    async def set_note(self, key: bytes, value: str, ttl: float) -> None:
        self._later((_tag("note", key),), self._set_note, key, value[:MAX_NOTE_CHARS], ttl)

    def _set_note(self, db: sqlite3.Connection, key: bytes, value: str, ttl: float) -> None:
        now = self.clock()
        db.execute(
            "INSERT OR REPLACE INTO notes VALUES (?, ?, ?, ?, ?)", (self.ns, key, value, now + ttl, now)
        )

    async def get_note(self, key: bytes) -> str | None:
        rows = await self._run(
            "SELECT value FROM notes WHERE ns = ? AND key = ? AND expires > ?",
            (self.ns, key, self.clock()),
            _tag("note", key),
        )
        return str(rows[0][0]) if rows else None

    async def put_record(self, key: bytes, value: str, ttl: float, tenant: str | None = None) -> bool:
        """As ``MemoryStore.put_record``: at most ``max_bytes`` of records, a tenant's at most its
        quota, the oldest written going first (the tenant's own first)."""
        if not fits(value, tenant, self.limits.tenant_bytes, MAX_RECORD_CHARS):
            return False
        self._later((_tag("record", key),), self._put_record, key, value, ttl, tenant)
        return True

    def _put_record(
        self, db: sqlite3.Connection, key: bytes, value: str, ttl: float, tenant: str | None
    ) -> None:
        now = self.clock()
        db.execute(
            "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self.ns, key, value, tenant, charge(value), now + ttl, now),
        )
        if tenant is None:
            return
        # the tenant's total from the index alone (a thousand records: ~0.1 ms); only past its quota
        # are its oldest found and deleted (the window over all its records cost ~3 ms a write)
        (held,) = db.execute(TENANT_TOTAL, (self.ns, tenant)).fetchone()
        if held > self.limits.tenant_bytes:
            db.execute(GIVE_UP, (self.ns, self.ns, tenant, self.limits.tenant_bytes))

    async def get_record(self, key: bytes) -> str | None:
        rows = await self._run(
            "SELECT value FROM records WHERE ns = ? AND key = ? AND expires > ?",
            (self.ns, key, self.clock()),
            _tag("record", key),
        )
        return str(rows[0][0]) if rows else None

    async def flush(self) -> None:
        """Until every write queued so far is written or dropped."""
        while self._queue:
            await asyncio.sleep(RETRY_SECONDS)

    def close(self) -> None:
        self._thread.shutdown(wait=False)

    # -- reads on the loop, writes queued on the store's thread ------------------------------------

    async def _run(self, sql: str, parameters: tuple[object, ...], tag: bytes) -> list[tuple[Any, ...]]:
        """A read. On the event loop itself once the file is laid out: a read of a WAL file never
        waits for a writer, and the loop's connection waits for nothing (``timeout=0``: a file busy
        recovering fails the call, and memory answers), so it costs the query (tens of µs) and no
        trip through the loop, which a saturated proxy makes every request wait for. Before that,
        on the store's thread, which opens the file."""
        if self._pending[tag]:
            raise Pending
        if not self._laid_out:
            return await self._call(lambda: self.connection.execute(sql, parameters).fetchall())
        try:
            return self._loop_connection().execute(sql, parameters).fetchall()
        except Exception:
            self._close_on_loop()
            raise

    def _later(self, tags: tuple[bytes, ...], function: Callable[..., None], *arguments: object) -> None:
        """A write, queued and not waited for: the writes a turn of the loop queues are written
        together at its end, in one transaction, on the loop (``_write_queued``). A thread would
        cost more: each statement it ran handed the GIL back and forth with the loop (~5-9% of a
        saturated proxy's throughput under ``bench/bench_load.py``). Until it is written, a read of
        what it is about (``tags``) is answered from memory, which the tiered store wrote first:
        this process reads its own writes. At most ``MAX_QUEUED`` wait: past them a write fails now."""
        if len(self._queue) >= MAX_QUEUED:
            raise Backlog(f"{MAX_QUEUED} writes waiting on the store's file")
        self._pending.update(tags)
        self._queue.append((tags, function, arguments))
        if not self._scheduled:
            self._write_soon()

    def _write_queued(self) -> None:
        """What is queued, in one transaction on the loop. The loop's connection waits for nothing:
        another process's write lock defers the batch a moment (``RETRY_SECONDS``) until the batch
        has waited ``BUSY_SECONDS``, then it is dropped and said (``on_fault``); nothing blocks."""
        self._scheduled = False
        if not self._queue:
            return
        loop = asyncio.get_running_loop()
        if not self._laid_out:  # the store's thread opens (and lays out) the file first
            opened = loop.run_in_executor(self._thread, self._guarded, lambda: self.connection, ())
            opened.add_done_callback(self._opened)
            self._scheduled = True
            return
        batch = self._queue[:BATCH]
        try:
            with Transaction(self._loop_connection()) as db:
                for _, function, arguments in batch:
                    function(db, *arguments)
                self._writes, before = self._writes + len(batch), self._writes
                if before // PRUNE_EVERY != self._writes // PRUNE_EVERY:
                    self._sweep(db)
        except sqlite3.OperationalError as error:
            if "locked" in str(error) and time.monotonic() - self._since < BUSY_SECONDS:
                self._scheduled = True
                loop.call_later(RETRY_SECONDS, self._write_queued)
                return
            self._dropped(batch, error)
        except Exception as error:
            self._dropped(batch, error)
        else:
            self._done(batch)
            if self._writes // CHECKPOINT_EVERY != (self._writes - len(batch)) // CHECKPOINT_EVERY:
                self._thread.submit(self._guarded, self._checkpoint, ())
        if self._queue:
            self._write_soon()

    def _opened(self, opened: asyncio.Future[sqlite3.Connection]) -> None:
        """The store's thread tried to open the file for what is queued: write it, or drop it all."""
        error = None if opened.cancelled() else opened.exception()
        if error is None:
            self._write_soon()
            return
        self._scheduled = False
        self._dropped(list(self._queue), error)

    def _write_soon(self) -> None:
        self._scheduled, self._since = True, time.monotonic()
        asyncio.get_running_loop().call_soon(self._write_queued)

    def _done(self, batch: list[Write]) -> None:
        del self._queue[: len(batch)]
        for tags, _, _ in batch:
            for tag in tags:
                self._pending[tag] -= 1
                if self._pending[tag] <= 0:
                    del self._pending[tag]
        self._since = time.monotonic()

    def _dropped(self, batch: list[Write], error: BaseException) -> None:
        self._done(batch)
        if is_outage(error):
            self._close_on_loop()
        self.on_fault(error)

    def _checkpoint(self) -> None:
        """On the store's thread: the WAL copied back into the file (the loop's connection never
        checkpoints: that is where a commit would wait on the disk)."""
        self.connection.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _close_on_loop(self) -> None:
        """The loop's connection closed after a fault (opened again by the next read)."""
        if self._on_loop is not None:
            self._on_loop.close()
            self._on_loop = None

    def _loop_connection(self) -> sqlite3.Connection:
        if self._on_loop is None:
            self._on_loop = _loop_connection(self.folder / FILE_NAME)
        return self._on_loop

    def _write(self, db: sqlite3.Connection, sql: str, parameters: tuple[object, ...]) -> None:
        db.execute(sql, parameters)

    async def _call(self, function: Callable[..., T], *arguments: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self._guarded, function, arguments
        )

    def _guarded(self, function: Callable[..., T], arguments: tuple[object, ...]) -> T:
        """``function`` on the store's thread; a fault that is not another process's lock closes the
        file, so the next call opens it again (a corrupt file moved aside by any process is then
        replaced, a folder made writable again is used)."""
        try:
            done = function(*arguments)
            self._laid_out = True
            return done
        except Exception as error:
            if is_outage(error) and self._connection is not None:
                self._connection.close()
                self._connection = None
            raise


class Backlog(Exception):  # noqa: N818
    """Too many writes wait on the file: this one fails now (memory keeps it; counted)."""


def _tag(kind: str, key: bytes) -> bytes:
    return kind.encode() + b":" + key


def _loop_connection(path: Path) -> sqlite3.Connection:
    """The loop's connection: waiting for nothing (a lock fails at once), never checkpointing."""
    connection = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA wal_autocheckpoint = 0")
    connection.execute("PRAGMA synchronous = NORMAL")
    return connection


class Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an error): the write lock taken first, so two
    processes' read-then-write transactions never deadlock on an upgrade."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def __enter__(self) -> sqlite3.Connection:
        self.connection.execute("BEGIN IMMEDIATE")
        return self.connection

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.connection.execute("COMMIT" if kind is None else "ROLLBACK")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one namespace of the file may hold: what the in-process store's settings say."""

    ttl: float
    max_entries: int
    max_bytes: int
    tenant_bytes: int


def open_file(folder: Path) -> sqlite3.Connection:
    """The store's file in ``folder`` (made, private to this user), laid out for this release.

    Raises ``sqlite3.Error`` or ``OSError`` when it cannot be used (the caller keeps the in-process
    store); a file that is not a database is moved aside (``.corrupt-<time>``) and made anew."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / FILE_NAME
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    try:
        return _laid_out(path)
    except sqlite3.DatabaseError as error:
        if isinstance(error, sqlite3.OperationalError):
            raise
        aside = path.with_name(f"{FILE_NAME}.corrupt-{int(time.time())}")
        logger.warning(
            "compact_hook: the store's file %s is not a database (%s); moved to %s", path, error, aside
        )
        path.replace(aside)
        return _laid_out(path)


def _laid_out(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(
            "PRAGMA synchronous=NORMAL"
        )  # WAL: durable at checkpoints; a lost write is a lost cache entry
        with Transaction(connection) as db:
            (layout,) = db.execute("PRAGMA user_version").fetchone()
            if layout != LAYOUT:
                if layout:
                    logger.warning(
                        "compact_hook: the store's file %s has layout %s, this release %s: laid out anew",
                        path,
                        layout,
                        LAYOUT,
                    )
                for table in TABLES:
                    db.execute(f"DROP TABLE IF EXISTS {table}")  # noqa: S608
                for statement in filter(str.strip, SCHEMA.split(";")):  # executescript would commit
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {LAYOUT}")
    except BaseException:
        connection.close()
        raise
    return connection

"""The file store (issue 62): one SQLite file shared by the processes of one machine.

What it keeps (bounds, expiry, tenant quotas, one lease per key across processes), and its faults:
a locked, full, read-only, unreachable or corrupt file, and one of another release, each answered
from memory by the tiered store and counted (``compact_hook_store_fallbacks_total``), never raised
to the request. Each fault is shown failing the file store's own call first: without the fallback
the request would fail.
"""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from compact_hook.core.chain import Entry
from compact_hook.settings.process import ProcessConfig
from compact_hook.state.backends import build_stores, over_file
from compact_hook.state.file_store import FILE_NAME, LAYOUT, MAX_QUEUED, FileStore, Limits, Transaction
from compact_hook.state.store import MemoryStore
from compact_hook.state.tiered import TieredStore

LIMITS = Limits(ttl=60, max_entries=100, max_bytes=1 << 20, tenant_bytes=4096)


def entry(span: int, summary: str = "summary") -> Entry:
    return Entry(span, (), summary)


async def written_now(file: FileStore, key: bytes, written: Entry) -> None:
    """A write of the file store's own, at once: its fault raised here (a queued one reports it)."""
    with Transaction(file._loop_connection()) as db:
        file._put(db, b"root", key, written)


def tiered(folder: Path) -> tuple[TieredStore, FileStore]:
    file = FileStore(folder, LIMITS)
    return over_file(file, MemoryStore(100, 60), timeout=5), file


async def test_two_stores_on_one_folder_share_compactions_notes_and_records(tmp_path: Path) -> None:
    first, second = FileStore(tmp_path, LIMITS), FileStore(tmp_path, LIMITS)
    await first.put(b"root", b"k2", entry(2))
    await first.flush()  # writes are queued on the store's thread
    assert await second.find(b"root", [b"k0", b"k1", b"k2", b"k3"]) == (b"k2", entry(2))
    assert await second.find(b"other root", [b"k0", b"k1", b"k2"]) is None
    await first.set_note(b"n", "noted", 60)
    await first.flush()
    assert await second.get_note(b"n") == "noted"
    assert await first.put_record(b"r", "what a handle stands for", 60, "team:a")
    await first.flush()
    assert await second.get_record(b"r") == "what a handle stands for"


async def test_the_longest_stored_prefix_of_the_request_is_found(tmp_path: Path) -> None:
    store = FileStore(tmp_path, LIMITS)
    await store.put(b"root", b"k1", entry(1, "shorter"))
    await store.put(b"root", b"k3", entry(3, "longer"))
    await store.put(b"root", b"x3", entry(3, "a fork"))
    await store.flush()
    assert await store.find(b"root", [b"k0", b"k1", b"k2", b"k3"]) == (b"k3", entry(3, "longer"))
    assert await store.find(b"root", [b"k0", b"k1", b"j2", b"j3"]) == (b"k1", entry(1, "shorter"))


async def test_namespaces_on_one_file_are_apart(tmp_path: Path) -> None:
    applied, prepared = FileStore(tmp_path, LIMITS), FileStore(tmp_path, LIMITS, "prepared")
    await prepared.put(b"root", b"k1", entry(1))
    await prepared.flush()
    assert await applied.get(b"k1") is None and await prepared.get(b"k1") == entry(1)


async def test_what_expired_is_gone(tmp_path: Path) -> None:
    now = [1000.0]
    store = FileStore(tmp_path, LIMITS, clock=lambda: now[0])
    await store.put(b"root", b"k1", entry(1))
    await store.set_note(b"n", "noted", 5)
    await store.flush()
    assert await store.try_lock(b"lock", 5) is not None
    now[0] += 10
    assert await store.get(b"k1") == entry(1) and await store.get_note(b"n") is None
    assert await store.try_lock(b"lock", 5) is not None  # an expired lease is taken again
    now[0] += LIMITS.ttl
    assert await store.get(b"k1") is None and await store.find(b"root", [b"k0", b"k1"]) is None


async def test_entries_are_bounded_in_number_and_bytes_the_oldest_written_going_first(tmp_path: Path) -> None:
    clock = iter(range(1_000, 2_000))
    store = FileStore(tmp_path, Limits(60, 3, 1 << 20, 4096), clock=lambda: float(next(clock)))
    for number in range(5):
        await store.put(b"root", f"k{number}".encode(), entry(number))
    await store.flush()
    kept = [number for number in range(5) if await store.get(f"k{number}".encode()) is not None]
    assert kept == [2, 3, 4]
    small = FileStore(tmp_path / "small", Limits(60, 100, 3 * 1200, 4096), clock=lambda: float(next(clock)))
    for number in range(5):
        await small.put(b"root", f"k{number}".encode(), entry(number, "s" * 1000))
    await small.flush()
    assert [n for n in range(5) if await small.get(f"k{n}".encode()) is not None] == [2, 3, 4]


async def test_a_tenant_past_its_quota_gives_up_its_own_oldest_records(tmp_path: Path) -> None:
    clock = iter(range(1_000, 2_000))
    store = FileStore(tmp_path, LIMITS, clock=lambda: float(next(clock)))
    assert await store.put_record(b"b", "B's", 60, "team:b")
    for number in range(6):
        assert await store.put_record(f"a{number}".encode(), "a" * 1000, 60, "team:a")
    await store.flush()
    kept = [n for n in range(6) if await store.get_record(f"a{n}".encode()) is not None]
    assert kept == [3, 4, 5]  # 3 x (1000 + 256) within 4096
    assert await store.get_record(b"b") == "B's"
    assert not await store.put_record(b"big", "x" * 5000, 60, "team:a")  # alone over the quota


def take_leases(folder: str, keys: list[bytes], start: Any, taken: Any) -> None:
    """In another process: the leases this one took of ``keys``, all asked at once with the other."""
    import asyncio

    async def take() -> list[bytes]:
        store = FileStore(Path(folder), LIMITS)
        await store.get(b"opened")  # the file opened (and laid out) before the race
        start.wait()
        return [key for key in keys if await store.try_lock(key, 60) is not None]

    taken.put(asyncio.run(take()))


def test_two_processes_never_both_hold_one_lease(tmp_path: Path) -> None:
    """One summary per compaction event whichever worker gets the turn: of two processes asking
    for the same 50 leases at once, exactly one gets each."""
    keys = [f"key{number}".encode() for number in range(50)]
    context = multiprocessing.get_context("spawn")
    start, taken = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=take_leases, args=(str(tmp_path), keys, start, taken)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    held = [taken.get(timeout=120), taken.get(timeout=120)]
    for worker in workers:
        worker.join()
    assert sorted(held[0] + held[1]) == sorted(keys)


async def test_a_locked_file_is_answered_from_memory_counted_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, file = tiered(tmp_path)
    await store.put(b"root", b"k1", entry(1))
    await file.flush()
    other = sqlite3.connect(tmp_path / FILE_NAME, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process writing
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        await written_now(file, b"k2", entry(2))  # the file's own write fails
    with caplog.at_level(logging.WARNING):
        for number in range(2, 5):
            await store.put(b"root", f"k{number}".encode(), entry(number))  # no error: memory keeps it
            await file.flush()
    assert await store.find(b"root", [b"k0", b"k1", b"k2", b"k3", b"k4"]) == (b"k4", entry(4))
    assert store.fallbacks >= 3 and store.outages == 0  # each write lost, the file not set aside
    assert caplog.text.count("file store call failed") == 1
    other.execute("ROLLBACK")
    other.close()
    assert await store.find(b"root", [b"k0", b"k1", b"k2", b"k3", b"k4"]) == (b"k4", entry(4))
    await file.flush()
    assert await file.get(b"k4") == entry(4)  # the longer state given back to the file


async def test_a_full_file_is_answered_from_memory_and_used_again_after_its_rest(tmp_path: Path) -> None:
    store, file = tiered(tmp_path)
    now = [0.0]
    store.clock = lambda: now[0]
    await store.put(b"root", b"k1", entry(1))
    await file.flush()
    file._loop_connection().execute("PRAGMA max_page_count = 1")  # what a full disk says
    await store.put(b"root", b"k2", entry(2, "x" * 100_000))  # no error: in memory
    await file.flush()
    assert await store.local.get(b"k2") is not None and store.outages == 1
    assert await store.get(b"k2") is not None  # resting: memory answers
    now[0] += 2  # the rest over: the file (opened again) serves
    await store.put(b"root", b"k3", entry(3))
    await file.flush()
    assert await file.get(b"k3") == entry(3) and store.outages == 1


async def test_a_read_only_file_is_answered_from_memory(tmp_path: Path) -> None:
    store, file = tiered(tmp_path)
    await store.put(b"root", b"k1", entry(1))
    await file.flush()
    file._loop_connection().execute("PRAGMA query_only = ON")  # what a read-only file says
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        await written_now(file, b"k2", entry(2))
    await store.put(b"root", b"k2", entry(2))
    await file.flush()
    assert await store.local.get(b"k2") == entry(2) and store.fallbacks == 1
    assert await store.get(b"k2") == entry(2)  # the file set aside: memory answers


async def test_writes_waiting_on_the_file_are_bounded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, file = tiered(tmp_path)
    other = sqlite3.connect(tmp_path / FILE_NAME, isolation_level=None)
    await file.get(b"opened")
    other.execute("BEGIN EXCLUSIVE")  # every batch waits its 0.25 s, then fails
    with caplog.at_level(logging.WARNING):
        for number in range(MAX_QUEUED + 100):
            await store.set_note(f"n{number}".encode(), "v", 60)
    assert "Backlog" in caplog.text  # past the bound a write failed at once, counted
    assert await store.get_note(f"n{MAX_QUEUED + 99}".encode()) == "v"  # memory kept what failed
    other.execute("ROLLBACK")
    other.close()
    await file.flush()


async def test_a_folder_that_cannot_be_made_is_answered_from_memory(tmp_path: Path) -> None:
    blocked = tmp_path / "a file"
    blocked.write_text("not a folder")
    config = ProcessConfig(store="file", store_dir=str(blocked / "store"))
    store = build_stores(config).main
    assert isinstance(store, TieredStore)
    with pytest.raises(OSError):
        await store.shared.get(b"k1")
    await store.put(b"root", b"k1", entry(1))
    await store.shared.flush()  # type: ignore[attr-defined]
    assert await store.find(b"root", [b"k0", b"k1"]) == (b"k1", entry(1))
    assert store.fallbacks >= 1 and store.outages == 1


async def test_a_corrupt_file_is_moved_aside_and_made_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"this is not a database, " * 100)
    with pytest.raises(sqlite3.DatabaseError):
        sqlite3.connect(tmp_path / FILE_NAME).execute("SELECT * FROM sqlite_master").fetchall()
    store, file = tiered(tmp_path)
    with caplog.at_level(logging.WARNING):
        await store.put(b"root", b"k1", entry(1))
        await file.flush()
    assert await store.shared.get(b"k1") == entry(1) and store.fallbacks == 0
    assert [p.name.startswith(f"{FILE_NAME}.corrupt-") for p in tmp_path.iterdir()].count(True) == 1
    assert "is not a database" in caplog.text


@pytest.mark.parametrize("layout", [0, LAYOUT + 1], ids=["an older release", "a newer release"])
async def test_a_file_of_another_release_is_laid_out_anew(tmp_path: Path, layout: int) -> None:
    old = sqlite3.connect(tmp_path / FILE_NAME)
    old.execute("CREATE TABLE entries (key TEXT, summary TEXT)")
    old.execute("INSERT INTO entries VALUES ('k1', 'from another release')")
    old.execute(f"PRAGMA user_version = {layout}")
    old.commit()
    old.close()
    store, file = tiered(tmp_path)
    assert await store.get(b"k1") is None and store.fallbacks == 0
    await store.put(b"root", b"k1", entry(1))
    await file.flush()
    assert await store.shared.get(b"k1") == entry(1)


def test_the_default_folder_is_the_users_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    store = build_stores(ProcessConfig()).main
    assert isinstance(store, TieredStore) and store.shared.folder == tmp_path / "compact_hook"  # type: ignore[attr-defined]


async def test_the_folder_and_file_are_private(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store", LIMITS)
    await store.set_note(b"n", "v", 60)
    await store.flush()
    assert (tmp_path / "store").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "store" / FILE_NAME).stat().st_mode & 0o777 == 0o600

"""``engine.economy.prompt_cache``: what the provider reported of each conversation's cache, remembered for its
next request — in the store's notes (shared by replicas) or, with no store, in a bounded map.

Clocks are lists the test moves by hand: nothing here depends on how fast the machine is.
"""

from __future__ import annotations

from compact_hook.core.economics import CacheNote, Heard
from compact_hook.engine.economy.prompt_cache import KEEP_TTLS, LOCAL_NOTES, PREFIX, CacheLedger
from compact_hook.state.store import MemoryStore

FIRST = Heard(read=0, written=800, uncached=200, forwarded=1_000)
NEXT = Heard(read=800, written=150, uncached=50, forwarded=1_100)


async def test_the_first_report_starts_a_note_and_the_next_one_updates_it() -> None:
    """The first request heard is remembered as the conversation's first (its bill against our
    count); the next one counts as a second request and teaches how fast it grows."""
    now = [1_000.0]
    ledger = CacheLedger(None, clock=lambda: now[0])
    assert await ledger.note(b"c1") is None
    first = await ledger.heard(b"c1", FIRST, ttl=300)
    assert (first.seen_at, first.requests, first.first_billed, first.first_forwarded) == (
        1_000.0,
        1,
        1_000,
        1_000,
    )
    now[0] = 1_010.0
    second = await ledger.heard(b"c1", NEXT, ttl=300)
    assert (second.seen_at, second.requests, second.read, second.forwarded) == (1_010.0, 2, 800, 1_100)
    assert second.growth == 100.0 and second.first_billed == 1_000  # the first stays the first
    assert await ledger.note(b"c1") == second
    assert await ledger.note(b"c2") is None  # one conversation's report is not another's


async def test_with_a_store_a_replica_reads_the_note_another_one_wrote() -> None:
    store = MemoryStore(100, 60)
    assert await CacheLedger(store).note(b"c1") is None
    written = await CacheLedger(store, clock=lambda: 50.0).heard(b"c1", FIRST, ttl=300)
    assert await store.get_note(PREFIX + b"c1") == written.to_text()
    assert await CacheLedger(store).note(b"c1") == CacheNote.from_text(written.to_text())
    assert await CacheLedger(None).note(b"c1") is None  # the in-process map is not the store


async def test_a_stored_note_outlives_the_cache_it_describes_by_a_few_lifetimes() -> None:
    now = [0.0]
    store = MemoryStore(100, 60, clock=lambda: now[0])
    ledger = CacheLedger(store)
    await ledger.heard(b"c1", FIRST, ttl=300)
    now[0] = 300 * KEEP_TTLS - 1
    assert await ledger.note(b"c1") is not None  # long past the cache's own lifetime: cold, not new
    now[0] = 300 * KEEP_TTLS + 1
    assert await ledger.note(b"c1") is None


async def test_a_note_already_read_is_used_as_given_not_read_again() -> None:
    """``known``: the request looked the note up before (``Run._calibrate``). ``None`` given means
    it was read and not found, so the report starts a new note even if one was stored since."""
    store = MemoryStore(100, 60)
    ledger = CacheLedger(store)
    await ledger.heard(b"c1", FIRST, ttl=300)
    fresh = await ledger.heard(b"c1", NEXT, ttl=300, known=None)
    assert fresh.requests == 1 and fresh.first_billed == NEXT.billed
    given = CacheNote(seen_at=0.0, requests=7, forwarded=1_000)
    assert (await ledger.heard(b"c1", NEXT, ttl=300, known=given)).requests == 8


async def test_a_store_value_that_is_not_our_note_reads_as_none_and_starts_afresh() -> None:
    store = MemoryStore(100, 60)
    await store.set_note(PREFIX + b"c1", "not,a,note", 60)
    ledger = CacheLedger(store)
    assert await ledger.note(b"c1") is None
    assert (await ledger.heard(b"c1", FIRST, ttl=300)).requests == 1


async def test_without_a_store_the_least_recently_heard_conversation_goes_first() -> None:
    """The in-process map is bounded (``LOCAL_NOTES``): hearing a conversation again keeps it."""
    ledger = CacheLedger(None, clock=lambda: 0.0)
    for n in range(LOCAL_NOTES):
        await ledger.heard(b"c%d" % n, FIRST, ttl=300)
    await ledger.heard(b"c0", NEXT, ttl=300)  # heard again: now the most recent
    await ledger.heard(b"one-more", FIRST, ttl=300)
    assert await ledger.note(b"c1") is None
    assert await ledger.note(b"c0") is not None and await ledger.note(b"one-more") is not None
    assert await ledger.note(b"c%d" % (LOCAL_NOTES - 1)) is not None

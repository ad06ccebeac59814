"""``engine.economy.prompt_cache`` and ``core.notes``: what the provider reported of each conversation's
requests, remembered for its next request — in the store's records (shared by replicas, charged to the
tenant) or, with no store, in a bounded map — and judged only against the same conversation's own.

Clocks are lists the test moves by hand: nothing here depends on how fast the machine is.
"""

from __future__ import annotations

from compact_hook.core.calibration import Billed
from compact_hook.core.notes import THREADS, CacheNote, Heard, Lineage, Notes, Prefix
from compact_hook.engine.economy.prompt_cache import KEEP_TTLS, LOCAL_NOTES, PREFIX, CacheLedger
from compact_hook.proxy.feedback.usage import earlier_of
from compact_hook.state.store import MemoryStore

FIRST = Heard(read=0, written=800, uncached=200, forwarded=1_000)
NEXT = Heard(read=800, written=150, uncached=50, forwarded=1_100)


def prints(*names: str) -> list[bytes]:
    return [name.encode().ljust(16, b".") for name in names]


A1 = prints("task", "a1")
A2 = prints("task", "a1", "a2")
B1 = prints("task", "b1")
B2 = prints("task", "b1", "b2")
KEEP = (300.0, "team:t")


def on(client: list[bytes], sent: list[bytes] | None = None) -> Lineage:
    return Lineage(client, client if sent is None else sent)


async def test_the_first_report_starts_a_note_and_the_next_one_updates_it() -> None:
    """The first request heard is remembered as the conversation's first (its bill against our
    count); the next one counts as a second request and teaches how fast it grows."""
    now = [1_000.0]
    ledger = CacheLedger(None, clock=lambda: now[0])
    assert await ledger.note(b"c1", A1) is None
    first = await ledger.heard(b"c1", FIRST, on(A1), KEEP)
    assert (first.seen_at, first.requests, first.first_billed, first.first_forwarded) == (
        1_000.0,
        1,
        1_000,
        1_000,
    )
    now[0] = 1_010.0
    second = await ledger.heard(b"c1", NEXT, on(A2), KEEP)
    assert (second.seen_at, second.requests, second.read, second.forwarded) == (1_010.0, 2, 800, 1_100)
    assert second.growth == 100.0 and second.first_billed == 1_000  # the first stays the first
    assert second.before == Billed(1_000, 1_000)
    assert await ledger.note(b"c1", A2 + prints("a3")) == second
    assert await ledger.note(b"c2", A2) is None  # one key's report is not another's


async def test_two_conversations_that_begin_alike_keep_a_note_each_and_never_judge_each_others_bills() -> (
    None
):
    """Sub-agents of one prompt, a task run twice, Codex sessions of one repository: the same first
    entries, the same key. Each request reads the note of the conversation it extends."""
    ledger = CacheLedger(None, clock=lambda: 0.0)
    await ledger.heard(b"k", FIRST, on(A1), KEEP)
    await ledger.heard(b"k", Heard(0, 0, 1_300, 1_000), on(B1), KEEP)  # the other counted 1.3×
    a, b = await ledger.note(b"k", A2), await ledger.note(b"k", B2)
    assert a is not None and b is not None
    assert (a.billed, b.billed) == (1_000, 1_300)
    assert a.client == Prefix.of(A1) and b.client == Prefix.of(B1)
    assert await ledger.note(b"k", prints("task", "c1")) is None  # extends neither


def test_a_conversation_that_changed_its_last_entry_still_finds_its_note_but_one_that_shares_only_its_task_does_not() -> (
    None
):
    """Text added to the last tool result's message, a reminder replaced: the next request extends the
    last one but for its last entry. Its note is found (its bills are not continued: the request
    billed is no prefix of this one); a conversation sharing only the task with a note is not given it."""
    asked = prints("task", "a1", "next?")
    notes, _ = Notes().heard(0.0, FIRST, on(asked))
    assert notes.of(prints("task", "a1", "a2", "next?")) is not None
    assert earlier_of(notes.of(prints("task", "a1", "a2")), on(prints("task", "a1", "a2"))).previous is None
    short, _ = Notes().heard(0.0, FIRST, on(A1))
    assert short.of(prints("task", "c1", "c2")) is None
    apart, _ = notes.heard(1.0, NEXT, on(prints("task", "a1", "b")))
    assert len(apart.notes) == 2  # not merged: it may as well be another conversation


async def test_a_bill_is_set_against_the_last_only_where_what_was_billed_is_a_prefix_of_what_we_forward() -> (
    None
):
    """After a compaction what we forward no longer begins with what was billed: the next bill is
    compared with nothing, and the note's bills start again from it."""
    notes, _ = Notes().heard(0.0, FIRST, on(A1))
    note = notes.of(A2)
    assert note is not None
    assert earlier_of(note, on(A2)).previous == Billed(1_000, 1_000)
    compacted = on(A2, prints("summary", "a2"))
    assert earlier_of(note, compacted).previous is None
    _, after = notes.heard(1.0, NEXT, compacted)
    assert after.first == Billed(1_000, 1_100) and after.before is None and after.requests == 2


async def test_a_key_keeps_a_few_notes_the_least_recently_heard_going_first() -> None:
    notes = Notes()
    for n in range(THREADS + 1):
        notes, _ = notes.heard(float(n), FIRST, on(prints("task", f"t{n}")))
    assert len(notes.notes) == THREADS
    assert notes.of(prints("task", "t0", "more")) is None
    assert notes.of(prints("task", f"t{THREADS}", "more")) is not None
    assert Notes.from_text(notes.to_text()) == notes


async def test_with_a_store_a_replica_reads_the_note_another_one_wrote() -> None:
    store = MemoryStore(100, 60)
    assert await CacheLedger(store).note(b"c1", A1) is None
    written = await CacheLedger(store, clock=lambda: 50.0).heard(b"c1", FIRST, on(A1), KEEP)
    assert await store.get_record(PREFIX + b"c1") == written.to_text()
    assert await CacheLedger(store).note(b"c1", A2) == CacheNote.from_text(written.to_text())
    assert await CacheLedger(None).note(b"c1", A2) is None  # the in-process map is not the store


async def test_a_stored_note_outlives_the_cache_it_describes_by_a_few_lifetimes() -> None:
    now = [0.0]
    store = MemoryStore(100, 60, clock=lambda: now[0])
    ledger = CacheLedger(store)
    await ledger.heard(b"c1", FIRST, on(A1), KEEP)
    now[0] = 300 * KEEP_TTLS - 1
    assert await ledger.note(b"c1", A1) is not None  # long past the cache's own lifetime: cold, not new
    now[0] = 300 * KEEP_TTLS + 1
    assert await ledger.note(b"c1", A1) is None


async def test_notes_already_read_are_used_as_given_not_read_again() -> None:
    """``known``: the response's notes as read to judge it. Empty given means they were read and none
    found, so the report starts a new note even if one was stored since."""
    store = MemoryStore(100, 60)
    ledger = CacheLedger(store)
    await ledger.heard(b"c1", FIRST, on(A1), KEEP)
    fresh = await ledger.heard(b"c1", NEXT, on(A2), KEEP, known=Notes())
    assert fresh.requests == 1 and fresh.first_billed == NEXT.billed
    given = Notes((CacheNote(seen_at=0.0, requests=7, forwarded=1_000, client=Prefix.of(A1)),))
    assert (await ledger.heard(b"c1", NEXT, on(A2), KEEP, known=given)).requests == 8


async def test_a_store_value_that_is_not_our_note_reads_as_none_and_starts_afresh() -> None:
    store = MemoryStore(100, 60)
    await store.put_record(PREFIX + b"c1", "not,a,note", 60)
    ledger = CacheLedger(store)
    assert await ledger.note(b"c1", A1) is None
    assert (await ledger.heard(b"c1", FIRST, on(A1), KEEP)).requests == 1


def test_a_record_that_is_not_ours_reads_as_no_note() -> None:
    assert CacheNote.from_text("1.0,0,0,900,2,0,800,10.0,850,700,1") is None  # a note of an earlier release
    assert Notes.from_text("junk\n1,2,3") == Notes()


async def test_without_a_store_the_least_recently_heard_conversation_goes_first() -> None:
    """The in-process map is bounded (``LOCAL_NOTES``): hearing a conversation again keeps it."""
    ledger = CacheLedger(None, clock=lambda: 0.0)
    for n in range(LOCAL_NOTES):
        await ledger.heard(b"c%d" % n, FIRST, on(A1), KEEP)
    await ledger.heard(b"c0", NEXT, on(A2), KEEP)  # heard again: now the most recent
    await ledger.heard(b"one-more", FIRST, on(A1), KEEP)
    assert await ledger.note(b"c1", A1) is None
    assert await ledger.note(b"c0", A2) is not None and await ledger.note(b"one-more", A1) is not None
    assert await ledger.note(b"c%d" % (LOCAL_NOTES - 1), A1) is not None

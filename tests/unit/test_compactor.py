"""The stateful engine: one summary per compaction, prefix stability, single flight, tenants."""

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

import pytest

from compact_hook import CompactConfig, count_tokens
from compact_hook.core.chain import Owner, scope_of
from compact_hook.core.failures import SummaryFailure
from compact_hook.core.limits import Limits
from compact_hook.core.outcomes import Reason, Removal, Summarizer
from compact_hook.engine import Compactor, CompactRequest, CompactResult
from compact_hook.engine.library import parse_chat
from compact_hook.engine.run import Run
from compact_hook.engine.summary.once import FAILED, Leases
from compact_hook.state.archive import Origin
from compact_hook.state.store import MemoryStore
from compact_hook.wires import Conversation
from tests.compaction import STORE_CONFIG, STORE_SCOPE, chat_request, compact_chat
from tests.fakes import FailingArchive, FakeSummarizer, InMemoryArchive, LockingMemoryStore, SlowSummarizer
from tests.support import (
    is_prefix,
    is_summary,
    load_transcript,
    pairing_problems,
    replay_points,
    sorted_json,
    user,
)

is_summary_message = is_summary

TRANSCRIPT = load_transcript("claude_code_fa812bfe_pre_compact.json")
LIMITS = Limits.of(STORE_CONFIG, None, 0)
assert LIMITS is not None
LIMIT = LIMITS.compact
AT_FIRST_COMPACTION = next(
    TRANSCRIPT[:end] for end in replay_points(TRANSCRIPT) if count_tokens(TRANSCRIPT[:end]) >= LIMIT
)


async def replay_session(
    compactor: Compactor, summarizer: FakeSummarizer, scope: bytes = STORE_SCOPE
) -> list[CompactResult]:
    archive = InMemoryArchive()
    results = []
    for end in replay_points(TRANSCRIPT):
        results.append(
            await compact_chat(compactor, TRANSCRIPT[:end], summarizer, "s", scope=scope, archive=archive)
        )
    return results


async def test_a_replay_makes_one_summary_per_compaction_event() -> None:
    summarizer = FakeSummarizer()
    results = await replay_session(Compactor(MemoryStore(1000, 3600)), summarizer)
    events = [r for r in results if r.cache == "miss"]
    assert len(events) >= 4
    assert len(summarizer.requests) == len(events) == sum(r.summary_calls for r in results)
    assert {r.cache for r in results} == {"none", "hit", "miss"}


async def test_a_summary_model_that_writes_no_summary_is_said_once_and_its_breaker_opens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each answer a loop: the digest stands in for each (counted: ``summary_failure``), the log says
    so once for the group, and the breaker counts them as failures (no call once it is open)."""
    looped = "## Goal and user constraints\n" + "The agent ran the tests and the tests passed.\n" * 40
    summarizer = FakeSummarizer(default=looped, raw=True)
    results = await replay_session(Compactor(MemoryStore(1000, 3600)), summarizer)
    unusable = [r for r in results if r.summary_failure is SummaryFailure.UNUSABLE]
    assert len(unusable) == STORE_CONFIG.breaker_failures == len(summarizer.requests)
    assert all(r.summarizer is Summarizer.DIGEST and r.compacted for r in unusable)
    assert any(r.reason is Reason.BREAKER_OPEN for r in results)
    assert caplog.text.count("the digest stands in") == 1


async def test_without_a_store_every_turn_over_the_threshold_pays_a_summary() -> None:
    stateless = FakeSummarizer()
    await replay_session(Compactor(None), stateless)
    stateful = FakeSummarizer()
    await replay_session(Compactor(MemoryStore(1000, 3600)), stateful)
    assert len(stateless.requests) > 5 * len(stateful.requests)


async def test_every_forwarded_request_is_under_the_threshold_and_valid() -> None:
    limit = LIMIT
    for result in await replay_session(Compactor(MemoryStore(1000, 3600)), FakeSummarizer()):
        assert count_tokens(result.messages) < limit
        assert pairing_problems(result.messages) == []
        assert sum(is_summary_message(m) for m in result.messages) <= 1


async def test_between_compactions_each_forwarded_request_extends_the_previous_one() -> None:
    results = await replay_session(Compactor(MemoryStore(1000, 3600)), FakeSummarizer())
    sizes = []
    for previous, current in zip(results, results[1:], strict=False):
        if current.cache != "miss":
            assert is_prefix(
                [sorted_json(m) for m in previous.messages], [sorted_json(m) for m in current.messages]
            )
        sizes.append(current.stats.compacted_token_count or current.input_tokens)
    drops = sum(1 for a, b in zip(sizes, sizes[1:], strict=False) if b < a)
    assert drops >= 4  # the forwarded size saw-tooths


async def test_kept_messages_are_the_clients_own_objects() -> None:
    results = await replay_session(Compactor(MemoryStore(1000, 3600)), FakeSummarizer())
    originals = {id(m) for m in TRANSCRIPT}
    for result in results:
        assert all(id(m) in originals for m in result.messages if not is_summary_message(m))


async def test_re_compaction_merges_the_previous_summary() -> None:
    summarizer = FakeSummarizer(*[f"summary number {i}" for i in range(1, 50)])
    await replay_session(Compactor(MemoryStore(1000, 3600)), summarizer)
    second = summarizer.transcripts[1]
    assert "### previous summary\n## Goal and user constraints\nsummary number 1" in second


async def test_eight_concurrent_identical_requests_share_one_summary() -> None:
    compactor = Compactor(MemoryStore(1000, 3600))
    summarizer = SlowSummarizer(0.2)
    messages = AT_FIRST_COMPACTION
    results = await asyncio.gather(
        *(
            compact_chat(compactor, messages, summarizer, scope=STORE_SCOPE, archive=InMemoryArchive())
            for _ in range(8)
        )
    )
    assert len(summarizer.requests) == 1
    assert sorted(r.cache for r in results) == ["miss"] + ["shared"] * 7
    assert len({json.dumps(r.messages) for r in results}) == 1
    assert len(compactor.flights) == 0


async def test_a_replica_waits_for_the_lock_holders_summary() -> None:
    shared = LockingMemoryStore()
    first, second = Compactor(shared, Leases(lock_wait=5)), Compactor(shared, Leases(lock_wait=5))
    summarizer = SlowSummarizer(0.3)
    messages = AT_FIRST_COMPACTION
    a, b = await asyncio.gather(
        compact_chat(first, messages, summarizer, scope=STORE_SCOPE, archive=InMemoryArchive()),
        compact_chat(second, messages, summarizer, scope=STORE_SCOPE, archive=InMemoryArchive()),
    )
    assert len(summarizer.requests) == 1
    assert sorted([a.cache, b.cache]) == ["miss", "shared"]
    assert a.messages == b.messages


Moment = Literal["lock", "look"]


class HolderDoneFirst(LockingMemoryStore):
    """A store where another replica's whole compaction (it takes the lock, stores its summary and
    lets go) runs at one moment of ours: just before ours asks for the lock (``"lock"``), or after
    ours decided to compact and before it first looks at the key (``"look"``: its check for a
    recent failure comes between)."""

    def __init__(self, moment: Moment) -> None:
        super().__init__()
        self.moment = moment
        self.other: Callable[[], Awaitable[object]] | None = None

    async def _at(self, moment: Moment) -> None:
        other, self.other = (self.other, None) if moment == self.moment else (None, self.other)
        if other is not None:
            await other()

    async def try_lock(self, key: bytes, ttl: float) -> str | None:
        await self._at("lock")
        return await super().try_lock(key, ttl)

    async def get_note(self, key: bytes) -> str | None:
        if key.startswith(FAILED):
            await self._at("look")
        return await super().get_note(key)


async def _holder_done_first(moment: Moment) -> None:
    """The replica that comes second uses the first's summary: one summary call, the same messages."""
    shared = HolderDoneFirst(moment)
    first, second = Compactor(shared, Leases(lock_wait=5)), Compactor(shared, Leases(lock_wait=5))
    summarizer = FakeSummarizer()
    made: list[CompactResult] = []

    async def first_replica() -> None:
        archive = InMemoryArchive()
        made.append(
            await compact_chat(first, AT_FIRST_COMPACTION, summarizer, scope=STORE_SCOPE, archive=archive)
        )

    shared.other = first_replica
    late = await compact_chat(
        second, AT_FIRST_COMPACTION, summarizer, scope=STORE_SCOPE, archive=InMemoryArchive()
    )
    assert made[0].cache == "miss" and late.cache == "shared"
    assert len(summarizer.requests) == 1 and late.messages == made[0].messages


async def test_a_replica_that_takes_the_lock_after_the_holder_released_it_uses_the_holders_summary() -> None:
    """Both replicas looked before either had stored it; the first made the summary, stored it and
    unlocked just before the second asked for the lock. Taking the lock is not enough: the second
    looks again and finds the first's (it made a second summary: two summary calls for eight
    concurrent requests, no store trouble, on a fresh clone's CI)."""
    await _holder_done_first("lock")


async def test_a_replica_whose_first_look_comes_after_the_holder_stored_it_uses_the_holders_summary() -> None:
    """The first replica's summary is stored and its lock gone by the time the second looks: what
    the second finds there is not what it decided from, so it is the first's (it made a second
    summary: two for eight concurrent requests, no store trouble, on CI under load)."""
    await _holder_done_first("look")


async def test_a_crashed_lock_holder_does_not_block_others_forever(caplog: pytest.LogCaptureFixture) -> None:
    shared = LockingMemoryStore()
    compactor = Compactor(shared, Leases(lock_ttl=0.3, lock_wait=5))
    messages = AT_FIRST_COMPACTION
    probe = await compact_chat(Compactor(MemoryStore(10, 10)), messages, FakeSummarizer())
    assert probe.cache == "miss"
    for key in list(shared._entries):
        del shared._entries[key]
    # Another replica took every possible lock and died: its locks expire, we compute ourselves.
    summarizer = FakeSummarizer()
    original_try_lock = shared.try_lock
    taken: list[bytes] = []

    async def dead_holder_first(key: bytes, ttl: float) -> str | None:
        if key not in taken:
            taken.append(key)
            await original_try_lock(key, 0.3)
        return await original_try_lock(key, ttl)

    shared.try_lock = dead_holder_first  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="compact_hook.engine.summary.once"):
        result = await compact_chat(
            compactor, messages, summarizer, scope=STORE_SCOPE, archive=InMemoryArchive()
        )
    assert result.compacted and result.cache == "miss" and len(summarizer.requests) == 1
    assert "lock ended with no summary (expired or its replica stopped); making it" in caplog.text


async def test_a_waiter_times_out_into_computing_itself() -> None:
    shared = LockingMemoryStore()
    compactor = Compactor(shared, Leases(lock_ttl=60, lock_wait=0.2))
    messages = AT_FIRST_COMPACTION
    original_try_lock = shared.try_lock
    calls = 0

    async def always_held_elsewhere(key: bytes, ttl: float) -> str | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await original_try_lock(key, 60)  # a live holder that never finishes
        return await original_try_lock(key, ttl)

    shared.try_lock = always_held_elsewhere  # type: ignore[method-assign]
    summarizer = FakeSummarizer()
    result = await compact_chat(compactor, messages, summarizer, scope=STORE_SCOPE, archive=InMemoryArchive())
    assert result.compacted and len(summarizer.requests) == 1


async def test_tenants_never_see_each_others_compactions() -> None:
    store = MemoryStore(1000, 3600)
    compactor = Compactor(store)
    messages = AT_FIRST_COMPACTION
    team_a = FakeSummarizer("summary for team a")
    team_b = FakeSummarizer("summary for team b")
    a = await compact_chat(compactor, messages, team_a, scope=STORE_SCOPE, archive=InMemoryArchive())
    team_b_scope = scope_of(STORE_CONFIG, Owner("model", "team:b", "chat"), "1")
    b = await compact_chat(compactor, messages, team_b, scope=team_b_scope, archive=InMemoryArchive())
    assert (a.cache, b.cache) == ("miss", "miss")
    assert "team b" in json.dumps(b.messages) and "team a" not in json.dumps(b.messages)
    again = await compact_chat(
        compactor, messages, FakeSummarizer(), scope=STORE_SCOPE, archive=InMemoryArchive()
    )
    assert again.cache == "hit" and "team a" in json.dumps(again.messages)


async def test_a_failed_re_compaction_still_forwards_the_stored_compaction() -> None:
    store = MemoryStore(1000, 3600)
    compactor = Compactor(store)
    results = await replay_session(Compactor(store), FakeSummarizer())
    assert any(r.cache == "miss" for r in results)
    stored = await compact_chat(compactor, TRANSCRIPT, FakeSummarizer(), scope=STORE_SCOPE)
    assert stored.cache == "hit"
    broken = FakeSummarizer(*[RuntimeError("down")] * 10)
    # over the trigger again, still inside the window
    grown = TRANSCRIPT + [user("x " * (19_000 - stored.output_tokens))]
    result = await compact_chat(compactor, grown, broken, scope=STORE_SCOPE, archive=InMemoryArchive())
    assert result.reason == "summary_failed" and len(broken.requests) == 3 == result.summary_calls
    assert result.compacted and result.cache == "hit"
    assert pairing_problems(result.messages) == []


async def test_an_edited_history_does_not_reuse_a_compaction_of_the_old_one() -> None:
    store = MemoryStore(1000, 3600)
    await replay_session(Compactor(store), FakeSummarizer())
    edited = [dict(TRANSCRIPT[0], content="a different task")] + TRANSCRIPT[1:]
    summarizer = FakeSummarizer()
    result = await compact_chat(Compactor(store), edited, summarizer, archive=InMemoryArchive())
    assert result.cache == "miss" and len(summarizer.requests) >= 1


async def test_a_clearing_boundary_made_by_this_request_is_not_reported_as_a_cache_hit() -> None:
    """Issue 7: `hit` on a conversation never seen, because the boundary was stored and read back."""
    clearing = CompactConfig(
        context_window=60_000,
        clear_trigger_ratio=0.5,
        clear_at_least=1000,
        tool_output_policy="none",
        user_message_budget=0,
        archive_dir="/nonexistent",
    )
    conversation = parse_chat(TRANSCRIPT[:120])
    assert isinstance(conversation, Conversation)
    compactor = Compactor(MemoryStore(100, 3600))
    first = await compactor.compact(
        CompactRequest(conversation, clearing, FakeSummarizer(), scope=STORE_SCOPE)
    )
    assert first.cleared > 0 and first.cache == "none" and not first.compacted
    again = await compactor.compact(
        CompactRequest(conversation, clearing, FakeSummarizer(), scope=STORE_SCOPE)
    )
    assert again.cache == "hit" and again.messages == first.messages


async def test_a_failed_summary_is_remembered_so_the_next_turns_do_not_repeat_it() -> None:
    compactor = Compactor(MemoryStore(100, 3600), Leases(failure_ttl=60))
    broken = FakeSummarizer(*[RuntimeError("down")] * 20)
    first = await compact_chat(compactor, AT_FIRST_COMPACTION, broken, archive=InMemoryArchive())
    assert first.reason == "summary_failed" and first.summary_calls == 3
    points = [end for end in replay_points(TRANSCRIPT) if end > len(AT_FIRST_COMPACTION)][:3]
    for end in points:
        later = await compact_chat(compactor, TRANSCRIPT[:end], broken, archive=InMemoryArchive())
        assert later.reason == "summary_failed" and later.summary_calls == 0
    assert len(broken.requests) == 3


async def test_a_failure_is_forgotten_after_its_ttl() -> None:
    compactor = Compactor(MemoryStore(100, 3600), Leases(failure_ttl=0.05))
    await compact_chat(compactor, AT_FIRST_COMPACTION, FakeSummarizer(*[RuntimeError("down")] * 3))
    await asyncio.sleep(0.1)
    working = FakeSummarizer()
    result = await compact_chat(compactor, AT_FIRST_COMPACTION, working, archive=InMemoryArchive())
    assert result.compacted and len(working.requests) == 1


async def test_a_waiting_replica_does_not_repeat_the_holders_failure() -> None:
    shared = LockingMemoryStore()
    first, second = Compactor(shared, Leases(lock_wait=5)), Compactor(shared, Leases(lock_wait=5))
    failing = SlowSummarizer(0.2, *[RuntimeError("down")] * 20)
    a, b = await asyncio.gather(
        compact_chat(first, AT_FIRST_COMPACTION, failing, archive=InMemoryArchive()),
        compact_chat(second, AT_FIRST_COMPACTION, failing, archive=InMemoryArchive()),
    )
    assert len(failing.requests) == 3  # the holder's 1 + 2 retries; the waiter made none
    assert sorted([a.summary_calls, b.summary_calls]) == [0, 3]
    assert a.reason == b.reason == "summary_failed"


async def test_a_failed_archive_is_reported_remembered_and_retried_on_a_later_turn() -> None:
    compactor = Compactor(MemoryStore(100, 3600))
    failing = FailingArchive()
    first = await compact_chat(compactor, AT_FIRST_COMPACTION, FakeSummarizer(), archive=failing)
    assert first.compacted and first.archive_status == "failed" and first.archive_path is None
    [(_, lost)] = failing.attempts
    working = InMemoryArchive()
    request = chat_request(list(AT_FIRST_COMPACTION), FakeSummarizer(), archive=working)
    run = await Run.measure(request, compactor.memory)
    decision = await compactor.decide(run)
    assert decision.state.unarchived and working.saved == []  # deciding writes nothing
    later = await compactor.carry_out(run, decision)
    assert later.cache == "hit" and later.archive_status == "written"
    assert working.saved == [(working.saved[0][0], lost)]  # the same entries, archived now
    again = await compact_chat(compactor, AT_FIRST_COMPACTION, FakeSummarizer(), archive=working)
    assert again.archive_status is None and len(working.saved) == 1  # retried once, not every turn


async def test_orphan_results_removed_by_normalization_are_archived() -> None:
    messages = [user("q"), {"role": "tool", "tool_call_id": "gone", "content": "stale output"}, user("go")]
    archive = InMemoryArchive()
    always = dataclasses.replace(STORE_CONFIG, normalize="always")
    conversation = parse_chat(messages)
    assert isinstance(conversation, Conversation)
    result = await Compactor(None).compact(
        CompactRequest(conversation, always, FakeSummarizer(), archive=archive)
    )
    assert result.normalized == 1 and messages[1] not in result.messages
    assert [saved for _, saved in archive.saved] == [[messages[1]]]


async def test_the_archive_audit_holds_the_summary_the_model_saw_instead() -> None:
    archive = InMemoryArchive()
    conversation = parse_chat(AT_FIRST_COMPACTION)
    assert isinstance(conversation, Conversation)
    origin = Origin("model", "chat", "call-7")
    request = CompactRequest(
        conversation,
        STORE_CONFIG,
        FakeSummarizer(),
        "s",
        STORE_SCOPE,
        archive,
        tenant="team:a",
        origin=origin,
    )
    result = await Compactor(MemoryStore(100, 3600)).compact(request)
    [audit] = archive.audits
    [(_, saved)] = archive.saved
    assert audit is not None and audit.removal is Removal.SUMMARIZED and audit.origin == origin
    assert audit.summarizer is Summarizer.MODEL
    assert any(is_summary(m) and audit.summary in str(m["content"]) for m in result.messages)
    assert audit.entries is not None and audit.entry_count == len(saved)
    first, last = audit.entries
    assert AT_FIRST_COMPACTION[first] is saved[0] and AT_FIRST_COMPACTION[last] is saved[-1]
    assert audit.tokens_before > audit.tokens_after > 0

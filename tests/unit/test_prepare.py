"""Prepared compaction: made in the background from ``prepare_ratio``, applied at the trigger.

The engine is driven like the proxy drives it, turn by turn through a real Claude Code
session, with an agent's pause between turns (the background queue drains); the summarizer
is a fake at the edge, the stores are the real in-process ones (a locking one stands for
Redis shared by two replicas).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

from compact_hook import CompactConfig, count_tokens
from compact_hook.core.limits import Limits
from compact_hook.core.outcomes import CacheStatus, Preparation, Summarizer
from compact_hook.engine import Compactor, CompactResult
from compact_hook.engine.ahead.background import Background, Job
from compact_hook.engine.summary.breaker import Breaker
from compact_hook.settings.setting import resolved
from compact_hook.state.store import MemoryStore
from tests.compaction import (
    AT_TRIGGER,
    IN_ZONE,
    LIMITS,
    POINTS,
    STORE_CONFIG,
    TRANSCRIPT,
    Replica,
    compact_chat,
    idle,
    loop_config,
    replay_client_loop,
    replica,
)
from tests.fakes import FakeSummarizer, InMemoryArchive, LockingMemoryStore, SlowSummarizer
from tests.support import (
    is_prefix,
    is_summary,
    pairing_problems,
    sorted_json,
)


class GatedSummarizer(FakeSummarizer):
    """Answers only once ``release`` is set: a summary in flight for as long as a test wants."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def __call__(self, messages: list[Any]) -> str:
        self.started.set()
        await self.release.wait()
        return await super().__call__(messages)


async def compact_turn(
    compactor: Compactor,
    messages: list[Any],
    summarizer: Any,
    archive: InMemoryArchive | None = None,
    config: CompactConfig = STORE_CONFIG,
) -> CompactResult:
    """One turn of the session ``s`` (a fresh archive unless given)."""
    return await compact_chat(
        compactor, messages, summarizer, "s", archive=archive or InMemoryArchive(), config=config
    )


async def replay_with_pauses(
    node: Replica, summarizer: Any, archive: InMemoryArchive, config: CompactConfig = STORE_CONFIG
) -> list[CompactResult]:
    results = []
    for end in POINTS:
        results.append(await compact_turn(node.compactor, TRANSCRIPT[:end], summarizer, archive, config))
        await idle(node.background)
    return results


def compaction_turns(results: list[CompactResult]) -> list[int]:
    """Turns where a new compaction reached the forwarded request."""
    return [
        turn
        for turn, result in enumerate(results)
        if result.cache in (CacheStatus.PREPARED, CacheStatus.MISS) and result.compacted
    ]


async def test_every_compaction_event_of_a_replay_applies_a_prepared_summary() -> None:
    summarizer, archive, node = FakeSummarizer(), InMemoryArchive(), replica()
    results = await replay_with_pauses(node, summarizer, archive)
    compactions = compaction_turns(results)
    prepared = [turn for turn in compactions if results[turn - 1].preparation is not None]
    assert len(prepared) >= 4
    for turn in compactions:
        if turn in prepared:  # the turn before was past prepare_ratio: nothing waits
            assert results[turn].cache == CacheStatus.PREPARED and results[turn].summary_calls == 0
        else:  # one tool output jumped from under prepare_ratio to over the window: made now
            assert results[turn - 1].output_tokens < LIMITS.prepare
            assert results[turn].cache == CacheStatus.MISS
    stats = node.compactor.preparations.stats  # type: ignore[union-attr]
    assert stats.tally.applied == len(prepared)
    assert len(summarizer.requests) <= len(compactions) + 1  # at most the last one is unused
    assert stats.tally.unused == stats.tally.made - len(prepared) <= 1


async def test_what_is_forwarded_only_changes_at_compaction_events() -> None:
    results = await replay_with_pauses(replica(), FakeSummarizer(), InMemoryArchive())
    compactions = set(compaction_turns(results))
    for turn in range(1, len(results)):
        if turn not in compactions:
            assert is_prefix(
                [sorted_json(m) for m in results[turn - 1].messages],
                [sorted_json(m) for m in results[turn].messages],
            )
    for result in results:
        assert count_tokens(result.messages) < LIMITS.compact
        assert pairing_problems(result.messages) == []
        assert sum(is_summary(m) for m in result.messages) <= 1


async def test_a_prepared_compaction_is_not_applied_under_the_trigger() -> None:
    node, summarizer = replica(), FakeSummarizer()
    first = await compact_turn(node.compactor, IN_ZONE, summarizer)
    assert first.preparation == Preparation.STARTED and not first.compacted
    await idle(node.background)
    again = await compact_turn(node.compactor, IN_ZONE, summarizer)
    assert again.preparation == Preparation.READY
    assert again.messages == IN_ZONE and not again.compacted
    assert len(summarizer.requests) == 1


async def test_what_is_summarized_is_archived_when_applied_not_when_prepared() -> None:
    node, summarizer, archive = replica(), FakeSummarizer(), InMemoryArchive()
    await compact_turn(node.compactor, IN_ZONE, summarizer, archive)
    await idle(node.background)
    assert archive.saved == []
    applied = await compact_turn(node.compactor, AT_TRIGGER, summarizer, archive)
    assert applied.cache == CacheStatus.PREPARED and applied.archive_status == "written"
    [(_, archived)] = archive.saved
    forwarded = {json.dumps(m, sort_keys=True) for m in applied.messages}
    assert archived and all(json.dumps(m, sort_keys=True) not in forwarded for m in archived)


async def test_the_trigger_awaits_a_preparation_in_flight_instead_of_starting_its_own() -> None:
    node, summarizer = replica(), GatedSummarizer()
    started = await compact_turn(node.compactor, IN_ZONE, summarizer)
    assert started.preparation == Preparation.STARTED
    await summarizer.started.wait()
    trigger = asyncio.ensure_future(compact_turn(node.compactor, AT_TRIGGER, summarizer))
    await asyncio.sleep(0.05)
    assert not trigger.done()  # it waits for the summary already being made
    summarizer.release.set()
    result = await trigger
    assert result.cache == CacheStatus.PREPARED and result.summary_calls == 0 and result.compacted
    assert len(summarizer.requests) == 1


async def test_a_preparation_still_waiting_for_a_slot_is_taken_back_by_the_trigger() -> None:
    node, summarizer = replica(concurrency=1), FakeSummarizer()
    blocker = asyncio.Event()

    async def occupy() -> None:
        await blocker.wait()

    node.background.submit(b"other conversation", Job("team:b", occupy, lambda: None))
    queued = await compact_turn(node.compactor, IN_ZONE, summarizer)
    assert queued.preparation == Preparation.STARTED
    result = await compact_turn(node.compactor, AT_TRIGGER, summarizer)
    assert result.cache == CacheStatus.MISS and result.summary_calls == 1  # as without preparation
    assert node.compactor.preparations.stats.dropped == 1  # type: ignore[union-attr]
    blocker.set()
    await idle(node.background)
    assert len(summarizer.requests) == 1


async def test_a_prepared_compaction_that_no_longer_suffices_is_merged_not_stacked() -> None:
    node = replica()
    summarizer = FakeSummarizer("prepared summary", "merged summary")
    await compact_turn(node.compactor, IN_ZONE, summarizer)
    await idle(node.background)
    # far past the trigger: the prepared compaction alone cannot bring it under
    far = next(TRANSCRIPT[:end] for end in POINTS if count_tokens(TRANSCRIPT[:end]) >= 2 * LIMITS.compact)
    result = await compact_turn(node.compactor, far, summarizer)
    assert result.compacted and result.summary_calls == 1 and result.cache == CacheStatus.MISS
    assert "prepared summary" in summarizer.transcripts[1]
    [summary] = [m for m in result.messages if is_summary(m)]
    assert "merged summary" in json.dumps(summary) and "prepared summary" not in json.dumps(summary)


async def test_a_failed_preparation_counts_toward_the_breaker_and_the_trigger_compacts_itself() -> None:
    node = replica()
    summarizer = FakeSummarizer(*[RuntimeError("model down")] * 3)
    config = dataclasses.replace(STORE_CONFIG, max_retries=0)
    await compact_turn(node.compactor, IN_ZONE, summarizer, config=config)
    await idle(node.background)
    breaker = node.compactor.breaker
    key = Breaker.key("", "")
    assert (await breaker._state(key)).failures == 1
    again = await compact_turn(node.compactor, IN_ZONE, summarizer, config=config)
    assert again.preparation is None  # not retried at once
    assert len(summarizer.requests) == 1
    result = await compact_turn(node.compactor, AT_TRIGGER, summarizer, config=config)
    assert result.cache != CacheStatus.PREPARED and result.summary_calls == 1
    assert node.compactor.preparations.stats.failed == 1  # type: ignore[union-attr]


async def test_a_prepared_answer_that_is_no_summary_is_prepared_as_the_digest_and_heard_by_the_breaker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = replica()
    looped = "## Goal and user constraints\n" + "The agent ran the tests and the tests passed.\n" * 40
    summarizer = FakeSummarizer(default=looped, raw=True)
    await compact_turn(node.compactor, IN_ZONE, summarizer)
    await idle(node.background)
    assert (await node.compactor.breaker._state(Breaker.key("", ""))).failures == 1
    assert caplog.text.count("the digest stands in") == 1 and len(summarizer.requests) == 1
    applied = await compact_turn(node.compactor, AT_TRIGGER, summarizer)
    assert applied.cache == CacheStatus.PREPARED and applied.summarizer is Summarizer.DIGEST


async def test_two_replicas_prepare_a_conversation_once() -> None:
    shared, prepared = LockingMemoryStore(), LockingMemoryStore()
    first, second = replica(shared, prepared), replica(shared, prepared)
    summarizer = GatedSummarizer()
    started = await compact_turn(first.compactor, IN_ZONE, summarizer)
    await summarizer.started.wait()
    other = await compact_turn(second.compactor, IN_ZONE, summarizer)
    assert started.preparation == Preparation.STARTED
    assert len(second.background) == 0  # the lock says the first replica is on it
    trigger = asyncio.ensure_future(compact_turn(second.compactor, AT_TRIGGER, summarizer))
    await asyncio.sleep(0.05)
    summarizer.release.set()
    result = await trigger
    await idle(first.background)
    assert other.preparation == Preparation.RUNNING
    assert result.cache == CacheStatus.PREPARED and result.summary_calls == 0
    assert len(summarizer.requests) == 1


async def test_a_replica_whose_preparation_starts_after_anothers_ended_does_not_prepare_it_again() -> None:
    """The lock says another replica is on it only while that one runs: a preparation queued here
    before the other took the lock, run after it let go, finds its compaction and makes none (a
    loaded CI machine: 6 summary calls for 4 events on a Redis Cluster)."""
    shared, prepared = LockingMemoryStore(), LockingMemoryStore()
    first, second = replica(shared, prepared), replica(shared, prepared, concurrency=1)
    busy = asyncio.Event()
    second.background.submit(b"busy", Job("other", busy.wait, lambda: None))
    summarizer = FakeSummarizer()
    queued = await compact_turn(second.compactor, IN_ZONE, summarizer)
    started = await compact_turn(first.compactor, IN_ZONE, summarizer)
    await idle(first.background)
    busy.set()
    await idle(second.background)
    trigger = await compact_turn(second.compactor, AT_TRIGGER, summarizer)
    assert queued.preparation == started.preparation == Preparation.STARTED
    assert len(summarizer.requests) == 1
    assert trigger.cache == CacheStatus.PREPARED and trigger.summary_calls == 0


async def test_preparation_off_or_digest_never_runs_in_the_background() -> None:
    for config in (
        dataclasses.replace(STORE_CONFIG, prepare=False),
        dataclasses.replace(STORE_CONFIG, summary_model="digest"),
    ):
        node, summarizer = replica(), FakeSummarizer()
        result = await compact_turn(node.compactor, IN_ZONE, summarizer, config=config)
        assert result.preparation is None and len(node.background) == 0
        trigger = await compact_turn(node.compactor, AT_TRIGGER, summarizer, config=config)
        assert trigger.cache == CacheStatus.MISS


async def test_closing_cancels_preparations_and_releases_their_locks() -> None:
    prepared = LockingMemoryStore()
    node, summarizer = replica(prepared=prepared), GatedSummarizer()
    await compact_turn(node.compactor, IN_ZONE, summarizer)
    await summarizer.started.wait()
    assert prepared.locks
    assert await node.background.close() == 1
    assert prepared.locks == {}
    stats = node.compactor.preparations.stats  # type: ignore[union-attr]
    assert stats.cancelled == 1 and stats.tally.made == 0
    assert (await compact_turn(node.compactor, IN_ZONE, summarizer)).preparation is None  # closed


async def test_the_prepared_cut_leaves_at_the_trigger_what_a_compaction_made_there_would() -> None:
    prepared_node, plain = replica(), Compactor(MemoryStore(1000, 3600))
    await compact_turn(prepared_node.compactor, IN_ZONE, FakeSummarizer())
    await idle(prepared_node.background)
    applied = await compact_turn(prepared_node.compactor, AT_TRIGGER, FakeSummarizer())
    made_there = await compact_turn(plain, AT_TRIGGER, FakeSummarizer())
    assert applied.cache == CacheStatus.PREPARED and made_there.cache == CacheStatus.MISS
    assert applied.output_tokens <= made_there.output_tokens * 1.25


# -- the background queue ---------------------------------------------------------------------


async def test_the_queue_drops_the_oldest_waiting_job_of_the_busiest_tenant() -> None:
    background, ran, dropped = Background(concurrency=1, queue=3), [], []
    gate = asyncio.Event()

    def job(tenant: str, name: str) -> Job:
        async def work() -> None:
            await gate.wait()
            ran.append(name)

        return Job(tenant, work, lambda: dropped.append(name))

    assert background.submit(b"0", job("a", "a0"))  # runs
    for key, tenant, name in ((b"1", "a", "a1"), (b"2", "a", "a2"), (b"3", "b", "b1"), (b"4", "b", "b2")):
        assert background.submit(key, job(tenant, name))
    assert dropped == ["a1"]  # a had two waiting, b one: a's oldest went
    assert not background.submit(b"2", job("a", "again"))  # known key: never twice
    gate.set()
    await idle(background)
    assert ran == ["a0", "a2", "b1", "b2"]


async def test_a_job_that_raises_is_logged_and_the_queue_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    background, ran = Background(concurrency=1, queue=2), []

    async def broken() -> None:
        raise RuntimeError("boom")

    async def fine() -> None:
        ran.append("fine")

    background.submit(b"a", Job("t", broken, lambda: None))
    background.submit(b"b", Job("t", fine, lambda: None))
    await idle(background)
    assert ran == ["fine"] and "background work failed" in caplog.text


def test_prepare_ratio_defaults_below_the_trigger_and_is_validated() -> None:
    assert resolved(CompactConfig(), "prepare_ratio") == 0.75
    assert resolved(CompactConfig(trigger_ratio=0.6), "prepare_ratio") == pytest.approx(0.51)
    assert resolved(CompactConfig(prepare_ratio=0.5), "prepare_ratio") == 0.5
    with pytest.raises(ValueError, match="prepare_ratio"):
        CompactConfig(prepare_ratio=0.95)
    limits = Limits.of(CompactConfig(context_window=1000, prepare=False), None, 0)
    assert limits is not None and limits.prepare == limits.compact


async def test_every_hooks_cleanup_is_chained_once_after_the_proxys_drain_at_shutdown() -> None:
    from litellm.proxy.shutdown.graceful_shutdown_manager import GracefulShutdownManager

    from compact_hook.proxy.lifecycle import shutdown

    original = GracefulShutdownManager.__dict__["wait_for_drain"]
    registered = list(shutdown._cleanups)
    shutdown._cleanups.clear()
    calls: list[str] = []

    class Hook:
        def __init__(self, name: str) -> None:
            self.name = name

        async def close(self) -> None:
            calls.append(self.name)

    first, second, discarded = Hook("first"), Hook("second"), Hook("discarded")
    try:
        assert shutdown.on_shutdown(first.close) and shutdown.on_shutdown(first.close)
        assert shutdown.on_shutdown(discarded.close) and shutdown.on_shutdown(second.close)
        del discarded  # held weakly: a hook thrown away is not kept alive nor closed
        GracefulShutdownManager._drain_performed = False
        assert await GracefulShutdownManager.wait_for_drain(timeout=1, count_fn=lambda: 0) == 0
        assert calls == ["first", "second"]
    finally:
        GracefulShutdownManager.wait_for_drain = original  # type: ignore[method-assign]
        GracefulShutdownManager._drain_performed = False
        shutdown._cleanups[:] = registered


@pytest.mark.parametrize("window", [14_000, 16_000, 18_000, 20_000])
async def test_with_clearing_on_and_no_prices_every_summary_paid_for_is_applied_but_the_last(
    window: int,
) -> None:
    """Tokens before money: unpriced, with the cheap tiers on, nothing is prepared that a clearing
    batch about to come would leave unused, and a prepared compaction waits for the trigger unless
    it will not suffice there (Gemini CLI's loop at 16K used to pay 14 calls for 7 compactions)."""
    summarizer = FakeSummarizer(*(f"summary number {n}" for n in range(100)))
    count = await replay_client_loop("gemini-0.61.0", loop_config(window), summarizer)
    assert count.calls <= count.applied + 1
    assert max(count.reported_unused, default=0) <= 1  # the report says so, per conversation, as it goes
    assert count.most_unused <= 1  # and the metrics (compact_hook_prepared_session_unused)


@pytest.mark.parametrize(("client", "window"), [("gemini-0.61.0", 16_000), ("codex-0.171.0", 15_000)])
async def test_a_summary_slower_than_the_turns_is_still_applied_not_outgrown_by_a_clearing_batch(
    client: str, window: int
) -> None:
    """A preparation in flight holds the clearing tier back as a prepared one does: cleared
    meanwhile, the conversation outgrew the summary by the trigger, and the next was made from it
    and only the merge reached the provider (Gemini CLI 6 calls for 3 applied, Codex 9 for 5,
    summaries taking three turns)."""
    summarizer = SlowSummarizer(0.03, *(f"summary number {n}" for n in range(100)))
    count = await replay_client_loop(client, loop_config(window), summarizer, pause=0.01)
    assert count.applied >= 3  # the loop compacts several times
    assert count.calls <= count.applied + 1 and count.most_unused <= 1


async def test_a_prepared_compaction_that_suffices_at_the_trigger_is_not_prepared_again() -> None:
    node, summarizer = replica(), FakeSummarizer()
    zone = [end for end in POINTS if LIMITS.prepare <= count_tokens(TRANSCRIPT[:end]) < LIMITS.compact]
    assert zone
    for end in zone:  # every turn past prepare_ratio, under the trigger
        await compact_turn(node.compactor, TRANSCRIPT[:end], summarizer)
        await idle(node.background)
    assert len(summarizer.requests) == 1  # prepared once; it still suffices at the trigger
    last = await compact_turn(node.compactor, TRANSCRIPT[: zone[-1]], summarizer)
    assert last.prepared_unused == 1  # made, waiting for the trigger

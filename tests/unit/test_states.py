"""``engine.memory.states``: a conversation's state, looked up under the longest stored prefix of its
request and written under the prefix it is about; with no store, every request starts afresh.

Requests are measured in the WordCounter world (``tests.compaction.config``); the store is the
real in-process one.
"""

from __future__ import annotations

import dataclasses

from compact_hook.core.chain import OPEN_END, Entry
from compact_hook.core.outcomes import CacheStatus
from compact_hook.engine.memory.states import Restored, States
from compact_hook.engine.result import CompactRequest
from compact_hook.engine.run import ProcessMemory, Run
from compact_hook.state.store import MemoryStore
from compact_hook.wires import Conversation
from tests.compaction import config
from tests.conversations import Call, Said, Step, Tools, body, w, wire_of
from tests.fakes import FakeSummarizer, WordCounter


def session(task: str = "the task", turns: int = 3) -> list[Step]:
    """A task, then ``turns`` tool turns each followed by the user's next word."""
    steps: list[Step] = [Said(task)]
    for n in range(turns):
        steps += [Tools((Call("bash", w(30, f"out{n}")),)), Said(f"next {n}")]
    return steps


async def measured(steps: list[Step], wire: str = "chat") -> Run:
    parsed = wire_of(wire).parse(body(wire, steps))
    assert isinstance(parsed, Conversation), parsed
    request = CompactRequest(parsed, config(), FakeSummarizer(), "s", scope=b"scope", counter=WordCounter())
    return await Run.measure(request, ProcessMemory())


COMPACTION = Entry(covered=4, keep=(0,), summary="what happened")


async def test_with_no_store_every_request_starts_from_nothing() -> None:
    states = States(None)
    run = await measured(session())
    await states.put(run, COMPACTION)
    assert await states.restore(run) == Restored(Entry(), CacheStatus.NONE)


async def test_a_state_put_is_found_by_this_and_later_requests_of_its_conversation_only() -> None:
    """Stored under the prefix it covers, a state is what every longer request of the conversation
    restores (a hit); another conversation's requests never see it."""
    states = States(MemoryStore(100, 60))
    run = await measured(session(turns=3))
    assert await states.restore(run) == Restored()
    await states.put(run, COMPACTION)
    assert await states.restore(run) == Restored(COMPACTION, CacheStatus.HIT)
    later = await measured(session(turns=5))
    assert await states.restore(later) == Restored(COMPACTION, CacheStatus.HIT)
    shorter = await measured(session(turns=1)[:2])  # the task and one call: under the state's span
    assert len(shorter.prints) < COMPACTION.span and await states.restore(shorter) == Restored()
    other = await measured(session("another task", turns=3))
    assert await states.restore(other) == Restored()


async def test_a_stored_state_whose_indices_do_not_fit_the_request_is_ignored() -> None:
    """What a shared store hands back is checked before its indices are trusted: a compaction
    keeping an item it says it summarized is no state at all."""
    store = MemoryStore(100, 60)
    run = await measured(session())
    broken = dataclasses.replace(COMPACTION, keep=(5,))
    await store.put(run.root, run.chain[broken.span], broken)
    assert await States(store).restore(run) == Restored()


async def test_where_thinking_is_not_checked_a_fitted_request_leaves_its_state_as_it_was() -> None:
    store = MemoryStore(100, 60)
    states = States(store)
    run = await measured(session(), "chat")
    assert not run.checks_thinking
    assert await states.unstable(run, Entry()) == Entry()
    assert await states.restore(run) == Restored()  # nothing stored


async def test_a_fitted_request_marks_every_later_thinking_block_stale_and_stores_it_at_the_start() -> None:
    """Anthropic checks thinking blocks against their prefix; a fitted request is no stable one.
    With nothing compacted the state is kept under the conversation's start (``anchor``), so the
    next request, longer, restores it and strips the blocks too."""
    states = States(MemoryStore(100, 60))
    run = await measured(session(), "anthropic")
    assert run.checks_thinking
    unstable = await states.unstable(run, Entry())
    assert unstable == Entry(stale_thinking=((0, OPEN_END),), anchor=run.root_span)
    later = await measured(session(turns=4), "anthropic")
    restored = await states.restore(later)
    assert restored == Restored(unstable, CacheStatus.HIT)
    assert await states.unstable(later, restored.state) == unstable  # already unstable: unchanged


async def test_a_fitted_compacted_request_marks_thinking_stale_from_its_summary_on() -> None:
    states = States(MemoryStore(100, 60))
    run = await measured(session(), "anthropic")
    unstable = await states.unstable(run, COMPACTION)
    assert unstable == dataclasses.replace(COMPACTION, stale_thinking=((COMPACTION.covered, OPEN_END),))
    assert unstable.anchor == 0  # the compaction's own prefix names it
    assert await states.restore(run) == Restored(unstable, CacheStatus.HIT)

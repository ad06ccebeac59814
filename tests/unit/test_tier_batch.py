"""``engine.tiers.batch``: the clearing boundary advanced by one batch of old tool results, weighed by
what clearing them saves, or left where it is.

WordCounter world (1 + words per entry): a result ``outN`` followed by ``size`` words counts
``size + 2``; its placeholder (``[recall 123456]``) counts 3, so clearing it saves ``size - 1``.
The newest ``keep_tool_results`` (2 here) are never cleared.
"""

from __future__ import annotations

from typing import Any

from compact_hook.core.chain import Entry
from compact_hook.engine.result import CompactRequest
from compact_hook.engine.run import ProcessMemory, Run
from compact_hook.engine.tiers.batch import advance_clearing
from compact_hook.wires import Conversation
from tests.compaction import config, tool_session
from tests.conversations import Call, Said, Step, Tools, body, w, wire_of
from tests.fakes import FakeSummarizer, WordCounter


async def measured(data: dict[str, Any], wire: str = "chat", **settings: Any) -> Run:
    parsed = wire_of(wire).parse(data)
    assert isinstance(parsed, Conversation), parsed
    clearing = config(clear_tool_results=True, keep_tool_results=2, **settings)
    request = CompactRequest(parsed, clearing, FakeSummarizer(), "s", scope=b"scope", counter=WordCounter())
    return await Run.measure(request, ProcessMemory())


async def session(outputs: list[int], tool: str = "bash", **settings: Any) -> Run:
    """``tool_session``: system (0), task (1), then a call and its result per output (results at 3, 5, 7…)."""
    return await measured({"messages": tool_session(outputs, tool)}, **settings)


async def test_a_batch_clears_every_result_older_than_the_newest_kept_and_leaves_those() -> None:
    run = await session([60] * 6, clear_at_least=100)
    advanced = advance_clearing(run, Entry())
    assert advanced == Entry(cleared_before=11)  # results 3, 5, 7, 9 cleared; 11 and 13 kept
    view = run.tiers.view(advanced)
    sent = run.request.conversation.entries
    assert all(view.items[i].raw["content"].startswith("[recall ") for i in (3, 5, 7, 9))
    assert all(view.items[i].raw is sent[i] for i in (0, 1, 2, 4, 6, 8, 10, 11, 12, 13))


async def test_a_batch_waits_until_it_saves_at_least_the_least_asked() -> None:
    """Each batch rewrites the provider's cached prefix once: it is worth it only when it saves
    ``clear_at_least`` (``at_least`` given: that instead). Four results of 60 words save 4 × 59."""
    run = await session([60] * 6, clear_at_least=5_000)
    assert advance_clearing(run, Entry()) is None
    assert advance_clearing(run, Entry(), at_least=236) == Entry(cleared_before=11)
    assert advance_clearing(run, Entry(), at_least=237) is None


async def test_only_what_the_new_batch_clears_beyond_the_stored_boundary_counts() -> None:
    """Results already cleared (before the stored boundary) save nothing more; the boundary never
    moves back, nor stays put as a "new" state."""
    run = await session([300, 300, 100, 100, 60, 60])
    assert advance_clearing(run, Entry(), at_least=400) == Entry(cleared_before=11)  # 2 × 299 + 2 × 99
    assert advance_clearing(run, Entry(cleared_before=7), at_least=400) is None  # 2 × 99 left to gain
    assert advance_clearing(run, Entry(cleared_before=7), at_least=198) == Entry(cleared_before=11)
    assert advance_clearing(run, Entry(cleared_before=11), at_least=0) is None


async def test_results_a_compaction_summarized_are_not_weighed() -> None:
    """Under a compaction (``covered``), results are gone from the view: clearing them saves
    nothing, and the newest kept are counted among the results still shown."""
    run = await session([300, 300, 300, 100, 60, 60])
    compaction = Entry(covered=8, keep=(0, 1), summary="what happened")
    assert advance_clearing(run, Entry(), at_least=400) == Entry(cleared_before=11)
    assert advance_clearing(run, compaction, at_least=400) is None  # only result 9 (99) is shown
    advanced = advance_clearing(run, compaction, at_least=99)
    assert advanced is not None and (advanced.covered, advanced.cleared_before) == (8, 11)


async def test_protected_tools_results_save_nothing_so_no_batch_forms() -> None:
    run = await session([300] * 6, tool="manage_todo_list")
    assert advance_clearing(run, Entry(), at_least=1) is None


async def test_where_thinking_is_checked_a_batch_marks_it_stale_from_the_first_newly_cleared_result() -> None:
    """Anthropic checks each thinking block against everything before it: the batch changes the
    prefix from the old boundary on, so blocks produced before this request, after it, are stale."""
    steps: list[Step] = [Said(w(5, "task"))]
    steps += [Tools((Call("bash", w(60, f"out{n}")),)) for n in range(6)]
    run = await measured(body("anthropic", [*steps, Said("next")]), "anthropic")
    assert run.checks_thinking
    old = advance_clearing(run, Entry(), at_least=1)
    assert old is not None and old.stale_thinking == ((0, len(run.prints)),)
    first = Entry(cleared_before=4)
    advanced = advance_clearing(run, first, at_least=1)
    assert advanced is not None and advanced.cleared_before > first.cleared_before
    assert advanced.stale_thinking == ((first.cleared_before, len(run.prints)),)

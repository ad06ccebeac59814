"""``engine.ahead``: what the compactor asks about compactions prepared ahead — each answer "none"
when preparing is off, so its recipe reads the same either way.

A replica as the proxy runs one (``tests.compaction.replica``: real in-process stores and
background queue, a fake summarizer) in the WordCounter world: twelve 60-word tool results make
788 tokens, past ``prepare_ratio`` (750) and under the trigger (900).
"""

from __future__ import annotations

from typing import Any

from compact_hook.core.chain import Entry
from compact_hook.core.economics import Economy
from compact_hook.core.notes import Warmth
from compact_hook.core.outcomes import Preparation
from compact_hook.core.pricing import Prices
from compact_hook.engine.ahead.lookup import Ahead
from compact_hook.engine.decision import Decision, Step
from compact_hook.engine.result import CompactRequest
from compact_hook.engine.run import ProcessMemory, Run
from compact_hook.wires import Conversation
from tests.compaction import Replica, config, idle, replica, tool_session
from tests.conversations import wire_of
from tests.fakes import FakeSummarizer, WordCounter, sectioned

SONNET = Prices.per_million(3.0, 3.75, 0.30, 15.0)


async def measured(task: str = "the task", **settings: Any) -> Run:
    messages = tool_session([60] * 12)
    messages[1]["content"] = task
    parsed = wire_of("chat").parse({"messages": messages})
    assert isinstance(parsed, Conversation), parsed
    request = CompactRequest(
        parsed, config(**settings), FakeSummarizer(), "s", scope=b"scope", counter=WordCounter()
    )
    return await Run.measure(request, ProcessMemory())


def due(run: Run) -> Decision:
    """The decision past ``prepare_ratio``: prepare from no state, the client's own view."""
    return Decision(Step.PREPARE, state=Entry(), view=run.tiers.view(None))


async def prepared(node: Replica, run: Run) -> Entry:
    """A compaction prepared for ``run``'s conversation, the background idle again."""
    assert await node.compactor.ahead.start(run, due(run)) is Preparation.STARTED
    await idle(node.background)
    ready = await node.compactor.ahead.at_trigger(run, Entry())
    assert ready is not None
    return ready


async def test_with_nowhere_to_prepare_every_question_answers_none() -> None:
    ahead, run = Ahead(None), await measured()
    assert run.window.prepare <= run.total < run.window.compact
    assert not ahead.on(run)
    assert await ahead.start(run, due(run)) is None
    assert await ahead.waiting(run, Entry()) is False
    assert await ahead.at_trigger(run, Entry()) is None
    assert await ahead.worth_applying(run, due(run), early=True) is None
    assert await ahead.unused(run) is None


async def test_a_model_that_prepares_nothing_starts_nothing_in_the_background() -> None:
    """``prepare: false``, or summaries from the digest (free to make at the trigger)."""
    node = replica()
    for settings in ({"prepare": False}, {"summary_model": "digest"}):
        run = await measured(**settings)
        assert not node.compactor.ahead.on(run)
        assert await node.compactor.ahead.start(run, due(run)) is None
    assert len(node.background) == 0 and node.compactor.preparations is not None
    assert node.compactor.preparations.stats.started == 0


async def test_a_compaction_is_started_once_waits_while_made_and_is_found_at_the_trigger() -> None:
    """The turns until the trigger must not outgrow one being prepared (``waiting``); the trigger
    applies it instead of a summary of its own — but not one covering no more than its state."""
    node = replica()
    ahead, run = node.compactor.ahead, await measured()
    assert ahead.on(run) and await ahead.waiting(run, Entry()) is False
    assert await ahead.start(run, due(run)) is Preparation.STARTED
    assert await ahead.start(run, due(run)) is Preparation.RUNNING
    assert await ahead.waiting(run, Entry()) is True  # in flight
    await idle(node.background)
    assert await ahead.waiting(run, Entry()) is True  # made, waiting for the trigger
    ready = await ahead.at_trigger(run, Entry())
    assert ready is not None and ready.summary == sectioned("the summary") and ready.covered > 0
    assert await ahead.start(run, due(run)) is Preparation.READY  # it will suffice: not made again
    assert await ahead.at_trigger(run, ready) is None and await ahead.waiting(run, ready) is False
    other = await measured("another task")  # another conversation has nothing prepared
    assert await ahead.at_trigger(other, Entry()) is None and await ahead.waiting(other, Entry()) is False


async def test_applying_a_prepared_compaction_is_counted_and_leaves_none_unused() -> None:
    node = replica()
    ahead, run = node.compactor.ahead, await measured()
    await prepared(node, run)
    assert await ahead.unused(run) == 1
    tally = await ahead.applied(run)
    assert (tally.made, tally.applied, tally.unused) == (1, 1, 0)
    assert await ahead.unused(run) == 0
    assert node.compactor.preparations is not None
    assert node.compactor.preparations.stats.tally.applied == 1
    assert await ahead.unused(await measured("another task")) == 0


async def test_before_the_trigger_a_ready_compaction_is_applied_only_where_it_pays_its_rewrite() -> None:
    """Cost-aware: applying it rewrites the prefix (a warm cache's premium on what it leaves,
    282 tokens) and saves carrying 506 tokens over the turns still to come — few turns left, it
    waits; many, it goes. Unpriced it is never applied early; with the provider not heard yet, only
    where compacting now pays (``early``)."""
    node = replica()
    ahead, run = node.compactor.ahead, await measured()
    ready = await prepared(node, run)

    def forward(warmth: Warmth, turns: int) -> Decision:
        economy = Economy(SONNET, SONNET, warmth, growth=60.0, turns=turns, summary_tokens=10)
        return Decision(Step.FORWARD, state=Entry(), view=run.tiers.view(None), economy=economy)

    assert await ahead.worth_applying(run, due(run), early=True) is None  # unpriced
    assert await ahead.worth_applying(run, forward(Warmth.WARM, turns=4), early=False) is None
    assert await ahead.worth_applying(run, forward(Warmth.WARM, turns=16), early=False) == ready
    assert await ahead.worth_applying(run, forward(Warmth.COLD, turns=4), early=False) == ready
    assert await ahead.worth_applying(run, forward(Warmth.UNKNOWN, turns=16), early=False) is None
    assert await ahead.worth_applying(run, forward(Warmth.UNKNOWN, turns=16), early=True) == ready

"""The decision as a value: which step a request takes, read from ``Compactor.decide`` alone.

Every model here is unpriced (no prices in the request, none in the settings): the rules about
tokens decide by themselves, prices only refine them (``test_economics.py``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from compact_hook.core.chain import Entry
from compact_hook.core.economics import Way
from compact_hook.core.notes import Heard, Lineage
from compact_hook.core.outcomes import Mode, Reason
from compact_hook.core.pricing import Prices
from compact_hook.engine import Compactor
from compact_hook.engine.decision import Decision, Step
from compact_hook.engine.economy import costs as costs_module
from compact_hook.engine.economy.costs import Costs
from compact_hook.engine.run import Run
from compact_hook.engine.summary.compaction import sized_plan
from compact_hook.state.store import MemoryStore
from tests.compaction import (
    AT_TRIGGER,
    IN_ZONE,
    POINTS,
    STORE_CONFIG,
    TRANSCRIPT,
    chat_request,
    config,
    idle,
    priced_request,
    replica,
)
from tests.conversations import Call, Said, Tools, w
from tests.fakes import FakeSummarizer

SONNET = Prices.per_million(3.0, 3.75, 0.30, 15.0)


async def decided(compactor: Compactor, messages: list[object], **request: object) -> Decision:
    built = chat_request(list(messages), FakeSummarizer(), "s")
    built = dataclasses.replace(built, **request)  # type: ignore[arg-type]
    assert built.prices is None  # unpriced: tokens alone decide
    return await compactor.decide(await Run.measure(built, compactor.memory))


@pytest.mark.parametrize(
    ("request_changes", "reason"),
    [
        ({"mode": Mode.OFF}, Reason.OFF),
        ({"config": dataclasses.replace(STORE_CONFIG, enabled=False)}, Reason.DISABLED),
        ({"config": dataclasses.replace(STORE_CONFIG, context_window=None)}, Reason.WINDOW_UNKNOWN),
    ],
)
async def test_a_request_the_hook_cannot_help_is_untouched_and_says_why(
    request_changes: dict[str, object], reason: Reason
) -> None:
    decision = await decided(Compactor(MemoryStore(100, 60)), AT_TRIGGER, **request_changes)
    assert (decision.step, decision.reason, decision.view) == (Step.UNTOUCHED, reason, None)


async def test_a_short_conversation_is_untouched_below_the_threshold() -> None:
    decision = await decided(Compactor(MemoryStore(100, 60)), TRANSCRIPT[: POINTS[0]])
    assert (decision.step, decision.reason) == (Step.UNTOUCHED, Reason.BELOW_THRESHOLD)


async def test_past_prepare_ratio_an_unpriced_model_prepares_and_without_preparing_forwards() -> None:
    assert (await decided(replica().compactor, IN_ZONE)).step is Step.PREPARE
    no_store = Compactor(None)  # nowhere to keep a prepared compaction
    assert (await decided(no_store, IN_ZONE)).step is Step.FORWARD
    off = dataclasses.replace(STORE_CONFIG, prepare=False)  # and no cheap tiers: nothing to do yet
    untouched = await decided(replica().compactor, IN_ZONE, config=off)
    assert (untouched.step, untouched.reason) == (Step.UNTOUCHED, Reason.BELOW_THRESHOLD)


async def test_at_the_trigger_a_prepared_compaction_is_applied_else_one_is_made_now() -> None:
    node = replica()
    assert (await decided(node.compactor, AT_TRIGGER)).step is Step.COMPACT
    await node.compactor.compact(chat_request(list(IN_ZONE), FakeSummarizer(), "s"))  # prepares
    await idle(node.background)
    applied = await decided(node.compactor, AT_TRIGGER)
    assert applied.step is Step.APPLY_PREPARED and applied.prepared is not None
    assert applied.prepared.summary is not None


async def test_forcing_compacts_now_even_under_the_trigger_and_with_one_prepared() -> None:
    node = replica()
    await node.compactor.compact(chat_request(list(IN_ZONE), FakeSummarizer(), "s"))
    await idle(node.background)
    forced = await decided(node.compactor, IN_ZONE, mode=Mode.FORCE)
    assert forced.step is Step.COMPACT and forced.view is not None


async def test_deciding_writes_nothing_the_clearing_batch_is_stored_when_carried_out() -> None:
    """``decide`` only reads: the clearing tier's next boundary travels in the decision, and the
    store holds it only once ``carry_out`` has run."""
    clearing = dataclasses.replace(STORE_CONFIG, clear_tool_results=True, prepare=False)
    compactor = Compactor(MemoryStore(1000, 3600))
    for end in POINTS:
        built = chat_request(list(TRANSCRIPT[:end]), FakeSummarizer(), "s", config=clearing)
        run = await Run.measure(built, compactor.memory)
        decision = await compactor.decide(run)
        if decision.prefix_changed:
            break
    else:
        raise AssertionError("no turn of the session clears")
    assert decision.step is Step.FORWARD and decision.state.cleared_before > 0
    assert (await compactor.states.restore(run)).cache.value == "none"  # nothing stored by deciding
    result = await compactor.carry_out(run, decision)
    assert result.cleared > 0
    stored = await compactor.states.restore(run)
    assert stored.cache.value == "hit" and stored.state.cleared_before == decision.state.cleared_before


async def test_past_prepare_ratio_clearing_all_at_once_goes_first_only_where_a_summary_is_due() -> None:
    """Prices only refine the token rule. Unpriced, a conversation past ``prepare_ratio`` would
    start preparing a summary, so clearing everything it may, at once, goes first. Priced, with the
    provider's cache warm and the trigger many turns away, no summary is due yet: the usual batch
    keeps its size (clearing early, one big result stayed uncleared for the rest of a session: the
    priced replay's ponyc-4593 cost 15% more)."""
    settings = config(cost_aware=True, clear_tool_results=True, keep_tool_results=1, clear_at_least=10_000)
    steps: list[Any] = [Said(w(30, "task"))]
    steps += [Tools((Call(f"t{i}", w(60, f"o{i}")),)) for i in range(11)]
    steps.append(Said(w(30, "more")))
    decisions = {}
    for priced in (False, True):
        node = replica()
        _, request = priced_request("chat", steps, settings, SONNET if priced else None)
        run = await Run.measure(request, node.compactor.memory)
        assert run.window.prepare <= run.total < run.window.compact
        if priced:  # warm, and growing by 5 tokens a request: the trigger is dozens of turns off
            total, ledger = run.total, node.compactor.ledger
            await ledger.heard(
                run.conversation_key,
                Heard(total - 60, 50, 5, total - 5),
                Lineage(run.prints, run.prints),
                (300, ""),
            )
            await ledger.heard(
                run.conversation_key,
                Heard(total - 55, 50, 5, total),
                Lineage(run.prints, run.prints),
                (300, ""),
            )  # billed as we count
            run = await Run.measure(request, node.compactor.memory, ledger)
            assert run.note is not None and run.ratio.value == 1.0
        decisions[priced] = await node.compactor.decide(run)
    unpriced, priced = decisions[False], decisions[True]
    assert unpriced.prefix_changed and unpriced.state.cleared_before > 0  # cleared instead of preparing
    assert not priced.prefix_changed and priced.step is Step.FORWARD  # nothing due: no batch yet


@pytest.mark.parametrize(
    ("what", "warmth", "way"),
    [("outputs", "cold", Way.CLEAR), ("outputs", "warm", Way.HOLD), ("words", "uncached", Way.SUMMARY)],
)
async def test_past_prepare_ratio_with_a_summary_due_the_cheaper_way_under_the_trigger_is_taken(
    what: str, warmth: str, way: Way, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Priced, a turn or two from the trigger (a summary is due): clearing everything and the summary
    are weighed by one comparison (``Costs.way_under``) — clearing's rewrite and what it leaves carried
    over the turns likely still to come, against the summary's call, its rewrite and what it leaves.
    A conversation of tool outputs: clearing leaves little and rewrites what a summary would, so it is
    the cheaper way — cleared now on a cold cache; held while warm (a batch now and another when the
    next results arrive are two rewrites where one batch at the trigger clears both), no summary
    prepared. One of a person's long messages, nothing cached, a summary that costs next to nothing:
    clearing leaves most of it to be carried at full price, so a summary is prepared (where the rule
    about tokens alone clears: it lands under ``prepare_ratio`` and the target)."""
    settings = config(cost_aware=True, clear_tool_results=True, keep_tool_results=1, clear_at_least=10_000)
    if what == "outputs":
        steps: list[Any] = [Said(w(30, "task"))]
        steps += [Tools((Call(f"t{i}", w(60, f"o{i}")),)) for i in range(11)]
        steps.append(Said(w(30, "more")))
        agent = SONNET
    else:
        steps = [Said(w(330, "task")), *(Tools((Call(f"t{i}", w(60, f"o{i}")),)) for i in range(5))]
        steps.append(Said(w(140, "more")))
        agent = Prices.per_million(100.0, 100.0, 10.0, 100.0)
    node = replica()
    _, request = priced_request("chat", steps, settings, agent)
    request = dataclasses.replace(request, summary_prices=Prices.per_million(0.01, 0.01, 0.001, 0.01))
    run = await Run.measure(request, node.compactor.memory)
    assert run.window.prepare <= run.total < run.window.compact
    total, ledger = run.total, node.compactor.ledger
    clock = ledger.clock
    if warmth == "cold":  # heard long ago: the provider's cache has expired since
        ledger.clock = lambda: time.time() - 10_000
    for forwarded in (total - 100, total):  # 100 tokens a request: the trigger a turn or two off
        cached = warmth != "uncached"
        heard = Heard(forwarded - 55, 50, 5, forwarded) if cached else Heard(0, 0, forwarded, forwarded)
        await ledger.heard(run.conversation_key, heard, Lineage(run.prints, run.prints), (300, ""))
    ledger.clock = clock
    run = await Run.measure(request, node.compactor.memory, ledger)
    assert run.note is not None and run.ratio.value == 1.0  # billed as we count
    costs, view = Costs.of(run, Entry()), run.tiers.view(None)
    assert (await costs.way_under(Entry(), view, run.total))[0] is way
    planned: list[int] = []

    def counted(*args: Any) -> Any:
        planned.append(1)
        return sized_plan(*args)

    monkeypatch.setattr(costs_module, "sized_plan", counted)
    decision = await node.compactor.decide(run)
    assert len(planned) == 1  # asked by the early compaction, by clearing, by preparing: planned once
    assert decision.prefix_changed is (way is Way.CLEAR)
    assert decision.step is (Step.PREPARE if way is Way.SUMMARY else Step.FORWARD)
    if way is Way.SUMMARY:
        unpriced = dataclasses.replace(request, prices=None)
        decided_unpriced = await node.compactor.decide(await Run.measure(unpriced, node.compactor.memory))
        assert decided_unpriced.prefix_changed and decided_unpriced.state.cleared_before > 0


async def test_at_the_trigger_the_compaction_happens_rather_than_a_clearing_batch_in_its_place() -> None:
    """Clearing everything at once stands in for a preparation, not for the compaction: at the
    trigger a batch in its place would leave the conversation higher than a compaction and the
    prefix would change again within a few turns (the real CLIs' loops cost 4.6-25% more so)."""
    settings = config(clear_tool_results=True, keep_tool_results=1, clear_at_least=10_000)
    steps: list[Any] = [Said(w(30, "task"))]
    steps += [Tools((Call(f"t{i}", w(62, f"o{i}")),)) for i in range(13)]
    steps.append(Said(w(30, "more")))
    node = replica()
    _, request = priced_request("chat", steps, settings, None)
    run = await Run.measure(request, node.compactor.memory)
    assert run.total >= run.window.compact  # at the trigger; clearing all but one result would get far under
    decision = await node.compactor.decide(run)
    assert decision.step is Step.COMPACT and not decision.prefix_changed

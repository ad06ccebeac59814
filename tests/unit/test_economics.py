"""Cost-aware timing's decisions (``core/economics.py``) on constructed cache states, and the
engine keeping to the trigger and the window whatever they decide."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compact_hook.core.economics import (
    PREPARE_TURNS,
    Economy,
    clearing_batch,
    clearing_pays,
    compacts_early,
    estimated_saving,
    worth_preparing,
)
from compact_hook.core.notes import CacheNote, Heard, Lineage, Warmth
from compact_hook.core.outcomes import Reason
from compact_hook.core.pricing import Prices, Usage
from tests.compaction import priced_request

SONNET = Prices.per_million(3.0, 3.75, 0.30, 15.0)
GPT = Prices.per_million(1.25, 1.25, 0.125, 10.0)


HAIKU = Prices.per_million(1.0, 1.25, 0.10, 5.0)


def economy(
    warmth: Warmth,
    prices: Prices = SONNET,
    growth: float = 2_000,
    turns: int = 40,
    summary: Prices | None = None,
) -> Economy:
    return Economy(prices, summary or prices, warmth, growth, turns, summary_tokens=2_000)


def test_a_usage_costs_each_kind_of_token_at_its_price() -> None:
    usage = Usage(uncached=1_000, cache_write=2_000, cache_read=10_000, output=500)
    assert usage.input == 13_000
    assert usage.cost(SONNET) == pytest.approx((1_000 * 3 + 2_000 * 3.75 + 10_000 * 0.3 + 500 * 15) / 1e6)
    assert SONNET.rewrite_premium == pytest.approx(3.45e-6) and GPT.rewrite_premium == pytest.approx(1.125e-6)


def test_a_note_says_warm_cold_or_uncached_and_survives_the_store() -> None:
    first = CacheNote(seen_at=100.0, read=0, written=5_000)
    assert first.warmth(now=200.0, ttl=300) is Warmth.WARM
    assert first.warmth(now=401.0, ttl=300) is Warmth.COLD
    silent = CacheNote(seen_at=100.0)
    assert silent.warmth(200.0, 300) is Warmth.UNKNOWN  # one report without caching: maybe the first write
    assert silent.after(150.0, Heard(0, 0, 900, 900), Lineage()).warmth(200.0, 300) is Warmth.UNCACHED
    later = first.after(250.0, Heard(read=5_000, written=300, uncached=20, forwarded=5_400), Lineage())
    assert CacheNote.from_text(later.to_text()) == later


def test_growth_per_request_is_smoothed_and_a_shrunk_request_says_nothing_of_it() -> None:
    note = Heard(0, 1_000, 0, forwarded=10_000).first(0.0)
    note = note.after(1.0, Heard(1_000, 500, 0, forwarded=12_000), Lineage())
    assert note.growth == 2_000
    note = note.after(2.0, Heard(1_500, 100, 0, forwarded=12_400), Lineage())
    assert note.growth == 1_600  # a quarter of the last request's, three quarters of what was known
    assert (
        note.after(3.0, Heard(0, 5_000, 0, forwarded=6_000), Lineage()).growth == 1_600
    )  # compacted: no news
    assert CacheNote.from_text("not,a,note") is None and CacheNote.from_text("") is None


@pytest.mark.parametrize("warmth", [Warmth.UNKNOWN, Warmth.COLD, Warmth.UNCACHED])
def test_without_a_warm_cache_a_clearing_batch_always_pays(warmth: Warmth) -> None:
    assert clearing_pays(economy(warmth), saved=1, kept=10**9)


def test_with_a_warm_cache_results_accumulate_to_the_batch_that_costs_least_per_turn() -> None:
    warm = economy(Warmth.WARM, growth=2_000)
    # the economic order quantity: sqrt(2 × premium × kept × growth / carry)
    batch = clearing_batch(warm, kept=10_000)
    assert batch == int(math.sqrt(2 * SONNET.rewrite_premium * 10_000 * 2_000 / SONNET.cache_read))
    assert not clearing_pays(warm, saved=batch - 100, kept=10_000)
    assert clearing_pays(warm, saved=batch, kept=10_000)
    slow = economy(Warmth.WARM, growth=100)  # a conversation that hardly grows: carrying costs, clear sooner
    assert clearing_batch(slow, kept=10_000) < batch / 4


def test_nothing_known_never_compacts_early_and_always_prepares() -> None:
    unknown = economy(Warmth.UNKNOWN)
    assert not compacts_early(unknown, total=500_000, compacted=10_000, middle=490_000)
    assert worth_preparing(unknown, total=1, compact_at=10**9)


def test_an_early_compaction_needs_the_gap_and_its_payback() -> None:
    warm = economy(Warmth.WARM, turns=60, summary=HAIKU)  # summaries by a cheaper model
    gap = warm.gap(20_000)
    # sqrt(2 × fixed × growth / carry) with fixed = summary (prompt + output) + premium on 20K
    fixed = 1e-6 * (600 + 2_000) + 5e-6 * 2_000 + SONNET.rewrite_premium * 20_000
    assert gap == int(math.sqrt(2 * fixed * 2_000 / 0.3e-6))
    assert not compacts_early(warm, total=20_000 + gap - 1, compacted=20_000, middle=gap)
    assert compacts_early(warm, total=20_000 + gap + 1, compacted=20_000, middle=gap)
    # what the summary reads is the middle as the client sent it: with its cleared results back, dearer
    assert not compacts_early(warm, total=20_000 + gap + 1, compacted=20_000, middle=40 * gap)
    young = economy(Warmth.WARM, turns=2, summary=HAIKU)  # 4 turns likely to come: no payback
    assert not compacts_early(young, total=20_000 + 3 * gap, compacted=20_000, middle=3 * gap)
    dear = economy(Warmth.WARM, turns=60)  # summaries by the model itself: 16 turns at most do not pay it
    assert not compacts_early(dear, total=20_000 + gap + 1, compacted=20_000, middle=gap)


def test_a_cold_or_uncached_conversation_compacts_sooner_than_a_warm_one() -> None:
    gaps = {w: economy(w).gap(20_000) for w in (Warmth.WARM, Warmth.COLD, Warmth.UNCACHED)}
    assert gaps[Warmth.UNCACHED] < gaps[Warmth.COLD] < gaps[Warmth.WARM]


def test_a_summary_is_prepared_only_a_couple_of_turns_ahead() -> None:
    warm = economy(Warmth.WARM, growth=3_000)
    assert worth_preparing(warm, total=100_000 - int(PREPARE_TURNS * 3_000), compact_at=100_000)
    assert not worth_preparing(warm, total=100_000 - int(PREPARE_TURNS * 3_000) - 1_000, compact_at=100_000)


def test_the_estimated_saving_prices_what_was_not_sent_and_charges_a_warm_rewrite() -> None:
    assert estimated_saving(SONNET, Warmth.WARM, removed=10_000, rewritten=0) == pytest.approx(0.003)
    assert estimated_saving(SONNET, Warmth.COLD, removed=10_000, rewritten=30_000) == pytest.approx(0.0375)
    assert estimated_saving(SONNET, Warmth.UNCACHED, removed=10_000, rewritten=30_000) == pytest.approx(0.03)
    assert estimated_saving(SONNET, Warmth.WARM, removed=10_000, rewritten=30_000) == pytest.approx(
        0.003 - 30_000 * 3.45e-6
    )


warmths = st.sampled_from(list(Warmth))
prices = st.sampled_from([SONNET, GPT, Prices.per_million(1.0, 1.0, 0.5, 4.0)])


@settings(max_examples=300, deadline=None)
@given(
    warmths,
    prices,
    st.floats(1, 50_000),
    st.integers(0, 500),
    st.integers(1, 400_000),
    st.integers(1, 400_000),
)
def test_compacting_early_is_monotone_in_the_gap_once_it_pays_per_token(
    warmth: Warmth, price: Prices, growth: float, turns: int, total: int, compacted: int
) -> None:
    """Where each removed token pays more over the horizon than it costs to summarize, a
    conversation that compacts early at a size would also at any larger size."""
    decided = economy(warmth, price, growth, turns)
    if decided.carry * decided.horizon < decided.summary.input:
        return
    if compacts_early(decided, total, compacted, total - compacted):
        assert compacts_early(decided, total + 1_000, compacted, total + 1_000 - compacted)
        assert total - compacted >= decided.gap(compacted)


@settings(max_examples=300, deadline=None)
@given(warmths, prices, st.integers(0, 10**6), st.integers(0, 10**6), st.floats(0, 50_000))
def test_clearing_never_waits_for_a_cache_that_would_be_written_anyway_and_a_bigger_batch_never_waits_longer(
    warmth: Warmth, price: Prices, saved: int, kept: int, growth: float
) -> None:
    decided = economy(warmth, price, growth=growth)
    if warmth is not Warmth.WARM:
        assert clearing_pays(decided, saved, kept)
    if clearing_pays(decided, saved, kept):
        assert clearing_pays(decided, saved + 1_000, kept)


# -- the engine keeps to the trigger and the window, whatever the economics decide ------------------


TURN = st.tuples(st.integers(1, 5), st.integers(5, 160))  # (calls in parallel, words per output)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(TURN, min_size=3, max_size=28),
    warmths,
    prices,
    st.sampled_from(["chat", "anthropic", "responses"]),
    st.booleans(),
)
def test_cost_aware_turns_never_exceed_the_window_nor_pass_the_trigger_uncompacted(
    turns: list[tuple[int, int]], warmth: Warmth, price: Prices, wire: str, clearing: bool
) -> None:
    asyncio.run(_turns_keep_the_limits(turns, warmth, price, wire, clearing))


async def _turns_keep_the_limits(
    turns: list[tuple[int, int]], warmth: Warmth, price: Prices, wire: str, clearing: bool
) -> None:
    """Every turn of a growing conversation, with the provider's cache reported in any state:
    what is forwarded fits the window, and a conversation at or past the trigger is compacted
    (or says why it could not be), exactly as without cost awareness."""
    from compact_hook.engine import Compactor
    from compact_hook.state.store import MemoryStore
    from tests.compaction import config
    from tests.conversations import Call, Said, Tools, w

    settings_ = config(cost_aware=True, clear_tool_results=clearing, keep_tool_results=1, clear_at_least=20)
    compactor = Compactor(MemoryStore(1_000, 3_600))
    steps: list[Any] = [Said(w(30, "task"))]
    compact_at = int(0.9 * 1000)
    checked: list[Any] = []
    for index, (calls, words) in enumerate(turns):
        steps.append(Tools(tuple(Call(f"t{index}x{k}", w(words, f"o{index}")) for k in range(calls))))
        parsed, request = priced_request(wire, steps, settings_, price)
        result = await compactor.compact(request)
        checked.append(result)
        assert result.output_tokens <= 1000 or result.reason is Reason.CANNOT_FIT
        if result.output_tokens >= compact_at:
            assert result.reason in PAST_TRIGGER, (index, result.reason, result.output_tokens)
        if result.conversation:  # what the provider would report for it: the state under test
            await _report(compactor.ledger, result, warmth)
    assert len(checked) == len(turns)


PAST_TRIGGER = {Reason.OVER_TRIGGER, Reason.NOTHING_TO_SUMMARIZE, Reason.CANNOT_FIT, Reason.FITTED}


async def _report(ledger: Any, result: Any, warmth: Warmth) -> None:
    """Make the ledger hold a note in ``warmth`` for the result's conversation."""
    if warmth is Warmth.UNKNOWN:
        return
    conversation, lineage, keep = result.conversation, result.lineage, (300, "")
    if warmth is Warmth.UNCACHED:
        await ledger.heard(conversation, Heard(0, 0, 500, 500), lineage, keep)
        await ledger.heard(conversation, Heard(0, 0, 500, 500), lineage, keep)
        return
    clock = ledger.clock
    if warmth is Warmth.COLD:  # heard long ago: the provider's cache has expired since
        ledger.clock = lambda: time.time() - 10_000
    await ledger.heard(conversation, Heard(400, 100, 5, 505), lineage, keep)
    ledger.clock = clock


def test_a_cost_aware_compaction_aims_lower_when_compactions_would_come_too_close() -> None:
    """With the cache warm and a summary dearer than what a few turns of reading save, compacting
    harder spaces the events out: the cost-aware compaction leaves less than today's, keeps the
    newest turn verbatim, and both stay valid."""
    asyncio.run(_compare_targets())


async def _compare_targets() -> None:
    from compact_hook.engine import Compactor
    from compact_hook.state.store import MemoryStore
    from tests.compaction import config
    from tests.conversations import Call, Said, Tools, w
    from tests.support import pairing_problems

    sizes: dict[bool, int] = {}
    for aware in (False, True):
        compactor = Compactor(MemoryStore(1_000, 3_600))
        steps: list[Any] = [Said(w(30, "task"))]
        for index in range(40):
            steps.append(Tools((Call(f"t{index}", w(60, f"o{index}")),)))
            parsed, request = priced_request("chat", steps, config(cost_aware=aware, prepare=False), SONNET)
            result = await compactor.compact(request)
            if result.conversation:
                await compactor.ledger.heard(
                    result.conversation, Heard(500, 50, 5, result.output_tokens), result.lineage, (300, "")
                )
            if result.compacted and result.cache.value == "miss":
                assert pairing_problems(result.messages) == []
                assert result.messages[-1] is parsed.entries[-1]
                sizes[aware] = result.output_tokens
                break
    assert sizes[True] < sizes[False]


def test_the_conversation_key_is_the_chains_whether_or_not_the_whole_chain_was_hashed() -> None:
    """``Run.root`` hashes only up to the first user turn when nothing else needed the chain."""
    from compact_hook.core.chain import root_position
    from compact_hook.engine.run import ProcessMemory, Run
    from tests.compaction import config
    from tests.conversations import Call, Said, Tools, w

    steps: list[Any] = [Said(w(5, "task")), *(Tools((Call(f"t{i}", w(20, f"o{i}")),)) for i in range(6))]
    parsed, request = priced_request("anthropic", steps, config(), SONNET)

    async def measured() -> Run:
        return await Run.measure(request, ProcessMemory())

    alone, hashed = asyncio.run(measured()), asyncio.run(measured())
    whole = hashed.chain  # the whole chain first: the key is read from it
    assert alone.root == hashed.root == whole[root_position(parsed.lazy_items())]
    assert "chain" not in alone.__dict__  # the key alone did not hash every message


def test_once_cleared_a_large_result_that_was_among_the_newest_goes_when_it_pays_under_the_threshold() -> (
    None
):
    """The first batch brings the conversation under the clearing threshold, with the large result
    that was still among the newest kept. Cost-aware, with a rewrite that costs nothing extra (a
    cold cache), it is cleared once it is old enough, under the threshold; unpriced, it is carried
    until the conversation grows back to the threshold (the timing before cost awareness); with a
    warm cache, a batch smaller than the one that costs least per turn waits."""
    cleared = {
        (price is not None, warmth): asyncio.run(_large_result_cleared(price, warmth))
        for price, warmth in ((GPT, Warmth.COLD), (None, Warmth.COLD), (GPT, Warmth.WARM))
    }
    assert cleared == {(True, Warmth.COLD): True, (False, Warmth.COLD): False, (True, Warmth.WARM): False}


async def _large_result_cleared(price: Prices | None, warmth: Warmth) -> bool:
    """Whether the large result is cleared two turns after the first batch, the view under the
    clearing threshold all along."""
    from compact_hook.engine import Compactor
    from compact_hook.state.store import MemoryStore
    from tests.compaction import config
    from tests.conversations import Call, Said, Tools, w

    settings_ = config(
        cost_aware=True, clear_tool_results=True, keep_tool_results=1, clear_at_least=20, prepare=False
    )
    compactor = Compactor(MemoryStore(1_000, 3_600))
    large = w(200, "large")
    steps: list[Any] = [Said(w(30, "task")), *(Tools((Call(f"t{i}", w(80, f"o{i}")),)) for i in range(6))]
    results = []
    for call in (Call("big", large), Call("t7", w(8, "small")), Call("t8", w(8, "small"))):
        steps.append(Tools((call,)))
        _, request = priced_request("chat", steps, settings_, price)
        result = await compactor.compact(request)
        results.append(result)
        if result.conversation:
            await _report(compactor.ledger, result, warmth)
    first, *later = results
    assert first.cleared > 0 and first.output_tokens < 700 <= first.input_tokens  # the first batch
    assert all(result.output_tokens < 700 for result in later)
    return all(large not in str(message) for message in later[-1].messages)

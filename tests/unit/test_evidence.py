"""What a response's usage is worth (``core/evidence.py``) and what it teaches a tenant and a group
(``proxy/feedback/ratios.py``): usage that cannot describe the prompt is set aside, what is learned lowers a
count only down to the floor, and no tenant moves another's count."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compact_hook.core.calibration import MIN_SAMPLES, Billed, CountRatio, RatioSource
from compact_hook.core.evidence import (
    MIN_STEP,
    Earlier,
    Forwarded,
    Trust,
    Verdict,
    judge,
    judged,
)
from compact_hook.core.failures import is_context_error
from compact_hook.proxy.feedback.ratios import ASIDE_SECONDS, GROUP_CEILING, LearnedRatios
from compact_hook.state.store import MemoryStore

TRUST = Trust(1.0, 0.75)
FIXED = 12_000
"""Claude Code's system prompt and tool definitions, about."""


def growing(bill: callable, turns: int = 12, start: int = 14_000, step: int = 1_500) -> list[Verdict]:  # type: ignore[valid-type]
    """A conversation growing by ``step`` a turn, each response billed ``bill(ours, previous ours)``,
    judged as the proxy judges it (against the previous response and the first)."""
    verdicts, previous, first = [], None, None
    for turn in range(turns):
        ours = start + turn * step
        billed = bill(ours)
        verdict = judge(billed, Forwarded(ours, FIXED), Earlier(previous, first), TRUST)
        verdicts.append(verdict)
        previous = Billed(billed, ours)
        first = first or previous
    return verdicts


@pytest.mark.parametrize("factor", [0.8, 1.0, 1.1, 1.25, 1.44, 3.0])
def test_truthful_usage_is_learned_on_every_turn_whatever_the_providers_ratio(factor: float) -> None:
    assert set(growing(lambda ours: round(factor * ours + 346))) == {Verdict.LEARNED}


def test_usage_of_only_the_tokens_after_a_cached_prefix_is_set_aside() -> None:
    """Ollama 0.30: the tokens it evaluated, not the cached prefix — about what the request grew by."""
    verdicts = growing(lambda ours: 1_500 + ours % 97)
    assert verdicts[0] is Verdict.FIXED_LEFT_OUT  # the first heard: far below the fixed part alone
    assert set(verdicts[1:]) == {Verdict.CACHED_LEFT_OUT}


def test_usage_pinned_at_a_servers_context_is_set_aside_once_we_forward_more() -> None:
    verdicts = growing(lambda ours: min(ours, 20_000))
    assert verdicts[:5] == [Verdict.LEARNED] * 5  # under the server's 20K context: truthful
    assert set(verdicts[5:]) == {Verdict.CAPPED}


def along(bills: list[tuple[int, int]], fixed: int, trust: Trust, reserve: int = 4_000) -> list[Verdict]:
    """``(billed, ours)`` pairs of one conversation, judged as the proxy judges them: against the
    previous response, the one before it and the first, in a 24,000-token window."""
    verdicts: list[Verdict] = []
    first = previous = before = None
    for billed, ours in bills:
        forwarded = Forwarded(ours, fixed, reserve=reserve, window=24_000)
        verdicts.append(judge(billed, forwarded, Earlier(previous, first, before), trust))
        before, previous = previous, Billed(billed, ours)
        first = first or previous
    return verdicts


def test_a_bill_of_the_fixed_part_plus_what_was_new_is_a_cache_left_out_not_a_ceiling() -> None:
    """Issue 60's Claude Code run: a server caching the messages but billing system and tools (9,426
    tokens of ours) and what is new. Its bills stall near the fixed part while the prompt grows by
    ~300 a turn: read as a ceiling, the window they teach (13,705 with the 4,000 reserve) leaves the
    conversation no room, and every request was forwarded as sent."""
    claude = Trust(1.10, 0.75)
    ours = [15_000 + 300 * turn for turn in range(6)]
    bills = [(16_500, ours[0]), *((10_369 + 280 + turn % 3 * 7, o) for turn, o in enumerate(ours[1:]))]
    verdicts = along(bills, 9_426, claude)
    assert Verdict.CAPPED not in verdicts
    assert Verdict.CACHED_LEFT_OUT in verdicts


def test_a_bill_pinned_where_it_leaves_room_is_a_ceiling_and_one_that_moves_with_what_was_new_is_not() -> (
    None
):
    """The same figure turn after turn (within 1%), well above the fixed part: a server's context —
    while the turns grow alike, the reading that compacts more. But where they grew by amounts
    apart and the bill moved with them, the server bills what was new: its cache was left out."""
    steps = [300, 300, 390, 300, 390]
    ours = [12_000 + sum(steps[:k]) for k in range(len(steps) + 1)]
    ceiling = along([(min(o, 12_500), o) for o in ours], 2_000, TRUST)
    assert ceiling[-3:] == [Verdict.CAPPED] * 3
    new = [(12_000, ours[0])] + [(9_000 + step, o) for step, o in zip(steps, ours[1:], strict=True)]
    moving = along(new, 2_000, TRUST)
    assert moving[2] is Verdict.CAPPED  # 300 then 300: no telling, the ceiling compacts more
    assert moving[3:] == [Verdict.CACHED_LEFT_OUT] * 3  # moved by what was new, within 1%


def test_usage_of_the_messages_only_is_set_aside_early_and_late() -> None:
    """A gateway that leaves system and tools out: far below the fixed part while the messages are few,
    and, once they outgrow it, a bill that grows with the messages from well below it."""
    verdicts = growing(lambda ours: ours - FIXED, turns=30, start=13_000, step=2_500)
    assert verdicts[0] is Verdict.FIXED_LEFT_OUT and set(verdicts) == {Verdict.FIXED_LEFT_OUT}
    small_tools = [
        judge(
            ours - 2_000,
            Forwarded(ours, 2_000),
            Earlier(Billed(20_000 - 2_000, 20_000), Billed(18_000, 20_000)),
            TRUST,
        )
        for ours in (30_000,)
    ]
    assert small_tools == [Verdict.FIXED_LEFT_OUT]  # 0.93 of ours: within the floor, caught by its growth


def test_missing_zero_and_estimated_usage_teach_nothing() -> None:
    assert judge(0, Forwarded(20_000, FIXED), Earlier(), TRUST) is Verdict.MISSING
    image = Forwarded(20_000, FIXED, estimated=True)
    assert judge(3_000, image, Earlier(), TRUST) is Verdict.UNKNOWABLE  # a 1×1 image: a sample of 0.15
    assert judge(90_000, image, Earlier(), TRUST) is Verdict.UNKNOWABLE  # a 3-page PDF: 4.5
    assert judge(100, Forwarded(200), Earlier(), TRUST) is Verdict.UNUSABLE  # too small to tell
    assert judge(120_000, Forwarded(20_000), Earlier(), TRUST) is Verdict.UNUSABLE  # 6×: absurd
    assert judge(13_000, Forwarded(20_000, FIXED), Earlier(), TRUST) is Verdict.BELOW_FLOOR  # 0.65


def test_a_coherent_response_is_one_that_grew_with_what_we_forward_since_the_previous() -> None:
    previous = Billed(10_000, 10_000)
    assert judged(11_000, Forwarded(11_000), Earlier(previous), TRUST).coherent
    assert not judged(11_000, Forwarded(11_000), Earlier(), TRUST).coherent  # nothing to compare with
    assert not judged(10_100, Forwarded(10_100), Earlier(previous), TRUST).coherent  # grew < MIN_STEP
    assert MIN_STEP > 100


@given(st.floats(0.3, 1.0), st.floats(-3_000, 3_000), st.integers(1_000, 200_000))
def test_what_is_learned_never_counts_under_the_floor(value: float, offset: float, ours: int) -> None:
    trust = Trust(1.1, 0.75)
    trusted = trust.ratio(CountRatio(value, RatioSource.CONVERSATION, offset), ours)
    assert trusted.value >= trust.lowest - 1e-9 and trusted.effective(ours) >= trust.lowest - 1e-9
    assert trust.ratio(CountRatio(1.44, RatioSource.CONVERSATION, 300.0), ours) == CountRatio(
        1.44, RatioSource.CONVERSATION, 300.0
    )  # above the prior: as it comes


@pytest.mark.parametrize(
    "words",
    [
        "Too many tokens, please wait before trying again.",  # Bedrock's throttle
        "litellm.RateLimitError: Rate limit reached for gpt-4o on tokens per min (TPM)",
        "ThrottlingException: Too many tokens",
    ],
)
def test_a_throttle_is_never_a_context_error(words: str) -> None:
    assert not is_context_error(RuntimeError(words))


def test_a_context_error_is_still_one() -> None:
    assert is_context_error(RuntimeError("prompt is too long: 52000 tokens > 40000 maximum"))
    assert is_context_error(
        RuntimeError(
            "Your input exceeds the context window of this model. Please adjust your input and try again."
        )
    )


def judged_at(ratio: float, ours: int = 20_000) -> object:
    return judged(round(ratio * ours), Forwarded(ours), Earlier(), TRUST)


async def teach(ratios: LearnedRatios, tenant: str, ratio: float, times: int = MIN_SAMPLES) -> None:
    for _ in range(times):
        await ratios.heard("agent", tenant, judged_at(ratio), TRUST, 3_600)  # type: ignore[arg-type]


async def test_a_tenants_estimate_counts_its_requests_and_the_groups_median_counts_a_new_tenants(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore(100, 60)
    one = LearnedRatios(store)
    assert await one.ratio("agent", "team:a", TRUST) == CountRatio(1.0)
    await teach(one, "team:a", 1.52)
    assert await one.ratio("agent", "team:a", TRUST) == CountRatio(
        pytest.approx(1.52), RatioSource.MODEL_GROUP
    )
    assert await one.ratio("agent", "team:new", TRUST) == CountRatio(1.0)  # one tenant is no group's say
    with caplog.at_level(logging.WARNING, "compact_hook.proxy.feedback.ratios"):
        for tenant, ratio in (("team:b", 1.5), ("team:c", 1.55)):
            await teach(one, tenant, ratio)
    assert "counts 1.520 tokens per one of ours (was 1.000" in caplog.text
    assert (await one.ratio("agent", "team:new", TRUST)).value == pytest.approx(1.52)  # the median of three
    other = LearnedRatios(store)  # another replica reads what this one published
    assert (await other.ratio("agent", "team:a", TRUST)).value == pytest.approx(1.52)


async def test_no_tenant_moves_anothers_count() -> None:
    ratios = LearnedRatios(MemoryStore(100, 60))
    for tenant in ("team:a", "team:b"):
        await teach(ratios, tenant, 1.0)
    before = await ratios.ratio("agent", "team:a", TRUST)
    await teach(ratios, "team:odd", 0.76, times=20)  # within the floor, every time
    await teach(ratios, "team:odd", 0.3, times=20)  # below it: set aside
    for _ in range(5):
        await ratios.heard(
            "agent", "team:odd", judged(5_000, Forwarded(20_000, estimated=True), Earlier(), TRUST), TRUST, 60
        )
    assert await ratios.ratio("agent", "team:a", TRUST) == before
    assert (await ratios.ratio("agent", "team:new", TRUST)).value == pytest.approx(1.0)  # the median
    assert await ratios.ratio("agent", "team:odd", TRUST) == CountRatio(1.0)  # set aside: the prior


async def test_the_groups_median_stays_within_bounds_of_the_prior() -> None:
    ratios = LearnedRatios(MemoryStore(100, 60))
    for tenant in ("team:a", "team:b", "team:c"):
        await teach(ratios, tenant, 4.5)
    assert (await ratios.ratio("agent", "team:a", TRUST)).value == pytest.approx(4.5)  # its own: as it comes
    assert (await ratios.ratio("agent", "team:new", TRUST)).value == GROUP_CEILING


async def test_usage_set_aside_comes_back_only_when_it_grows_with_what_we_forward(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ratios = LearnedRatios(MemoryStore(100, 60))
    await teach(ratios, "team:a", 0.9)
    capped = judged(20_000, Forwarded(24_000), Earlier(Billed(20_000, 22_000)), TRUST)
    with caplog.at_level(logging.WARNING, "compact_hook.proxy.feedback.ratios"):
        learned = await ratios.heard("agent", "team:a", capped, TRUST, 60)
        await ratios.heard("agent", "team:a", capped, TRUST, 60)
    assert (
        learned.verdict is Verdict.CAPPED and caplog.text.count("does not describe the prompt (capped") == 1
    )
    assert await ratios.ratio("agent", "team:a", TRUST) == CountRatio(1.0)
    lone = await ratios.heard("agent", "team:a", judged_at(0.9), TRUST, 60)
    assert lone.verdict is Verdict.UNCONFIRMED and await ratios.ratio("agent", "team:a", TRUST) == CountRatio(
        1.0
    )
    grown = judged(round(0.9 * 12_000), Forwarded(12_000), Earlier(Billed(9_000, 10_000)), TRUST)
    assert (await ratios.heard("agent", "team:a", grown, TRUST, 60)).verdict is Verdict.LEARNED
    assert (await ratios.ratio("agent", "team:a", TRUST)).value == pytest.approx(0.9)


async def test_one_odd_bill_sets_a_tenant_aside_for_a_while_not_for_good() -> None:
    """Before issue 60 the set-aside lasted until the process restarted: a one-off caller never sends
    the coherent response that brings it back."""
    now = [1_000.0]
    ratios = LearnedRatios(MemoryStore(100, 60), wall=lambda: now[0])
    await teach(ratios, "team:a", 1.3)
    odd = judged(0, Forwarded(20_000), Earlier(), TRUST)
    assert (await ratios.heard("agent", "team:a", odd, TRUST, 3_600)).verdict is Verdict.MISSING
    assert await ratios.ratio("agent", "team:a", TRUST) == CountRatio(1.0)  # set aside: the prior
    now[0] += ASIDE_SECONDS + 1
    assert (await ratios.ratio("agent", "team:a", TRUST)).value == pytest.approx(1.3)
    assert (await ratios.heard("agent", "team:a", judged_at(1.3), TRUST, 3_600)).verdict is Verdict.LEARNED


async def test_a_refusal_that_states_the_providers_count_ends_a_set_aside_and_raises_the_count() -> None:
    """An unrecognised Claude name counted at 1.0 where the provider counts 1.44: refusals say so.
    What a refusal states (``proxy.feedback.recovery``: judged, and coherent by its nature) is taken."""
    ratios = LearnedRatios(MemoryStore(100, 60))
    await ratios.heard("agent", "team:a", judged(0, Forwarded(20_000), Earlier(), TRUST), TRUST, 60)
    stated = dataclasses.replace(judged_at(1.44), coherent=True)  # type: ignore[type-var]
    assert (await ratios.heard("agent", "team:a", stated, TRUST, 60)).verdict is Verdict.LEARNED
    assert (await ratios.ratio("agent", "team:a", TRUST)).value == pytest.approx(1.44)


async def test_the_groups_median_is_a_fixed_sample_of_its_tenants_not_its_busiest() -> None:
    """Busy keys are as many votes as quiet ones, and the store keeps a sample by the hash of their
    names: 32 keys heard last no longer own every other replica's median (the store kept the 32 most
    recently heard tenants, and another replica's median was theirs)."""
    store, ticks = MemoryStore(100, 60), iter(range(0, 10**9, 10))
    ratios = LearnedRatios(store, clock=lambda: float(next(ticks)))  # every response published
    for n in range(60):
        await teach(ratios, f"team:{n}", 1.0)
    for n in range(32):  # 32 more keys, each busy, heard last
        await teach(ratios, f"key:flood-{n}", 1.9, times=10)
    other = LearnedRatios(store)
    assert (await other.ratio("agent", "team:new", TRUST)).value == pytest.approx(1.0)

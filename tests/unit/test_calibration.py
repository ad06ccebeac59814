"""Counts in the provider's tokens (``core/calibration.py``): the priors, what one response teaches,
a group's estimate, a conversation's affine ratio, and the engine's windows and figures at it."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compact_hook.core.calibration import (
    HIGHEST,
    LOWEST,
    MIN_COUNTED,
    MIN_SAMPLES,
    MIN_SPAN,
    RESET_AFTER,
    Billed,
    CountRatio,
    RatioSource,
    RatioStats,
    conversation_ratio,
    family_prior,
    sample,
)
from compact_hook.core.limits import Limits, Unused
from compact_hook.core.notes import CacheNote, Heard, Lineage
from compact_hook.engine.compactor import Compactor
from compact_hook.settings.model import CompactConfig
from compact_hook.state.store import MemoryStore
from tests.compaction import priced_request
from tests.conversations import Call, Said, Tools, w


@pytest.mark.parametrize(
    ("model", "tokenizer", "prior"),
    [
        ("anthropic/claude-sonnet-4-5-20250929", "claude", 1.10),
        ("anthropic/claude-opus-4-6", "claude", 1.10),
        ("claude-3-5-sonnet-20241022", "claude", 1.10),
        ("anthropic/claude-opus-4-7", "claude", 1.44),
        ("anthropic.claude-fable-5-1-v1:0", "claude", 1.44),
        ("anthropic/claude-sonnet-5", "o200k_base", 1.49),
        ("claude-sonnet-4-5@20250929", "cl100k_base", 1.19),
        ("claude-2.1", "claude", 1.0),  # the old tokenizer is Claude 2's own
        ("openai/gpt-4o", "o200k_base", 1.0),
        ("gemini/gemini-3-pro", "o200k_base", 1.0),
        ("anthropic/claude-fable-5", "/models/mine/tokenizer.json", 1.0),
    ],
)
def test_a_claude_model_starts_from_its_generations_measured_prior(
    model: str, tokenizer: str, prior: float
) -> None:
    assert family_prior(model, tokenizer) == prior


def test_a_response_teaches_nothing_when_its_usage_is_missing_zero_absurd_or_too_small_to_tell() -> None:
    assert sample(1_250, 1_000) == 1.25
    assert sample(0, 1_000) is None
    assert sample(1_000, MIN_COUNTED - 1) is None
    assert sample(int(1_000 * HIGHEST) + 10, 1_000) is None
    assert sample(int(1_000 * LOWEST) - 10, 1_000) is None


def test_a_ratio_converts_whole_requests_with_its_fixed_part_and_budgets_without() -> None:
    ratio = CountRatio(1.4, RatioSource.CONVERSATION, offset=500.0)
    assert ratio.billed(10_000) == 14_500
    assert ratio.ours(14_500) == 10_000  # a window: the fixed part comes off first
    assert ratio.ours_of(1_400) == 1_000  # a budget inside a request has no fixed part
    assert ratio.effective(10_000) == pytest.approx(1.45)


@given(st.floats(0.2, 5.0), st.floats(-2_000, 2_000), st.integers(1_000, 400_000))
def test_a_window_in_our_tokens_holds_what_the_provider_counts_within_it(
    value: float, offset: float, window: int
) -> None:
    ratio = CountRatio(value, RatioSource.CONVERSATION, offset)
    ours = ratio.ours(window)
    if window - offset > value:  # a window the fixed part does not fill
        assert ratio.billed(ours) <= window + 1 and ratio.billed(ours + 2) > window - value


def test_a_groups_estimate_averages_then_rejects_an_outlier_until_it_persists() -> None:
    stats = RatioStats()
    for ratio in (1.40, 1.35, 1.30):
        stats, counted = stats.after(ratio)
        assert counted
    assert stats.samples == MIN_SAMPLES and stats.ratio == pytest.approx(
        math.exp(sum(map(math.log, (1.3, 1.4, 1.35))) / 3)
    )
    outlier, counted = stats.after(0.6)  # far lower (a higher count is taken at once)
    assert not counted and outlier.ratio == stats.ratio and outlier.outliers == 1
    for _ in range(RESET_AFTER - 1):
        outlier, counted = outlier.after(0.6)
    assert counted and outlier.samples == 1 and outlier.ratio == pytest.approx(0.6)  # the deployment changed
    assert RatioStats.from_text(stats.to_text()) == RatioStats(
        stats.samples, round(stats.mean, 6), round(stats.variance, 8), 0
    )
    assert RatioStats.from_text("a,b") is None and RatioStats.from_text("1,9.0,0,0") is None  # e^9: absurd


def test_a_provider_that_starts_counting_more_is_followed_at_once_and_one_counting_less_gradually() -> None:
    """Issue 60: after 20 bills at 1.10, a group moved from Opus 4.6 to 4.7 bills 1.44. Averaged in, the
    estimate was 1.31 after 10 more and 1.40 after 21: counted low all along. Raising our count is the
    safe direction: one response does it. Back at 1.10, it comes down as an average does."""
    stats = RatioStats()
    for _ in range(20):
        stats, _ = stats.after(1.10)
    raised, counted = stats.after(1.44)
    assert counted and raised.ratio == pytest.approx(1.44)
    lowered, _ = raised.after(1.10)
    assert 1.10 < lowered.ratio < 1.44 and lowered.ratio > 1.40


def test_a_conversation_counts_what_is_new_at_its_margin_and_keeps_its_fixed_part() -> None:
    # system and tools billed 1,800 for our 1,000; every token since at 1.25
    first, last = Billed(1_800, 1_000), Billed(1_800 + 12_500, 11_000)
    ratio = conversation_ratio(last, first)
    assert ratio == CountRatio(1.25, RatioSource.CONVERSATION, offset=550.0)
    assert ratio.billed(6_000) == 1_800 + int(1.25 * 5_000)  # compacted to 6,000: the fixed part stays
    near = conversation_ratio(Billed(1_300, 1_000), Billed(1_300 - 1_000, MIN_SPAN // 4))
    assert near == CountRatio(1.3, RatioSource.CONVERSATION)  # too little growth to tell its margin
    assert conversation_ratio(Billed(0, 1_000), first) is None


def test_a_conversations_own_ratio_is_never_overridden_by_its_groups() -> None:
    """3.0 against a group's 1.3 was thrown away: a group another tenant's odd requests can steer
    must not override what this conversation's own bills say."""
    found = conversation_ratio(Billed(3_000, 1_000), Billed(1_800, 600))
    assert found is not None and found.effective(1_000) == pytest.approx(3.0)


def test_a_conversations_note_keeps_its_first_request_through_every_report() -> None:
    note = Heard(0, 900, 100, 800).first(1.0)
    later = note.after(2.0, Heard(1_000, 200, 300, 1_200), Lineage())
    assert (later.first_billed, later.first_forwarded, later.billed, later.forwarded) == (
        1_000,
        800,
        1_500,
        1_200,
    )
    assert CacheNote.from_text(later.to_text()) == later


def test_limits_are_the_providers_window_in_our_tokens() -> None:
    config = CompactConfig(context_window=40_000)
    plain = Limits.of(config, 8_000, 5_000)
    claude = Limits.of(config, 8_000, 5_000, CountRatio(1.4, RatioSource.CONVERSATION, offset=300.0))
    assert plain is not None and claude is not None
    assert claude.window == int((32_000 - 300) / 1.4) and claude.compact == claude.window  # the reserve binds
    assert claude.room == claude.window - 5_000
    assert claude.ours(config.user_message_budget) == int(20_000 / 1.4)
    crowded = Limits.of(dataclasses.replace(config, count_ratio=1.5), 30_000, 7_000, CountRatio(1.5))
    assert crowded is not None and crowded.no_room  # 30,000 + 1.5 × 7,000 fill the 40,000 at the prior


def test_a_learned_count_that_leaves_no_room_is_not_used_and_no_room_is_never_learned() -> None:
    """A count learned at 1.5 where the prior is 1 would fill the window with the reserve and the fixed
    part: the hook would forward every request as sent. It is evidence against itself: the prior counts."""
    config = CompactConfig(context_window=40_000)
    learned = Limits.of(config, 30_000, 7_000, CountRatio(1.5, RatioSource.MODEL_GROUP))
    unlearned = Limits.of(config, 30_000, 7_000)
    assert learned is not None and not learned.no_room and learned.unused is Unused.COUNT
    assert dataclasses.replace(learned, unused=None) == unlearned


def test_a_learned_window_that_leaves_no_room_is_not_used() -> None:
    """Claude Code's 9,426 tokens of system and tools and its 4,000-token reserve in a 24,000 window: a
    window of 13,705 learned from a bill of the fixed part plus what was new leaves nothing."""
    config = CompactConfig(context_window=24_000, count_ratio=1.1)
    prior = CountRatio(1.1)
    taught = Limits.of(config, 4_000, 9_426, prior, learned=13_705)
    configured = Limits.of(config, 4_000, 9_426, prior)
    assert taught is not None and taught.unused is Unused.WINDOW and not taught.no_room
    assert dataclasses.replace(taught, unused=None) == configured
    roomy = Limits.of(config, 4_000, 9_426, prior, learned=20_000)
    assert roomy is not None and roomy.unused is None and roomy.window == prior.ours(16_000)


def test_what_is_learned_only_ever_lowers_the_limits() -> None:
    """A count learned below the prior shows in the figures, never in what we forward: every limit
    is at most its value with nothing learned."""
    config = CompactConfig(context_window=32_000, count_ratio=1.0)
    low = Limits.of(config, 4_000, 3_000, CountRatio(0.8, RatioSource.MODEL_GROUP))
    high = Limits.of(config, 4_000, 3_000, CountRatio(1.25, RatioSource.MODEL_GROUP))
    unlearned = Limits.of(config, 4_000, 3_000, CountRatio(1.0))
    assert low is not None and high is not None and unlearned is not None
    for name in ("clear", "compact", "window", "room", "prepare"):
        assert getattr(low, name) == getattr(unlearned, name)
        assert getattr(high, name) < getattr(unlearned, name)
    assert low.ratio.value == 0.8  # the budgets within a request and the figures follow the bills


TURN = [Said(w(40, "task"))] + [Tools((Call(f"t{i}", w(300, f"o{i}")),)) for i in range(20)]


async def test_the_engine_compacts_at_the_providers_trigger_and_reports_its_tokens() -> None:
    """The same conversation under the same window: as we count it, under the trigger; at 1.3 of
    our count (the provider's), over it, and every figure in the provider's tokens."""
    config = CompactConfig(
        context_window=8_000, summary_max_tokens=200, archive_dir="/nonexistent", clear_tool_results=False
    )
    results = {}
    for ratio in (CountRatio(), CountRatio(1.3, RatioSource.MODEL_GROUP)):
        _, request = priced_request("chat", TURN, config, None)
        request = type(request)(
            **{**{f: getattr(request, f) for f in request.__slots__}, "count_ratio": ratio}
        )
        results[ratio.value] = await Compactor(MemoryStore(100, 60)).compact(request)
    ours, provider = results[1.0], results[1.3]
    assert ours.input_tokens < 0.92 * 8_000 and not ours.compacted
    assert provider.compacted and provider.input_tokens == round(1.3 * ours.input_tokens)
    assert provider.output_tokens == round(1.3 * provider.counted) <= 0.92 * 8_000
    assert provider.count_ratio.source is RatioSource.MODEL_GROUP

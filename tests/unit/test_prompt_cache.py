"""The prompt-cache simulator (tools/prompt_cache.py) against the providers' documented rules and examples.

Anthropic: platform.claude.com "Prompt caching"; OpenAI: platform.openai.com "Prompt caching". Every
assertion is an exact number, so a rule implemented wrongly fails.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.harness import load_tool, standin_upstream

pc = load_tool("prompt_cache")
Segment = pc.Segment
PromptCache = pc.PromptCache
CacheControlError = pc.CacheControlError


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def seg(tokens: int, name: str, *, bp: bool = False, ttl: str = "5m", cacheable: bool = True) -> Any:
    return Segment(tokens, name, breakpoint=bp, ttl=ttl, cacheable=cacheable)


def blocks(n: int, tokens: int, prefix: str = "b") -> list[Any]:
    return [seg(tokens, f"{prefix}{i}") for i in range(n)]


def mark(segments: list[Any], *positions: int, ttl: str = "5m") -> list[Any]:
    out = list(segments)
    for p in positions:
        out[p] = Segment(out[p].tokens, out[p].digest, breakpoint=True, ttl=ttl, cacheable=out[p].cacheable)
    return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache(clock: FakeClock) -> Any:
    return PromptCache(clock=clock)


# ----------------------------------------------------------------------------------------------------------
# Anthropic: writes, reads, growth, invalidation
# ----------------------------------------------------------------------------------------------------------


def test_first_request_writes_up_to_the_last_breakpoint_and_an_identical_one_reads(cache: Any) -> None:
    request = [seg(2000, "system", bp=True), seg(50, "user")]
    assert cache.anthropic("claude", request) == (50, 2000, 0, 0)
    assert cache.anthropic("claude", request) == (50, 0, 2000, 0)


def test_documented_pride_and_prejudice_example(cache: Any) -> None:
    # {"cache_creation_input_tokens":188086,"cache_read_input_tokens":0,"input_tokens":21} then the read
    request = [seg(30, "instructions"), seg(188056, "book", bp=True), seg(21, "question")]
    assert cache.anthropic("claude", request)[:3] == (21, 188086, 0)
    assert cache.anthropic("claude", request)[:3] == (21, 0, 188086)


def test_new_turn_with_the_breakpoint_moved_to_the_end_reads_the_old_prefix_and_writes_the_new_part(
    cache: Any,
) -> None:
    turn1 = [seg(1200, "system"), seg(40, "u1"), seg(60, "a1"), seg(30, "u2")]
    turn2 = [*turn1, seg(70, "a2"), seg(25, "u3")]
    turn3 = [*turn2, seg(80, "a3"), seg(10, "u4")]
    assert cache.anthropic("claude", mark(turn1, 3)) == (0, 1330, 0, 0)
    assert cache.anthropic("claude", mark(turn2, 5)) == (0, 95, 1330, 0)
    assert cache.anthropic("claude", mark(turn3, 7)) == (0, 90, 1425, 0)


def test_a_change_early_in_the_prefix_invalidates_everything_after_it(cache: Any) -> None:
    base = [seg(1200, "system"), seg(300, "u1"), seg(300, "a1"), seg(20, "u2")]
    assert cache.anthropic("claude", mark(base, 0, 3)) == (0, 1820, 0, 0)
    new_system = [seg(1200, "system v2"), *base[1:]]
    assert cache.anthropic("claude", mark(new_system, 0, 3)) == (0, 1820, 0, 0)  # nothing survives
    new_first_message = [base[0], seg(300, "u1 edited"), *base[2:]]
    assert cache.anthropic("claude", mark(new_first_message, 0, 3)) == (0, 620, 1200, 0)  # system still read


def test_below_the_minimum_nothing_is_cached(cache: Any) -> None:
    short = [seg(1023, "system", bp=True), seg(10, "user")]
    assert cache.anthropic("claude", short) == (1033, 0, 0, 0)
    assert cache.anthropic("claude", short) == (1033, 0, 0, 0)
    exact = [seg(1024, "system", bp=True), seg(10, "user")]
    assert cache.anthropic("claude", exact) == (10, 1024, 0, 0)
    assert cache.anthropic("claude", exact) == (10, 0, 1024, 0)


def test_a_breakpoint_under_the_minimum_writes_nothing_while_a_later_one_does(cache: Any) -> None:
    request = [seg(500, "system", bp=True), seg(1000, "u1"), seg(5, "u2", bp=True)]
    assert cache.anthropic("claude", request) == (0, 1505, 0, 0)
    assert cache.anthropic("claude", request) == (0, 0, 1505, 0)
    changed = [*request[:2], seg(5, "u2 edited", bp=True)]
    assert cache.anthropic("claude", changed) == (0, 1505, 0, 0)  # no entry was ever written at the system


def test_per_model_minimum(cache: Any) -> None:
    request = [seg(1500, "system", bp=True), seg(10, "user")]
    assert cache.anthropic("haiku", request, min_tokens=2048) == (1510, 0, 0, 0)
    assert cache.anthropic("sonnet", request) == (10, 1500, 0, 0)
    assert PromptCache(min_tokens=2048).anthropic("x", request) == (1510, 0, 0, 0)


@pytest.mark.parametrize(
    ("model", "minimum"),
    [
        ("claude-opus-4-6", 4096),
        ("claude-opus-4-5-20251101", 4096),
        ("claude-haiku-4-5-20251001", 4096),
        ("anthropic/claude-opus-4.5", 4096),
        ("claude-sonnet-4-6", 2048),
        ("claude-3-5-haiku-20241022", 2048),
        ("claude-3-haiku-20240307", 2048),
        ("claude-sonnet-4-5-20250929", 1024),
        ("claude-opus-4-1-20250805", 1024),
        ("claude-sonnet-4-20250514", 1024),
        ("claude-3-7-sonnet-20250219", 1024),
        ("standin-strict", 1024),
    ],
)
def test_documented_minimum_per_model(model: str, minimum: int) -> None:
    assert pc.anthropic_min_cacheable_tokens(model) == minimum


# ----------------------------------------------------------------------------------------------------------
# Anthropic: TTL
# ----------------------------------------------------------------------------------------------------------


def test_entries_expire_after_five_minutes(cache: Any, clock: FakeClock) -> None:
    request = [seg(2000, "system", bp=True), seg(50, "user")]
    assert cache.anthropic("claude", request) == (50, 2000, 0, 0)
    clock.advance(299.9)
    assert cache.anthropic("claude", request) == (50, 0, 2000, 0)
    clock.advance(300)
    assert cache.anthropic("claude", request) == (50, 2000, 0, 0)  # written again
    assert cache.anthropic("claude", request) == (50, 0, 2000, 0)


def test_a_read_refreshes_the_ttl(cache: Any, clock: FakeClock) -> None:
    request = [seg(2000, "system", bp=True), seg(50, "user")]
    cache.anthropic("claude", request)
    for _ in range(5):  # 25 minutes in all, never 5 minutes idle
        clock.advance(299)
        assert cache.anthropic("claude", request) == (50, 0, 2000, 0)
    clock.advance(300)
    assert cache.anthropic("claude", request) == (50, 2000, 0, 0)


def test_one_hour_ttl(cache: Any, clock: FakeClock) -> None:
    request = [seg(2000, "system", bp=True, ttl="1h"), seg(50, "user")]
    assert cache.anthropic("claude", request) == (50, 2000, 0, 2000)
    clock.advance(3599)
    assert cache.anthropic("claude", request) == (50, 0, 2000, 0)
    clock.advance(3600)
    assert cache.anthropic("claude", request) == (50, 2000, 0, 2000)


def test_mixed_ttls_bill_each_part_at_its_own_ttl(cache: Any, clock: FakeClock) -> None:
    request = [
        seg(1500, "tools", bp=True, ttl="1h"),
        seg(600, "system"),
        seg(400, "u1", bp=True),
        seg(20, "u2"),
    ]
    first = cache.anthropic("claude", request)
    assert first == (20, 2500, 0, 1500)
    assert pc.anthropic_usage(first, 7) == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 2500,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 1500},
        "output_tokens": 7,
    }
    clock.advance(600)  # the 5-minute entry is gone, the 1-hour one is not
    assert cache.anthropic("claude", request) == (20, 1000, 1500, 0)


def test_a_longer_ttl_must_come_before_a_shorter_one(cache: Any) -> None:
    request = [seg(1500, "system", bp=True), seg(600, "u1", bp=True, ttl="1h")]
    with pytest.raises(CacheControlError, match="longer TTLs must come first"):
        cache.anthropic("claude", request)


# ----------------------------------------------------------------------------------------------------------
# Anthropic: breakpoints and the 20-block lookback
# ----------------------------------------------------------------------------------------------------------


def test_at_most_four_breakpoints(cache: Any) -> None:
    four = mark(blocks(8, 300), 1, 3, 5, 7)
    assert cache.anthropic("claude", four) == (0, 2400, 0, 0)
    five = mark(blocks(8, 300), 0, 1, 3, 5, 7)
    with pytest.raises(CacheControlError) as refused:
        cache.anthropic("claude", five)
    assert str(refused.value) == "A maximum of 4 blocks with cache_control may be provided. Found 5."


def test_documented_lookback_example(clock: FakeClock) -> None:
    # Turn 1: 10 blocks, breakpoint on block 10; turn 2: 15 blocks, breakpoint on 15 (hit at 10); turn 3: 35
    # blocks, breakpoint on 35: blocks 35..16 are checked and the turn-2 entry at 15 is one outside.
    conversation = blocks(35, 200)
    cache = PromptCache(clock=clock)
    assert cache.anthropic("claude", mark(conversation[:10], 9)) == (0, 2000, 0, 0)
    assert cache.anthropic("claude", mark(conversation[:15], 14)) == (0, 1000, 2000, 0)
    assert cache.anthropic("claude", mark(conversation, 34)) == (0, 7000, 0, 0)
    # "Adding a second breakpoint at block 15 starts a second lookback window there, which finds the entry."
    cache = PromptCache(clock=clock)
    cache.anthropic("claude", mark(conversation[:10], 9))
    cache.anthropic("claude", mark(conversation[:15], 14))
    assert cache.anthropic("claude", mark(conversation, 14, 34)) == (0, 4000, 3000, 0)


def test_lookback_of_exactly_twenty_positions_counting_the_breakpoint(cache: Any) -> None:
    conversation = blocks(40, 100)
    cache.anthropic("claude", mark(conversation[:15], 14))  # entry at index 14
    assert cache.anthropic("claude", mark(conversation[:34], 33)) == (0, 1900, 1500, 0)  # 33..14: found
    other = PromptCache()
    other.anthropic("claude", mark(conversation[:15], 14))
    assert other.anthropic("claude", mark(conversation[:35], 34)) == (0, 3500, 0, 0)  # 34..15: missed


def test_the_hit_is_found_at_an_earlier_breakpoint(cache: Any) -> None:
    system = seg(1100, "system")
    history = blocks(25, 50, "m")
    first = mark([system, *history], 0, 25)
    assert cache.anthropic("claude", first) == (0, 2350, 0, 0)
    edited = mark([system, *history[:-1], seg(50, "m24 edited")], 0, 25)  # last window: 25..6, no entry
    assert cache.anthropic("claude", edited) == (0, 1250, 1100, 0)  # the system breakpoint's window hits
    single = PromptCache()
    single.anthropic("claude", mark([system, *history], 25))
    assert single.anthropic("claude", mark([system, *history[:-1], seg(50, "m24 edited")], 25)) == (
        0,
        2350,
        0,
        0,
    )


def test_without_a_breakpoint_nothing_is_cached(cache: Any) -> None:
    request = blocks(5, 1000)
    assert cache.anthropic("claude", request) == (5000, 0, 0, 0)
    assert cache.anthropic("claude", request) == (5000, 0, 0, 0)


# ----------------------------------------------------------------------------------------------------------
# Anthropic: automatic caching (top-level cache_control)
# ----------------------------------------------------------------------------------------------------------

SYSTEM = "S" * 4400  # 1100 tokens


def _messages(*texts: str) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]


def test_automatic_caching_moves_the_breakpoint_forward_as_the_conversation_grows(cache: Any) -> None:
    # The documented table: request 1 writes everything; request 2 reads through User(2), writes Asst(2)+User(3)
    auto = {"type": "ephemeral"}
    turns = ["u" * 40, "a" * 80, "u" * 40, "a" * 120, "u" * 60, "a" * 20, "u" * 8]
    request1 = {"system": SYSTEM, "cache_control": auto, "messages": _messages(*turns[:3])}
    request2 = {**request1, "messages": _messages(*turns[:5])}
    request3 = {**request1, "messages": _messages(*turns)}
    assert cache.anthropic("claude", pc.anthropic_segments(request1)) == (0, 1140, 0, 0)
    assert cache.anthropic("claude", pc.anthropic_segments(request2)) == (0, 45, 1140, 0)
    assert cache.anthropic("claude", pc.anthropic_segments(request3)) == (0, 7, 1185, 0)


def test_automatic_caching_with_a_one_hour_ttl(cache: Any) -> None:
    body = {
        "system": SYSTEM,
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
        "messages": _messages("hi"),
    }
    segments = pc.anthropic_segments(body)
    assert [(s.breakpoint, s.ttl) for s in segments] == [(False, "5m"), (True, "1h")]
    assert cache.anthropic("claude", segments) == (0, 1101, 0, 1101)


def test_automatic_breakpoint_walks_back_over_blocks_that_cannot_take_one() -> None:
    segments = [
        seg(10, "a"),
        seg(10, "b"),
        seg(5, "thinking", cacheable=False),
        seg(0, "empty", cacheable=False),
    ]
    placed = pc.apply_automatic_breakpoint(segments)
    assert [s.breakpoint for s in placed] == [False, True, False, False]
    assert pc.apply_automatic_breakpoint([seg(5, "t", cacheable=False)]) == [seg(5, "t", cacheable=False)]


def test_automatic_breakpoint_edge_cases() -> None:
    same = [seg(10, "a"), seg(10, "b", bp=True)]
    assert pc.apply_automatic_breakpoint(same) == same  # same TTL: a no-op, still one breakpoint
    with pytest.raises(CacheControlError):
        pc.apply_automatic_breakpoint([seg(10, "a"), seg(10, "b", bp=True, ttl="1h")])  # another TTL: 400
    four = mark(blocks(6, 10), 0, 1, 2, 3)
    with pytest.raises(CacheControlError, match="Found 5"):
        pc.apply_automatic_breakpoint(four)  # no slot left
    three = mark(blocks(6, 10), 0, 1, 2)
    assert [s.breakpoint for s in pc.apply_automatic_breakpoint(three)] == [
        True,
        True,
        True,
        False,
        False,
        True,
    ]


def test_automatic_caching_in_a_body_skips_a_final_thinking_block() -> None:
    body = {
        "cache_control": {"type": "ephemeral"},
        "messages": [
            {"role": "user", "content": "question"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "ok"}, {"type": "thinking", "thinking": "t"}],
            },
        ],
    }
    assert [s.breakpoint for s in pc.anthropic_segments(body)] == [False, True, False]


# ----------------------------------------------------------------------------------------------------------
# Segment identity (request bodies)
# ----------------------------------------------------------------------------------------------------------


def _anthropic_body(breakpoint_on_system: bool, breakpoint_on_last: bool) -> dict[str, Any]:
    system_block: dict[str, Any] = {"type": "text", "text": SYSTEM}
    if breakpoint_on_system:
        system_block["cache_control"] = {"type": "ephemeral"}
    last: dict[str, Any] = {"type": "text", "text": "u" * 40}
    if breakpoint_on_last:
        last["cache_control"] = {"type": "ephemeral", "ttl": "5m"}
    return {
        "system": [system_block],
        "messages": [
            {"role": "user", "content": "q" * 40},
            {"role": "assistant", "content": "a" * 40},
            {"role": "user", "content": [last]},
        ],
    }


def test_cache_control_does_not_change_segment_identity() -> None:
    plain = pc.anthropic_segments(_anthropic_body(False, False))
    marked = pc.anthropic_segments(_anthropic_body(True, True))
    assert [s.digest for s in plain] == [s.digest for s in marked]
    assert [s.tokens for s in plain] == [s.tokens for s in marked] == [1100, 10, 10, 10]
    assert [s.breakpoint for s in plain] == [False] * 4
    assert [s.breakpoint for s in marked] == [True, False, False, True]


def test_moving_a_breakpoint_keeps_the_cached_prefix(cache: Any) -> None:
    assert cache.anthropic("claude", pc.anthropic_segments(_anthropic_body(True, False))) == (30, 1100, 0, 0)
    # the breakpoint is now on the last block only: its lookback finds the entry written at the system block
    assert cache.anthropic("claude", pc.anthropic_segments(_anthropic_body(False, True))) == (0, 30, 1100, 0)


def test_role_and_message_boundaries_are_part_of_the_identity() -> None:
    def digests(messages: list[dict[str, Any]]) -> list[str]:
        return [s.digest for s in pc.anthropic_segments({"messages": messages})]

    one = digests(
        [{"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]}]
    )
    two = digests([{"role": "user", "content": "A"}, {"role": "user", "content": "B"}])
    assert one[0] == two[0] and one[1] != two[1]
    assert digests([{"role": "user", "content": "A"}]) != digests([{"role": "assistant", "content": "A"}])
    # a string content is the same single text block as its list form
    assert digests([{"role": "user", "content": "A"}]) == digests(
        [{"role": "user", "content": [{"type": "text", "text": "A"}]}]
    )


def test_tool_choice_invalidates_the_messages_cache_only(cache: Any) -> None:
    body = {**_anthropic_body(True, True), "tool_choice": {"type": "auto"}}
    assert cache.anthropic("claude", pc.anthropic_segments(body)) == (0, 1130, 0, 0)
    changed = {**body, "tool_choice": {"type": "any"}}
    assert cache.anthropic("claude", pc.anthropic_segments(changed)) == (0, 30, 1100, 0)


def test_an_image_anywhere_invalidates_the_messages_cache_only(cache: Any) -> None:
    body = _anthropic_body(True, True)
    cache.anthropic("claude", pc.anthropic_segments(body))
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    later = {**body, "messages": [*body["messages"], {"role": "assistant", "content": "ok"}]}
    later["messages"].append({"role": "user", "content": [image, {"type": "text", "text": "look"}]})
    segments = pc.apply_automatic_breakpoint(pc.anthropic_segments(later))
    assert cache.anthropic("claude", segments) == (0, 32, 1100, 0)


def test_a_tool_definition_change_invalidates_everything(cache: Any) -> None:
    tool = {"name": "read", "description": "d" * 4000, "input_schema": {"type": "object"}}
    body = {**_anthropic_body(False, True), "tools": [{**tool, "cache_control": {"type": "ephemeral"}}]}
    first = pc.anthropic_segments(body)
    assert cache.anthropic("claude", first)[:3] == (0, sum(s.tokens for s in first), 0)
    edited = {**body, "tools": [{**tool, "description": "e" * 4000, "cache_control": {"type": "ephemeral"}}]}
    segments = pc.anthropic_segments(edited)
    assert cache.anthropic("claude", segments)[:3] == (0, sum(s.tokens for s in segments), 0)
    assert cache.anthropic("claude", first)[:3] == (0, 0, sum(s.tokens for s in first))  # the old one stays


# ----------------------------------------------------------------------------------------------------------
# Token totals: the stand-in's estimate
# ----------------------------------------------------------------------------------------------------------

ANTHROPIC_BODIES = [
    {"messages": [{"role": "user", "content": "hello"}]},
    {"system": "be brief" * 7, "messages": [{"role": "user", "content": "x" * 1001}]},
    {
        "system": [{"type": "text", "text": "abc"}, {"type": "text", "text": "defgh", "cache_control": {}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}, {"type": "document", "source": {}}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "th" * 33, "signature": "sig"},
                    {"type": "tool_use", "id": "t", "name": "f", "input": {"b": [1, 2], "a": "é"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "r"}]}
                ],
            },
            {"role": "assistant", "content": []},
            "not a message",
        ],
    },
]


@pytest.mark.parametrize("body", ANTHROPIC_BODIES)
def test_anthropic_total_is_the_standin_input_tokens(body: dict[str, Any]) -> None:
    expected = standin_upstream.anthropic_usage(body, "")["input_tokens"]
    assert sum(s.tokens for s in pc.anthropic_segments(body)) == expected


CHAT_MESSAGES = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "s" * 999},
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"arguments": '{"x": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "result" * 11},
    ],
]


@pytest.mark.parametrize("messages", CHAT_MESSAGES)
def test_chat_total_is_the_standin_prompt_tokens(messages: list[dict[str, Any]]) -> None:
    expected = standin_upstream.usage_for(messages, "")["prompt_tokens"]
    assert sum(s.tokens for s in pc.chat_segments({"messages": messages})) == expected


RESPONSES_BODIES = [
    {"input": "hello there"},
    {
        "instructions": "i" * 501,
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "q" * 17}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "why"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "out" * 9},
        ],
    },
]


@pytest.mark.parametrize("body", RESPONSES_BODIES)
def test_responses_total_is_the_standin_input_tokens(body: dict[str, Any]) -> None:
    expected = standin_upstream.responses_usage(body, "")["input_tokens"]
    assert sum(s.tokens for s in pc.responses_segments(body)) == expected


def test_tools_count_unless_asked_not_to() -> None:
    tool = {"type": "function", "function": {"name": "f", "description": "d" * 100}}
    body = {"tools": [tool], "messages": [{"role": "user", "content": "u" * 40}]}
    tool_chars = len(pc.canonical_json(tool))
    assert sum(s.tokens for s in pc.chat_segments(body)) == -(-(tool_chars + 40) // 4)
    assert [s.tokens for s in pc.chat_segments(body, count_tools=False)] == [0, 10]
    assert pc.chat_segments(body)[0].digest == pc.chat_segments(body, count_tools=False)[0].digest


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "assistant", "system", "tool"]),
                "content": st.text(max_size=40),
            },
            optional={
                "tool_calls": st.lists(
                    st.fixed_dictionaries(
                        {"function": st.fixed_dictionaries({"arguments": st.text(max_size=20)})}
                    ),
                    max_size=2,
                )
            },
        ),
        max_size=8,
    )
)
def test_chat_totals_match_the_standin_for_any_messages(messages: list[dict[str, Any]]) -> None:
    expected = standin_upstream.usage_for(messages, "")["prompt_tokens"]
    segments = pc.chat_segments({"messages": messages})
    assert sum(s.tokens for s in segments) == expected
    assert all(s.tokens >= 0 for s in segments)


# ----------------------------------------------------------------------------------------------------------
# OpenAI
# ----------------------------------------------------------------------------------------------------------


def test_openai_under_1024_tokens_is_never_cached(cache: Any) -> None:
    request = [seg(1000, "system"), seg(23, "user")]
    assert cache.openai("gpt", request) == (1023, 0)
    assert cache.openai("gpt", request) == (1023, 0)


def test_openai_documented_usage_example(cache: Any) -> None:
    # "prompt_tokens": 2006 ... "cached_tokens": 1920
    request = [seg(1900, "system"), seg(106, "user")]
    assert cache.openai("gpt", request) == (2006, 0)
    assert cache.openai("gpt", request) == (2006, 1920)


@pytest.mark.parametrize(
    ("prefix", "cached"), [(1024, 1024), (1100, 1024), (1151, 1024), (1152, 1152), (1300, 1280), (1408, 1408)]
)
def test_openai_hits_come_in_128_token_increments(cache: Any, prefix: int, cached: int) -> None:
    cache.openai("gpt", [seg(prefix, "conversation so far")])
    assert cache.openai("gpt", [seg(prefix, "conversation so far"), seg(500, "new turn")]) == (
        prefix + 500,
        cached,
    )


def test_openai_growing_conversation(cache: Any) -> None:
    turn1 = [seg(1000, "system"), seg(110, "u1")]
    turn2 = [*turn1, seg(200, "a1"), seg(30, "u2")]
    turn3 = [*turn2, seg(200, "a2"), seg(30, "u3")]
    assert cache.openai("gpt", turn1) == (1110, 0)
    assert cache.openai("gpt", turn2) == (1340, 1024)
    assert cache.openai("gpt", turn3) == (1570, 1280)


def test_openai_prefix_change_is_a_miss(cache: Any) -> None:
    cache.openai("gpt", [seg(1500, "system"), seg(600, "u1")])
    assert cache.openai("gpt", [seg(1500, "system v2"), seg(600, "u1")]) == (2100, 0)
    assert cache.openai("gpt", [seg(1500, "system"), seg(600, "u1 edited")]) == (2100, 1408)


def test_deployments_never_share_entries(cache: Any) -> None:
    request = [seg(3000, "system", bp=True), seg(10, "user")]
    cache.openai("gpt-a", request)
    assert cache.openai("gpt-b", request) == (3010, 0)
    assert cache.openai("gpt-a", request) == (3010, 2944)
    cache.anthropic("claude-a", request)
    assert cache.anthropic("claude-b", request) == (10, 3000, 0, 0)
    assert cache.anthropic("gpt-a", request) == (10, 3000, 0, 0)  # the two surfaces do not share either


def test_openai_prompt_cache_key_routes_to_its_own_cache(cache: Any) -> None:
    request = [seg(2000, "system")]
    cache.openai("gpt", request, routing_key="session-1")
    assert cache.openai("gpt", request, routing_key="session-2") == (2000, 0)
    assert cache.openai("gpt", request) == (2000, 0)
    assert cache.openai("gpt", request, routing_key="session-1") == (2000, 1920)


def test_openai_inactivity_timeout_and_refresh(clock: FakeClock) -> None:
    cache = PromptCache(clock=clock, openai_ttl=600)
    request = [seg(2000, "system")]
    cache.openai("gpt", request)
    clock.advance(599)
    assert cache.openai("gpt", request) == (2000, 1920)  # used: refreshed
    clock.advance(599)
    assert cache.openai("gpt", request) == (2000, 1920)
    clock.advance(600)
    assert cache.openai("gpt", request) == (2000, 0)


def test_openai_default_timeout_is_five_minutes(cache: Any, clock: FakeClock) -> None:
    cache.openai("gpt", [seg(2000, "system")])
    clock.advance(300)
    assert cache.openai("gpt", [seg(2000, "system")]) == (2000, 0)


def test_chat_bodies(cache: Any) -> None:
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "u" * 40}]
    turn2 = [*turn1, {"role": "assistant", "content": "a" * 80}, {"role": "user", "content": "v" * 40}]
    assert cache.openai("gpt", pc.chat_segments({"messages": turn1})) == (1110, 0)
    assert cache.openai("gpt", pc.chat_segments({"messages": turn2})) == (1140, 1024)
    edited = [{"role": "system", "content": SYSTEM + "!"}, *turn2[1:]]
    assert cache.openai("gpt", pc.chat_segments({"messages": edited})) == (1141, 0)


def test_responses_bodies(cache: Any) -> None:
    first = {"instructions": "i" * 4800, "input": "q" * 40}
    assert cache.openai("gpt", pc.responses_segments(first)) == (1210, 0)
    follow_up = {
        "instructions": "i" * 4800,
        "input": [
            {"role": "user", "content": "q" * 40},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a" * 40}]},
            {"role": "user", "content": "next"},
        ],
    }
    assert cache.openai("gpt", pc.responses_segments(follow_up)) == (1221, 1152)
    other_instructions = {**follow_up, "instructions": "j" * 4800}
    assert cache.openai("gpt", pc.responses_segments(other_instructions)) == (1221, 0)


def test_usage_objects() -> None:
    result = pc.OpenAICacheResult(2006, 1920)
    assert pc.chat_usage(result, 300) == {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    assert pc.responses_usage(result, 48) == {
        "input_tokens": 2006,
        "input_tokens_details": {"cached_tokens": 1920, "cache_write_tokens": 0},
        "output_tokens": 48,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 2054,
    }
    assert pc.anthropic_usage(pc.AnthropicCacheResult.uncached(50), 3) == {
        "input_tokens": 50,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 3,
    }


# ----------------------------------------------------------------------------------------------------------
# Memory bound, expiry bookkeeping, threads
# ----------------------------------------------------------------------------------------------------------


def test_memory_bound_evicts_the_least_recently_used_prefix(clock: FakeClock) -> None:
    cache = PromptCache(clock=clock, max_entries=2)
    a, b, c = ([seg(2000, name, bp=True)] for name in "abc")
    for request in (a, b):
        assert cache.anthropic("claude", request) == (0, 2000, 0, 0)
    assert len(cache) == 2
    assert cache.anthropic("claude", a) == (0, 0, 2000, 0)  # a is now the most recently used
    assert cache.anthropic("claude", c) == (0, 2000, 0, 0)  # evicts b
    assert len(cache) == 2
    assert cache.anthropic("claude", a) == (0, 0, 2000, 0)
    assert cache.anthropic("claude", b) == (0, 2000, 0, 0)


def test_expired_entries_are_not_counted_and_clear_empties(cache: Any, clock: FakeClock) -> None:
    cache.anthropic("claude", [seg(2000, "a", bp=True)])
    cache.anthropic("claude", [seg(2000, "b", bp=True, ttl="1h")])
    assert len(cache) == 2
    clock.advance(300)
    assert len(cache) == 1
    cache.clear()
    assert len(cache) == 0
    assert cache.anthropic("claude", [seg(2000, "b", bp=True, ttl="1h")]) == (0, 2000, 0, 2000)


def test_concurrent_requests(clock: FakeClock) -> None:
    cache = PromptCache(clock=clock, max_entries=50)
    errors: list[Exception] = []

    def worker(n: int) -> None:
        try:
            for i in range(60):
                request = [
                    seg(1100, "system", bp=True),
                    *blocks(i % 7, 40, f"w{n}-"),
                    seg(30, f"u{i}", bp=True),
                ]
                result = cache.anthropic(f"model-{n % 2}", request)
                assert result.total_input_tokens == 1130 + 40 * (i % 7)
                chat = cache.openai(f"model-{n % 2}", request)
                assert chat.cached_tokens in (0, 1024, 1152, 1280, 1408)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(cache) <= 50


# ----------------------------------------------------------------------------------------------------------
# Properties over any sequence of requests
# ----------------------------------------------------------------------------------------------------------

MIN_TOKENS = 1024


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[int], list[tuple[list[Any], float]]]:
    """A shared base of segments and requests that are mostly prefixes of it (so they hit), some edited."""
    sizes = draw(st.lists(st.integers(0, 700), min_size=30, max_size=30))
    requests = []
    for _ in range(draw(st.integers(1, 8))):
        length = draw(st.integers(0, 30))
        names = [f"s{i}" for i in range(length)]
        if length and draw(st.booleans()):
            names[draw(st.integers(0, length - 1))] += "'"
        marked = sorted(draw(st.sets(st.integers(0, max(length - 1, 0)), max_size=4))) if length else []
        long_ones = draw(st.integers(0, len(marked)))
        segments = [
            Segment(
                sizes[i],
                names[i],
                breakpoint=i in marked,
                ttl="1h" if i in marked[:long_ones] else "5m",
            )
            for i in range(length)
        ]
        requests.append((segments, draw(st.sampled_from([0.0, 1.0, 200.0, 299.0, 301.0, 4000.0]))))
    return sizes, requests


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_anthropic_counts_always_add_up(case: tuple[list[int], list[tuple[list[Any], float]]]) -> None:
    _, requests = case
    clock = FakeClock()
    cache = PromptCache(clock=clock, min_tokens=MIN_TOKENS)
    for segments, pause in requests:
        clock.advance(pause)
        total = sum(s.tokens for s in segments)
        result = cache.anthropic("claude", segments)
        assert (
            result.input_tokens + result.cache_creation_input_tokens + result.cache_read_input_tokens == total
        )
        assert min(result) >= 0
        assert result.cache_read_input_tokens == 0 or result.cache_read_input_tokens >= MIN_TOKENS
        assert result.cache_creation_1h_input_tokens <= result.cache_creation_input_tokens
        written = result.cache_creation_input_tokens + result.cache_read_input_tokens
        assert result.cache_creation_input_tokens == 0 or written >= MIN_TOKENS
        # the same request again at once reads everything up to its last breakpoint and writes nothing
        marked = [i for i, s in enumerate(segments) if s.breakpoint]
        up_to_last = sum(s.tokens for s in segments[: marked[-1] + 1]) if marked else 0
        expected_read = up_to_last if up_to_last >= MIN_TOKENS else 0
        assert cache.anthropic("claude", segments) == (total - expected_read, 0, expected_read, 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_openai_cached_tokens_are_zero_or_128_steps_from_1024(
    case: tuple[list[int], list[tuple[list[Any], float]]],
) -> None:
    _, requests = case
    clock = FakeClock()
    cache = PromptCache(clock=clock)
    for segments, pause in requests:
        clock.advance(pause)
        total = sum(s.tokens for s in segments)
        prompt, cached = cache.openai("gpt", segments)
        assert prompt == total
        assert cached == 0 or (cached >= 1024 and cached % 128 == 0)
        assert cached <= total
        again = cache.openai("gpt", segments)
        assert again == (total, total // 128 * 128 if total >= 1024 else 0)

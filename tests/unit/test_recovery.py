"""Recovery and control, without a proxy: errors parsed, windows learned, control resolved, the
breaker's states, force/off/focus in the engine, and no compaction loops on the shared transcripts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from compact_hook import CompactConfig
from compact_hook.core.failures import Overflow, SummaryFailure, is_context_error
from compact_hook.core.outcomes import CacheStatus, Mode, Reason
from compact_hook.engine import Compactor, CompactRequest
from compact_hook.engine.library import parse_chat
from compact_hook.engine.summary.breaker import Breaker, Circuit
from compact_hook.proxy.feedback.recovery import is_retry
from compact_hook.proxy.feedback.windows import LearnedWindows, Taught
from compact_hook.proxy.marks import INTERNAL_TOKEN, RETRY_KEY
from compact_hook.proxy.request.control import Control, control_of, with_command
from compact_hook.proxy.request.gate import attach_fallbacks
from compact_hook.state.store import MemoryStore
from compact_hook.wires import Conversation
from compact_hook.wires.command import command_in, ran_command
from tests.fakes import FakeSummarizer, InMemoryArchive
from tests.support import load_transcript, openai_transcripts, replay_points

# -- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "sent"),
    [
        (
            "This model's maximum context length is 9000 tokens. However, your messages resulted in 12000 tokens.",
            9000,
            12000,
        ),
        (  # OpenAI's "requested" counts the completion too: the messages' share is what was sent
            "This model's maximum context length is 128000 tokens. However, you requested 133000 tokens "
            "(125000 in the messages, 8000 in the completion). Please reduce the length of the messages.",
            128000,
            125000,
        ),
        (
            '{"type":"error","error":{"message":"prompt is too long: 201234 tokens > 200000 maximum"}}',
            200000,
            201234,
        ),
        ("input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000", 200000, 198000),
        ("Your input exceeds the context window of this model. Please adjust your input.", None, None),
        (  # Gemini, as LiteLLM passes it on
            'GeminiException - {"error": {"code": 400, "message": "The input token count (12156) exceeds the '
            'maximum number of tokens allowed (9000).", "status": "INVALID_ARGUMENT"}}',
            9000,
            12156,
        ),
        (  # llama.cpp's server, as LiteLLM's openai/ provider passes it on
            "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
            "OpenAIException - request (6031 tokens) exceeds the available context size (2048 tokens), "
            "try increasing it",
            2048,
            6031,
        ),
        (  # llama.cpp's server, its JSON body (LiteLLM's anthropic/ provider keeps it whole)
            '{"error":{"code":400,"message":"request exceeds the available context size",'
            '"type":"exceed_context_size_error","n_prompt_tokens":6031,"n_ctx":2048}}',
            2048,
            6031,
        ),
        (  # vLLM's newer wording
            "This model's maximum context length is 2048 tokens. However, your request has 3001 input "
            "tokens. Please reduce the length of the input messages.",
            2048,
            3001,
        ),
    ],
)
def test_a_context_length_error_says_the_limit_and_the_size_when_it_knows_them(
    text: str, limit: int | None, sent: int | None
) -> None:
    assert is_context_error(text)
    assert Overflow.parse(text) == Overflow(limit, sent)


def test_other_errors_are_not_context_errors() -> None:
    assert not is_context_error("Rate limit reached for requests")
    assert not is_context_error(RuntimeError("stand-in failure"))


def test_a_refusal_gives_the_window_in_the_providers_tokens_and_the_ratio_it_counted_at() -> None:
    # the provider counted 12,000 where we counted 10,000: its count is 1.2 of ours, its window its own
    assert Overflow(9000, 12000).window(10_000) == 9000 and Overflow(9000, 12000).ratio(10_000) == 1.2
    # not what it counted: the lower of its limit and our estimate of what was sent, less a margin
    assert (
        Overflow(9000, None).window(20_000) == int(9000 * 0.95) and Overflow(9000, None).ratio(10_000) is None
    )
    assert Overflow(9000, None).window(8_000) == int(8000 * 0.95)  # we undercount: below what failed
    assert Overflow().window(10_000) == 8_000
    assert Overflow(9000, 10**9).ratio(10_000) is None  # absurd: teaches nothing


async def test_a_learned_window_is_shared_through_the_store_and_only_ever_shrinks() -> None:
    store = MemoryStore(100, 60)
    one, other = LearnedWindows(store), LearnedWindows(store)
    assert await one.get("agent", "team:a") is None
    assert await one.learn("agent", 9000, 60, "team:a", Taught.STATED) == 9000
    assert await one.learn("agent", 12000, 60, "team:a", Taught.STATED) == 9000
    assert await other.get("agent", "team:b") == 9000  # another replica (no memo yet) reads it from the store


async def test_a_window_guessed_from_what_was_sent_serves_only_the_tenant_whose_request_it_was() -> None:
    """A refusal that states no limit (our guess: a share of what was sent) — or a throttle read as one —
    must not cut every tenant's window."""
    store = MemoryStore(100, 60)
    windows = LearnedWindows(store)
    assert await windows.learn("agent", 6000, 60, "team:a", Taught.GUESSED) == 6000
    assert await windows.get("agent", "team:a") == 6000
    assert await LearnedWindows(store).get("agent", "team:a") == 6000  # replicas share it
    assert await windows.get("agent", "team:b") is None
    await windows.learn("agent", 9000, 60, "team:a", Taught.STATED)  # a stated limit: the group's
    assert (await windows.get("agent", "team:a"), await windows.get("agent", "team:b")) == (6000, 9000)


def test_the_retry_fallback_is_ours_alone_and_never_leaks() -> None:
    chat: dict[str, Any] = {"model": "agent"}
    attach_fallbacks(chat, "agent", None, "acompletion")
    [[target, *rest]] = [entry["agent"] for entry in chat["context_window_fallbacks"]]
    assert target == {"model": "agent", RETRY_KEY: INTERNAL_TOKEN} and rest == []
    responses: dict[str, Any] = {"model": "agent"}

    class Router:
        fallbacks = [{"agent": ["backup"]}]

    attach_fallbacks(responses, "agent", Router(), "aresponses")
    assert responses["fallbacks"] == [{"model": "agent", RETRY_KEY: INTERNAL_TOKEN}, {"model": "backup"}]
    own: dict[str, Any] = {"model": "agent", "fallbacks": ["mine"]}
    attach_fallbacks(own, "agent", None, "aresponses")
    assert own["fallbacks"] == ["mine"]  # the client's choice stands
    forged = {RETRY_KEY: "guess", "messages": []}
    assert not is_retry(forged) and RETRY_KEY not in forged
    genuine = {RETRY_KEY: INTERNAL_TOKEN}
    assert is_retry(genuine) and genuine == {}


# -- control --------------------------------------------------------------------------------------------


class Auth:
    def __init__(self, metadata: Any = None, team_metadata: Any = None) -> None:
        self.metadata, self.team_metadata = metadata, team_metadata


def headers(value: str) -> dict[str, Any]:
    return {"proxy_server_request": {"headers": {"X-Compact": value}}}


def test_the_request_says_more_than_its_key_and_its_key_more_than_its_team() -> None:
    team = Auth(team_metadata={"compact": {"mode": "off", "trigger_ratio": 0.5, "keep_tool_results": 1}})
    assert control_of({}, "metadata", team).mode is Mode.OFF
    key_and_team = Auth({"compact": {"mode": "force", "trigger_ratio": 0.6}}, team.team_metadata)
    control = control_of({}, "metadata", key_and_team)
    assert control.mode is Mode.FORCE and control.overrides == {"trigger_ratio": 0.6, "keep_tool_results": 1}
    assert control_of(headers("auto"), "metadata", key_and_team).mode is Mode.AUTO
    request = {"litellm_metadata": {"compact": {"mode": "off", "focus": "x"}}}
    assert control_of(request, "litellm_metadata", key_and_team).mode is Mode.OFF
    assert control_of(request, "metadata", key_and_team).mode is Mode.FORCE  # not where that format looks


def test_a_request_cannot_change_settings_and_nonsense_is_ignored() -> None:
    request = {"metadata": {"compact": {"mode": "force", "trigger_ratio": 0.01, "archive_dir": "/etc"}}}
    assert control_of(request, "metadata", None) == Control(Mode.FORCE)
    for value in ("FORCE ", "sometimes", 3, ["off"], {"mode": 1}):
        control = control_of({"metadata": {"compact": value}}, "metadata", None)
        assert control.mode is (Mode.FORCE if value == "FORCE " else Mode.AUTO)
    bad = Control(overrides={"trigger_ratio": 7})
    config = CompactConfig(context_window=1000)
    assert bad.settings(config) == config  # an operator's typo: logged, the model's settings stand


def test_a_focus_is_one_bounded_line() -> None:
    control = control_of({"metadata": {"compact": {"focus": "a\n\nb " + "c" * 900}}}, "metadata", None)
    assert control.focus.startswith("a b c") and len(control.focus) == 500
    assert with_command(control, "").focus == control.focus
    assert with_command(control, "the tests").focus == "the tests"


def test_slash_compact_is_a_users_command_only() -> None:
    assert command_in({"role": "user", "content": "/compact"}) == ""
    assert (
        command_in({"role": "user", "content": [{"type": "text", "text": " /compact the db "}]}) == "the db"
    )
    assert command_in({"type": "message", "role": "user", "content": "/compact x"}) == "x"
    assert command_in("/compact") == ""  # a Responses string input
    assert command_in({"role": "user", "content": "/compaction"}) is None
    assert command_in({"role": "assistant", "content": "/compact"}) is None
    assert command_in({"role": "tool", "tool_call_id": "1", "content": "/compact"}) is None
    tool_result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "1", "content": "/compact"}],
    }
    assert command_in(tool_result) is None
    assert ran_command([{"role": "user", "content": "/compact"}, {"role": "user", "content": "go on"}])
    assert not ran_command([{"role": "user", "content": "/compact"}])  # the newest is the command itself


# -- the breaker ----------------------------------------------------------------------------------------


async def test_the_breaker_opens_after_consecutive_failures_doubles_its_cooldown_and_closes_on_success() -> (
    None
):
    now = [1000.0]
    breaker = Breaker(MemoryStore(100, 60), clock=lambda: now[0])
    config = CompactConfig(breaker_failures=2, breaker_cooldown_seconds=10, breaker_max_cooldown_seconds=25)
    key = Breaker.key("summarizer", "team:a")
    assert await breaker.gate(key, config) is Circuit.CLOSED
    await breaker.failed(key, config)
    assert await breaker.gate(key, config) is Circuit.CLOSED
    await breaker.failed(key, config)
    assert await breaker.gate(key, config) is Circuit.OPEN
    assert await breaker.gate(Breaker.key("summarizer", "team:b"), config) is Circuit.CLOSED  # per tenant
    now[0] += 10
    assert await breaker.gate(key, config) is Circuit.PROBE
    await breaker.failed(key, config)  # the probe failed: open again, twice as long
    now[0] += 19
    assert await breaker.gate(key, config) is Circuit.OPEN
    now[0] += 1
    assert await breaker.gate(key, config) is Circuit.PROBE
    await breaker.failed(key, config)
    now[0] += 24  # capped at 25
    assert await breaker.gate(key, config) is Circuit.OPEN
    now[0] += 1
    await breaker.succeeded(key)
    assert await breaker.gate(key, config) is Circuit.CLOSED


# -- the engine -----------------------------------------------------------------------------------------

CONFIG = CompactConfig(
    context_window=20_000,
    summary_max_tokens=1000,
    retry_backoff_seconds=0,
    tool_output_policy="none",
    clear_tool_results=False,
    user_message_budget=0,
)
TRANSCRIPT = load_transcript("claude_code_fa812bfe_pre_compact.json")


def conversation(messages: list[dict[str, Any]]) -> Conversation:
    parsed = parse_chat(messages)
    assert isinstance(parsed, Conversation)
    return parsed


def compact_request(messages: list[dict[str, Any]], summarizer: Any, **extra: Any) -> CompactRequest:
    return CompactRequest(conversation(messages), CONFIG, summarizer, archive=InMemoryArchive(), **extra)


async def test_off_forwards_exactly_what_was_sent_and_force_compacts_under_the_threshold() -> None:
    long, short = TRANSCRIPT, TRANSCRIPT[:17]
    summarizer = FakeSummarizer()
    off = await Compactor(MemoryStore(100, 60)).compact(compact_request(long, summarizer, mode=Mode.OFF))
    assert len(off.messages) == len(long) and all(a is b for a, b in zip(off.messages, long, strict=True))
    assert off.reason is Reason.OFF
    auto = await Compactor(MemoryStore(100, 60)).compact(compact_request(short, summarizer))
    assert not auto.compacted and summarizer.requests == []
    forced = await Compactor(MemoryStore(100, 60)).compact(
        compact_request(short, summarizer, mode=Mode.FORCE, focus="the bead ids")
    )
    assert forced.compacted and forced.cache is CacheStatus.MISS and len(summarizer.requests) == 1
    assert "Pay particular attention to: the bead ids" in summarizer.requests[0][-1]["content"]


async def test_a_failing_summary_model_opens_the_breaker_for_the_next_conversations() -> None:
    config = CompactConfig(**{**CONFIG.__dict__, "max_retries": 0, "on_overflow": "fit"})
    summarizer = FakeSummarizer(default="")  # an empty answer is a failure
    compactor = Compactor(MemoryStore(100, 60))
    reasons = []
    for number in range(5):
        messages = [{"role": "user", "content": f"conversation {number}"}, *TRANSCRIPT[1:]]
        made = CompactRequest(conversation(messages), config, summarizer, archive=InMemoryArchive())
        reasons.append((await compactor.compact(made)).reason)
    assert reasons == [Reason.SUMMARY_FAILED] * 3 + [Reason.BREAKER_OPEN] * 2
    assert len(summarizer.requests) == 3


class Unauthorized(Exception):
    status_code = 401


async def test_a_refused_summary_opens_the_breaker_at_once_and_says_why() -> None:
    """A bad key for the summary model is refused the same way every time: one call, not
    ``breaker_failures`` of them, and the report names the kind."""
    config = CompactConfig(**{**CONFIG.__dict__, "max_retries": 2, "retry_backoff_seconds": 0})
    summarizer = FakeSummarizer(default="")
    summarizer.answers = [Unauthorized("invalid x-api-key")] * 5
    compactor = Compactor(MemoryStore(100, 60))
    results = []
    for number in range(3):
        messages = [{"role": "user", "content": f"conversation {number}"}, *TRANSCRIPT[1:]]
        made = CompactRequest(conversation(messages), config, summarizer, archive=InMemoryArchive())
        results.append(await compactor.compact(made))
    assert [r.reason for r in results] == [Reason.SUMMARY_FAILED, Reason.BREAKER_OPEN, Reason.BREAKER_OPEN]
    assert [r.summary_failure for r in results] == [SummaryFailure.REFUSED] + [
        SummaryFailure.BREAKER_OPEN
    ] * 2
    assert len(summarizer.requests) == 1 and results[0].summary_calls == 1


async def test_a_failure_noted_by_a_peer_carries_its_kind_to_the_next_turn() -> None:
    store = MemoryStore(100, 60)
    config = CompactConfig(**{**CONFIG.__dict__, "max_retries": 0, "on_overflow": "passthrough"})
    timing_out = FakeSummarizer(TimeoutError())
    first = await Compactor(store).compact(
        CompactRequest(conversation(TRANSCRIPT), config, timing_out, archive=InMemoryArchive())
    )
    peer = FakeSummarizer()
    later = await Compactor(store).compact(  # another replica, sharing the store
        CompactRequest(conversation(TRANSCRIPT), config, peer, archive=InMemoryArchive())
    )
    assert first.summary_failure is SummaryFailure.TIMEOUT and first.reason is Reason.SUMMARY_FAILED
    assert later.summary_failure is SummaryFailure.TIMEOUT and peer.requests == []


@pytest.mark.parametrize("name", openai_transcripts())
def test_no_two_consecutive_turns_start_a_new_compaction(name: str) -> None:
    """Replayed turn by turn with the digest (every compaction event is a miss): a compaction lands
    well under the trigger, so the next turn does not compact again."""
    messages = load_transcript(name)
    config = CompactConfig(context_window=16_384, summary_model="digest", summary_max_tokens=1000)

    async def replay() -> list[bool]:
        compactor = Compactor(MemoryStore(1000, 600))
        misses = []
        for end in replay_points(messages):
            made = CompactRequest(
                conversation(messages[:end]), config, FakeSummarizer(), archive=InMemoryArchive()
            )
            misses.append((await compactor.compact(made)).cache is CacheStatus.MISS)
        return misses

    misses = asyncio.run(replay())
    loops = [turn for turn in range(1, len(misses)) if misses[turn] and misses[turn - 1]]
    assert loops == [], f"{name}: consecutive compactions at turns {loops} of {len(misses)}"

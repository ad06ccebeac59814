"""The cheap tiers, protected content, normalization and the fit guarantee (PEER_SCENARIOS E, B.38)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compact_hook import CompactConfig, compact_messages, count_tokens
from compact_hook.core.clearing import PLACEHOLDER
from compact_hook.core.digest import digest
from compact_hook.core.normalize import ABORTED_RESULT, is_valid, normalize
from compact_hook.core.pairing import pair
from compact_hook.core.truncate import Cut, Truncating, truncate_results
from compact_hook.engine import Compactor, CompactRequest, CompactResult
from compact_hook.engine.library import parse_chat
from compact_hook.state.store import MemoryStore
from compact_hook.state.tokenizers import HFTokenCounter
from compact_hook.wires import CHAT, Conversation
from tests.compaction import compact_via_library, tool_session, word_total
from tests.conversations import w
from tests.fakes import FakeSummarizer, InMemoryArchive, WordCounter
from tests.support import (
    Message,
    assistant,
    calling,
    is_prefix,
    is_summary,
    items_of,
    load_transcript,
    pairing_problems,
    replay_points,
    result,
    system,
    user,
)

TOKENS = HFTokenCounter("o200k_base")
is_summary_message = is_summary


def truncate_tool_message(message: Message, limit: int, policy: str, cut: Cut) -> Message | None:
    """Tier 1 on one chat tool message: the rebuilt message, or None when nothing needs cutting."""
    item = CHAT.item(message)
    cuts = truncate_results(item, Truncating(limit, policy, cut))
    return CHAT.replace_outputs(item, cuts, keep_media=True).raw if cuts else None


def normalized(messages: list[Message]) -> list[Message]:
    return [item.raw for item in normalize(items_of(messages), CHAT)]


def words_config(**overrides: Any) -> CompactConfig:
    """A WordCounter-sized world: 1,000-token window, tiers on, nothing fancy."""
    settings: dict[str, Any] = {
        "context_window": 1000,
        "trigger_ratio": 0.9,
        "tail_retention_ratio": 0.3,
        "clear_trigger_ratio": 0.5,
        "clear_at_least": 50,
        "tool_output_max_tokens": 100,
        "summary_context_window": 100_000,
        "summary_max_tokens": 100,
        "retry_backoff_seconds": 0,
        "user_message_budget": 0,
    }
    settings.update(overrides)
    return CompactConfig(**settings)


# --- tier 1: truncation --------------------------------------------------------------------


def test_an_oversized_output_keeps_head_and_tail_with_a_marker() -> None:
    lines = "\n".join(f"line {i}: some output text here" for i in range(2000))
    message = {"role": "tool", "tool_call_id": "x", "content": lines}
    cut = truncate_tool_message(message, 500, "tokens", TOKENS.cut)
    assert cut is not None and cut is not message and message["content"] == lines
    assert cut["content"].startswith("line 0: some output")
    assert cut["content"].endswith("line 1999: some output text here")
    assert "tokens truncated; the full output had 2000 lines…" in cut["content"]
    assert TOKENS.count_text(cut["content"]) <= 500
    assert cut["tool_call_id"] == "x"
    assert truncate_tool_message(message, 500, "tokens", TOKENS.cut) == cut  # deterministic


def test_an_output_within_the_limit_is_untouched() -> None:
    assert truncate_tool_message(result("short output"), 100, "tokens", TOKENS.cut) is None


def test_the_bytes_policy_cuts_by_utf8_bytes() -> None:
    message = result("é" * 10_000)
    cut = truncate_tool_message(message, 100, "bytes", TOKENS.cut)
    assert cut is not None and "bytes truncated" in cut["content"]
    assert len(cut["content"].encode()) <= 100 * 4 + 60


def test_the_none_policy_never_truncates() -> None:
    assert truncate_tool_message(result(w(10_000)), 100, "none", TOKENS.cut) is None


def test_outputs_made_of_content_parts_are_truncated_too() -> None:
    parts = [{"type": "text", "text": w(3000, "alpha")}, {"type": "text", "text": w(3000, "omega")}]
    image = {"type": "image_url", "image_url": {"url": "https://x.test/plot.png"}}
    cut = truncate_tool_message(
        {"role": "tool", "tool_call_id": "x", "content": [*parts, image]}, 300, "tokens", TOKENS.cut
    )
    assert cut is not None
    [part, kept_image] = cut["content"]
    assert part["text"].startswith("alpha") and part["text"].endswith("omega") and "truncated" in part["text"]
    assert kept_image is image  # media stays after the cut text


async def test_truncation_applies_on_every_request_but_never_to_protected_tools() -> None:
    messages = tool_session([10, 300]) + [calling("manage_todo_list", call_id="t"), result(w(300), "t_0")]
    out = await compact_via_library(messages, words_config(context_window=100_000))
    assert out.compacted is False and out.truncated == 1
    assert "tokens truncated" in out.messages[5]["content"]
    assert out.messages[7] is messages[7]  # protected
    assert out.messages[3] is messages[3]  # small


async def test_b38_the_newest_oversized_output_is_truncated_and_older_pairs_stay() -> None:
    """[CX compact_remote_v2_trim_estimate_uses_session_base_instructions]"""
    messages = tool_session([20, 20, 400])
    out = await compact_via_library(messages, words_config(context_window=100_000))
    assert [m for m in out.messages if m.get("tool_calls")] == [m for m in messages if m.get("tool_calls")]
    assert out.messages[:6] == messages[:6]
    assert "truncated" in out.messages[-1]["content"] and out.messages[-1]["tool_call_id"] == "c2_0"


# --- tier 2: clearing (PEER_SCENARIOS E) ---------------------------------------------------


async def test_e57_under_the_clearing_trigger_results_are_untouched() -> None:
    messages = tool_session([50] * 5)
    out = await compact_via_library(messages, words_config())
    assert out.cleared == 0 and all(a is b for a, b in zip(out.messages, messages, strict=True))


async def test_e58_e59_over_the_trigger_old_results_become_placeholders_and_the_newest_stay() -> None:
    messages = tool_session([90] * 6)
    out = await compact_via_library(messages, words_config(keep_tool_results=2))
    contents = [m["content"] for m in out.messages if m["role"] == "tool"]
    assert contents[:4] == [PLACEHOLDER.format(tool="bash", back="")] * 4
    assert contents[4:] == [m["content"] for m in messages[-3::2]]
    assert out.cleared == 4 and out.compacted is False


async def test_e60_protected_tools_are_never_cleared_even_when_largest() -> None:
    messages = tool_session([90, 90, 90, 90, 90])
    messages[3] = {**messages[3], "content": "x " * 400}
    messages[2] = calling("manage_todo_list", call_id="c0")
    out = await compact_via_library(messages, words_config(keep_tool_results=1, tool_output_policy="none"))
    assert out.messages[3] is messages[3]
    assert out.cleared == 3


async def test_e61_clearing_keeps_the_message_count_and_order() -> None:
    messages = tool_session([90] * 6)
    out = await compact_via_library(messages, words_config())
    assert [(m["role"], m.get("tool_call_id")) for m in out.messages] == [
        (m["role"], m.get("tool_call_id")) for m in messages
    ]


async def test_short_results_are_not_worth_clearing() -> None:
    messages = tool_session([5] * 60)
    out = await compact_via_library(messages, words_config(clear_at_least=1))
    assert out.cleared == 0


async def test_clearing_waits_for_a_batch_worth_clear_at_least() -> None:
    messages = tool_session([90] * 6)
    assert (await compact_via_library(messages, words_config(clear_at_least=10_000))).cleared == 0
    assert (await compact_via_library(messages, words_config(clear_at_least=50))).cleared > 0


async def test_e62_an_oversized_output_is_shrunk_only_when_the_window_is_small() -> None:
    """[CX remote_compact_v2_trims_tool_search_output_to_empty_tools_array]"""
    messages = [system("s"), user("task"), calling("search", call_id="a"), result(w(3000), "a_0")]
    roomy = await compact_via_library(
        messages, words_config(context_window=100_000, tool_output_policy="none")
    )
    assert roomy.messages[3] is messages[3]
    tight = await compact_via_library(messages, words_config(context_window=1000, tool_output_policy="none"))
    assert word_total(tight.messages) <= 1000 < word_total(messages)
    assert "tokens truncated" in tight.messages[3]["content"]
    assert tight.messages[3]["tool_call_id"] == "a_0" and pairing_problems(tight.messages) == []


async def test_clearing_is_remembered_so_the_prefix_stays_stable_between_batches() -> None:
    transcript = load_transcript("claude_code_fa812bfe_pre_compact.json")
    config = CompactConfig(
        context_window=60_000, summary_max_tokens=1000, retry_backoff_seconds=0, clear_at_least=3000
    )
    compactor = Compactor(MemoryStore(1000, 3600))
    summarizer = FakeSummarizer()
    previous: list[str] | None = None
    changes = 0
    for end in replay_points(transcript):
        conversation = parse_chat(transcript[:end])
        assert isinstance(conversation, Conversation)
        out = await compactor.compact(
            CompactRequest(conversation, config, summarizer, "s", scope=b"x", archive=InMemoryArchive())
        )
        current = [json.dumps(m, sort_keys=True) for m in out.messages]
        if previous is not None and not is_prefix(previous, current):
            changes += 1
        previous = current
    batches = len({m for m in compactor.store._entries.values()})  # type: ignore[union-attr]
    assert changes <= batches
    assert changes >= 2


# --- protected content in compaction ---------------------------------------------------------


async def test_users_words_survive_compaction_within_the_budget_in_order() -> None:
    messages = [system("rules")]
    for i in range(12):
        messages += [user(f"instruction {i} " + w(20)), assistant(w(60))]
    config = words_config(tool_output_policy="none", clear_tool_results=False, user_message_budget=70)
    out = await compact_via_library(messages, config)
    assert out.compacted
    kept = [
        m["content"].split()[1] for m in out.messages if m["role"] == "user" and not is_summary_message(m)
    ]
    assert kept == sorted(kept, key=int)
    summary_at = next(i for i, m in enumerate(out.messages) if is_summary_message(m))
    before = [m for m in out.messages[:summary_at] if m["role"] == "user"]
    assert 1 <= len(before) <= 3  # 22 words each, within 70 + the latest always


async def test_a_zero_budget_keeps_only_the_latest_user_message() -> None:
    messages = [system("rules"), user("first " + w(10))] + [assistant(w(90)) for _ in range(10)]
    messages.append(user("go on"))
    out = await compact_via_library(
        messages, words_config(tool_output_policy="none", clear_tool_results=False)
    )
    assert out.compacted and out.messages[-1] is messages[-1] and messages[1] not in out.messages


async def test_protected_results_and_interrupt_markers_survive_compaction() -> None:
    messages = [system("rules"), user("task")]
    messages += [calling("manage_todo_list", call_id="t"), result("1. do it " + w(10), "t_0")]
    messages += [assistant(w(100)), user("[Request interrupted by user]"), assistant(w(100))]
    messages += [assistant(w(100)) for _ in range(8)]
    out = await compact_via_library(
        messages, words_config(tool_output_policy="none", clear_tool_results=False)
    )
    assert out.compacted
    assert messages[2] in out.messages and messages[3] in out.messages
    assert messages[5] in out.messages
    assert pairing_problems(out.messages) == []


async def test_a_previous_summary_is_never_kept_as_a_user_message() -> None:
    first = await compact_via_library(
        [system("s"), user("task")] + [assistant(w(100)) for _ in range(10)] + [user("go on")],
        words_config(tool_output_policy="none", clear_tool_results=False, user_message_budget=10_000),
    )
    grown = first.messages + [assistant(w(100)) for _ in range(8)] + [user("and on")]
    second = await compact_via_library(
        grown, words_config(tool_output_policy="none", clear_tool_results=False, user_message_budget=10_000)
    )
    assert sum(is_summary_message(m) for m in second.messages) == 1


# --- normalization ---------------------------------------------------------------------------


def test_an_unanswered_call_gets_a_synthetic_result_and_an_orphan_result_goes() -> None:
    messages = [
        user("q"),
        calling("a", "b", call_id="x"),
        result("only a", "x_0"),
        result("orphan", "zzz"),
        user("next"),
    ]
    messages = messages[:3] + [user("between"), result("orphan", "zzz")]
    fixed = normalized(messages)
    assert fixed[1] is messages[1] and fixed[2] is messages[2]
    assert fixed[3] == {"role": "tool", "tool_call_id": "x_1", "content": ABORTED_RESULT}
    assert fixed[4] is messages[3] and len(fixed) == 5
    assert is_valid(items_of(fixed)) and pairing_problems(fixed) == []


def test_parallel_results_out_of_order_are_kept_as_sent() -> None:
    messages = [calling("a", "b", call_id="x"), result("b out", "x_1"), result("a out", "x_0")]
    assert normalized(messages) == messages and is_valid(items_of(messages))


def test_a_trailing_unanswered_call_is_answered() -> None:
    conversation = load_transcript("openhands_ponylang__ponyc-4595.json")
    fixed = normalized(conversation)
    assert len(fixed) == len(conversation) + 1 and fixed[-1]["content"] == ABORTED_RESULT
    assert pairing_problems(fixed) == []


async def test_normalize_always_fixes_even_unchanged_requests() -> None:
    messages = [user("q"), calling("a", call_id="x"), user("next")]
    assert (await compact_via_library(messages, words_config())).messages == messages
    fixed = await compact_via_library(messages, words_config(normalize="always"))
    assert fixed.normalized == 1 and fixed.messages[2]["content"] == ABORTED_RESULT


# --- the guarantee ---------------------------------------------------------------------------


async def test_a_failed_summary_over_the_window_is_replaced_by_the_digest_and_fits() -> None:
    messages = [system("s"), user("please fix parser.py")]
    for i in range(30):
        arguments = json.dumps({"path": f"src/mod{i}.py"})
        messages += [
            {
                **calling("read_file", call_id=f"c{i}"),
                "tool_calls": [
                    {
                        "id": f"c{i}_0",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": arguments},
                    }
                ],
            },
            result(("Error: boom\n" if i == 3 else "") + w(40), f"c{i}_0"),
        ]
    config = words_config(tool_output_policy="none", clear_tool_results=False, max_retries=0)
    out = await compact_via_library(messages, config, FakeSummarizer(RuntimeError("down")))
    assert out.compacted and out.summarizer == "digest" and out.cache == "miss"
    assert word_total(out.messages) <= 1000
    summary = next(m["content"] for m in out.messages if is_summary_message(m))
    assert "src/mod" in summary and "read_file(" in summary and "Error: boom" in summary
    assert pairing_problems(out.messages) == []


async def test_with_passthrough_an_over_window_request_leaves_as_the_client_sent_it() -> None:
    messages = tool_session([100] * 30)
    config = words_config(
        on_overflow="passthrough", max_retries=0, tool_output_policy="none", clear_tool_results=False
    )
    out = await compact_via_library(messages, config, FakeSummarizer(RuntimeError("down")))
    assert out.messages == messages and all(a is b for a, b in zip(out.messages, messages, strict=True))


async def test_a_tail_too_large_alone_is_fitted_dropping_oldest_units_never_head_or_latest_user() -> None:
    messages = [system("rules"), user("the task")] + [
        m for i in range(4) for m in (calling("x", call_id=f"c{i}"), result(w(400), f"c{i}_0"))
    ]
    config = words_config(
        tool_output_policy="none", clear_tool_results=False, tail_retention_ratio=0.8, trigger_ratio=0.9
    )
    archive = InMemoryArchive()
    out = await compact_messages(
        messages, config, FakeSummarizer(), session_id="s", counter=WordCounter(), archive=archive
    )
    assert word_total(out.messages) <= 1000
    assert out.messages[0] is messages[0] and messages[1] in out.messages
    assert pairing_problems(out.messages) == []
    archived = [m for _, saved in archive.saved for m in saved]
    for message in messages:
        assert (
            message in out.messages
            or message in archived
            or any(
                m.get("tool_call_id") == message.get("tool_call_id") and m["role"] == "tool"
                for m in out.messages
            )
        )


async def test_summary_model_digest_summarizes_without_any_call() -> None:
    summarizer = FakeSummarizer()
    messages = [system("s"), user("task one")] + [assistant(w(100)) for _ in range(12)] + [user("go on")]
    out = await compact_via_library(
        messages,
        words_config(summary_model="digest", tool_output_policy="none", clear_tool_results=False),
        summarizer,
    )
    assert out.compacted and out.summarizer == "digest" and out.summary_calls == 0
    assert summarizer.requests == []


def test_the_digest_copies_facts_verbatim_and_stays_bounded() -> None:
    conversation = load_transcript("sweagent_fc_marshmallow-1867.json")
    text = digest(items_of(conversation), 4000)
    assert len(text) <= 4400
    assert "## User requests" in text and "## Files touched" in text and "## Tool calls and outcomes" in text
    assert digest(items_of(conversation), 4000) == text


# --- every shared conversation ---------------------------------------------------------------

PROTECTED = {
    "claude_code": "Edit",
    "openhands": "str_replace_editor",
    "sweagent": "edit",
    "tau_bench": "get_reservation_details",
}


@pytest.mark.parametrize(
    "name", sorted(p for p in __import__("tests.support", fromlist=["x"]).openai_transcripts())
)
async def test_every_shared_conversation_leaves_valid_protected_and_deterministic(name: str) -> None:
    conversation = load_transcript(name)
    protected = next(tool for prefix, tool in PROTECTED.items() if name.startswith(prefix))
    total = count_tokens(conversation)
    config = CompactConfig(
        context_window=max(2000, total // 3),
        summary_max_tokens=300,
        tool_output_max_tokens=800,
        clear_at_least=200,
        retry_backoff_seconds=0,
        protected_tools=(protected,),
    )
    first = await compact_messages(
        conversation, config, FakeSummarizer(), session_id="s", archive=InMemoryArchive()
    )
    second = await compact_messages(
        conversation, config, FakeSummarizer(), session_id="s", archive=InMemoryArchive()
    )
    assert json.dumps(first.messages) == json.dumps(second.messages)
    client_turn = len(conversation) - next(
        i for i, m in enumerate(reversed(conversation)) if m["role"] != "assistant"
    )
    assert (
        first.messages[len(first.messages) - (len(conversation) - client_turn) :]
        == conversation[client_turn:]
    )
    assert pairing_problems(first.messages[: len(first.messages) - (len(conversation) - client_turn)]) == []
    latest_user = max((i for i, m in enumerate(conversation) if m["role"] == "user"), default=None)
    if latest_user is not None:
        assert conversation[latest_user] in first.messages
    protected_results = [
        m
        for i, m in enumerate(conversation)
        if m["role"] == "tool" and _tool_of(conversation, i) == protected
    ]
    for message in protected_results:
        assert message in first.messages or not _in_tail(first, message)
    if protected_results:
        assert protected_results[-1] in first.messages


def _tool_of(conversation: list[Message], index: int) -> str | None:
    return pair(items_of(conversation)).tool_of.get((index, 0))


def _in_tail(result: CompactResult, message: Message) -> bool:
    """Whether ``message``'s call id appears in the forwarded request at all (then it must be intact)."""
    return any(
        m.get("tool_call_id") == message.get("tool_call_id") and m["role"] == "tool" for m in result.messages
    )

"""The engine end to end with fakes: trigger boundaries, assembly, failure, archive."""

import copy
import json
from pathlib import Path

import pytest

from compact_hook import CompactConfig, CompactStats, compact_messages, should_compact
from compact_hook.core.failures import SummaryFailure
from compact_hook.core.items import SUMMARY_PREFIX
from compact_hook.core.limits import Limits
from compact_hook.core.outcomes import Reason, Summarizer
from compact_hook.errors import SummarizerError
from tests.compaction import word_total
from tests.conversations import w
from tests.fakes import FakeSummarizer, InMemoryArchive, WordCounter
from tests.support import (
    Message,
    assistant,
    calling,
    is_summary,
    load_transcript,
    pairing_problems,
    result,
    system,
    user,
)

is_summary_message = is_summary


def threshold(cfg: CompactConfig, max_output_tokens: int | None = None) -> int:
    limits = Limits.of(cfg, max_output_tokens, 0)
    assert limits is not None
    return limits.compact


def small_window_config(**overrides: object) -> CompactConfig:
    settings: dict[str, object] = {
        "context_window": 100,
        "trigger_ratio": 0.8,
        "tail_retention_ratio": 0.2,
        "retry_backoff_seconds": 0,
        "summary_context_window": 100_000,
        "summary_max_tokens": 100,
        # issue-2 behaviour in isolation: no cheap tiers, no fitting (see test_tiers.py)
        "tool_output_policy": "none",
        "clear_tool_results": False,
        "user_message_budget": 0,
        "on_overflow": "passthrough",
    }
    settings.update(overrides)
    return CompactConfig(**settings)  # type: ignore[arg-type]


def history(total_words: int) -> list[Message]:
    """system + task + alternating turns, WordCounter total = total_words + framing."""
    return [system(w(4)), user(w(4))] + [
        assistant(w(9)) if i % 2 else user(w(9)) for i in range(max(0, (total_words - 10) // 10))
    ]


# --- trigger -------------------------------------------------------------------------------


def test_threshold_is_inclusive_at_the_trigger_ratio() -> None:
    words = WordCounter()
    cfg = small_window_config(context_window=1000, trigger_ratio=0.8)
    at = [user(w(800 - 1 - 3))]  # 1 per message + 3 reply priming
    assert word_total(at) == 800
    assert should_compact(at, cfg, counter=words) is True
    assert (
        should_compact(at, small_window_config(context_window=1000, trigger_ratio=0.81), counter=words)
        is False
    )
    below = [user(w(800 - 1 - 3 - 1))]
    assert should_compact(below, cfg, counter=words) is False


def test_empty_messages_never_compact() -> None:
    assert should_compact([], small_window_config()) is False


def test_unknown_window_never_compacts() -> None:
    assert (
        should_compact([user(w(10_000))], small_window_config(context_window=None), counter=WordCounter())
        is False
    )


def test_max_tokens_lowers_the_threshold_when_the_reply_would_not_fit() -> None:
    cfg = small_window_config(context_window=1000, trigger_ratio=0.9)
    assert threshold(cfg) == 900
    assert threshold(cfg, max_output_tokens=50) == 900
    assert threshold(cfg, max_output_tokens=400) == 600
    messages = [user(w(700))]
    assert should_compact(messages, cfg, counter=WordCounter()) is False
    assert should_compact(messages, cfg, max_output_tokens=400, counter=WordCounter()) is True


def test_disabled_config_never_compacts() -> None:
    assert should_compact([user(w(1000))], small_window_config(enabled=False), counter=WordCounter()) is False


async def test_below_threshold_returns_the_same_messages_and_zero_stats() -> None:
    messages = [user("hello"), assistant("hi")]
    summarizer = FakeSummarizer()
    out = await compact_messages(messages, small_window_config(), summarizer, counter=WordCounter())
    assert out.compacted is False and out.messages == messages and out.stats == CompactStats()
    assert out.reason is Reason.BELOW_THRESHOLD and out.input_tokens > 0
    assert all(a is b for a, b in zip(out.messages, messages, strict=True))  # the client's own objects
    assert summarizer.requests == []


# --- compaction ----------------------------------------------------------------------------


async def test_compaction_assembles_head_kept_user_summary_tail(archive: InMemoryArchive) -> None:
    messages = history(200)
    original = copy.deepcopy(messages)
    summarizer = FakeSummarizer("## Goal\nthe summary text")
    out = await compact_messages(
        messages, small_window_config(), summarizer, session_id="s1", counter=WordCounter(), archive=archive
    )
    assert out.compacted
    assert messages == original  # input not mutated
    assert out.messages[0] is messages[0]  # head, same object
    summaries = [m for m in out.messages if is_summary_message(m)]
    assert len(summaries) == 1
    assert summaries[0]["content"].startswith(SUMMARY_PREFIX)
    assert "the summary text" in summaries[0]["content"]
    tail = out.messages[out.messages.index(summaries[0]) + 1 :]
    assert all(kept is orig for kept, orig in zip(tail, messages[len(messages) - len(tail) :], strict=True))
    assert out.stats.compacted_message_count == len(archive.saved[0][1])
    assert out.stats.retained_message_count == len(out.messages) - 1
    assert out.stats.compacted_token_count < out.stats.original_token_count
    assert out.stats.compaction_ratio == pytest.approx(
        out.stats.compacted_token_count / out.stats.original_token_count, abs=1e-4
    )


async def test_the_archive_holds_exactly_the_summarized_middle(archive: InMemoryArchive) -> None:
    messages = history(200)
    out = await compact_messages(
        messages,
        small_window_config(),
        FakeSummarizer(),
        session_id="sess",
        counter=WordCounter(),
        archive=archive,
    )
    kept_ids = {id(m) for m in out.messages}
    middle = [m for m in messages if id(m) not in kept_ids]
    assert archive.saved == [("sess", middle)]
    assert out.archive_path == Path("/memory/sess/1.json")


async def test_the_summary_request_carries_the_whole_middle() -> None:
    messages = [system("rules"), user("task words")] + [
        assistant(f"step {i} " + w(8)) if i % 2 else user(f"reply {i} " + w(8)) for i in range(18)
    ]
    summarizer = FakeSummarizer()
    out = await compact_messages(
        messages, small_window_config(), summarizer, counter=WordCounter(), archive=InMemoryArchive()
    )
    summarized = [m for m in messages if all(m is not k for k in out.messages)]
    sent = "\n".join(summarizer.transcripts)
    for message in summarized:
        assert message["content"] in sent


async def test_the_latest_user_message_is_never_summarized_away() -> None:
    task = user("the task: fix the bug in parser.py")
    messages = [system("sys"), task] + [
        m for i in range(12) for m in (calling("bash"), result(w(20), "call_0"))
    ]
    out = await compact_messages(
        messages, small_window_config(), FakeSummarizer(), counter=WordCounter(), archive=InMemoryArchive()
    )
    assert out.compacted
    assert out.messages[1] is task
    assert is_summary_message(out.messages[2])
    assert pairing_problems(out.messages) == []


async def test_a_previous_summary_is_merged_not_stacked() -> None:
    first = await compact_messages(
        history(200),
        small_window_config(),
        FakeSummarizer("first summary"),
        counter=WordCounter(),
        archive=InMemoryArchive(),
    )
    grown = first.messages + [assistant(w(9)) if i % 2 else user(w(9)) for i in range(12)]
    summarizer = FakeSummarizer("second summary")
    second = await compact_messages(
        grown, small_window_config(), summarizer, counter=WordCounter(), archive=InMemoryArchive()
    )
    assert second.compacted
    summaries = [m for m in second.messages if is_summary_message(m)]
    assert len(summaries) == 1 and "second summary" in summaries[0]["content"]
    assert "### previous summary\n## Goal and user constraints\nfirst summary" in summarizer.transcripts[0]


async def test_a_failing_summarizer_leaves_the_request_unchanged() -> None:
    messages = history(200)
    summarizer = FakeSummarizer(RuntimeError("boom"), RuntimeError("boom"), RuntimeError("boom"))
    archive = InMemoryArchive()
    out = await compact_messages(
        messages, small_window_config(), summarizer, counter=WordCounter(), archive=archive
    )
    assert out.compacted is False and out.reason is Reason.SUMMARY_FAILED
    assert out.messages == messages and all(a is b for a, b in zip(out.messages, messages, strict=True))
    assert len(summarizer.requests) == 3  # 1 + max_retries
    assert out.summary_calls == 3  # failed attempts are reported too
    assert archive.saved == []


async def test_a_retry_after_a_failure_succeeds() -> None:
    summarizer = FakeSummarizer(RuntimeError("flaky"), "", "good summary")
    out = await compact_messages(
        history(200), small_window_config(), summarizer, counter=WordCounter(), archive=InMemoryArchive()
    )
    assert out.compacted and len(summarizer.requests) == 3
    assert any("good summary" in m["content"] for m in out.messages if is_summary_message(m))


async def test_nothing_to_summarize_is_not_compacted() -> None:
    messages = [user(w(500))]
    out = await compact_messages(messages, small_window_config(), FakeSummarizer(), counter=WordCounter())
    assert out.compacted is False and out.reason is Reason.NOTHING_TO_SUMMARIZE


async def test_malformed_input_is_passed_through_not_raised() -> None:
    for bad in ([{"content": "no role"}], [{"role": "user", "content": 5}], "not a list"):
        out = await compact_messages(bad, small_window_config(), FakeSummarizer(), counter=WordCounter())  # type: ignore[arg-type]
        assert out.compacted is False and out.reason is Reason.MALFORMED and out.detail


async def test_real_file_archive_is_written_by_default(tmp_path: Path) -> None:
    out = await compact_messages(
        history(200),
        small_window_config(archive_dir=str(tmp_path)),
        FakeSummarizer(),
        session_id="abc",
        counter=WordCounter(),
    )
    assert out.archive_path is not None and out.archive_path.parent == tmp_path / "abc"
    archived = json.loads(out.archive_path.read_text())
    assert len(archived) == out.stats.compacted_message_count


async def test_summarizer_error_type_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    out = await compact_messages(
        history(200),
        small_window_config(max_retries=0),
        FakeSummarizer(SummarizerError("down")),
        counter=WordCounter(),
    )
    assert out.reason is Reason.SUMMARY_FAILED
    assert "down" in caplog.text


async def test_a_digest_standing_in_for_a_failed_summary_says_so_and_counts_the_failed_calls() -> None:
    """The request must fit: the model failed, so the digest stands in — and the report tells."""
    summarizer = FakeSummarizer(RuntimeError("down"), RuntimeError("down"))
    out = await compact_messages(
        history(400),
        small_window_config(max_retries=1, on_overflow="fit", context_window=300),
        summarizer,
        counter=WordCounter(),
        archive=InMemoryArchive(),
    )
    assert out.compacted and out.reason is Reason.SUMMARY_FAILED
    assert out.summarizer is Summarizer.DIGEST and out.summary_calls == 2
    assert out.output_tokens <= 300


async def test_real_transcript_compacts_with_the_real_tokenizer(archive: InMemoryArchive) -> None:
    messages = load_transcript("claude_code_fa812bfe_pre_compact.json")
    cfg = CompactConfig(
        context_window=60_000,
        retry_backoff_seconds=0,
        summary_max_tokens=2000,
        tool_output_policy="none",
        clear_tool_results=False,
        user_message_budget=0,
    )
    out = await compact_messages(messages, cfg, FakeSummarizer("## Goal\nshort"), archive=archive)
    assert out.compacted
    assert out.stats.compacted_token_count < 0.92 * 60_000
    assert pairing_problems(out.messages) == []
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    # no system head: the task (the first user message, pinned) leads, then the latest one
    assert out.messages[0] is messages[users[0]] and out.messages[1] is messages[users[-1]]


LOOPED = "## Goal and user constraints\n" + "The agent ran the tests and the tests passed.\n" * 40
ECHOED = "## Decisions\nChoices made and why, including approaches rejected.\n## Current state\n" + (
    "Where the work stands at the end of the transcript: what is done, what is in progress."
)


@pytest.mark.parametrize("answer", [LOOPED, ECHOED, "Usage: ponyc [OPTIONS] <package directory>"])
async def test_an_answer_that_is_no_summary_is_not_applied_the_digest_stands_in(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 135M model's answers (issue 61): a loop, the prompt echoed, a usage block. One call, not
    retried; the digest in its place, said as an ``unusable`` summary failure."""
    summarizer = FakeSummarizer(answer, answer, raw=True)
    config = small_window_config(context_window=1000)  # room for the digest
    out = await compact_messages(
        history(2000), config, summarizer, counter=WordCounter(), archive=InMemoryArchive()
    )
    assert out.compacted and out.summarizer is Summarizer.DIGEST and len(summarizer.requests) == 1
    assert out.reason is Reason.SUMMARY_FAILED and out.summary_failure is SummaryFailure.UNUSABLE
    summaries = [m["content"] for m in out.messages if is_summary_message(m)]
    assert len(summaries) == 1 and answer[:60] not in summaries[0]
    assert "not a summary" in caplog.text and "the digest stands in" in caplog.text

"""Prompt, transcript, chunking and retries of the summary step."""

import asyncio
import re
import time

import pytest

from compact_hook.core.failures import SummaryFailure, failure_of
from compact_hook.core.recall import mention
from compact_hook.core.transcript import read_tokens, transcript_entries
from compact_hook.engine.summary.summarize import (
    MIN_CHUNK_TOKENS,
    PROMPT_VERSION,
    Budget,
    Summarizing,
    call_with_retries,
    input_budget,
    plan_capped,
    plan_chunks,
    summarize_middle,
    summary_prompt,
)
from compact_hook.errors import SummarizerError
from compact_hook.settings.model import CompactConfig
from compact_hook.state.tokenizers import HFTokenCounter
from compact_hook.wires import ANTHROPIC, CHAT
from tests.fakes import FakeSummarizer, WordCounter, sectioned
from tests.support import assistant, calling, items_of, load_transcript, result, user

SECTIONS = [
    "## Goal and user constraints",
    "## Decisions",
    "## Files and artifacts",
    "## Tool calls and outcomes",
    "## Errors and fixes",
    "## Current state",
    "## Next steps",
]


def test_the_prompt_is_a_package_file_with_every_section() -> None:
    prompt = summary_prompt()
    positions = [prompt.index(section) for section in SECTIONS]
    assert positions == sorted(positions)
    assert PROMPT_VERSION


def test_transcript_labels_roles_tool_results_and_previous_summaries() -> None:
    messages = [
        CHAT.summary("older facts").raw,
        user("please fix it"),
        calling("read_file", "grep"),
        result("file body", "call_0"),
        result("3 matches", "call_1"),
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]},
    ]
    entries = transcript_entries(items_of(messages))
    assert entries[0] == "### previous summary\nolder facts"
    assert entries[1] == "### user\nplease fix it"
    assert entries[2] == "### assistant\n-> call read_file({})\n-> call grep({})"
    assert entries[3] == "### tool result (read_file)\nfile body"
    assert entries[4] == "### tool result (grep)\n3 matches"
    assert "https://x.test/a.png" in entries[5]


def test_with_recall_a_summary_reads_large_outputs_by_their_ends_and_handle() -> None:
    """The model can read an output back by its handle: the summary reads its beginning and end
    (a late spike of large outputs was most of what summaries cost: issue 36)."""
    big = "".join(f"line {n}: {'x' * 60}\n" for n in range(2_000))
    messages = [calling("read_file", "grep"), result(big, "call_0"), result("3 matches", "call_1")]
    entries = transcript_entries(items_of(messages), recall=True, output_tokens=1_000)
    read = entries[1]
    assert read.startswith("### tool result (read_file)\nline 0: ") and read.endswith(
        "line 1999: " + "x" * 60 + "\n"
    )
    assert (
        len(read) < 4_000 * 1.1 < len(big)
        and f"truncated; the full output had 2000 lines; {mention(big)}" in read
    )
    assert entries[2] == f"### tool result (grep; {mention('3 matches')})\n3 matches"  # under the cap: whole
    whole = transcript_entries(items_of(messages), recall=True)  # 0: read as forwarded
    assert big in whole[1]
    assert big in transcript_entries(items_of(messages), output_tokens=1_000)[1]  # no handle: read whole
    item = items_of(messages)[1]  # what cost-aware timing reckons the summary reads of it
    assert read_tokens(item, 40_000, 1_000) == 40_000 - (len(big) // 4 - 1_000)
    assert read_tokens(item, 40_000, 0) == 40_000 == read_tokens(items_of(messages)[0], 40_000, 1_000)


def test_anthropic_results_inside_a_user_message_are_labelled_with_their_tool() -> None:
    messages = [
        {"role": "user", "content": "read both"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "two reads", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "t2", "name": "Grep", "input": {"pattern": "x"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t2", "content": "2 matches"},
                {"type": "tool_result", "tool_use_id": "t1", "content": "print(1)", "is_error": True},
                {"type": "text", "text": "also check b.py"},
            ],
        },
    ]
    entries = transcript_entries([ANTHROPIC.item(message) for message in messages])
    assert entries[1] == (
        '### assistant\n[thinking] two reads\n-> call Read({"path":"a.py"})\n-> call Grep({"pattern":"x"})'
    )
    assert entries[2] == (
        "### user\n[tool result (Grep)]\n2 matches\n[tool result, error (Read)]\nprint(1)\nalso check b.py"
    )


def test_reused_ids_still_label_results_by_position() -> None:
    messages = load_transcript("tau_bench_airline_gpt4o_task2_trial1.json")
    entries = transcript_entries(items_of(messages))
    assert len(entries) == len(messages)
    assert all(e.startswith("### ") for e in entries)


def test_chunks_cover_every_character_and_respect_the_budget() -> None:
    counter = HFTokenCounter("o200k_base")
    entries = transcript_entries(items_of(load_transcript("claude_code_fa812bfe_pre_compact.json")))
    chunks = plan_chunks(entries, counter, budget=8_000)
    assert len(chunks) > 5
    assert all(counter.count_text(chunk) <= 8_000 + 50 for chunk in chunks)
    joined = "".join(chunks).replace("\n", "")
    assert joined == "".join(entries).replace("\n", "")


def test_an_entry_larger_than_the_budget_is_split_never_cut() -> None:
    counter = HFTokenCounter("o200k_base")
    big = "line of tool output number {}\n"
    entry = "".join(big.format(i) for i in range(3000))
    chunks = plan_chunks([entry], counter, budget=1000)
    assert len(chunks) > 10
    assert "".join(chunks) == entry
    assert all(counter.count_text(chunk) <= 1000 for chunk in chunks)


async def test_a_middle_larger_than_the_summary_window_is_summarized_in_chunks_with_the_running_summary() -> (
    None
):
    middle = items_of([user(f"fact number {i} " + "x " * 300) for i in range(40)])
    config = CompactConfig(context_window=200_000, summary_context_window=4000, summary_max_tokens=300)
    summarizer = FakeSummarizer(*[f"summary after part {i}" for i in range(1, 100)])
    budget = Budget(config)
    text = await summarize_middle(middle, Summarizing(config, summarizer, WordCounter()), budget)
    assert len(summarizer.requests) > 1 and budget.calls == len(summarizer.requests)
    assert text == sectioned(f"summary after part {len(summarizer.requests)}")
    for index, request in enumerate(summarizer.requests[1:], start=1):
        assert (
            f"<summary-so-far>\n{sectioned(f'summary after part {index}')}\n</summary-so-far>"
            in request[-1]["content"]
        )
    sent = "".join(summarizer.transcripts)
    assert all(f"fact number {i} " in sent for i in range(40))


async def test_a_single_chunk_request_has_the_system_prompt_and_the_transcript() -> None:
    summarizer = FakeSummarizer()
    config = CompactConfig(context_window=100_000)
    how = Summarizing(config, summarizer, WordCounter())
    await summarize_middle(items_of([user("hello"), assistant("hi")]), how, Budget(config))
    [request] = summarizer.requests
    assert request[0] == {"role": "system", "content": summary_prompt()}
    assert "<transcript>\n### user\nhello\n\n### assistant\nhi\n</transcript>" in request[1]["content"]


@pytest.mark.parametrize(
    ("window", "tokens"), [(2_048, 320), (4_096, 806), (8_192, 1_779), (32_768, 4_096), (200_000, 4_096)]
)
def test_unset_the_summarys_length_is_derived_from_the_summary_models_window_and_leaves_room(
    window: int, tokens: int
) -> None:
    """Issue 61: a fixed 4,096 reserved twice left a 4K summary model -4,599 tokens for the transcript,
    and no summary was ever made. Derived from the window, every window from 2K on keeps a transcript
    of several times the smallest chunk, counted with a real tokenizer."""
    from compact_hook.state.tokenizers import counter_for

    config = CompactConfig(context_window=window)
    assert config.summary_max_tokens is None and config.summary_tokens == tokens
    assert input_budget(config, counter_for("o200k_base")) >= MIN_CHUNK_TOKENS
    set_by_hand = CompactConfig(context_window=window, summary_max_tokens=300)
    assert set_by_hand.summary_tokens == 300
    apart = CompactConfig(context_window=200_000, summary_context_window=window)
    assert apart.summary_tokens == tokens  # the summary model's own window, where it has one
    assert CompactConfig(context_window=window, summary_model="digest").summary_tokens == 4_096


def test_a_window_too_small_for_prompt_and_summary_is_an_error() -> None:
    config = CompactConfig(context_window=1000, summary_max_tokens=800)
    with pytest.raises(SummarizerError, match="window"):
        input_budget(config, WordCounter())


async def test_retries_back_off_exponentially() -> None:
    config = CompactConfig(max_retries=2, retry_backoff_seconds=0.05)
    summarizer = FakeSummarizer(RuntimeError("1"), RuntimeError("2"), "ok", raw=True)
    budget = Budget(config)
    start = time.monotonic()
    assert await call_with_retries(summarizer, [user("x")], config, budget) == "ok"
    assert time.monotonic() - start >= 0.05 + 0.1
    assert budget.calls == 3  # the failed attempts are counted too


async def test_an_empty_answer_is_retried_once_however_many_retries_are_left() -> None:
    config = CompactConfig(max_retries=5, retry_backoff_seconds=0)
    budget = Budget(config)
    with pytest.raises(SummarizerError, match="empty") as raised:
        await call_with_retries(FakeSummarizer("", "   ", "late", raw=True), [user("x")], config, budget)
    assert budget.calls == 2 and raised.value.kind is SummaryFailure.UNUSABLE
    assert (
        await call_with_retries(FakeSummarizer("", "fine", raw=True), [user("x")], config, Budget(config))
        == "fine"
    )


class StatusError(Exception):
    """An error as LiteLLM and the provider SDKs raise them: a class name and a ``status_code``."""

    def __init__(self, status_code: int, message: str = "") -> None:
        super().__init__(message or f"status {status_code}")
        self.status_code = status_code


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (StatusError(401, "invalid api key"), SummaryFailure.REFUSED),
        (StatusError(404, "model not found"), SummaryFailure.REFUSED),
        (type("AuthenticationError", (Exception,), {})("bad key"), SummaryFailure.REFUSED),
    ],
)
async def test_a_refusal_is_not_retried(error: Exception, kind: SummaryFailure) -> None:
    config = CompactConfig(max_retries=3, retry_backoff_seconds=0)
    budget = Budget(config)
    with pytest.raises(SummarizerError) as raised:
        await call_with_retries(FakeSummarizer(error, "ok"), [user("x")], config, budget)
    assert raised.value.kind is kind and budget.calls == 1 and budget.retries_left == 3


@pytest.mark.parametrize(
    "error",
    [StatusError(429, "rate limited"), StatusError(503, "overloaded"), RuntimeError("connection reset")],
)
async def test_a_rate_limit_an_outage_or_an_unknown_error_is_retried_with_backoff(error: Exception) -> None:
    config = CompactConfig(max_retries=2, retry_backoff_seconds=0.02)
    budget = Budget(config)
    start = time.monotonic()
    assert (
        await call_with_retries(FakeSummarizer(error, error, "ok", raw=True), [user("x")], config, budget)
        == "ok"
    )
    assert budget.calls == 3 and time.monotonic() - start >= 0.02 + 0.04


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (TimeoutError(), SummaryFailure.TIMEOUT),
        (type("Timeout", (Exception,), {})("litellm.Timeout"), SummaryFailure.TIMEOUT),
        (StatusError(400, "This model's maximum context length is 8192 tokens"), SummaryFailure.TOO_LONG),
        (type("ContextWindowExceededError", (Exception,), {})("x"), SummaryFailure.TOO_LONG),
        (StatusError(500), SummaryFailure.UNAVAILABLE),
        (StatusError(408), SummaryFailure.UNAVAILABLE),
        (StatusError(422, "schema"), SummaryFailure.REFUSED),
        (ValueError("anything else"), SummaryFailure.UNAVAILABLE),
    ],
)
def test_each_failure_is_placed_by_its_type_status_and_words(error: Exception, kind: SummaryFailure) -> None:
    assert failure_of(error) is kind


async def test_a_chunk_too_long_for_the_summary_model_is_sent_again_in_halves_never_unchanged() -> None:
    middle = items_of([user(f"fact number {i} " + "x " * 300) for i in range(6)])
    config = CompactConfig(
        context_window=200_000, summary_context_window=8000, summary_max_tokens=300, retry_backoff_seconds=0
    )
    too_long = StatusError(400, "prompt is too long: 9000 tokens > 8000 maximum")
    summarizer = FakeSummarizer(too_long, "first half", "second half")
    budget = Budget(config)
    text = await summarize_middle(middle, Summarizing(config, summarizer, WordCounter()), budget)
    first, *again = summarizer.transcripts
    assert text == sectioned("second half") and len(again) == 2
    assert all(len(retry) < len(first) * 0.7 for retry in again)  # smaller each time, never the same
    assert "fact number 0" in again[0] and "fact number 5" in again[1]
    assert f"<summary-so-far>\n{sectioned('first half')}" in again[1]


async def test_a_too_long_chunk_with_no_retries_left_fails_as_too_long() -> None:
    middle = items_of([user(f"fact {i} " + "x " * 300) for i in range(6)])
    config = CompactConfig(
        context_window=200_000, summary_context_window=8000, summary_max_tokens=300, max_retries=0
    )
    summarizer = FakeSummarizer(StatusError(400, "input is too long"))
    with pytest.raises(SummarizerError) as raised:
        await summarize_middle(middle, Summarizing(config, summarizer, WordCounter()), Budget(config))
    assert raised.value.kind is SummaryFailure.TOO_LONG and len(summarizer.requests) == 1


async def test_a_hanging_summary_call_times_out() -> None:
    async def hang(messages: object) -> str:
        await asyncio.sleep(10)
        return "never"

    config = CompactConfig(max_retries=0, summary_timeout_seconds=0.05)
    with pytest.raises(SummarizerError, match="Timeout"):
        await call_with_retries(hang, [user("x")], config, Budget(config))


async def test_the_deadline_bounds_all_attempts_together() -> None:
    """Per call 10 s, retries 5: the 0.3 s deadline still ends it (issue 8: one request took 363 s)."""

    async def slow(messages: object) -> str:
        await asyncio.sleep(10)
        return "never"

    config = CompactConfig(max_retries=5, summary_timeout_seconds=10, summary_deadline_seconds=0.3)
    budget = Budget(config)
    start = time.monotonic()
    with pytest.raises(SummarizerError):
        await call_with_retries(slow, [user("x")], config, budget)
    assert time.monotonic() - start < 1.5 and budget.calls >= 1


async def test_retries_are_shared_by_the_chunks_of_one_middle() -> None:
    middle = items_of([user(f"fact number {i} " + "x " * 300) for i in range(40)])
    config = CompactConfig(
        context_window=200_000,
        summary_context_window=4000,
        summary_max_tokens=300,
        max_retries=2,
        retry_backoff_seconds=0,
    )
    failing = FakeSummarizer(*[RuntimeError("upstream 503")] * 9)  # unavailable: retried
    budget = Budget(config)
    with pytest.raises(SummarizerError):
        await summarize_middle(middle, Summarizing(config, failing, WordCounter()), budget)
    assert budget.calls == 3  # one chunk's first attempt and the two retries: not 3 per chunk


async def test_a_middle_beyond_the_call_cap_digests_its_oldest_part_and_makes_at_most_the_cap() -> None:
    middle = items_of([user(f"fact number {i} " + "x " * 300) for i in range(200)])
    config = CompactConfig(
        context_window=200_000, summary_context_window=4000, summary_max_tokens=300, max_summary_calls=4
    )
    summarizer = FakeSummarizer(*[f"summary after part {i}" for i in range(1, 100)])
    await summarize_middle(middle, Summarizing(config, summarizer, WordCounter()), Budget(config))
    assert len(summarizer.requests) == 4
    first = summarizer.transcripts[0]
    digest_part, transcript_part = first.split("<transcript", 1)
    assert "(Digest made without a model" in digest_part
    start = int(re.search(r"fact number (\d+) ", transcript_part).group(1))  # type: ignore[union-attr]
    assert start > 0 and f"fact number {start - 1} " in digest_part  # the digested part's newest words
    assert "earlier entries omitted" in digest_part  # bounded: its oldest lines gave way
    sent = "".join(summarizer.transcripts)
    assert "fact number 199 " in sent  # the newest part is read by the model


def test_the_capped_plan_keeps_whole_entries() -> None:
    counter = HFTokenCounter("o200k_base")
    entries = [f"entry {i} " + "word " * 400 for i in range(30)]
    start, chunks = plan_capped(entries, counter, budget=1000, cap=5)
    assert len(chunks) <= 5 and start > 0
    assert "".join(chunks).replace("\n", "") == "".join(entries[start:]).replace("\n", "")

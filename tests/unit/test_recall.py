"""Handles on what compaction takes out (``core.recall``): named in placeholders, truncation markers
and summaries, stable across turns, and found again in the request that still holds the original."""

from __future__ import annotations

from typing import Any

import pytest

from compact_hook import CompactConfig
from compact_hook.core.clearing import placeholder
from compact_hook.core.pairing import pair
from compact_hook.core.recall import (
    HANDLE_DIGITS,
    TOOL_NAME,
    Original,
    Originals,
    handle_in,
    handle_of,
    mention,
    mentioned,
    tool_name,
)
from compact_hook.core.transcript import transcript_entries
from compact_hook.core.truncate import Truncating, truncate_text
from compact_hook.state.tokenizers import HFTokenCounter
from tests.compaction import compact_via_engine, config, tool_session
from tests.fakes import FakeSummarizer
from tests.support import calling, items_of, result

TOKENS = HFTokenCounter("o200k_base")
LONG = "\n".join(f"line {i}: the output of a long command" for i in range(3000))


def words_config(**overrides: Any) -> CompactConfig:
    """A WordCounter-sized world with every tier on and recall on."""
    tiers = {"clear_trigger_ratio": 0.5, "clear_at_least": 50, "tool_output_max_tokens": 100}
    on = {"tool_output_policy": "tokens", "clear_tool_results": True, "recall": True}
    return config(**{**tiers, **on, **overrides})


def test_a_handle_is_a_short_digest_of_the_text_the_same_every_time() -> None:
    handle = handle_of("some output")
    assert handle.isdigit() and len(handle) == HANDLE_DIGITS == 6
    assert handle == handle_of("some output") != handle_of("some output.")
    assert mentioned(f"[x; {mention('some output')}] and again recall {handle}") == [handle]


def test_a_handle_is_read_as_a_model_writes_it() -> None:
    assert handle_in("048213") == handle_in(48213) == handle_in(" recall 048213 ") == "048213"
    assert handle_in("recall: 48213") == "048213"
    assert [handle_in(x) for x in ("", "r2x7kq4mza", "0482139", None, True, -1, 10**6, 1.5)] == [""] * 8


def test_two_outputs_under_one_handle_are_both_given() -> None:
    first, second = Original("first output", "bash"), Original("second output", "read")
    originals = Originals({"000001": {o.text: o for o in (first, second)}})
    both = originals.get("000001")
    assert both is not None and both.text == (
        "[output 1 of 2 with this id, from bash]\nfirst output\n[output 2 of 2 with this id, from read]\nsecond output"
    )
    assert originals.get("000002") is None and len(list(originals.items())) == 2


def test_our_tool_gives_way_to_a_client_tool_of_the_same_name() -> None:
    assert tool_name({"bash", "read"}) == TOOL_NAME
    assert tool_name({TOOL_NAME, "bash"}) == f"{TOOL_NAME}_2"
    assert tool_name({TOOL_NAME, f"{TOOL_NAME}_2"}) == f"{TOOL_NAME}_3"


def test_a_placeholder_names_the_clients_original_and_keeps_the_errors_it_quotes() -> None:
    original = "Traceback (most recent call last)\n" + LONG + "\nFAILED test_x"
    shown = placeholder("pytest", original, original)
    assert shown == f"[{mention(original)}; it reported: Traceback (most recent call last) | FAILED test_x]"
    assert placeholder("ls", "a.py b.py", "a.py b.py") == f"[{mention('a.py b.py')}]"
    assert placeholder("ls", "a.py b.py") == "[Previous: used ls]"  # recall off: as before


@pytest.mark.parametrize("policy", ["tokens", "bytes"])
def test_a_truncated_output_names_its_original_and_a_second_cut_keeps_that_name(policy: str) -> None:
    how = Truncating(200, policy, TOKENS.cut, recall=True)
    once = truncate_text(LONG, how)
    assert once is not None and mentioned(once) == [handle_of(LONG)]
    twice = truncate_text(once, Truncating(60, policy, TOKENS.cut, recall=True))
    assert twice is not None and mentioned(twice) == [handle_of(LONG)]
    assert mentioned(truncate_text(LONG, Truncating(200, policy, TOKENS.cut)) or "") == []


async def test_cleared_results_name_their_originals_and_the_request_finds_them_again() -> None:
    messages = tool_session([90] * 6)
    out = await compact_via_engine(messages, words_config(keep_tool_results=2))
    assert out.cleared == 4
    tools = [m["content"] for m in out.messages if m["role"] == "tool"][:4]
    originals = [m["content"] for m in messages if m["role"] == "tool"][:4]
    assert [mentioned(shown) for shown in tools] == [[handle_of(text)] for text in originals]
    items = items_of(messages)
    found = Originals.of(items, pair(items).tool_of)
    assert [found.get(handle_of(text)) for text in originals] == [
        found.get(mentioned(shown)[0]) for shown in tools
    ]
    assert all(o is not None and o.tool == "bash" for o in (found.get(handle_of(t)) for t in originals))
    assert found.get(handle_of("never sent")) is None


async def test_the_same_turn_sent_again_shows_the_same_placeholders_byte_for_byte() -> None:
    messages = tool_session([90] * 6)
    first = await compact_via_engine(messages, words_config(keep_tool_results=2))
    second = await compact_via_engine([dict(m) for m in messages], words_config(keep_tool_results=2))
    assert first.messages == second.messages


async def test_the_summarizer_reads_each_outputs_handle_and_is_asked_to_keep_them() -> None:
    summarizer = FakeSummarizer()
    messages = tool_session([120] * 9)
    out = await compact_via_engine(
        messages, words_config(clear_tool_results=False, tool_output_policy="none"), summarizer
    )
    assert out.compacted
    transcript = summarizer.transcripts[0]
    outputs = [m["content"] for m in messages if m["role"] == "tool"]
    assert [handle_of(text) for text in outputs if text in transcript] == [h for h in mentioned(transcript)]
    assert "keep it as (recall <number>)" in transcript


async def test_recall_off_names_nothing() -> None:
    summarizer = FakeSummarizer()
    out = await compact_via_engine(
        tool_session([120] * 9),
        words_config(recall=False, clear_tool_results=False, tool_output_policy="none"),
        summarizer,
    )
    assert out.compacted
    assert not any(mentioned(str(m.get("content"))) for m in out.messages)
    assert "recall:" not in summarizer.transcripts[0]


def test_a_previous_summary_and_a_placeholder_are_not_labelled_twice() -> None:
    cleared = placeholder("bash", LONG, LONG)
    items = items_of([calling("bash", call_id="c0"), result(cleared, "c0_0")])
    entries = transcript_entries(items, recall=True)
    assert mentioned("\n".join(entries)) == [handle_of(LONG)]


def test_the_digest_names_each_outputs_handle_as_a_summary_model_is_asked_to() -> None:
    """The digest stands in for a failed summary: what it covers must stay recallable too."""
    from compact_hook.core.digest import digest

    cleared = placeholder("bash", LONG, LONG)
    middle = items_of(
        [calling("bash", call_id="a"), result(LONG, "a"), calling("cat", call_id="b"), result(cleared, "b")]
    )
    text = digest(middle, 10_000, recall=True)
    assert mentioned(text) == [handle_of(LONG)]  # its own, and the one the placeholder names: the same
    assert mentioned(
        digest(items_of([calling("ls", call_id="c"), result("x.txt", "c")]), 10_000, recall=True)
    ) == [handle_of("x.txt")]
    assert mentioned(digest(middle, 10_000)) == []


def test_only_our_own_syntax_names_a_handle() -> None:
    """A client's output that says ``recall 123456`` was taken for our marker: truncated, its marker
    named 123456 — another output's, or none — instead of its own (issue 45, item 10)."""
    from compact_hook.core.clearing import placeholder
    from compact_hook.core.recall import named_by_us
    from compact_hook.core.truncate import Truncating, truncate_text

    said = "the tool printed: to read it again, recall 123456\n" + "\n".join(f"row {i}" for i in range(3000))
    assert named_by_us(said) is None
    cut = truncate_text(said, Truncating(200, "bytes", lambda *a: (0, 0, 0), recall=True))
    assert cut is not None and named_by_us(cut) == handle_of(said) != "123456"
    assert named_by_us(
        truncate_text(cut, Truncating(100, "bytes", lambda *a: (0, 0, 0), recall=True)) or ""
    ) == handle_of(said)
    shown = placeholder("bash", said, original=said)
    assert named_by_us(shown) == handle_of(said)
    assert named_by_us(f"{shown} and more") is None  # a placeholder is the whole text

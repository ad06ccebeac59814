"""The proxy's own answer to ``/compact`` (``proxy/answers/compact.py``): its words, and the streamed
/v1/messages mend that acts only where LiteLLM hands the answer over whole."""

import json
from collections.abc import AsyncIterator
from typing import Any

from compact_hook.core.outcomes import ArchiveStatus, Reason, Summarizer
from compact_hook.engine.result import CompactResult, CompactStats
from compact_hook.proxy.answers.compact import ANSWERED, answer_text, answered_stream
from compact_hook.proxy.observe.report import Report, record

WHOLE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude",
    "content": [{"type": "text", "text": "Compacted: 9 -> 3 tokens"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 0, "output_tokens": 0},
}


async def chunks(*items: Any) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def streamed(answered: bool, *items: Any) -> list[Any]:
    data: dict[str, Any] = {}
    record(data, "litellm_metadata", Report({ANSWERED: True} if answered else {}))
    return [chunk async for chunk in answered_stream(chunks(*items), data)]


def sse_events(sse: list[str]) -> list[tuple[str, dict[str, Any]]]:
    parsed = []
    for event in sse:
        name, data = event.strip().split("\n")
        parsed.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return parsed


async def test_a_whole_message_in_our_answered_stream_becomes_the_messages_events() -> None:
    got = sse_events(await streamed(True, WHOLE))
    assert [name for name, _ in got] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert got[2][1]["delta"]["text"] == "Compacted: 9 -> 3 tokens"
    assert got[0][1]["message"]["content"] == [] and got[4][1]["delta"]["stop_reason"] == "end_turn"


async def test_a_stream_litellm_already_made_properly_is_not_touched() -> None:
    made = [b"event: message_start\ndata: {}\n\n", b"event: message_stop\ndata: {}\n\n"]  # 1.109's own
    assert await streamed(True, *made) == made


async def test_a_whole_message_in_a_stream_we_did_not_answer_is_not_ours_to_mend() -> None:
    assert await streamed(False, WHOLE, "data: x\n\n") == [WHOLE, "data: x\n\n"]


def test_the_answer_says_what_happened() -> None:
    done = CompactResult(
        [],
        True,
        CompactStats(compacted_message_count=12),
        input_tokens=40_000,
        output_tokens=9_000,
        summarizer=Summarizer.MODEL,
        archive_status=ArchiveStatus.WRITTEN,
    )
    assert answer_text(done) == (
        "Compacted: 40,000 -> 9,000 tokens; 12 messages summarized by model. Originals archived. "
        "The next turns continue from the summary."
    )
    nothing = CompactResult([], False, input_tokens=500, reason=Reason.NOTHING_TO_SUMMARIZE)
    assert answer_text(nothing).startswith("Nothing to compact yet: the conversation (500 tokens)")
    failed = CompactResult([], False, input_tokens=500, reason=Reason.SUMMARY_FAILED)
    assert (
        answer_text(failed) == "Not compacted (summary failed); the conversation stays as it is (500 tokens)."
    )


def test_the_answer_is_an_exception_litellm_answers_but_on_gemini_a_mock_response() -> None:
    from litellm.exceptions import ModifyResponseException

    from compact_hook.proxy.answers.compact import answer, answerable

    chat: dict[str, Any] = {"model": "agent"}
    raised = answer("Compacted.", chat, "acompletion")
    assert isinstance(raised, ModifyResponseException) and "mock_response" not in chat
    gemini: dict[str, Any] = {"model": "agent"}
    assert answer("Compacted.", gemini, "agenerate_content") is None
    assert gemini["mock_response"] == "Compacted."  # LiteLLM answers it, no provider called
    assert answerable("acompletion") and answerable("agenerate_content")
    assert not answerable("agenerate_content_stream")  # LiteLLM calls the provider whatever we say

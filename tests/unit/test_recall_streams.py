"""Recall inside streams (``proxy.recall.streaming``): raw SSE cut anywhere, our calls never shown, the
blocks and items after one renumbered, the final reply continuing the stream with every round's usage."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from compact_hook.core.recall import handle_of
from compact_hook.proxy.recall import Pending
from compact_hook.proxy.recall.rounds import recalled_stream
from compact_hook.wires import ANTHROPIC, GOOGLE, Conversation
from compact_hook.wires.registry import WIRES
from compact_hook.wires.sse import Frame, Frames, frame

OUTPUT = "\n".join(f"row {i}" for i in range(3000))
HANDLE = handle_of(OUTPUT)
TOOL = "compact_recall"


async def chunks_of(items: Iterable[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def streamed(pending: Pending, data: dict[str, Any], chunks: Iterable[Any]) -> list[Any]:
    return [chunk async for chunk in recalled_stream(pending, data, chunks_of(chunks))]


def events(chunks: list[Any]) -> list[dict[str, Any]]:
    """The client's events, read back from the bytes it was sent."""
    frames = Frames()
    found = [f for chunk in chunks for f in frames.feed(chunk)]
    assert not frames.rest()
    return [f.data for f in found if isinstance(f, Frame) and f.data is not None]


def messages_pending() -> Pending:
    conversation = ANTHROPIC.parse(
        {
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t0", "name": "bash", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t0", "content": OUTPUT}],
                },
            ]
        }
    )
    assert isinstance(conversation, Conversation)
    return Pending(WIRES["anthropic"].recall, TOOL, conversation, 100_000, "s")


def message_stream(*blocks: dict[str, Any], stop: str = "tool_use") -> bytes:
    """A provider's Messages stream of these blocks (tool inputs as one JSON delta)."""
    out = [
        frame(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": "x",
                    "content": [],
                    "usage": {"input_tokens": 100, "output_tokens": 1},
                },
            },
        )
    ]
    for index, block in enumerate(blocks):
        start = {**block, "input": {}} if block["type"] == "tool_use" else {**block, "text": ""}
        out.append(
            frame(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
            )
        )
        delta = (
            {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            if block["type"] == "tool_use"
            else {"type": "text_delta", "text": block["text"]}
        )
        out.append(
            frame("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        )
        out.append(frame("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        frame(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 20}},
        )
    )
    out.append(frame("message_stop", {"type": "message_stop"}))
    return b"".join(out)


OURS = {"type": "tool_use", "id": "toolu_1", "name": TOOL, "input": {"id": HANDLE}}
THEIRS = {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"cmd": "ls"}}
TEXT = {"type": "text", "text": "Let me look."}


def test_raw_events_cut_anywhere_come_back_whole() -> None:
    raw = message_stream(TEXT, OURS)
    whole = Frames().feed(raw)
    for cut in range(1, len(raw)):
        frames = Frames()
        assert frames.feed(raw[:cut]) + frames.feed(raw[cut:]) == whole and not frames.rest()


async def test_a_messages_stream_with_the_clients_call_too_hides_ours_and_renumbers_theirs(
    recall_router: Any,
) -> None:
    spy = recall_router()
    raw = message_stream(TEXT, OURS, THEIRS)
    shown = events(await streamed(messages_pending(), {"model": "x", "messages": []}, [raw[:50], raw[50:]]))
    starts = [(e["index"], e["content_block"]["type"]) for e in shown if e["type"] == "content_block_start"]
    assert starts == [(0, "text"), (1, "tool_use")]
    assert {e["index"] for e in shown if e["type"].startswith("content_block")} == {0, 1}
    assert TOOL not in json.dumps(shown) and shown[-2]["delta"]["stop_reason"] == "tool_use"
    assert spy.requests == []  # the client runs its tool; the model asks again next turn


async def test_a_messages_stream_calling_only_ours_continues_with_the_answer(recall_router: Any) -> None:
    final = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "row 2000"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 300, "output_tokens": 5},
    }
    spy = recall_router(final)
    shown = events(
        await streamed(messages_pending(), {"model": "x", "messages": []}, [message_stream(TEXT, OURS)])
    )
    [request] = spy.requests
    assert request["messages"][-1]["content"][0]["content"] == OUTPUT
    assert request["messages"][-2]["content"][1] == OURS  # the model's turn as it came, our call in it
    starts = [(e["index"], e["content_block"]["type"]) for e in shown if e["type"] == "content_block_start"]
    assert starts == [(0, "text"), (1, "text")]
    assert [e["type"] for e in shown][-2:] == ["message_delta", "message_stop"]
    assert shown[-2]["delta"]["stop_reason"] == "end_turn"
    assert shown[-2]["usage"] == {
        "input_tokens": 400,
        "output_tokens": 25,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def google_pending() -> Pending:
    conversation = GOOGLE.parse(
        {
            "contents": [
                {"role": "user", "parts": [{"text": "go"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {}}}]},
                {
                    "role": "user",
                    "parts": [{"functionResponse": {"name": "bash", "response": {"output": OUTPUT}}}],
                },
            ]
        }
    )
    assert isinstance(conversation, Conversation)
    return Pending(WIRES["google"].recall, TOOL, conversation, 100_000, "s")


def google_chunk(*parts: dict[str, Any], finish: bool = False) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    chunk: dict[str, Any] = {"candidates": [candidate], "responseId": "g"}
    if finish:
        candidate["finishReason"] = "STOP"
        chunk["usageMetadata"] = {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120}
    return frame("", chunk)


async def test_a_gemini_stream_answers_a_call_without_id_and_sends_its_signature_back(
    recall_router: Any,
) -> None:
    final = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "row 2000"}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 5, "totalTokenCount": 305},
    }
    spy = recall_router(final)
    call = {"functionCall": {"name": TOOL, "args": {"id": HANDLE}}, "thoughtSignature": "c2ln"}
    chunks = [google_chunk({"text": "Let me look."}), google_chunk(call, finish=True)]
    shown = events(await streamed(google_pending(), {"model": "g", "contents": []}, chunks))
    [request] = spy.requests
    turn, answer = request["contents"][-2:]
    assert turn == {"role": "model", "parts": [{"text": "Let me look."}, call]}
    assert answer["parts"] == [{"functionResponse": {"name": TOOL, "response": {"output": OUTPUT}}}]
    texts = [p.get("text") for e in shown for p in e["candidates"][0]["content"]["parts"]]
    assert texts == ["Let me look.", "row 2000"] and TOOL not in json.dumps(shown)
    assert shown[-1]["usageMetadata"]["promptTokenCount"] == 400


async def test_a_responses_stream_renumbers_the_items_after_ours(recall_router: Any) -> None:
    spy = recall_router()
    conversation = ANTHROPIC.parse({"messages": [{"role": "user", "content": "go"}]})
    assert isinstance(conversation, Conversation)
    pending = Pending(WIRES["responses"].recall, TOOL, conversation, 100_000, "s")
    ours = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": TOOL, "arguments": "{}"}
    theirs = {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "shell", "arguments": "{}"}
    stream = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "resp"}},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": ours},
        {"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": ours},
        {"type": "response.output_item.added", "sequence_number": 3, "output_index": 1, "item": theirs},
        {"type": "response.output_item.done", "sequence_number": 4, "output_index": 1, "item": theirs},
        {
            "type": "response.completed",
            "sequence_number": 5,
            "response": {"id": "resp", "output": [ours, theirs], "usage": {"input_tokens": 1}},
        },
    ]
    out = await streamed(pending, {"model": "x", "input": []}, stream)
    shown = [events([c])[0] if isinstance(c, bytes) else c for c in out]
    assert [(e["type"], e.get("output_index")) for e in shown] == [
        ("response.created", None),
        ("response.output_item.added", 0),
        ("response.output_item.done", 0),
        ("response.completed", None),
    ]
    assert shown[-1]["response"]["output"] == [theirs] and spy.requests == []


def test_the_clients_turn_keeps_the_first_rounds_thinking_never_a_later_rounds() -> None:
    """A later round's thinking followed our recall call and its answer, which the client never
    sees: sent back next turn, it would be bound to a conversation the client does not have."""
    first_thought = {"type": "thinking", "thinking": "look it up", "signature": "s1"}
    first = {"content": [first_thought, OURS], "usage": {}}
    later = {"type": "thinking", "thinking": "found it", "signature": "s2"}
    final = {"content": [later, THEIRS], "stop_reason": "tool_use", "usage": {}}
    done = WIRES["anthropic"].recall.finished(final, TOOL, {"input_tokens": 1}, first)
    assert done["content"] == [first_thought, THEIRS]


# -- failing open (issue 45, item 5) -----------------------------------------------------------------------


def partial_message_stream(stop: str) -> bytes:
    """A Messages stream whose reply stopped (``stop``) inside our tool's input: its JSON cut short."""
    raw = message_stream(TEXT, OURS, stop=stop)
    whole = json.dumps(json.dumps({"id": HANDLE}))[1:-1].encode()  # as it stands inside the event's JSON
    assert whole in raw
    return raw.replace(whole, json.dumps('{"id": "04')[1:-1].encode())


async def test_a_messages_reply_cut_inside_our_call_ends_as_the_model_ended_it(recall_router: Any) -> None:
    """Before: ``json.loads`` raised after the visible text and ``message_stop`` never came."""
    spy = recall_router()
    shown = events(
        await streamed(
            messages_pending(), {"model": "x", "messages": []}, [partial_message_stream("max_tokens")]
        )
    )
    assert spy.requests == []  # answered only on a tool-use stop
    assert [e["type"] for e in shown][-2:] == ["message_delta", "message_stop"]
    assert shown[-2]["delta"]["stop_reason"] == "max_tokens" and TOOL not in json.dumps(shown)


def chat_chunk(finish: str | None = None, **delta: Any) -> Any:
    import litellm

    return litellm.ModelResponseStream(
        id="s", model="m", choices=[{"index": 0, "delta": delta, "finish_reason": finish}]
    )


def chat_pending() -> Pending:
    from compact_hook.wires import CHAT

    conversation = CHAT.parse({"messages": [{"role": "user", "content": "go"}]})
    assert isinstance(conversation, Conversation)
    return Pending(WIRES["chat"].recall, TOOL, conversation, 100_000, "s")


async def test_a_chat_reply_cut_inside_our_call_is_not_answered(recall_router: Any) -> None:
    spy = recall_router()
    call = {"index": 0, "id": "c", "type": "function", "function": {"name": TOOL, "arguments": '{"id": "04'}}
    out = await streamed(
        chat_pending(),
        {"model": "x", "messages": []},
        [chat_chunk(content="Let me look."), chat_chunk(tool_calls=[call]), chat_chunk("length")],
    )
    assert spy.requests == []
    assert [c.choices[0].finish_reason for c in out if c.choices][-1] == "length"
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in out)


async def test_a_gemini_reply_stopped_by_its_token_limit_inside_our_call_is_not_answered(
    recall_router: Any,
) -> None:
    spy = recall_router()
    call = {"functionCall": {"name": TOOL, "args": {}}}
    last = json.loads(google_chunk(call, finish=True)[6:])
    last["candidates"][0]["finishReason"] = "MAX_TOKENS"
    shown = events(
        await streamed(
            google_pending(),
            {"model": "g", "contents": []},
            [google_chunk({"text": "Let me"}), frame("", last)],
        )
    )
    assert spy.requests == [] and shown[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert TOOL not in json.dumps(shown)


def responses_stream(end: str) -> list[dict[str, Any]]:
    ours = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": TOOL, "arguments": '{"id": "04'}
    return [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "resp"}},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": ours},
        {
            "type": end,
            "sequence_number": 2,
            "response": {
                "id": "resp",
                "status": end.split(".")[1],
                "output": [ours],
                "usage": {"input_tokens": 1},
            },
        },
    ]


def responses_pending() -> Pending:
    conversation = ANTHROPIC.parse({"messages": [{"role": "user", "content": "go"}]})
    assert isinstance(conversation, Conversation)
    return Pending(WIRES["responses"].recall, TOOL, conversation, 100_000, "s")


async def test_an_incomplete_or_failed_responses_reply_passes_with_our_call_taken_out(
    recall_router: Any,
) -> None:
    """Before: ``response.incomplete`` and ``response.failed`` went to the client with our call inside."""
    spy = recall_router()
    for end in ("response.incomplete", "response.failed"):
        out = await streamed(responses_pending(), {"model": "x", "input": []}, responses_stream(end))
        assert [e["type"] for e in out] == ["response.created", end]
        assert out[-1]["response"]["output"] == [] and TOOL not in json.dumps(out)
    assert spy.requests == []


async def test_an_error_of_ours_at_the_end_of_a_stream_sends_its_end_as_it_came(
    monkeypatch: Any, recall_router: Any
) -> None:
    """On every wire: the end-of-stream work raising left the stream without its end."""
    from compact_hook.proxy.recall import rounds

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug of ours")

    monkeypatch.setattr(rounds, "answered", broken)
    said = events(
        await streamed(messages_pending(), {"model": "x", "messages": []}, [message_stream(TEXT, OURS)])
    )
    assert [e["type"] for e in said][-2:] == ["message_delta", "message_stop"]
    call = {"index": 0, "id": "c", "type": "function", "function": {"name": TOOL, "arguments": "{}"}}
    chatted = await streamed(
        chat_pending(),
        {"model": "x", "messages": []},
        [chat_chunk(tool_calls=[call]), chat_chunk("tool_calls")],
    )
    assert chatted[-1].choices[0].finish_reason == "tool_calls"
    gemini = events(
        await streamed(
            google_pending(),
            {"model": "g", "contents": []},
            [google_chunk({"functionCall": {"name": TOOL, "args": {"id": HANDLE}}}, finish=True)],
        )
    )
    assert gemini[-1]["candidates"][0]["finishReason"] == "STOP"
    completed = responses_stream("response.completed")
    answered_out = await streamed(responses_pending(), {"model": "x", "input": []}, completed)
    assert answered_out[-1]["type"] == "response.completed" and TOOL not in json.dumps(answered_out[-1])


async def test_a_recall_round_that_fails_in_a_stream_ends_it_with_the_error(recall_router: Any) -> None:
    import litellm

    down = litellm.ServiceUnavailableError(message="provider down", model="m", llm_provider="openai")
    recall_router(down, down)
    with pytest.raises(litellm.ServiceUnavailableError):
        await streamed(messages_pending(), {"model": "x", "messages": []}, [message_stream(TEXT, OURS)])


async def test_a_failure_reporting_a_streams_recalls_never_breaks_the_stream(
    monkeypatch: Any, recall_router: Any
) -> None:
    """The hook's iterator: the stream has been sent whole when its recalls are reported, so a failure
    there (metrics, the audit log) is logged, never raised into the client's stream."""
    from compact_hook.proxy.hook import CompactHook
    from compact_hook.proxy.observe.report import Report, record
    from compact_hook.settings.model import CompactConfig

    hook = CompactHook(CompactConfig())

    def broken(*args: Any) -> None:
        raise RuntimeError("metrics down")

    monkeypatch.setattr(hook.telemetry, "recalled", broken)
    recall_router()
    report = Report()
    report.recall = chat_pending()
    data: dict[str, Any] = {"model": "x", "messages": []}
    record(data, "metadata", report)
    said = [chat_chunk(content="Done."), chat_chunk("stop")]
    out = [c async for c in hook.async_post_call_streaming_iterator_hook(None, chunks_of(said), data)]
    assert [c.choices[0].finish_reason for c in out if c.choices][-1] == "stop"

"""The recall rounds (``proxy.recall``): answered through the router, bounded, fail-open, and the
client's own calls left to the client."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import litellm
import pytest

from compact_hook.core.recall import handle_of
from compact_hook.proxy.recall import MAX_ROUNDS, Pending, recalled_stream, rounds
from compact_hook.proxy.recall.offer import NOT_FOUND, RoundFailure
from compact_hook.wires import CHAT, Conversation
from compact_hook.wires.registry import WIRES

OUTPUT = "\n".join(f"row {i}" for i in range(3000))
TOOL = "compact_recall"


def reply(*calls: tuple[str, str, str], content: str | None = None) -> Any:
    """A chat reply calling ``(id, tool, handle)`` each, or saying ``content``."""
    tool_calls = [
        {"id": id_, "type": "function", "function": {"name": name, "arguments": json.dumps({"id": handle})}}
        for id_, name, handle in calls
    ]
    message = {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})}
    return litellm.ModelResponse(
        id="r",
        choices=[{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    )


def pending(room: int = 100_000) -> Pending:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c0", "content": OUTPUT},
    ]
    conversation = CHAT.parse({"messages": messages})
    assert isinstance(conversation, Conversation)
    return Pending(WIRES["chat"].recall, TOOL, conversation, room, "s")


DATA = {
    "model": "agent",
    "messages": [{"role": "user", "content": "go"}],
    "tools": [],
    "litellm_call_id": "x",
}


async def test_a_recall_is_answered_with_the_original_and_the_usage_is_every_rounds(
    recall_router: Any,
) -> None:
    spy = recall_router(reply(content="done"))
    final = await rounds.answered(pending(), DATA, reply(("a", TOOL, handle_of(OUTPUT))))
    [request] = spy.requests
    assert request["messages"][-1] == {"role": "tool", "tool_call_id": "a", "content": OUTPUT}
    assert request["metadata"]["compact_hook_internal"] and "litellm_call_id" not in request
    assert final.choices[0].message.content == "done" and final.usage.prompt_tokens == 200


async def test_a_reply_calling_the_clients_tools_too_goes_to_the_client_without_ours(
    recall_router: Any,
) -> None:
    spy = recall_router()
    final = await rounds.answered(pending(), DATA, reply(("a", TOOL, "rxxxxxxxxxx"), ("b", "bash", "")))
    assert spy.requests == []
    assert [c.function.name for c in final.choices[0].message.tool_calls] == ["bash"]


async def test_the_rounds_stop_at_the_limit_and_the_last_answers_say_so(recall_router: Any) -> None:
    again = [reply((f"a{n}", TOOL, handle_of(OUTPUT))) for n in range(MAX_ROUNDS)]
    spy = recall_router(*again)
    final = await rounds.answered(pending(), DATA, reply(("a", TOOL, handle_of(OUTPUT))))
    assert len(spy.requests) == MAX_ROUNDS
    assert spy.requests[-1]["messages"][-1]["content"].endswith(rounds.NO_MORE)
    assert final.choices[0].message.tool_calls is None and final.choices[0].finish_reason == "stop"


async def test_a_handle_the_conversation_does_not_hold_is_not_found(recall_router: Any) -> None:
    spy = recall_router(reply(content="ok"))
    await rounds.answered(pending(), DATA, reply(("a", TOOL, handle_of("another conversation's output"))))
    assert spy.requests[0]["messages"][-1]["content"] == NOT_FOUND.format(
        handle=handle_of("another conversation's output")
    )


async def test_a_round_that_fails_once_is_tried_again(recall_router: Any) -> None:
    spy = recall_router(RuntimeError("502 bad gateway"), reply(content="found it"))
    final = await rounds.answered(
        pending(), DATA, reply(("a", TOOL, handle_of(OUTPUT)), content="let me look")
    )
    assert final.choices[0].message.content == "found it" and len(spy.requests) == 2


async def test_a_round_that_keeps_failing_fails_the_request_with_its_error(recall_router: Any) -> None:
    """Before issue 45 the reply so far went out, our call taken out: often nothing, ending ``stop``
    — an agent reads "task complete". Now the client gets the error (its status), and retries."""
    down = litellm.ServiceUnavailableError(message="provider down", model="m", llm_provider="openai")
    recall_router(down, down)
    waiting = pending()
    with pytest.raises(rounds.RoundFailed) as failed:
        await rounds.answered(waiting, DATA, reply(("a", TOOL, handle_of(OUTPUT)), content=""))
    assert failed.value.error is down and waiting.failed is RoundFailure.ERROR


async def test_an_error_without_a_status_reaches_the_client_as_a_503(recall_router: Any) -> None:
    recall_router(RuntimeError("connection reset"), RuntimeError("connection reset"))
    with pytest.raises(rounds.RoundFailed) as failed:
        await rounds.answered(pending(), DATA, reply(("a", TOOL, handle_of(OUTPUT))))
    assert isinstance(failed.value.error, litellm.ServiceUnavailableError)


async def test_a_round_too_long_for_the_model_is_resent_without_our_tool(recall_router: Any) -> None:
    """What the answers added made it too long: retrying the turn would meet the same; the client's
    request goes once more without our tool, and the model answers from what it had."""
    spy = recall_router(
        RuntimeError("prompt is too long: 210000 tokens > 200000 maximum"), reply(content="as I recall")
    )
    data = {**DATA, "tools": [{"type": "function", "function": {"name": "bash"}}, pending().wire.tool(TOOL)]}
    waiting = pending()
    final = await rounds.answered(waiting, data, reply(("a", TOOL, handle_of(OUTPUT))))
    assert final.choices[0].message.content == "as I recall" and waiting.failed is RoundFailure.RESENT
    assert len(spy.requests) == 2 and TOOL not in json.dumps(spy.requests[1].get("tools"))


async def test_a_round_that_hangs_times_out_as_litellms_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    class Hanging:
        async def acompletion(self, **request: Any) -> Any:
            await asyncio.sleep(60)

    monkeypatch.setattr(rounds, "proxy_router", lambda: Hanging())
    waiting = pending()
    waiting.round_timeout = 0.01
    with pytest.raises(rounds.RoundFailed) as failed:
        await rounds.answered(waiting, DATA, reply(("a", TOOL, handle_of(OUTPUT))))
    assert isinstance(failed.value.error, litellm.Timeout)


def test_an_answer_is_cut_to_the_room_left_head_and_tail() -> None:
    waiting = pending(room=1000)
    shown = waiting.answer(handle_of(OUTPUT), share=1)
    assert shown.startswith("row 0\n") and shown.endswith("row 2999") and "truncated" in shown
    assert len(shown.encode()) < 4 * 1000 + 200 and waiting.room < 1000


def stream_chunk(**delta: Any) -> Any:
    finish = delta.pop("finish", None)
    usage = delta.pop("usage", None)
    return litellm.ModelResponseStream(
        id="s", model="m", choices=[{"index": 0, "delta": delta, "finish_reason": finish}], usage=usage
    )


async def chunks_of(*chunks: Any) -> Any:
    for chunk in chunks:
        yield chunk


def recall_delta(index: int = 0, name: str = TOOL, arguments: str = "") -> dict[str, Any]:
    function = {"name": name, "arguments": arguments} if name else {"arguments": arguments}
    return {"index": index, "id": f"call{index}" if name else None, "type": "function", "function": function}


async def streamed(pending_: Pending, *chunks: Any) -> list[Any]:
    return [chunk async for chunk in recalled_stream(pending_, DATA, chunks_of(*chunks))]


async def test_a_stream_without_our_call_ends_as_it_came_its_usage_said_once(recall_router: Any) -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    shown = await streamed(pending(), stream_chunk(content="hi", usage=usage), stream_chunk(finish="stop"))
    assert [c.choices[0].delta.content for c in shown if c.choices] == ["hi", None]
    assert [c.usage.prompt_tokens for c in shown if c.usage is not None] == [5]


async def test_a_stream_calling_our_tool_continues_with_the_answer_and_never_shows_the_call(
    recall_router: Any,
) -> None:
    spy = recall_router(reply(content="found it"))
    arguments = json.dumps({"id": handle_of(OUTPUT)})
    shown = await streamed(
        pending(),
        stream_chunk(content="let me look. "),
        stream_chunk(tool_calls=[recall_delta()]),
        stream_chunk(tool_calls=[recall_delta(name="", arguments=arguments)]),
        stream_chunk(finish="tool_calls"),
    )
    assert spy.requests[0]["messages"][-1]["content"] == OUTPUT
    deltas = [c.choices[0].delta for c in shown if c.choices]
    assert not any(d.tool_calls for d in deltas)
    assert "".join(d.content or "" for d in deltas) == "let me look. found it"
    assert [c.choices[0].finish_reason for c in shown if c.choices][-1] == "stop"


async def test_a_stream_calling_the_clients_tool_too_shows_theirs_only(recall_router: Any) -> None:
    spy = recall_router()
    shown = await streamed(
        pending(),
        stream_chunk(tool_calls=[recall_delta(0, arguments=json.dumps({"id": "r"}))]),
        stream_chunk(tool_calls=[recall_delta(1, name="bash", arguments="{}")]),
        stream_chunk(finish="tool_calls"),
    )
    assert spy.requests == []
    names = [d.function.name for c in shown if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert names == ["bash"] and shown[-1].choices[0].finish_reason == "tool_calls"


async def test_a_conversations_answers_stop_at_its_budget_across_requests(recall_router: Any) -> None:
    """A model that reads the same output back turn after turn: the conversation's budget (in the
    store, shared by the replicas) cuts the answer that reaches it, then refuses."""
    from compact_hook.proxy.recall.offer import SPENT, RecallBudget
    from compact_hook.state.store import MemoryStore

    store, size = MemoryStore(100, 600.0), len(OUTPUT.encode())
    budget = RecallBudget.of(store, "tenant", "conversation", size + 4096, 600.0)
    answers = []
    for _ in range(3):
        spy = recall_router(reply(content="done"))
        each = pending()
        each.budget = lambda: budget
        await rounds.answered(each, DATA, reply(("a", TOOL, handle_of(OUTPUT))))
        answers.append(spy.requests[0]["messages"][-1]["content"])
    assert answers[0] == OUTPUT
    assert answers[1] != OUTPUT and len(answers[1].encode()) <= 4096 + 200  # head and tail, a note
    assert answers[2] == SPENT
    assert await RecallBudget.of(store, "other", "conversation", 10_000, 600.0).left() == 10_000


async def test_the_tool_is_offered_beside_the_clients_tools_never_alone() -> None:
    """A request without tools (opencode's title request) is not an agent's loop: a tool there would
    change what the model answers."""
    from compact_hook import CompactConfig
    from compact_hook.proxy.recall import Offer

    on = CompactConfig(recall=True)
    asked = {"model": "m", "messages": [], "litellm_call_id": "x"}
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    assert await Offer.of(asked, "chat", on) is None
    offered = await Offer.of({**asked, "tools": tools}, "chat", on)
    assert offered is not None and offered.name == TOOL
    assert await Offer.of({**asked, "tools": tools}, "chat", CompactConfig(recall=False)) is None
    full = [{"type": "function", "function": {"name": f"t{n}", "parameters": {}}} for n in range(128)]
    assert await Offer.of({**asked, "tools": full}, "chat", on) is None  # OpenAI's limit


async def test_the_client_gets_a_failed_rounds_own_error(recall_router: Any) -> None:
    """Through the success hook: the provider's error (here a 503) is what the client is answered
    with — it retries — not the reply without our call."""
    from compact_hook.proxy.hook import CompactHook
    from compact_hook.proxy.observe.report import Report, record
    from compact_hook.settings.model import CompactConfig

    unavailable = litellm.ServiceUnavailableError(message="overloaded", model="m", llm_provider="openai")
    recall_router(unavailable, unavailable)
    data: dict[str, Any] = {**DATA, "metadata": {}}
    report = Report()
    report.recall = pending()
    record(data, "metadata", report)
    with pytest.raises(litellm.ServiceUnavailableError):
        await CompactHook(CompactConfig()).async_post_call_success_hook(
            data, None, reply(("a", TOOL, handle_of(OUTPUT)))
        )

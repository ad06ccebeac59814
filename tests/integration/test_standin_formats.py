"""The stand-in upstream speaks Anthropic Messages and OpenAI Responses natively, through a real LiteLLM proxy.

The proxy here has no ``compact_hook`` callback: these tests pin the stand-in and LiteLLM's wire behaviour,
independently of the plugin. One proxy serves the whole module (start-up takes several seconds).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from pydantic import TypeAdapter

from tests.integration.harness import (
    SUMMARY_MARKER,
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    standin_deployment,
    standin_upstream,
)
from tests.integration.wire_clients import openai_sdk

su = standin_upstream

TOOLS: Any = [
    {
        "name": "read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]
SYSTEM: Any = [{"type": "text", "text": "You are terse. Ünïcödé ✓", "cache_control": {"type": "ephemeral"}}]
ANTHROPIC_MESSAGES: Any = [
    {"role": "user", "content": "read a.py"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "print(1)"}],
            },
            {"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}},
        ],
    },
]
RESPONSES_TOOLS: Any = [
    {
        "type": "function",
        "name": "read",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        "strict": False,
    }
]
RESPONSES_INPUT: Any = [
    {"role": "user", "content": "read a.py"},
    {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": '{"path": "a.py"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "print(1)"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]},
]
INSTRUCTIONS = "Answer in one line."


def _anthropic_client(base_url: str, api_key: str = "none") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)


# ------------------------------------------------------------------------------------------------------------
# pure helpers: validators and shapes (no server)
# ------------------------------------------------------------------------------------------------------------


def _tool_use(tid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "read", "input": {}}


def _tool_result(tid: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": "ok"}


@pytest.mark.parametrize(
    "messages, fragment",
    [
        (ANTHROPIC_MESSAGES, None),
        (  # consecutive same-role messages merge, so results split over two user messages still pair
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [_tool_use("a")]},
                {"role": "assistant", "content": [_tool_use("b")]},
                {"role": "user", "content": [_tool_result("a")]},
                {"role": "user", "content": [_tool_result("b")]},
            ],
            None,
        ),
        (
            [{"role": "user", "content": "go"}, {"role": "assistant", "content": [_tool_use("a")]}],
            "messages.1: tool_use ids were found without tool_result blocks immediately after: a.",
        ),
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [_tool_use("a"), _tool_use("b")]},
                {"role": "user", "content": [_tool_result("a"), {"type": "text", "text": "x"}]},
            ],
            "immediately after: b.",
        ),
        (
            [{"role": "user", "content": [_tool_result("zz")]}],
            "messages.0: unexpected tool_use_id found in tool_result blocks: zz.",
        ),
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [_tool_use("a")]},
                {"role": "user", "content": [{"type": "text", "text": "x"}, _tool_result("a")]},
            ],
            "tool_result blocks must come first",
        ),
        ([{"role": "assistant", "content": "hi"}], 'first message must use the "user" role'),
        ([{"role": "system", "content": "hi"}], "a system message must follow a user message"),
        ([{"role": "user", "content": ""}], "non-empty content"),
    ],
)
def test_check_anthropic_messages(messages: Any, fragment: str | None) -> None:
    body = {"model": "standin-strict", "max_tokens": 10, "messages": messages}
    if fragment is None:
        su.check_anthropic_messages(body)
        return
    with pytest.raises(su.BadRequest) as info:
        su.check_anthropic_messages(body)
    assert fragment in str(info.value)


def test_check_anthropic_messages_requires_max_tokens() -> None:
    with pytest.raises(su.BadRequest, match="max_tokens"):
        su.check_anthropic_messages({"messages": [{"role": "user", "content": "hi"}]})


@pytest.mark.parametrize(
    "items, previous, fragment",
    [
        (RESPONSES_INPUT, None, None),
        ("just text", None, None),
        (RESPONSES_INPUT[:2], None, "No tool output found for function call call_1."),
        (RESPONSES_INPUT[2:], None, "No tool call found for function call output with call_id call_1."),
        (RESPONSES_INPUT[2:], "resp_earlier", None),  # the call may live in the stored conversation
        (
            [*RESPONSES_INPUT, {"type": "reasoning", "id": "rs_1", "summary": []}],
            None,
            "Item 'rs_1' of type 'reasoning' was provided without its required following item.",
        ),
    ],
)
def test_check_responses_input(items: Any, previous: str | None, fragment: str | None) -> None:
    body = {"model": "standin-strict", "input": items, "previous_response_id": previous}
    if fragment is None:
        su.check_responses_input(body)
        return
    with pytest.raises(su.BadRequest) as info:
        su.check_responses_input(body)
    assert str(info.value) == fragment
    assert info.value.param == "input"


def test_check_chat_messages() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    user = {"role": "user", "content": "go"}

    su.check_chat_messages([user, assistant, answer, user])
    with pytest.raises(su.BadRequest, match="did not have response messages: call_1") as info:
        su.check_chat_messages([user, assistant, user])
    assert info.value.param == "messages.[1].role"
    with pytest.raises(su.BadRequest, match="must be a response to a preceeding message") as info:
        su.check_chat_messages([user, answer])
    assert info.value.param == "messages.[1].role"


def test_texts_and_summary_cover_every_field() -> None:
    """The marker is found in tool results, system blocks and instructions, and the summary counts them."""
    body = {"system": SYSTEM, "messages": ANTHROPIC_MESSAGES}
    assert su.anthropic_texts(body) == [
        "You are terse. Ünïcödé ✓",
        "read a.py",
        'Reading it.{"path": "a.py"}',
        "print(1)and now?",
    ]
    buried = json.loads(json.dumps(ANTHROPIC_MESSAGES).replace("print(1)", f"print(1) {SUMMARY_MARKER}"))
    assert su.anthropic_reply_text("standin", {"messages": buried}).startswith("## Goal")
    system_only = {"system": f"x {SUMMARY_MARKER}", "messages": [{"role": "user", "content": "u"}]}
    assert "Summarized 2 messages" in su.anthropic_reply_text("standin", system_only)
    assert su.anthropic_reply_text("standin", body) == "stand-in reply to 3 messages"
    assert su.anthropic_reply_text("standin-empty", system_only) == ""

    rbody = {"instructions": INSTRUCTIONS, "input": RESPONSES_INPUT}
    assert su.responses_texts(rbody) == [
        INSTRUCTIONS,
        "read a.py",
        '{"path": "a.py"}',
        "print(1)",
        "and now?",
    ]
    assert su.responses_reply_text("standin", rbody) == "stand-in reply to 4 messages"
    assert su.responses_reply_text("standin", {"input": "x", "instructions": SUMMARY_MARKER}).startswith(
        "## "
    )


def test_shapes_validate_against_the_official_sdk_types() -> None:
    from anthropic.types import Message, RawMessageStreamEvent
    from openai.types.responses import Response, ResponseStreamEvent

    abody = {"model": "standin", "max_tokens": 10, "system": SYSTEM, "messages": ANTHROPIC_MESSAGES}
    Message.model_validate(su.anthropic_message_body("standin", abody, "hi"))
    events = list(su.anthropic_stream_events("standin", abody, "hello world"))
    adapter: Any = TypeAdapter(RawMessageStreamEvent)
    for name, payload in events:
        assert payload["type"] == name
        if name != "ping":
            adapter.validate_python(payload)

    rbody = {
        "model": "standin",
        "input": RESPONSES_INPUT,
        "instructions": INSTRUCTIONS,
        "tools": RESPONSES_TOOLS,
    }
    Response.model_validate(su.response_object("standin", rbody, "hi"))
    revents = list(su.responses_stream_events("standin", rbody, "hello world"))
    radapter: Any = TypeAdapter(ResponseStreamEvent)
    for name, payload in revents:
        assert payload["type"] == name
        radapter.validate_python(payload)
    assert [p["sequence_number"] for _, p in revents] == list(range(len(revents)))
    assert revents[-1][1]["response"]["usage"]["total_tokens"] > 0


# ------------------------------------------------------------------------------------------------------------
# the stand-in directly, with the official SDKs
# ------------------------------------------------------------------------------------------------------------


def test_standin_messages_direct(upstream: Any) -> None:
    client = _anthropic_client(upstream.root_url)
    reply = client.messages.create(
        model="standin-quarter", max_tokens=64, system=SYSTEM, messages=ANTHROPIC_MESSAGES
    )
    with client.messages.stream(
        model="standin-quarter", max_tokens=64, messages=ANTHROPIC_MESSAGES
    ) as stream:
        streamed = stream.get_final_message()

    text = "stand-in reply to 3 messages"
    assert reply.content[0].type == "text" and reply.content[0].text == text
    assert reply.stop_reason == "end_turn" and reply.id.startswith("msg_standin_")
    chars = sum(len(t) for t in su.anthropic_texts({"system": SYSTEM, "messages": ANTHROPIC_MESSAGES}))
    assert reply.usage.input_tokens == (chars + 3) // 4
    assert reply.usage.output_tokens == (len(text) + 3) // 4
    assert streamed.content[0].type == "text" and streamed.content[0].text == text
    assert streamed.stop_reason == "end_turn" and streamed.usage.output_tokens == (len(text) + 3) // 4
    assert [r["path"] for r in upstream.messages_requests] == ["/v1/messages", "/v1/messages"]


def test_standin_messages_raw_sse_and_errors(upstream: Any) -> None:
    body = {
        "model": "standin",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    raw = httpx.post(f"{upstream.root_url}/v1/messages", json=body, timeout=10)
    names = [line.removeprefix("event: ") for line in raw.text.splitlines() if line.startswith("event: ")]
    fail = httpx.post(f"{upstream.root_url}/v1/messages", json={**body, "model": "standin-fail"}, timeout=10)
    bad = httpx.post(f"{upstream.root_url}/messages", json={"model": "standin"}, timeout=10)

    assert raw.headers["content-type"] == "text/event-stream" and "[DONE]" not in raw.text
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-4:] == ["content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert fail.status_code == 500 and fail.json()["error"]["type"] == "api_error"
    assert bad.status_code == 400 and bad.json()["type"] == "error"
    assert len(upstream.messages_requests) == 3


def test_standin_responses_direct(upstream: Any) -> None:
    client = openai_sdk(upstream.url)
    reply = client.responses.create(
        model="standin", input=RESPONSES_INPUT, instructions=INSTRUCTIONS, previous_response_id="resp_x"
    )
    with client.responses.stream(model="standin", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    empty = client.responses.create(model="standin-empty", input="hi")

    assert reply.output_text == "stand-in reply to 4 messages"
    assert reply.instructions == INSTRUCTIONS and reply.previous_response_id == "resp_x"
    assert reply.usage is not None and reply.usage.output_tokens == (len(reply.output_text) + 3) // 4
    assert "".join(deltas) == final.output_text == "stand-in reply to 1 messages"
    assert final.status == "completed" and final.usage is not None
    assert empty.output_text == ""
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model="standin-fail", input="hi")
    with pytest.raises(openai.BadRequestError, match="No tool output found for function call call_1"):
        client.responses.create(model="standin-strict", input=RESPONSES_INPUT[:2])


def test_standin_chat_strict_mode(upstream: Any) -> None:
    messages: Any = [
        {"role": "user", "content": "go"},
        {"role": "tool", "tool_call_id": "call_9", "content": "orphan"},
    ]
    client = openai_sdk(upstream.url)
    with pytest.raises(openai.BadRequestError, match="must be a response to a preceeding message") as info:
        client.chat.completions.create(model="standin-strict", messages=messages)
    assert info.value.param == "messages.[1].role"
    loose = client.chat.completions.create(model="standin", messages=messages)
    assert loose.choices[0].message.content == "stand-in reply to 2 messages"


# ------------------------------------------------------------------------------------------------------------
# through a real litellm proxy (no compact_hook callback)
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_standin_proxy(standin: Any) -> Iterator[ProxyProcess]:
    config = {
        "model_list": [
            anthropic_deployment("claude", standin.root_url),
            anthropic_deployment("claude-strict", standin.root_url, model="standin-strict"),
            standin_deployment("gpt", standin.url),
            standin_deployment("gpt-strict", standin.url, model="standin-strict"),
        ],
        "router_settings": {"num_retries": 0},
    }
    with ProxyProcess(config) as running:
        yield running


def test_root_url_and_anthropic_deployment(standin: Any) -> None:
    assert standin.url == f"{standin.root_url}/v1"
    entry = anthropic_deployment("c", f"{standin.root_url}/v1", model="standin-slow", max_input_tokens=100)
    assert entry["litellm_params"] == {
        "model": "anthropic/standin-slow",
        "api_base": standin.root_url,
        "api_key": "none",
    }
    assert entry["model_info"] == {"max_input_tokens": 100}


def test_proxy_messages_to_anthropic_deployment(plain_standin_proxy: ProxyProcess, upstream: Any) -> None:
    client = _anthropic_client(plain_standin_proxy.url, plain_standin_proxy.master_key)
    reply = client.messages.create(
        model="claude", max_tokens=64, system=SYSTEM, tools=TOOLS, messages=ANTHROPIC_MESSAGES
    )
    with client.messages.stream(
        model="claude", max_tokens=64, system=SYSTEM, tools=TOOLS, messages=ANTHROPIC_MESSAGES
    ) as stream:
        streamed = stream.get_final_text()

    assert reply.content[0].type == "text" and reply.content[0].text == "stand-in reply to 3 messages"
    assert streamed == "stand-in reply to 3 messages"
    plain, streaming = upstream.messages_requests
    for rec, stream_flag in ((plain, False), (streaming, True)):
        assert rec["path"] == "/v1/messages"
        assert rec["headers"]["x-api-key"] == "none" and "anthropic-version" in rec["headers"]
        body = rec["body"]
        assert body["system"] == SYSTEM
        assert body["tools"] == TOOLS
        assert body["messages"] == ANTHROPIC_MESSAGES  # cache_control on the last block included
        assert json.dumps(body["messages"]) == json.dumps(ANTHROPIC_MESSAGES)  # key order too
        assert body["model"] == "standin" and body["max_tokens"] == 64 and body["stream"] is stream_flag
        assert set(body) == {"model", "messages", "system", "tools", "max_tokens", "stream"}


def test_proxy_responses_to_openai_deployment(plain_standin_proxy: ProxyProcess, upstream: Any) -> None:
    client = openai_sdk(plain_standin_proxy.base_url, plain_standin_proxy.master_key)
    kwargs: Any = {
        "model": "gpt",
        "input": RESPONSES_INPUT,
        "instructions": INSTRUCTIONS,
        "tools": RESPONSES_TOOLS,
    }
    reply = client.responses.create(**kwargs)
    events = list(client.responses.create(**kwargs, stream=True))

    assert reply.output_text == "stand-in reply to 4 messages"
    assert reply.usage is not None and reply.usage.input_tokens > 0
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "stand-in reply to 4 messages"
    assert events[-1].type == "response.completed"
    plain, streaming = upstream.responses_requests
    for rec in (plain, streaming):
        assert rec["path"] == "/v1/responses" and rec["headers"]["authorization"] == "Bearer none"
        assert rec["body"]["input"] == RESPONSES_INPUT
        assert rec["body"]["instructions"] == INSTRUCTIONS
        assert rec["body"]["tools"] == RESPONSES_TOOLS
        assert rec["body"]["model"] == "standin"
    assert "stream" not in plain["body"] and streaming["body"]["stream"] is True


def test_proxy_responses_previous_response_id(plain_standin_proxy: ProxyProcess, upstream: Any) -> None:
    """litellm hands the client its own encoding of the id and decodes it again on the way upstream."""
    client = openai_sdk(plain_standin_proxy.base_url, plain_standin_proxy.master_key)
    first = client.responses.create(model="gpt", input="one")
    second = client.responses.create(model="gpt", input="two", previous_response_id=first.id)
    foreign = client.responses.create(model="gpt", input="three", previous_response_id="resp_from_elsewhere")

    assert second.output_text == "stand-in reply to 1 messages" and foreign.output_text
    recs = upstream.responses_requests
    assert len(recs) == 3 and "previous_response_id" not in recs[0]["body"]
    assert recs[1]["body"]["previous_response_id"].startswith("resp_standin_")
    assert recs[2]["body"]["previous_response_id"] == "resp_from_elsewhere"


def test_proxy_strict_errors_reach_the_sdks(plain_standin_proxy: ProxyProcess, upstream: Any) -> None:
    unanswered: Any = ANTHROPIC_MESSAGES[:2] + [{"role": "user", "content": "never mind"}]
    with pytest.raises(
        anthropic.BadRequestError, match="tool_use ids were found without tool_result"
    ) as a_err:
        _anthropic_client(plain_standin_proxy.url, plain_standin_proxy.master_key).messages.create(
            model="claude-strict", max_tokens=64, messages=unanswered
        )
    assert a_err.value.status_code == 400
    with pytest.raises(openai.BadRequestError, match="No tool call found for function call output") as o_err:
        openai_sdk(plain_standin_proxy.base_url, plain_standin_proxy.master_key).responses.create(
            model="gpt-strict", input=RESPONSES_INPUT[2:]
        )
    assert o_err.value.status_code == 400

    ok = _anthropic_client(plain_standin_proxy.url, plain_standin_proxy.master_key).messages.create(
        model="claude-strict", max_tokens=64, messages=ANTHROPIC_MESSAGES
    )
    assert ok.content[0].type == "text" and ok.content[0].text == "stand-in reply to 3 messages"
    assert len(upstream.messages_requests) == 2 and len(upstream.responses_requests) == 1


def test_proxy_messages_to_openai_deployment_go_to_responses(
    plain_standin_proxy: ProxyProcess, upstream: Any
) -> None:
    """/v1/messages for an ``openai/`` deployment is translated to /v1/responses (tool pairs stay paired)."""
    client = _anthropic_client(plain_standin_proxy.url, plain_standin_proxy.master_key)
    reply = client.messages.create(
        model="gpt-strict", max_tokens=64, system=SYSTEM, tools=TOOLS, messages=ANTHROPIC_MESSAGES
    )
    with client.messages.stream(model="gpt-strict", max_tokens=64, messages=ANTHROPIC_MESSAGES) as stream:
        streamed = stream.get_final_text()

    assert reply.content[0].type == "text" and reply.content[0].text == "stand-in reply to 5 messages"
    assert streamed == "stand-in reply to 5 messages"
    assert upstream.messages_requests == [] and upstream.chat_requests == []
    plain, streaming = upstream.responses_requests
    body = plain["body"]
    assert body["instructions"] == SYSTEM[0]["text"]
    assert body["max_output_tokens"] == 64
    # litellm 1.106.2 emits the assistant turn's function_call before that turn's text
    assert [(item["type"], item.get("role")) for item in body["input"]] == [
        ("message", "user"),
        ("function_call", None),
        ("message", "assistant"),
        ("function_call_output", None),
        ("message", "user"),
    ]
    assert body["input"][1]["call_id"] == body["input"][3]["call_id"] == "toolu_1"
    assert json.loads(body["input"][1]["arguments"]) == {"path": "a.py"}
    assert body["input"][3]["output"] == "print(1)"
    assert body["tools"][0]["type"] == "function" and body["tools"][0]["name"] == "read"
    assert streaming["body"]["stream"] is True


def test_proxy_chat_summary_call_to_anthropic_deployment(
    plain_standin_proxy: ProxyProcess, upstream: Any
) -> None:
    """A chat call routed to an ``anthropic/`` deployment moves the system message to ``system``."""
    messages: Any = [
        {"role": "system", "content": f"Summarize. {SUMMARY_MARKER}"},
        {"role": "user", "content": "USER: fix the build"},
    ]
    client = openai_sdk(plain_standin_proxy.base_url, plain_standin_proxy.master_key)
    reply = client.chat.completions.create(model="claude", messages=messages)
    chunks = list(client.chat.completions.create(model="claude", messages=messages, stream=True))

    content = reply.choices[0].message.content
    assert content == su.summary_reply(messages)  # same facts as over chat completions
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content
    plain, _ = upstream.messages_requests
    assert plain["body"]["system"] == [{"type": "text", "text": messages[0]["content"]}]
    assert plain["body"]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "USER: fix the build"}]}
    ]
    assert isinstance(plain["body"]["max_tokens"], int)


def test_standin_is_usable_as_a_fresh_instance() -> None:
    """``root_url`` needs a started server, like ``url``."""
    up = StandinUpstream()
    with pytest.raises(RuntimeError):
        _ = up.root_url

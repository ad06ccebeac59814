"""The model reads back what compaction took out, through a real proxy (issue 34: chat
completions, /v1/messages, /v1/responses, whole and streamed).

A long tool output is truncated on its way to the model, its marker naming its handle; the
stand-in's ``recaller`` model calls the recall tool with it; the proxy answers with the exact
original, calls the model again, and the client (the official SDK) gets the final answer only:
no recall call in it, the usage of both rounds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from compact_hook.core.recall import TOOL_NAME, handle_of, mentioned
from tests.integration.harness import (
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    compact_info,
    gemini_deployment,
    standin_deployment,
)
from tests.integration.wire_clients import anthropic_client, google_client, openai_client

pytestmark = [pytest.mark.integration, pytest.mark.edge]

OUTPUT = "\n".join(f"row {i}: value {i * 7919 % 10007}" for i in range(4000))
"""A tool output far over ``tool_output_max_tokens``: truncated, its middle out of the model's view."""
SETTINGS = {
    "context_window": 200_000,
    "tool_output_max_tokens": 500,
    "recall": True,
    "recall_max_tokens": 60_000,
}
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
RECALLED = f"RECALLED {handle_of(OUTPUT)}: {OUTPUT[:200]}"
"""What the stand-in's recaller answers once it read the output back."""


def chat_session() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "list the table"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c0", "content": OUTPUT},
        {"role": "user", "content": "what was in row 2000?"},
    ]


def messages_session() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "list the table"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t0", "name": "bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": OUTPUT}]},
        {"role": "user", "content": "what was in row 2000?"},
    ]


def responses_session() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "list the table"},
        {"type": "function_call", "call_id": "c0", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c0", "output": OUTPUT},
        {"role": "user", "content": "what was in row 2000?"},
    ]


def gemini_config() -> Any:
    """The google-genai SDK's config: the agent's bash tool, no automatic function calling."""
    from google.genai import types

    tool = types.Tool(
        function_declarations=[types.FunctionDeclaration(name="bash", parameters={"type": "object"})]
    )
    return types.GenerateContentConfig(
        tools=[tool], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )


def google_session() -> list[dict[str, Any]]:
    return [
        {"role": "user", "parts": [{"text": "list the table"}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "bash", "args": {}}, "thoughtSignature": "c2ln"}],
        },
        {"role": "user", "parts": [{"functionResponse": {"name": "bash", "response": {"output": OUTPUT}}}]},
        {"role": "user", "parts": [{"text": "what was in row 2000?"}]},
    ]


@pytest.fixture(scope="module")
def recall_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandinUpstream, ProxyProcess]]:
    archive = tmp_path_factory.mktemp("archive")
    with StandinUpstream() as upstream:
        config = {
            "model_list": [
                standin_deployment(
                    "chat-agent", upstream.url, "standin-recaller", **compact_info(archive, SETTINGS)
                ),
                standin_deployment(
                    "codex-agent", upstream.url, "standin-recaller", **compact_info(archive, SETTINGS)
                ),
                anthropic_deployment(
                    "claude-agent", upstream.root_url, "standin-recaller", **compact_info(archive, SETTINGS)
                ),
                gemini_deployment(
                    "gemini-agent", upstream.root_url, "gemini-3-recaller", **compact_info(archive, SETTINGS)
                ),
                standin_deployment(
                    "slow-agent", upstream.url, "standin-slow-recaller", **compact_info(archive, SETTINGS)
                ),
            ],
            "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
            "general_settings": {"custom_auth": "tests.integration.tenant_auth.user_api_key_auth"},
        }
        with ProxyProcess(config) as proxy:
            yield upstream, proxy


@pytest.fixture
def fresh(recall_proxy: tuple[StandinUpstream, ProxyProcess]) -> tuple[StandinUpstream, ProxyProcess]:
    """The module's proxy, its stand-in's record cleared."""
    recall_proxy[0].reset()
    return recall_proxy


MESSAGES_TOOLS = [{"name": "bash", "input_schema": {"type": "object"}}]


def test_a_chat_model_reads_back_a_truncated_output_and_the_client_sees_only_the_answer(
    fresh: tuple[StandinUpstream, ProxyProcess],
) -> None:
    upstream, proxy = fresh
    client = openai_client(proxy.base_url, proxy.master_key)
    raw = client.chat.completions.with_raw_response.create(
        model="chat-agent", messages=chat_session(), tools=TOOLS
    )  # type: ignore[arg-type]
    reply = raw.parse()
    assert raw.headers["x-compact-recalls"] == "1" and raw.headers["x-compact-truncated"] == "1"
    first, second = (r["body"] for r in upstream.chat_requests)
    shown = first["messages"][2]["content"]
    assert mentioned(shown) == [handle_of(OUTPUT)] and "row 2000:" not in shown
    assert [t["function"]["name"] for t in first["tools"]] == ["bash", TOOL_NAME]
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "recall_" + handle_of(OUTPUT),
        "content": OUTPUT,
    }
    message = reply.choices[0].message
    assert message.tool_calls is None and reply.choices[0].finish_reason == "stop"
    assert message.content == RECALLED
    billed = [r["billed"] for r in upstream.chat_requests]
    assert reply.usage is not None and reply.usage.prompt_tokens == sum(billed)


def test_a_messages_model_reads_back_a_truncated_output_and_the_client_sees_only_the_answer(
    fresh: tuple[StandinUpstream, ProxyProcess],
) -> None:
    upstream, proxy = fresh
    client = anthropic_client(proxy.url, proxy.master_key)
    raw = client.messages.with_raw_response.create(
        model="claude-agent", max_tokens=1024, messages=messages_session(), tools=MESSAGES_TOOLS
    )  # type: ignore[arg-type]
    reply = raw.parse()
    assert raw.headers["x-compact-recalls"] == "1"
    first, second = (r["body"] for r in upstream.messages_requests)
    assert mentioned(json.dumps(first["messages"][2])) == [handle_of(OUTPUT)]
    assert [t["name"] for t in first["tools"]] == ["bash", TOOL_NAME]
    assert second["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_recall_" + handle_of(OUTPUT), "content": OUTPUT}
    ]
    assert [block.type for block in reply.content] == ["text"] and reply.stop_reason == "end_turn"
    assert reply.content[0].text == RECALLED  # type: ignore[union-attr]
    assert reply.usage.input_tokens == sum(r["billed"] for r in upstream.messages_requests)


def test_a_responses_model_reads_back_a_truncated_output_and_the_client_sees_only_the_answer(
    fresh: tuple[StandinUpstream, ProxyProcess],
) -> None:
    upstream, proxy = fresh
    client = openai_client(proxy.base_url, proxy.master_key)
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]
    raw = client.responses.with_raw_response.create(
        model="codex-agent", input=responses_session(), tools=tools
    )  # type: ignore[arg-type]
    reply = raw.parse()
    assert raw.headers["x-compact-recalls"] == "1"
    first, second = (r["body"] for r in upstream.requests if r["path"].endswith("/responses"))
    assert mentioned(json.dumps(first["input"][2])) == [handle_of(OUTPUT)]
    assert [t["name"] for t in first["tools"]] == ["shell", TOOL_NAME]
    assert second["input"][-1] == {
        "type": "function_call_output",
        "call_id": "recall_" + handle_of(OUTPUT),
        "output": OUTPUT,
    }
    assert [item.type for item in reply.output] == ["message"]
    assert reply.output_text == RECALLED
    assert reply.usage is not None and reply.usage.input_tokens == sum(
        r["billed"] for r in upstream.requests if r["path"].endswith("/responses")
    )


def test_a_streamed_chat_reply_reads_back_and_the_stream_shows_only_the_answer(
    fresh: tuple[StandinUpstream, ProxyProcess],
) -> None:
    upstream, proxy = fresh
    client = openai_client(proxy.base_url, proxy.master_key)
    chunks = list(
        client.chat.completions.create(  # type: ignore[call-overload]
            model="chat-agent",
            messages=chat_session(),
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    first, second = (r["body"] for r in upstream.chat_requests)
    assert first["stream"] is True and not second.get("stream")  # the rounds are whole
    assert second["messages"][-1]["content"] == OUTPUT
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert not any(d.tool_calls for d in deltas)
    assert "".join(d.content or "" for d in deltas) == RECALLED
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    [usage] = [c.usage for c in chunks if c.usage is not None]
    assert usage.prompt_tokens == sum(r["billed"] for r in upstream.chat_requests)


def test_a_streamed_messages_reply_reads_back_and_the_stream_shows_only_the_answer(
    fresh: tuple[StandinUpstream, ProxyProcess],
) -> None:
    upstream, proxy = fresh
    client = anthropic_client(proxy.url, proxy.master_key)
    with client.messages.stream(
        model="claude-agent", max_tokens=1024, messages=messages_session(), tools=MESSAGES_TOOLS
    ) as stream:  # type: ignore[arg-type]
        events = list(stream)
        reply = stream.get_final_message()
    first, second = (r["body"] for r in upstream.messages_requests)
    assert first["stream"] is True and not second.get("stream")  # the rounds are whole
    assert [t["name"] for t in first["tools"]] == ["bash", TOOL_NAME]
    assert second["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_recall_" + handle_of(OUTPUT), "content": OUTPUT}
    ]
    started = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert started == ["text"] and [e.type for e in events][-1] == "message_stop"
    assert [block.type for block in reply.content] == ["text"] and reply.stop_reason == "end_turn"
    assert reply.content[0].text == RECALLED  # type: ignore[union-attr]
    assert reply.usage.input_tokens == sum(r["billed"] for r in upstream.messages_requests)


def test_a_streamed_responses_reply_reads_back_and_the_stream_shows_only_the_answer(
    fresh: tuple[StandinUpstream, ProxyProcess],
) -> None:
    upstream, proxy = fresh
    client = openai_client(proxy.base_url, proxy.master_key)
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]
    with client.responses.stream(
        model="codex-agent",
        input=responses_session(),
        tools=tools,  # type: ignore[arg-type]
    ) as stream:
        events = list(stream)
        reply = stream.get_final_response()
    first, second = (r["body"] for r in upstream.requests if r["path"].endswith("/responses"))
    assert first["stream"] is True and not second.get("stream")
    assert second["input"][-1]["output"] == OUTPUT
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["message"] and events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == reply.output_text == RECALLED
    assert [item.type for item in reply.output] == ["message"]
    assert reply.usage is not None and reply.usage.input_tokens == sum(
        r["billed"] for r in upstream.requests if r["path"].endswith("/responses")
    )


def test_a_gemini_model_reads_back_a_truncated_output_and_the_client_sees_only_the_answer(
    fresh: tuple[StandinUpstream, ProxyProcess],
) -> None:
    upstream, proxy = fresh
    client, config = google_client(proxy.url, proxy.master_key), gemini_config()
    reply = client.models.generate_content(model="gemini-agent", contents=google_session(), config=config)
    assert (reply.sdk_http_response.headers or {})["x-compact-recalls"] == "1"  # type: ignore[union-attr]
    first, second = (r["body"] for r in upstream.google_requests)
    assert mentioned(json.dumps(first["contents"][2])) == [handle_of(OUTPUT)]
    assert [d["name"] for t in first["tools"] for d in t["functionDeclarations"]] == ["bash", TOOL_NAME]
    call, answer = second["contents"][-2:]
    assert call["parts"] == [
        {
            "functionCall": {"name": TOOL_NAME, "args": {"id": handle_of(OUTPUT)}},
            "thoughtSignature": "cmVjYWxsZXI=",
        }
    ]
    assert answer["parts"][0]["functionResponse"]["response"] == {"output": OUTPUT}
    assert not reply.function_calls
    assert reply.text == RECALLED
    billed = [r["billed"] for r in upstream.google_requests]
    assert reply.usage_metadata is not None and reply.usage_metadata.prompt_token_count == sum(billed)


def test_a_streamed_gemini_reply_reads_back_and_the_stream_shows_only_the_answer(
    fresh: tuple[StandinUpstream, ProxyProcess],
) -> None:
    upstream, proxy = fresh
    client, config = google_client(proxy.url, proxy.master_key), gemini_config()
    chunks = list(
        client.models.generate_content_stream(model="gemini-agent", contents=google_session(), config=config)
    )
    first, second = upstream.google_requests
    assert ":streamGenerateContent" in first["path"] and ":generateContent" in second["path"]
    second = second["body"]
    assert second["contents"][-1]["parts"][0]["functionResponse"]["response"] == {"output": OUTPUT}
    assert not any(chunk.function_calls for chunk in chunks)
    assert "".join(chunk.text or "" for chunk in chunks) == RECALLED
    usage = chunks[-1].usage_metadata
    assert usage is not None and usage.prompt_token_count == sum(
        r["billed"] for r in upstream.google_requests
    )


def test_two_tenants_under_one_call_id_each_read_back_their_own_conversation(
    fresh: tuple[StandinUpstream, ProxyProcess],
) -> None:
    """``x-litellm-call-id`` is the client's to set: tenant A's slow request and tenant B's under the
    same id, in flight together. Each recall is answered from its own conversation (before issue 45,
    what answering needed was kept by that id: B's replaced A's, and A's reply came back with our
    call in it, or B's table)."""
    upstream, proxy = fresh
    tables = {team: "\n".join(f"{team} row {i}: {i * 31 % 997}" for i in range(3000)) for team in ("a", "b")}
    replies: dict[str, Any] = {}

    def ask(team: str, model: str) -> None:
        session = chat_session()
        session[2] = {**session[2], "content": tables[team]}
        client = openai_client(proxy.base_url, f"sk-tenant-{team}")
        replies[team] = client.chat.completions.create(
            model=model, messages=session, tools=TOOLS, extra_headers={"x-litellm-call-id": "one-id"}
        )  # type: ignore[arg-type]

    slow = threading.Thread(target=ask, args=("a", "slow-agent"))
    slow.start()
    ask("b", "chat-agent")
    slow.join()
    for team in ("a", "b"):
        message = replies[team].choices[0].message
        assert message.tool_calls is None, team
        assert message.content == f"RECALLED {handle_of(tables[team])}: {tables[team][:200]}", team

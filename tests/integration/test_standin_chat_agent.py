"""The stand-in's scripted agent on chat completions (``tools/agent_script.py``), with the official
``openai`` SDK against the stand-in directly: what Qwen Code, opencode and pi meet through the proxy. Tool
calls by the client's own schema, streamed and not, turns counted per session, then the final answer."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.integration.harness import StandinUpstream, standin_upstream

agent_script = standin_upstream.agent_script


def _tools(name: str, *properties: str) -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {p: {"type": "string"} for p in properties}}
    return [
        {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": name, "parameters": schema}},
    ]


def _standin_client(upstream: StandinUpstream) -> openai.OpenAI:
    return openai.OpenAI(api_key="none", base_url=upstream.url, max_retries=0)


def _turn(
    client: openai.OpenAI,
    messages: list[Any],
    tools: list[Any],
    stream: bool,
    model: str = "standin-strict-script8",
) -> dict[str, Any]:
    if not stream:
        answer = client.chat.completions.create(model=model, messages=messages, tools=tools)
        return answer.choices[0].message.model_dump(exclude_none=True)
    calls: dict[int, dict[str, Any]] = {}
    text = ""
    chunks = client.chat.completions.create(
        model=model, messages=messages, tools=tools, stream=True, stream_options={"include_usage": True}
    )
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                found = calls.setdefault(
                    call.index, {"id": call.id, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                found["function"]["name"] += (call.function.name or "") if call.function else ""
                found["function"]["arguments"] += (call.function.arguments or "") if call.function else ""
    return {"role": "assistant", "content": text or None} | (
        {"tool_calls": list(calls.values())} if calls else {}
    )


@pytest.mark.parametrize(
    ("name", "properties", "key"),
    [
        ("run_shell_command", ("command", "description"), "command"),  # Qwen Code
        ("bash", ("command", "description"), "command"),  # opencode
        ("bash", ("command", "timeout"), "command"),  # pi
        ("exec_command", ("cmd",), "cmd"),
    ],
)
def test_a_chat_client_runs_the_scripted_loop_streamed_and_not_with_its_own_shell_tool(
    upstream: StandinUpstream, name: str, properties: tuple[str, ...], key: str
) -> None:
    client = _standin_client(upstream)
    tools = _tools(name, *properties)
    messages: list[Any] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "do the task"},
    ]
    answers = []
    for turn in range(12):
        answer = _turn(client, messages, tools, stream=turn % 2 == 1)
        answers.append(answer)
        messages.append(answer)
        for call in answer.get("tool_calls", []):
            arguments = json.loads(call["function"]["arguments"])
            assert call["function"]["name"] == name and arguments[key].startswith("seq -f")
            assert set(arguments) == {key} | ({"description"} & set(properties))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        if "tool_calls" not in answer:
            break
    assert len(answers) == 9 and agent_script.AGENT_FINAL in answers[-1]["content"]
    assert [len(a.get("tool_calls", [])) for a in answers] == [1, 1, 1, 1, 1, 1, 2, 1, 0]  # 7th: two at once
    assert all(a.get("content") is None for a in answers[:-1])
    assert list(upstream.agent_turns.values()) == [9]  # one session: the client's head


def test_the_stream_opens_each_call_with_its_name_then_streams_its_arguments(
    upstream: StandinUpstream,
) -> None:
    body = {
        "model": "standin-script",
        "messages": [{"role": "user", "content": "stream it"}],
        "tools": _tools("bash", "command"),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = httpx.post(f"{upstream.url}/chat/completions", json=body, timeout=30)
    lines = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": None}
    opening = deltas[1]["tool_calls"][0]
    assert opening["id"].startswith("call_") and opening["type"] == "function"
    assert opening["function"] == {"name": "bash", "arguments": ""}
    pieces = [d["tool_calls"][0] for d in deltas[2:] if d.get("tool_calls")]
    assert len(pieces) == 2 and all(set(p) == {"index", "function"} for p in pieces)
    assert json.loads("".join(p["function"]["arguments"] for p in pieces))["command"].startswith("seq -f")
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "tool_calls" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert upstream.chat_requests[-1]["output_tokens"] == chunks[-1]["usage"]["completion_tokens"]
    whole = httpx.post(f"{upstream.url}/chat/completions", json={**body, "stream": False}, timeout=30).json()
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert whole["choices"][0]["message"]["content"] is None
    assert whole["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"


def test_sessions_are_the_cache_key_the_user_a_header_or_the_head(upstream: StandinUpstream) -> None:
    client = _standin_client(upstream)
    tools = _tools("bash", "command")

    def turn(messages: list[Any], **extra: Any) -> Any:
        return client.chat.completions.create(
            model="standin-script2", messages=messages, tools=tools, **extra
        ).choices[0]

    head = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "task A"}]
    compacted = [*head, {"role": "user", "content": "summary of what was done"}]
    assert turn(head).finish_reason == "tool_calls"
    assert turn(compacted).finish_reason == "tool_calls"  # the head is kept by a compaction: turn 2
    assert turn(compacted).message.content.startswith(agent_script.AGENT_FINAL)  # type: ignore[union-attr]
    turn([{"role": "user", "content": "task A"}])  # another client's head (no system prompt)
    turn([{"role": "user", "content": "task B"}])
    turn(head, extra_body={"prompt_cache_key": "conversation-1"})
    turn(head, user="someone")
    turn(head, extra_headers={"x-session-id": "header-session"})
    turn([{"role": "user", "content": "task C"}], extra_headers={"x-session-id": "header-session"})
    assert sorted(upstream.agent_turns.values()) == [1, 1, 1, 1, 2, 3]  # head A: 3, header: 2
    assert {"conversation-1", "someone", "header-session"} <= set(upstream.agent_turns)
    assert upstream.agent_turns["header-session"] == 2


@pytest.mark.parametrize(
    ("tools", "name", "arguments"),
    [
        (
            _tools("bash", "command") + _tools("run_shell_command", "command"),
            "run_shell_command",
            {"command"},
        ),
        (_tools("shell", "command") + _tools("Bash", "command"), "Bash", {"command"}),
        (_tools("exec_command", "cmd", "workdir"), "exec_command", {"cmd"}),
        (_tools("terminal", "cmd", "command"), "read", {"command"}),  # no shell tool: the first tool
        ([], "run_shell_command", {"command"}),  # no tools at all
    ],
)
def test_the_tool_and_its_arguments_follow_the_clients_schema(
    upstream: StandinUpstream, tools: list[Any], name: str, arguments: set[str]
) -> None:
    call = _turn(_standin_client(upstream), [{"role": "user", "content": "go"}], tools, stream=False)[
        "tool_calls"
    ][0]
    assert call["function"]["name"] == name and set(json.loads(call["function"]["arguments"])) == arguments

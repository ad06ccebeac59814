"""The stand-in's scripted agent on chat completions (``tools/agent_script.py``), with the official
``openai`` SDK: what Qwen Code, opencode and pi meet through the proxy. Tool calls by the client's own
schema, streamed and not, turns counted per session, then the final answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

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


@pytest.fixture
def upstream() -> Iterator[StandinUpstream]:
    with StandinUpstream() as up:
        yield up


def _turn(client: openai.OpenAI, messages: list[Any], tools: list[Any], stream: bool) -> dict[str, Any]:
    if not stream:
        answer = client.chat.completions.create(
            model="standin-strict-script8", messages=messages, tools=tools
        )
        return answer.choices[0].message.model_dump(exclude_none=True)
    calls: dict[int, dict[str, Any]] = {}
    text = ""
    chunks = client.chat.completions.create(
        model="standin-strict-script8",
        messages=messages,
        tools=tools,
        stream=True,
        stream_options={"include_usage": True},
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
    [("bash", ("command", "description"), "command"), ("exec_command", ("cmd",), "cmd")],
)
def test_a_chat_client_runs_the_scripted_loop_streamed_and_not_with_its_own_shell_tool(
    upstream: StandinUpstream, name: str, properties: tuple[str, ...], key: str
) -> None:
    client = openai.OpenAI(api_key="none", base_url=upstream.url, max_retries=0)
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
            assert ("description" in arguments) is ("description" in properties)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        if "tool_calls" not in answer:
            break
    assert len(answers) == 9 and agent_script.AGENT_FINAL in answers[-1]["content"]
    assert len(answers[6]["tool_calls"]) == 2  # every seventh turn: two calls at once
    assert list(upstream.agent_turns.values()) == [9]  # one session: the client's head

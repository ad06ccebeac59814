"""The stand-in speaks Google's generateContent natively (``tools/standin_google.py``): with the official
``google-genai`` SDK and raw HTTP, on its own and (one test) through a real LiteLLM proxy without our
callback.

What it must refuse as Gemini does is what makes the proxy tests able to fail: roles that do not
alternate, calls without their responses, and (Gemini 3) a current turn whose calls lost their thought
signatures.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from google import genai
from google.genai import errors, types

from tests.integration.harness import (
    SUMMARY_MARKER,
    ProxyProcess,
    StandinUpstream,
    gemini_deployment,
    standin_upstream,
)

agent_script = standin_upstream.agent_script
SHELL = [
    {
        "functionDeclarations": [
            {"name": "read_file", "description": "Read a file", "parameters": {"type": "object"}},
            {
                "name": "run_shell_command",
                "description": "Run a shell command",
                "parametersJsonSchema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
                },
            },
        ]
    }
]
MISSING = (
    "Function call is missing a thought_signature in functionCall parts. This is required for tools to work "
    "correctly, and missing thought_signature may lead to degraded model performance. Additional data, "
    "function call `default_api:run` , position 2. Please refer to "
    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)


def _client(base_url: str, key: str = "none", api_version: str = "v1beta") -> genai.Client:
    """The SDK at ``v1beta`` by default: google-genai 3 defaults to ``v1``, a path LiteLLM does not route
    (the stand-in does)."""
    options = types.HttpOptions(base_url=base_url, api_version=api_version, timeout=30_000)
    return genai.Client(api_key=key, http_options=options)


def _post(
    upstream: StandinUpstream,
    model: str,
    contents: list[Any],
    method: str = "generateContent",
    **fields: Any,
) -> httpx.Response:
    return httpx.post(
        f"{upstream.root_url}/v1beta/models/{model}:{method}",
        json={"contents": contents, **fields},
        timeout=30,
    )


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def _calls(*names: str, signed: bool = True, ids: bool = False) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        call: dict[str, Any] = {"name": name, "args": {"n": index}} | ({"id": f"c{index}"} if ids else {})
        parts.append(
            {"functionCall": call}
            | ({"thoughtSignature": agent_script.signature_of(call)} if signed and index == 0 else {})
        )
    return {"role": "model", "parts": parts}


def _answers(*names: str, ids: tuple[str, ...] = ()) -> dict[str, Any]:
    responses = [{"name": n, "response": {"output": "ok"}} for n in names]
    for response, call_id in zip(responses, ids, strict=False):
        response["id"] = call_id
    return {"role": "user", "parts": [{"functionResponse": response} for response in responses]}


def _sse(response: httpx.Response) -> list[dict[str, Any]]:
    """The ``data:`` payloads of a Google SSE stream, checking its framing: CRLF, no ``[DONE]``."""
    text = response.text
    assert text.endswith("\r\n\r\n") and "[DONE]" not in text
    events = [event for event in text.split("\r\n\r\n") if event]
    assert all(event.startswith("data: ") for event in events)
    return [json.loads(event.removeprefix("data: ")) for event in events]


# -- the wire -----------------------------------------------------------------------------------------------


def test_the_sdk_gets_whole_and_streamed_answers_and_usage(upstream: StandinUpstream) -> None:
    client = _client(upstream.root_url)
    whole = client.models.generate_content(model="gemini-2.5-flash-quarter", contents="hello")
    assert whole.text == "stand-in reply to 1 messages" and whole.usage_metadata is not None
    usage = whole.usage_metadata
    assert (usage.prompt_token_count, usage.candidates_token_count, usage.total_token_count) == (2, 7, 9)
    assert whole.candidates and whole.candidates[0].finish_reason == types.FinishReason.STOP
    chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash-quarter", contents="hi"))
    assert len(chunks) > 1 and "".join(c.text or "" for c in chunks) == "stand-in reply to 1 messages"
    assert chunks[-1].usage_metadata is not None and chunks[-1].usage_metadata.candidates_token_count == 7
    assert all(c.usage_metadata is None for c in chunks[:-1])
    recorded = upstream.google_requests
    assert [r["model"] for r in recorded] == ["gemini-2.5-flash-quarter"] * 2
    assert recorded[0]["path"] == "/v1beta/models/gemini-2.5-flash-quarter:generateContent"
    assert recorded[1]["path"] == "/v1beta/models/gemini-2.5-flash-quarter:streamGenerateContent?alt=sse"
    assert recorded[0]["output_tokens"] == 7 and upstream.chat_requests == []


def test_the_sdk_default_api_version_and_every_route_answer(upstream: StandinUpstream) -> None:
    client = _client(upstream.root_url, api_version="v1")  # bound: a Client closes its transport when freed
    assert client.models.generate_content(model="gemini-2.5-flash-quarter", contents="hello").text
    for prefix in ("/v1beta", "/v1alpha", "/v1", ""):
        answer = httpx.post(
            f"{upstream.root_url}{prefix}/models/gemini-3-pro-preview:generateContent",
            json={"contents": [_user("hi")], "model": "something-else-fail"},  # the path names the model
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["modelVersion"] == "gemini-3-pro-preview"
    assert [r["model"] for r in upstream.google_requests] == ["gemini-2.5-flash-quarter"] + [
        "gemini-3-pro-preview"
    ] * 4
    assert httpx.post(f"{upstream.root_url}/v1beta/models/x:countTokens", json={}).status_code == 404


def test_an_sse_stream_sends_text_in_pieces_and_usage_last_and_without_sse_one_json_array(
    upstream: StandinUpstream,
) -> None:
    streamed = httpx.post(
        f"{upstream.root_url}/v1beta/models/gemini-2.5-flash-quarter:streamGenerateContent?alt=sse",
        json={"contents": [_user("hi")]},
        timeout=30,
    )
    assert streamed.headers["content-type"] == "text/event-stream"
    chunks = _sse(streamed)
    assert (
        len(chunks) == 4
        and [set(c) for c in chunks[:-1]] == [{"candidates", "modelVersion", "responseId"}] * 3
    )
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in chunks[-1]
    text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
    assert text == "stand-in reply to 1 messages"
    array = _post(upstream, "gemini-2.5-flash-quarter", [_user("hi")], "streamGenerateContent")
    assert array.status_code == 200 and array.headers["content-type"] == "application/json"
    assert isinstance(array.json(), list) and len(array.json()) == 4
    assert array.json()[-1]["usageMetadata"] == chunks[-1]["usageMetadata"]


def test_replies_count_contents_and_a_summary_request_gets_the_summary(upstream: StandinUpstream) -> None:
    contents = [_user("a"), {"role": "model", "parts": [{"text": "b", "thought": True}]}, _user("c")]
    answer = _post(upstream, "gemini-2.5-flash-quarter", contents)
    assert answer.json()["candidates"][0]["content"]["parts"] == [{"text": "stand-in reply to 3 messages"}]
    system = {"parts": [{"text": f"Summarize. {SUMMARY_MARKER}"}]}
    summary = _post(
        upstream, "gemini-2.5-flash-quarter", [_user("the task")], systemInstruction=system
    ).json()
    assert summary["candidates"][0]["content"]["parts"][0]["text"].startswith("## Goal and user constraints")
    snake = _post(upstream, "gemini-2.5-flash-quarter", [_user("the task")], system_instruction=system).json()
    assert snake["candidates"][0]["content"]["parts"] == summary["candidates"][0]["content"]["parts"]
    # usage counts the system instruction, the tools' JSON and every part the model reads
    tools = [{"functionDeclarations": [{"name": "run", "parameters": {"type": "object"}}]}]
    call = {"name": "run", "args": {"command": "ls"}}
    contents = [_user("go"), {"role": "model", "parts": [{"functionCall": call}]}, _answers("run")]
    counted = _post(upstream, "gemini-2.5-flash-quarter", contents, tools=tools).json()["usageMetadata"]
    texts = [
        "go",
        json.dumps(call, sort_keys=True),
        json.dumps(_answers("run")["parts"][0]["functionResponse"], sort_keys=True),
    ]
    chars = len(json.dumps(tools, sort_keys=True)) + sum(map(len, texts))
    assert counted["promptTokenCount"] == -(-chars // 4)


def test_modes_fail_empty_and_a_context_window_as_google_words_them(upstream: StandinUpstream) -> None:
    failed = _post(upstream, "gemini-2.5-standin-fail", [_user("hi")])
    assert failed.status_code == 500
    assert failed.json() == {
        "error": {"code": 500, "message": standin_upstream.FAIL_MESSAGE, "status": "INTERNAL"}
    }
    empty = _post(upstream, "gemini-2.5-standin-empty", [_user("hi")])
    assert empty.status_code == 200 and empty.json()["candidates"][0]["content"]["parts"] == [{"text": ""}]
    too_long = _post(upstream, "gemini-2.5-standin-quarter-limit50", [_user("word " * 400)])
    assert too_long.status_code == 400
    assert too_long.json() == {
        "error": {
            "code": 400,
            "message": "The input token count (500) exceeds the maximum number of tokens allowed (50).",
            "status": "INVALID_ARGUMENT",
        }
    }
    assert _post(upstream, "gemini-2.5-standin-quarter-limit50", [_user("word")]).status_code == 200
    client = _client(upstream.root_url)
    with pytest.raises(errors.ClientError) as refused:
        client.models.generate_content(model="gemini-2.5-quarter-limit50", contents="word " * 400)
    assert refused.value.code == 400 and refused.value.status == "INVALID_ARGUMENT"
    assert "exceeds the maximum number of tokens allowed (50)" in (refused.value.message or "")


# -- strict ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("contents", "fragment"),
    [
        ([], "contents is not specified"),
        ([_user("a"), _user("b")], "alternate between user and model"),
        ([{"role": "model", "parts": [{"text": "hi"}]}, _user("a")], "first content"),
        ([_user("a"), {"role": "model", "parts": [{"text": "hi"}]}], "ends with a user role"),
        ([_user("a"), {"role": "system", "parts": [{"text": "hi"}]}, _user("b")], "must be user or model"),
        ([_user("a"), {"role": "model", "parts": []}, _user("b")], "must not be empty"),
        ([_user("a"), _calls("read", "grep"), _answers("read")], "number of function response parts"),
        ([_user("a"), _calls("read"), _answers("read", "read")], "number of function response parts"),
        ([_user("a"), _calls("read"), _user("b")], "number of function response parts"),
        ([_user("a"), _calls("read"), _answers("grep")], "does not match the function call"),
        ([_user("a"), _calls("read", "grep"), _answers("grep", "read")], "does not match the function call"),
        (
            [_user("a"), _calls("read", "grep", ids=True), _answers("read", "grep", ids=("c0", "c9"))],
            "answers no function call",
        ),
        ([_answers("read")], "must answer a function call"),
        (
            [_user("a"), {"role": "model", "parts": [{"text": "hi"}]}, _answers("read")],
            "must answer a function call",
        ),
    ],
)
def test_strict_refuses_what_gemini_refuses(
    upstream: StandinUpstream, contents: list[Any], fragment: str
) -> None:
    refused = _post(upstream, "gemini-2.5-standin-strict", contents)
    assert refused.status_code == 400 and fragment in refused.json()["error"]["message"], refused.text
    assert refused.json()["error"]["code"] == 400 and refused.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert _post(upstream, "gemini-2.5-standin", contents).status_code == 200  # only strict checks


@pytest.mark.parametrize(
    "contents",
    [
        [_user("a"), _calls("read", "grep"), _answers("read", "grep")],  # in order, by name
        [_user("a"), _calls("read", "read"), _answers("read", "read")],
        [_user("a"), _calls("read", "grep", ids=True), _answers("grep", "read", ids=("c1", "c0"))],  # by id
        [_user("a"), _calls("read", ids=True), _answers("read")],  # a response without its id: in order
        [
            _user("a"),
            {"role": "model", "parts": [{"function_call": {"name": "read", "args": {}}}]},
            {"role": "user", "parts": [{"function_response": {"name": "read", "response": {}}}]},
        ],  # snake_case, as the API accepts it
        [
            _user("a"),
            {"role": "model", "parts": [{"text": "Reading.", "thought": True}, _calls("read")["parts"][0]]},
            {"role": "user", "parts": [*_answers("read")["parts"], {"text": "and now?"}]},
        ],
    ],
)
def test_strict_accepts_what_gemini_accepts(upstream: StandinUpstream, contents: list[Any]) -> None:
    answer = _post(upstream, "gemini-2.5-standin-strict", contents)
    assert answer.status_code == 200, answer.text


# -- Gemini 3 thought signatures ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("contents", "refused"),
    [
        ([_user("go"), _calls("run", signed=False), _answers("run")], MISSING),
        ([_user("go"), _calls("run", "grep"), _answers("run", "grep")], None),  # only the first is signed
        (
            [
                _user("go"),
                _calls("run", signed=False),  # before the current turn: not checked
                _answers("run"),
                _user("next"),
                _calls("ls"),
                _answers("ls"),
            ],
            None,
        ),
        (
            [_user("go"), _calls("run"), _answers("run"), _calls("ls", signed=False), _answers("ls")],
            "function call `default_api:ls` , position 4.",
        ),
        (  # the turn in progress: its last content is the model's, not yet answered
            [_user("go"), _calls("run"), _answers("run"), _calls("ls", signed=False)],
            "position 4.",
        ),
        ([_user("go"), {"role": "model", "parts": [{"text": "plain text, no call"}]}, _user("ok")], None),
    ],
)
def test_gemini_3_refuses_a_current_turn_call_without_its_signature(
    upstream: StandinUpstream, contents: list[Any], refused: str | None
) -> None:
    answer = _post(upstream, "gemini-3-pro-standin", contents)
    if refused is None:
        assert answer.status_code == 200, answer.text
    else:
        assert answer.status_code == 400 and refused in answer.json()["error"]["message"]
        assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert (
        _post(upstream, "gemini-2.5-flash-quarter", contents).status_code == 200
    )  # older models sign nothing
    assert _post(upstream, "gemini-30-standin", contents).status_code == answer.status_code  # and newer


def test_a_moved_signature_is_refused_and_googles_values_and_foreign_ones_accepted(
    upstream: StandinUpstream,
) -> None:
    signed = _calls("run")["parts"][0]["thoughtSignature"]

    def turn(signature: str, key: str = "thoughtSignature", args: Any = None) -> list[Any]:
        call = {"name": "run", "args": {"n": 0} if args is None else args}
        return [
            _user("go"),
            {"role": "model", "parts": [{"functionCall": call, key: signature}]},
            _answers("run"),
        ]

    assert _post(upstream, "gemini-3-pro-standin", turn(signed)).status_code == 200
    moved = _post(upstream, "gemini-3-pro-standin", turn(signed, args={"n": 9}))
    assert moved.status_code == 400 and moved.json()["error"]["message"] == "Corrupted thought signature."
    snake = _post(upstream, "gemini-3-pro-standin", turn(signed, "thought_signature", {"n": 9}))
    assert snake.status_code == 400
    for accepted in (
        "skip_thought_signature_validator",
        "context_engineering_is_the_way_to_go",
        "CiQBjz1rX2Zvcm1lZC1ieS1nb29nbGU=",  # not ours: the real API's, which we cannot verify
    ):
        assert _post(upstream, "gemini-3-pro-standin", turn(accepted, args={"n": 9})).status_code == 200
    text = {"role": "model", "parts": [{"text": "done", "thoughtSignature": signed}]}  # the call's, on a text
    contents = [*turn(signed), text]
    assert _post(upstream, "gemini-3-pro-standin", contents).status_code == 400
    assert _post(upstream, "gemini-3-pro-standin", [*contents, _user("ok")]).status_code == 200  # turn over


# -- the scripted agent ---------------------------------------------------------------------------------------


def test_the_scripted_agent_runs_a_tool_loop_with_signed_parallel_calls_and_finishes(
    upstream: StandinUpstream,
) -> None:
    client = _client(upstream.root_url)
    config = types.GenerateContentConfig(
        tools=[types.Tool.model_validate(SHELL[0])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        thinking_config=types.ThinkingConfig(include_thoughts=True),
        system_instruction="You are an agent.",
    )
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="do the task")])]
    seen: list[list[tuple[str, bool]]] = []
    for turn in range(10):
        model = "gemini-3-pro-standin-strict-script8"
        if turn % 2:
            chunks = list(
                client.models.generate_content_stream(model=model, contents=contents, config=config)
            )
            assert all(len(c.candidates[0].content.parts) == 1 for c in chunks)  # type: ignore[index,union-attr,arg-type]
            parts = [p for c in chunks for p in c.candidates[0].content.parts]  # type: ignore[index,union-attr]
            content = types.Content(role="model", parts=parts)
        else:
            answer = client.models.generate_content(model=model, contents=contents, config=config)
            content = answer.candidates[0].content  # type: ignore[index,assignment]
        assert content is not None and content.parts is not None
        assert content.parts[0].thought  # the thoughts the client asked for
        calls = [part.function_call for part in content.parts if part.function_call]
        seen.append(
            [
                (p.function_call.name or "", bool(p.thought_signature))
                for p in content.parts
                if p.function_call
            ]
        )
        if not calls:
            final = "".join(p.text or "" for p in content.parts if not p.thought)
            assert agent_script.AGENT_FINAL in final and content.parts[-1].thought_signature
            break
        assert all(call.id is None for call in calls)  # the Gemini API returns no call ids
        assert calls[0].args == {
            "command": calls[0].args["command"],
            "description": f"Print turn {turn + 1} output",
        }  # type: ignore[index]
        assert calls[0].args["command"].startswith("seq -f")  # type: ignore[index]
        contents += [
            content,
            types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(name=c.name, response={"output": "ok"})
                    )
                    for c in calls
                ],
            ),
        ]
    assert len(seen) == 9 and seen[6] == [("run_shell_command", True), ("run_shell_command", False)]
    assert all(turn == [("run_shell_command", True)] for i, turn in enumerate(seen[:8]) if i != 6)
    assert list(upstream.agent_turns.values()) == [9]
    assert [r["output_tokens"] > 0 for r in upstream.google_requests] == [True] * 9


def test_the_scripted_agent_counts_sessions_by_the_head_or_a_header_and_reads_the_tools_schema(
    upstream: StandinUpstream,
) -> None:
    def tools(name: str, schema: dict[str, Any] | None) -> list[Any]:
        declaration = {"name": name} | ({"parameters": schema} if schema is not None else {})
        return [{"functionDeclarations": [{"name": "grep"}, declaration]}]

    def turn(first: str, tool: list[Any], headers: dict[str, str] | None = None, **more: Any) -> Any:
        answer = httpx.post(
            f"{upstream.root_url}/v1beta/models/gemini-2.5-script3:generateContent",
            json={"contents": [_user(first), *more.pop("after", [])], "tools": tool, **more},
            headers=headers or {},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["candidates"][0]["content"]["parts"]

    bash = tools("bash", {"type": "object", "properties": {"command": {"type": "string"}}})
    parts = turn("task A", bash)
    assert parts == [
        {"functionCall": parts[0]["functionCall"], "thoughtSignature": parts[0]["thoughtSignature"]}
    ]
    assert parts[0]["functionCall"]["name"] == "bash" and list(parts[0]["functionCall"]["args"]) == [
        "command"
    ]
    assert parts[0]["thoughtSignature"] == agent_script.signature_of(parts[0]["functionCall"])
    compacted = [{"role": "model", "parts": [{"text": "summary"}]}, _user("go on")]
    assert turn("task A", bash, after=compacted)[0]["functionCall"]["name"] == "bash"  # same session: turn 2
    assert turn("task B", tools("shell", None))[0]["functionCall"] == {  # another session: turn 1
        "name": "shell",
        "args": {"command": agent_script.shell_command(1, 0, agent_script.LINES_PER_TURN)},
    }
    assert turn("task B", tools("grep2", None), {"x-session-id": "s1"})[0]["functionCall"]["name"] == "grep"
    system = {"parts": [{"text": "another client"}]}
    turn("task A", bash, systemInstruction=system)
    assert sorted(upstream.agent_turns.values()) == [1, 1, 1, 2]
    assert "functionCall" in turn("task A", bash, after=compacted)[0]  # turn 3 of 3
    final = turn("task A", bash, after=compacted)
    assert final == [
        {"text": final[0]["text"], "thoughtSignature": agent_script.signature_of(final[0]["text"])}
    ]
    assert final[0]["text"].startswith(agent_script.AGENT_FINAL)


# -- through a real proxy -------------------------------------------------------------------------------------


def test_through_a_proxy_litellm_reaches_the_surface_whole_and_streamed_and_a_too_long_is_its_400() -> None:
    """LiteLLM posts a ``gemini/`` deployment with an ``api_base`` to ``{api_base}/models/<model>:
    generateContent`` (``:streamGenerateContent?alt=sse`` streamed) — no ``v1beta``/``v1alpha``, Gemini 2.x
    and 3 alike, from Google's own route and from chat completions. Gemini's too-long 400 reaches the
    client as LiteLLM's ``ContextWindowExceededError``: HTTP 400, an OpenAI-shaped error body (``type:
    invalid_request_error``, ``code: "400"``) whose message carries Google's sentence."""
    with StandinUpstream() as upstream:
        config = {
            "model_list": [
                gemini_deployment("gemini-3", upstream.root_url, "gemini-3-pro-standin-strict"),
                gemini_deployment("gemini-2", upstream.root_url, "gemini-2.5-flash-standin-strict"),
                gemini_deployment("gemini-small", upstream.root_url, "gemini-2.5-standin-quarter-limit50"),
            ],
            "router_settings": {"num_retries": 0},
        }
        with ProxyProcess(config) as proxy:
            client = _client(proxy.url, proxy.master_key)
            chat = openai.OpenAI(api_key=proxy.master_key, base_url=proxy.base_url, max_retries=0)
            for group in ("gemini-3", "gemini-2"):
                whole = client.models.generate_content(model=group, contents="hello")
                streamed = client.models.generate_content_stream(model=group, contents="hi")
                assert whole.text == "".join(c.text or "" for c in streamed) == "stand-in reply to 1 messages"
                messages: Any = [{"role": "user", "content": "hey"}]
                completion = chat.chat.completions.create(model=group, messages=messages)
                pieces = chat.chat.completions.create(model=group, messages=messages, stream=True)
                assert completion.choices[0].message.content == "stand-in reply to 1 messages"
                assert "".join(p.choices[0].delta.content or "" for p in pieces if p.choices) == (
                    "stand-in reply to 1 messages"
                )
            paths = [r["path"] for r in upstream.google_requests]
            for model in ("gemini-3-pro-standin-strict", "gemini-2.5-flash-standin-strict"):
                assert paths.count(f"/models/{model}:generateContent") == 2
                assert paths.count(f"/models/{model}:streamGenerateContent?alt=sse") == 2
            assert len(paths) == 8

            too_long = {"contents": [{"role": "user", "parts": [{"text": "word " * 400}]}]}
            refused = httpx.post(
                f"{proxy.url}/v1beta/models/gemini-small:generateContent",
                json=too_long,
                headers=proxy.auth_headers,
                timeout=60,
            )
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == "400"
            assert error["message"].startswith("litellm.ContextWindowExceededError")
            assert (
                "The input token count (500) exceeds the maximum number of tokens allowed (50)."
                in (error["message"])
            )
            with pytest.raises(errors.ClientError) as sdk:
                client.models.generate_content(model="gemini-small", contents="word " * 400)
            assert sdk.value.code == 400 and "ContextWindowExceededError" in str(sdk.value)
            with pytest.raises(openai.BadRequestError) as via_chat:
                chat.chat.completions.create(
                    model="gemini-small", messages=[{"role": "user", "content": "word " * 400}]
                )
            assert "ContextWindowExceededError" in str(via_chat.value)

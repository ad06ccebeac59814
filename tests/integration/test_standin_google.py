"""The stand-in speaks Google's generateContent natively (``tools/standin_google.py``): with the official
``google-genai`` SDK and raw HTTP, on its own and through a real LiteLLM proxy without our callback.

What it must refuse as Gemini does is what makes the proxy tests able to fail: roles that do not
alternate, calls without their responses, and (Gemini 3) a current turn whose calls lost their thought
signatures.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from tests.integration.harness import ProxyProcess, StandinUpstream, gemini_deployment, standin_upstream

agent_script = standin_upstream.agent_script
SHELL = [
    {
        "functionDeclarations": [
            {
                "name": "run_shell_command",
                "description": "Run a shell command",
                "parametersJsonSchema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
                },
            }
        ]
    }
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[StandinUpstream]:
    with StandinUpstream() as up:
        yield up


def _client(base_url: str, key: str = "none") -> genai.Client:
    """The SDK at ``v1beta``: google-genai 3 defaults to ``v1``, a path LiteLLM does not route."""
    options = types.HttpOptions(base_url=base_url, api_version="v1beta", timeout=30_000)
    return genai.Client(api_key=key, http_options=options)


def _post(
    upstream: StandinUpstream, model: str, contents: list[Any], method: str = "generateContent"
) -> httpx.Response:
    return httpx.post(
        f"{upstream.root_url}/v1beta/models/{model}:{method}", json={"contents": contents}, timeout=30
    )


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def _calls(*names: str, signed: bool = True) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        call = {"name": name, "args": {"n": index}}
        parts.append(
            {"functionCall": call}
            | ({"thoughtSignature": agent_script.signature_of(call)} if signed and index == 0 else {})
        )
    return {"role": "model", "parts": parts}


def _answers(*names: str) -> dict[str, Any]:
    return {
        "role": "user",
        "parts": [{"functionResponse": {"name": n, "response": {"output": "ok"}}} for n in names],
    }


def test_the_sdk_gets_whole_and_streamed_answers_and_usage(upstream: StandinUpstream) -> None:
    client = _client(upstream.root_url)
    whole = client.models.generate_content(model="gemini-2.5-flash", contents="hello")
    assert whole.text == "stand-in reply to 1 messages" and whole.usage_metadata is not None
    assert whole.usage_metadata.prompt_token_count == 2
    pieces = [
        chunk.text for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi")
    ]
    assert len(pieces) > 1 and "".join(p or "" for p in pieces) == "stand-in reply to 1 messages"
    recorded = upstream.google_requests[-1]
    assert recorded["model"] == "gemini-2.5-flash" and "alt=sse" in recorded["path"]


def test_a_stream_asked_without_sse_is_one_json_array(upstream: StandinUpstream) -> None:
    answer = _post(upstream, "gemini-2.5-flash", [_user("hi")], "streamGenerateContent")
    chunks = answer.json()
    assert answer.status_code == 200 and isinstance(chunks, list) and len(chunks) > 1
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in chunks[-1]


@pytest.mark.parametrize(
    ("contents", "fragment"),
    [
        ([_user("a"), _user("b")], "alternate between user and model"),
        ([{"role": "model", "parts": [{"text": "hi"}]}, _user("a")], "first content"),
        ([_user("a"), {"role": "model", "parts": [{"text": "hi"}]}], "ends with a user role"),
        ([_user("a"), _calls("read", "grep"), _answers("read")], "number of function response parts"),
        ([_user("a"), _calls("read"), _answers("grep")], "number of function response parts"),
        ([_answers("read")], "must answer a function call"),
        ([_user("a"), {"role": "model", "parts": []}, _user("b")], "must not be empty"),
    ],
)
def test_strict_refuses_what_gemini_refuses(
    upstream: StandinUpstream, contents: list[Any], fragment: str
) -> None:
    refused = _post(upstream, "gemini-2.5-standin-strict", contents)
    assert refused.status_code == 400 and fragment in refused.json()["error"]["message"]
    assert refused.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_parallel_responses_answer_by_name_in_any_order(upstream: StandinUpstream) -> None:
    contents = [_user("a"), _calls("read", "grep"), _answers("grep", "read")]
    assert _post(upstream, "gemini-2.5-standin-strict", contents).status_code == 200


@pytest.mark.parametrize(
    ("contents", "refused"),
    [
        ([_user("go"), _calls("run", signed=False), _answers("run")], "missing a thought_signature"),
        ([_user("go"), _calls("run", "grep"), _answers("run", "grep")], None),  # only the first is signed
        (
            [
                _user("go"),
                _calls("run", signed=False),
                _answers("run"),
                _user("next"),
                _calls("ls"),
                _answers("ls"),
            ],
            None,
        ),
        (
            [_user("go"), _calls("run"), _answers("run"), _calls("ls", signed=False), _answers("ls")],
            "position 4",
        ),
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
    assert _post(upstream, "gemini-2.5-flash", contents).status_code == 200  # older models sign nothing


def test_a_signature_moved_to_another_call_is_refused_and_googles_stand_in_value_accepted(
    upstream: StandinUpstream,
) -> None:
    signed = _calls("run")
    moved = {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "run", "args": {"n": 9}},
                "thoughtSignature": signed["parts"][0]["thoughtSignature"],
            }
        ],
    }
    answer = _post(upstream, "gemini-3-pro-standin", [_user("go"), moved, _answers("run")])
    assert answer.status_code == 400 and "Corrupted thought signature" in answer.text
    dummy = {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "run", "args": {}},
                "thoughtSignature": "skip_thought_signature_validator",
            }
        ],
    }
    assert _post(upstream, "gemini-3-pro-standin", [_user("go"), dummy, _answers("run")]).status_code == 200


def test_the_scripted_agent_runs_a_tool_loop_with_signed_parallel_calls_and_finishes(
    upstream: StandinUpstream,
) -> None:
    upstream.reset()
    client = _client(upstream.root_url)
    config = types.GenerateContentConfig(
        tools=[types.Tool.model_validate(SHELL[0])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        thinking_config=types.ThinkingConfig(include_thoughts=True),
    )
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="do the task")])]
    seen: list[list[tuple[str, bool]]] = []
    for _ in range(10):
        answer = client.models.generate_content(
            model="gemini-3-pro-standin-strict-script8", contents=contents, config=config
        )
        content = answer.candidates[0].content  # type: ignore[index]
        assert content is not None and content.parts is not None
        calls = [part.function_call for part in content.parts if part.function_call]
        seen.append(
            [
                (p.function_call.name or "", bool(p.thought_signature))
                for p in content.parts
                if p.function_call
            ]
        )
        assert content.parts[0].thought  # the thoughts the client asked for
        if not calls:
            assert agent_script.AGENT_FINAL in (answer.text or "")
            break
        assert calls[0].args is not None and "seq -f" in calls[0].args["command"]
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
    assert list(upstream.agent_turns.values()) == [9]


@pytest.mark.integration
def test_through_a_proxy_litellm_reaches_the_surface_whole_and_streamed_and_a_too_long_is_its_400() -> None:
    with StandinUpstream() as upstream:
        config = {
            "model_list": [
                gemini_deployment("gemini", upstream.root_url, "gemini-3-pro-standin-strict"),
                gemini_deployment("gemini-small", upstream.root_url, "gemini-2.5-standin-limit50"),
            ],
            "router_settings": {"num_retries": 0},
        }
        with ProxyProcess(config) as proxy:
            client = _client(proxy.url, proxy.master_key)
            whole = client.models.generate_content(model="gemini", contents="hello")
            streamed = "".join(
                c.text or "" for c in client.models.generate_content_stream(model="gemini", contents="hi")
            )
            assert whole.text == streamed == "stand-in reply to 1 messages"
            assert [r["path"].split("?")[0] for r in upstream.google_requests] == [
                "/models/gemini-3-pro-standin-strict:generateContent",
                "/models/gemini-3-pro-standin-strict:streamGenerateContent",
            ]
            with pytest.raises(errors.APIError) as refused:
                client.models.generate_content(model="gemini-small", contents="word " * 400)
            assert refused.value.code == 400 and "ContextWindowExceededError" in str(refused.value)

"""The proxy hook against a real ``litellm.Router``, the provider faked with respx."""

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from compact_hook.proxy import server
from compact_hook.proxy.hook import CompactHook
from compact_hook.proxy.marks import INTERNAL_TOKEN
from compact_hook.proxy.observe.report import Report, response_headers
from compact_hook.proxy.request.caller import session_id_of
from compact_hook.proxy.request.models import validate_model_list
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.summary import summary_tokens_for
from tests.routers import SUMMARY, UPSTREAM, SpyRouter, deployment, request, spy_router
from tests.support import (
    ANTHROPIC,
    GOOGLE,
    RESPONSES,
    SUMMARY_PREFIX,
    chat_to_google,
    chat_to_responses,
    chat_tool_definitions,
    is_summary,
    load_transcript,
    pairing_problems,
)


async def pre_call(data: dict[str, Any], call_type: str = "acompletion") -> dict[str, Any]:
    out = await CompactHook(CompactConfig()).async_pre_call_hook(None, None, data, call_type)
    assert out is data
    return out


async def test_a_long_request_is_compacted_through_the_router(
    router: SpyRouter, mocked_upstream: respx.Route
) -> None:
    original = load_transcript("claude_code_fa812bfe_pre_compact.json")
    data = await pre_call(request())
    messages = data["messages"]
    assert [m for m in messages if is_summary(m)] and SUMMARY in next(
        m["content"] for m in messages if is_summary(m)
    )
    assert pairing_problems(messages) == []
    assert messages[-1] == original[-1]
    report = data["metadata"]["compact_hook"]
    assert report["compacted"] is True
    assert report["tokens_after"] < 0.92 * 20_000 < report["tokens_before"]
    assert Path(report["archive_path"]).is_file() and report["archive"] == "written"
    # no top-level keys added but the router's own (it pops them: the upstream never sees them)
    assert set(data) == {"model", "messages", "metadata", "litellm_call_id", "context_window_fallbacks"}
    summary_calls = router.calls
    assert summary_calls and all(call["model"] == "agent" for call in summary_calls)
    assert summary_calls[0]["metadata"]["user_api_key"] == "hashed-key"
    assert summary_calls[0]["metadata"]["user_api_key_team_id"] == "team-1"
    assert summary_calls[0]["metadata"]["compact_hook_internal"] == INTERNAL_TOKEN
    assert "other" not in summary_calls[0]["metadata"]
    sent = json.loads(mocked_upstream.calls[0].request.content)
    assert sent["max_tokens"] == summary_tokens_for(20_000) == 4_096  # the group's window is large enough
    assert "<compact_hook:summary-request>" in sent["messages"][0]["content"]


async def test_a_failing_summary_model_forwards_the_request_unchanged(router: SpyRouter) -> None:
    with respx.mock() as mock:
        mock.post(f"{UPSTREAM}/chat/completions").mock(
            return_value=httpx.Response(500, json={"error": "down"})
        )
        data = await pre_call(request())
    assert data["messages"] == load_transcript("claude_code_fa812bfe_pre_compact.json")
    assert data["metadata"]["compact_hook"]["compacted"] is False
    assert data["metadata"]["compact_hook"]["reason"] == "summary_failed"
    assert len(router.calls) == 1 + CompactConfig().max_retries
    assert data["metadata"]["compact_hook"]["summary_calls"] == len(router.calls)  # failed attempts count


async def test_an_internal_error_forwards_the_request_untouched(
    router: SpyRouter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug")

    hook = CompactHook(CompactConfig())
    monkeypatch.setattr(hook.compactor, "compact", explode)
    data = request()
    before = json.dumps(data, sort_keys=True)
    assert await hook.async_pre_call_hook(None, None, data, "acompletion") is data
    assert json.dumps(data, sort_keys=True) == before
    assert "call-123" in caplog.text


@pytest.mark.parametrize("model", ["plain", "off", "unknown-model"])
async def test_models_without_compaction_are_untouched(router: SpyRouter, model: str) -> None:
    data = request(model)
    before = json.dumps(data, sort_keys=True)
    await pre_call(data)
    assert json.dumps(data, sort_keys=True) == before
    assert router.calls == []


@pytest.mark.parametrize("call_type", ["atext_completion", "aembedding", "aimage_generation"])
async def test_other_call_types_pass_through(router: SpyRouter, call_type: str) -> None:
    data = request()
    before = json.dumps(data, sort_keys=True)
    await pre_call(data, call_type)
    assert json.dumps(data, sort_keys=True) == before


async def test_our_own_summary_call_is_never_compacted(router: SpyRouter) -> None:
    data = request()
    data["metadata"]["compact_hook_internal"] = INTERNAL_TOKEN
    before = json.dumps(data, sort_keys=True)
    await pre_call(data)
    assert json.dumps(data, sort_keys=True) == before


async def test_a_client_cannot_skip_compaction_by_claiming_to_be_our_summary_call(
    router: SpyRouter, mocked_upstream: respx.Route
) -> None:
    data = request()
    data["metadata"]["compact_hook_internal"] = True
    await pre_call(data)
    assert "compact_hook_internal" not in data["metadata"]
    assert data["metadata"]["compact_hook"]["compacted"] is True


@pytest.mark.parametrize("model", ["agent", "plain"])
@pytest.mark.parametrize("key", ["metadata", "litellm_metadata"])
async def test_a_forged_report_never_comes_back_as_ours(router: SpyRouter, model: str, key: str) -> None:
    forged = {"compacted": True, "tokens_before": 999_999, "reason": "evil\r\nx-injected: 1", "cache": "ünï"}
    data = request(model, messages=[{"role": "user", "content": "hi"}])
    data.setdefault(key, {})["compact_hook"] = forged
    hook = CompactHook(CompactConfig())
    await hook.async_pre_call_hook(None, None, data, "acompletion")
    headers = await hook.async_post_call_response_headers_hook(data, None, None)
    report = data["metadata"].get("compact_hook")  # a chat request's report lives in `metadata`
    if model == "plain":  # no compact block: nothing of ours, and the forgery is gone
        assert headers is None and "compact_hook" not in data[key]
    else:
        assert headers is not None and headers["x-compact-tokens-before"] != "999999"
        assert report is not forged and report is not None and report["reason"] == "below_threshold"
    assert forged not in [
        data.get("metadata", {}).get("compact_hook"),
        data.get("litellm_metadata", {}).get("compact_hook"),
    ]


async def test_the_headers_hook_never_raises(router: SpyRouter) -> None:
    hook = CompactHook(CompactConfig())
    assert await hook.async_post_call_response_headers_hook(None, None, None) is None  # type: ignore[arg-type]
    weird = {"metadata": {"compact_hook": Report({"tokens_before": object()})}}
    headers = await hook.async_post_call_response_headers_hook(weird, None, None)
    assert headers is None or all(value.isascii() for value in headers.values())


def test_header_values_are_printable_ascii_and_short() -> None:
    headers = response_headers({"reason": "a\r\nb: c\x00ü" + "x" * 500})
    assert headers["x-compact-reason"].isascii() and "\r" not in headers["x-compact-reason"]
    assert headers["x-compact-reason"].startswith("ab: c") and len(headers["x-compact-reason"]) <= 200


@pytest.mark.parametrize(
    "messages",
    ["a string", [{"content": "no role"}], [{"role": "user", "content": {"a": 1}}], [["nested"]], None],
)
async def test_malformed_messages_pass_through_for_the_provider_to_judge(
    router: SpyRouter, messages: Any
) -> None:
    data = request(messages=messages) if messages is not None else {"model": "agent", "metadata": {}}
    kept = data.get("messages")
    await pre_call(data)
    assert data.get("messages") is kept
    assert router.calls == []


@pytest.mark.parametrize("where", [1, 3])  # changed in the middle, or new at the end
async def test_an_entry_not_sent_before_is_checked_though_the_rest_is_known(
    router: SpyRouter, where: int
) -> None:
    """Entries the conversation's last request sent the same are not checked again (``state.recent``):
    one changed or added since is, and a fault in it still passes the request through untouched."""
    hook = CompactHook(CompactConfig())
    sent = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]
    sent.append({"role": "user", "content": "three"})
    first = request(messages=json.loads(json.dumps(sent)), user="session-1")
    await hook.async_pre_call_hook(None, None, first, "acompletion")
    assert first["metadata"]["compact_hook"]["reason"] == "below_threshold"
    again = json.loads(json.dumps(sent)) + [{"role": "user", "content": "four"}]
    again[where] = {"role": "user", "content": {"not": "a list"}}
    data = request(messages=again, user="session-1")
    await hook.async_pre_call_hook(None, None, data, "acompletion")
    assert data["messages"] is again and data["metadata"]["compact_hook"]["reason"] == "malformed"
    assert f"messages[{where}]" in data["metadata"]["compact_hook"]["detail"]


async def test_a_compaction_block_in_a_changed_message_still_hands_the_context_to_the_client(
    router: SpyRouter,
) -> None:
    hook = CompactHook(CompactConfig())
    await hook.async_pre_call_hook(None, None, anthropic_request(), "anthropic_messages")
    data = anthropic_request()
    data["messages"][5] = {"role": "assistant", "content": [{"type": "compaction", "content": "earlier"}]}
    kept = data["messages"]
    await hook.async_pre_call_hook(None, None, data, "anthropic_messages")
    assert data["messages"] is kept
    assert data["litellm_metadata"]["compact_hook"]["reason"] == "client_managed"


async def test_a_short_request_is_reported_but_untouched(router: SpyRouter) -> None:
    messages = [{"role": "user", "content": "hi"}]
    data = await pre_call(request(messages=messages))
    assert data["messages"] is messages
    report = data["metadata"]["compact_hook"]
    assert report["compacted"] is False and report["reason"] == "below_threshold"
    assert report["tokens_before"] == report["tokens_after"] > 0


async def test_headers_hook_reports_the_stats(router: SpyRouter, mocked_upstream: respx.Route) -> None:
    hook = CompactHook(CompactConfig())
    data = request()
    await hook.async_pre_call_hook(None, None, data, "acompletion")
    headers = await hook.async_post_call_response_headers_hook(data, None, None)
    assert headers is not None
    assert headers["x-compact-compacted"] == "true"
    assert int(headers["x-compact-tokens-before"]) > int(headers["x-compact-tokens-after"])
    assert int(headers["x-compact-messages-summarized"]) > 0
    assert await hook.async_post_call_response_headers_hook({"metadata": {}}, None, None) is None


def test_response_headers_for_a_pass_through() -> None:
    headers = response_headers({"compacted": False, "tokens_before": 10, "tokens_after": 10, "reason": "x"})
    assert headers == {
        "x-compact-compacted": "false",
        "x-compact-tokens-before": "10",
        "x-compact-tokens-after": "10",
        "x-compact-reason": "x",
    }


def test_session_id_comes_from_the_client_first() -> None:
    messages = [{"role": "user", "content": "x"}]
    assert session_id_of({"metadata": {"session_id": "abc"}, "user": "u"}, messages) == "abc"
    assert session_id_of({"metadata": {"litellm_session_id": "lit"}}, messages) == "lit"
    assert session_id_of({"litellm_session_id": "top"}, messages) == "top"
    assert session_id_of({"user": "u"}, messages) == "u"
    assert session_id_of({}, messages).startswith("conv-")


def test_a_bad_compact_block_names_the_model_and_key() -> None:
    models = [deployment("good", {"context_window": 100_000}), deployment("bad", {"trigger_ratio": 3})]
    with pytest.raises(ValueError, match=r"model 'bad': model_info\.compact\.trigger_ratio"):
        validate_model_list(models, CompactConfig())


def summarized_by(window: int, **compact: object) -> list[dict[str, object]]:
    agent = deployment("agent", {"summary_model": "small", **compact})
    small = deployment("small")
    small["model_info"] = {"max_input_tokens": window}
    return [agent, small]


def test_a_summary_setting_that_leaves_no_transcript_fails_start_up_not_each_request() -> None:
    """Issue 61: with 4,096 answer tokens reserved twice, a 4K summary model had -4,599 tokens for the
    transcript and every summary failed, request after request, with nothing said at start-up."""
    with pytest.raises(
        ValueError, match=r"model 'agent': model_info\.compact\.summary_max_tokens: 4096 .*'small'"
    ):
        validate_model_list(summarized_by(4096, summary_max_tokens=4096), CompactConfig())
    with pytest.raises(ValueError, match=r"the summary model's window is too small"):
        validate_model_list(summarized_by(1024), CompactConfig())
    for window in (2048, 4096, 8192, 32_768, 200_000):  # the derived default fits each
        validate_model_list(summarized_by(window), CompactConfig())
    validate_model_list(summarized_by(1024, summary_model="digest"), CompactConfig())  # no model, no room
    validate_model_list(
        summarized_by(4096, summary_max_tokens=4096, summary_context_window=32_768), CompactConfig()
    )


async def test_a_group_without_a_known_window_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    spy = spy_router([deployment("custom", {}, model="openai/my-own-finetune")])
    monkeypatch.setattr(server, "proxy_router", lambda: spy)
    hook = CompactHook(CompactConfig())
    for _ in range(3):
        data = request("custom")
        await hook.async_pre_call_hook(None, None, data, "acompletion")
        assert data["metadata"]["compact_hook"]["reason"] == "window_unknown"
    assert caplog.text.count("context window unknown") == 1


async def test_the_window_defaults_to_the_routers_max_input_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = spy_router([deployment("known", {})])
    monkeypatch.setattr(server, "proxy_router", lambda: spy)
    hook = CompactHook(CompactConfig())
    config = hook.models.resolve(spy, "known")
    assert config is not None and config.context_window == 128_000 and config.tokenizer == "o200k_base"


async def test_an_oversized_tool_output_is_truncated_even_far_below_the_threshold(router: SpyRouter) -> None:
    messages = [
        {"role": "user", "content": "run it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "output line\n" * 6000},
    ]
    hook = CompactHook(CompactConfig())
    data = request("tiers", messages=messages)
    await hook.async_pre_call_hook(None, None, data, "acompletion")
    assert data["messages"] is not messages and data["messages"][:2] == messages[:2]
    assert "tokens truncated; the full output had 6000 lines" in data["messages"][2]["content"]
    assert messages[2]["content"] == "output line\n" * 6000  # the client's objects are untouched
    headers = await hook.async_post_call_response_headers_hook(data, None, None)
    assert headers is not None
    assert headers["x-compact-compacted"] == "false" and headers["x-compact-truncated"] == "1"
    assert router.calls == []


def anthropic_request(model: str = "agent", **extra: Any) -> dict[str, Any]:
    transcript = load_transcript("claude_code_fa812bfe_pre_compact.json", "anthropic")
    data: dict[str, Any] = {
        "model": model,
        "messages": transcript["messages"],
        "system": [
            {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [{"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}}],
        "max_tokens": 1024,
        "metadata": {"user_id": "user-1"},
        "litellm_metadata": {"user_api_key": "hashed-key", "user_api_key_team_id": "team-1"},
        "litellm_call_id": "call-456",
    }
    data.update(extra)
    return data


def responses_request(model: str = "agent", **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": model,
        "input": chat_to_responses(load_transcript("claude_code_fa812bfe_pre_compact.json")),
        "instructions": "You are a coding agent.",
        "litellm_metadata": {"user_api_key": "hashed-key"},
        "litellm_call_id": "call-789",
    }
    data.update(extra)
    return data


async def test_an_anthropic_messages_request_is_compacted_and_reported_in_litellm_metadata(
    router: SpyRouter, mocked_upstream: respx.Route
) -> None:
    data = anthropic_request()
    original = list(data["messages"])
    system, tools, provider_metadata = data["system"], data["tools"], data["metadata"]
    await pre_call(data, "anthropic_messages")
    messages = data["messages"]
    assert [m for m in messages if is_summary(m, ANTHROPIC)]
    assert pairing_problems(messages, ANTHROPIC) == []
    assert messages[0]["role"] == "user" and messages[-1] is original[-1]
    assert (
        data["system"] is system
        and data["tools"][:-1] == tools
        and data["tools"][-1]["name"] == "compact_recall"
    )
    assert data["metadata"] is provider_metadata and provider_metadata == {"user_id": "user-1"}
    report = data["litellm_metadata"]["compact_hook"]
    assert report["compacted"] is True and report["format"] == "anthropic"
    assert report["tokens_after"] < report["tokens_before"]
    assert router.calls[0]["metadata"]["user_api_key"] == "hashed-key"  # spend lands on the caller's key
    headers = await CompactHook(CompactConfig()).async_post_call_response_headers_hook(data, None, None)
    assert headers is not None and headers["x-compact-compacted"] == "true"


def google_request(model: str = "agent", **extra: Any) -> dict[str, Any]:
    """What LiteLLM hands the hook on ``:streamGenerateContent`` (the proxy's metadata under ``metadata``)."""
    data: dict[str, Any] = {
        "model": model,
        "contents": chat_to_google(load_transcript("claude_code_fa812bfe_pre_compact.json")),
        "systemInstruction": {"parts": [{"text": "You are a coding agent."}]},
        "tools": [{"functionDeclarations": [{"name": "run_shell_command", "description": "Run a command"}]}],
        "generationConfig": {"maxOutputTokens": 1024, "thinkingConfig": {"includeThoughts": True}},
        "stream": True,
        "metadata": {"user_api_key": "hashed-key", "user_api_key_team_id": "team-1"},
        "litellm_call_id": "call-321",
    }
    data.update(extra)
    return data


async def test_a_gemini_request_is_compacted_its_roles_alternate_and_the_rest_is_as_sent(
    router: SpyRouter, mocked_upstream: respx.Route
) -> None:
    data = google_request()
    original = list(data["contents"])
    system, tools, generation = data["systemInstruction"], data["tools"], data["generationConfig"]
    await pre_call(data, "agenerate_content_stream")
    contents = data["contents"]
    assert [c for c in contents if any(p.get("text", "").startswith(SUMMARY_PREFIX) for p in c["parts"])]
    assert pairing_problems(contents, GOOGLE) == []
    roles = [c["role"] for c in contents]
    assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:], strict=False))
    assert contents[-1] is original[-1]
    assert (
        data["systemInstruction"] is system
        and data["tools"][:-1] == tools  # and ours after them (recall)
        and data["tools"][-1]["functionDeclarations"][0]["name"] == "compact_recall"
        and data["generationConfig"] is generation
    )
    report = data["metadata"]["compact_hook"]
    assert report["compacted"] is True and report["format"] == "google"
    assert router.calls[0]["metadata"]["user_api_key"] == "hashed-key"  # spend lands on the caller's key
    headers = await CompactHook(CompactConfig()).async_post_call_response_headers_hook(data, None, None)
    assert headers is not None and headers["x-compact-compacted"] == "true"


async def test_a_gemini_request_on_cached_content_passes_through_untouched(router: SpyRouter) -> None:
    data = google_request(cachedContent="cachedContents/abc123")
    before = json.dumps(data, sort_keys=True)
    await pre_call(data, "agenerate_content")
    assert json.dumps({k: v for k, v in data.items() if k != "metadata"}, sort_keys=True) == json.dumps(
        {k: v for k, v in json.loads(before).items() if k != "metadata"}, sort_keys=True
    )
    assert data["metadata"]["compact_hook"]["reason"] == "client_managed" and router.calls == []


async def test_a_responses_request_is_compacted(router: SpyRouter, mocked_upstream: respx.Route) -> None:
    data = responses_request()
    original = list(data["input"])
    await pre_call(data, "aresponses")
    items = data["input"]
    assert [i for i in items if is_summary(i, RESPONSES)]
    assert pairing_problems(items, RESPONSES) == []
    assert items[-1] is original[-1] and data["instructions"] == "You are a coding agent."
    assert data["litellm_metadata"]["compact_hook"]["format"] == "responses"


@pytest.mark.parametrize(
    ("call_type", "make"),
    [
        ("aresponses", lambda: responses_request(previous_response_id="resp_123")),
        ("aresponses", lambda: responses_request(conversation="conv_123")),
        ("anthropic_messages", lambda: anthropic_request(context_management={"edits": [{"type": "x"}]})),
    ],
)
async def test_requests_that_manage_their_own_context_pass_through_untouched(
    router: SpyRouter, call_type: str, make: Any
) -> None:
    data = make()
    before = json.dumps({k: v for k, v in data.items() if k != "litellm_metadata"}, sort_keys=True)
    await pre_call(data, call_type)
    assert json.dumps({k: v for k, v in data.items() if k != "litellm_metadata"}, sort_keys=True) == before
    assert data["litellm_metadata"]["compact_hook"]["reason"] == "client_managed"
    assert router.calls == []


async def test_requests_forwarded_untouched_are_warned_of_once_per_model_and_reason(
    router: SpyRouter, caplog: pytest.LogCaptureFixture
) -> None:
    hook = CompactHook(CompactConfig())
    managed = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    sent = [anthropic_request(context_management=managed) for _ in range(3)]
    sent += [request(messages=[{"content": "no role"}]) for _ in range(2)]
    with caplog.at_level(logging.INFO, logger="compact_hook"):
        for data in sent:
            call_type = "anthropic_messages" if "litellm_metadata" in data else "acompletion"
            await hook.async_pre_call_hook(None, None, data, call_type)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
    assert "client_managed: context_management edit clear_tool_uses_20250919" in warned[0]
    assert "(malformed: " in warned[1]
    assert len([r for r in caplog.records if "passed through" in r.getMessage()]) == 5


async def test_an_anthropic_compaction_block_means_the_client_manages_its_context(router: SpyRouter) -> None:
    data = anthropic_request()
    data["messages"] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "earlier summary"}]},
        *data["messages"],
    ]
    kept = data["messages"]
    await pre_call(data, "anthropic_messages")
    assert data["messages"] is kept
    assert data["litellm_metadata"]["compact_hook"]["reason"] == "client_managed"


async def test_tool_definitions_count_toward_the_window(
    router: SpyRouter, mocked_upstream: respx.Route
) -> None:
    """Messages under the threshold, messages + tools over the window: forwarded within the window."""
    transcript = load_transcript("claude_code_fa812bfe_pre_compact.json")
    messages = transcript[:17]  # a replay point, 12.5K tokens: under the 18.4K trigger; the tools add ~9.6K
    tools = chat_tool_definitions(30)  # ~9.6K tokens
    hook = CompactHook(CompactConfig())
    alone = request("tiers-20k", messages=messages)
    await hook.async_pre_call_hook(None, None, alone, "acompletion")
    messages_only = alone["metadata"]["compact_hook"]
    assert messages_only["reason"] == "below_threshold"
    data = request("tiers-20k", messages=messages, tools=tools)
    await hook.async_pre_call_hook(None, None, data, "acompletion")
    report = data["metadata"]["compact_hook"]
    assert messages_only["tokens_before"] < 0.92 * 20_000 < 20_000 < report["tokens_before"]
    assert report["tokens_after"] <= 20_000
    assert data["tools"][:-1] == tools and data["tools"][-1]["function"]["name"] == "compact_recall"
    assert pairing_problems(data["messages"]) == []


def test_the_session_id_comes_from_each_formats_own_field() -> None:
    entries = [{"role": "user", "content": "x"}]
    claude_code = {"metadata": {"user_id": "user_abc_session_42"}, "litellm_metadata": {}}
    assert session_id_of(claude_code, entries) == "user_abc_session_42"
    assert session_id_of({"prompt_cache_key": "codex-conversation-7"}, entries) == "codex-conversation-7"
    assert session_id_of({"litellm_metadata": {"session_id": "s"}, "prompt_cache_key": "p"}, entries) == "s"


async def test_the_summary_window_is_the_summary_groups_own(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = spy_router(
        [
            deployment("small", {"context_window": 16_000, "summary_model": "reader"}),
            {**deployment("reader"), "model_info": {"max_input_tokens": 200_000}},
        ]
    )
    monkeypatch.setattr(server, "proxy_router", lambda: spy)
    config = CompactHook(CompactConfig()).models.resolve(spy, "small")
    assert config is not None and config.summary_context_window == 200_000


async def test_an_archive_that_cannot_be_written_is_a_header_and_a_log_line_with_the_session(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    mocked_upstream: respx.Route,
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file in the way")
    spy = spy_router([deployment("agent", {"context_window": 20_000, "archive_dir": str(blocked)})])
    monkeypatch.setattr(server, "proxy_router", lambda: spy)
    hook = CompactHook(CompactConfig())
    data = request(metadata={"session_id": "session-xyz"})
    await hook.async_pre_call_hook(None, None, data, "acompletion")
    headers = await hook.async_post_call_response_headers_hook(data, None, None)
    assert headers is not None and headers["x-compact-compacted"] == "true"
    assert headers["x-compact-archive"] == "failed"
    assert "archive write failed for session 'session-xyz'" in caplog.text


def test_start_up_loads_the_tokenizers_of_the_compacting_models_and_no_other() -> None:
    """What start-up preloads (so no request waits for a load): each compacting model's tokenizer,
    by its setting or its family; a model that does not compact loads nothing (o200k alone costs a
    worker ~56 MB)."""
    models = [
        deployment("mini", {}),
        deployment("legacy", {}, model="openai/gpt-4-0613"),
        deployment("claude", {}, model="anthropic/claude-sonnet-4-5"),
        deployment("custom", {"tokenizer": "cl100k_base"}, model="openai/my-model"),
        deployment("plain", None, model="openai/gpt-3.5-turbo"),
    ]
    assert validate_model_list(models, CompactConfig()) == {"o200k_base", "cl100k_base", "claude"}
    assert validate_model_list(models[:1] + models[-1:], CompactConfig()) == {"o200k_base"}


def test_start_up_warns_of_a_model_whose_summaries_may_outlast_the_replicas_lock(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lock that expires mid-summary lets another replica make the same summary: said at start-up,
    once per model whose deadline is longer than the lock, and not for the others."""
    models = [deployment("patient", {"summary_deadline_seconds": 600}), deployment("default", {})]
    with caplog.at_level(logging.WARNING, logger="compact_hook"):
        validate_model_list(models, CompactConfig(), lock_ttl=300)
    warned = [r.getMessage() for r in caplog.records if "COMPACT_LOCK_TTL_SECONDS" in r.getMessage()]
    assert len(warned) == 1 and "'patient'" in warned[0] and "(600)" in warned[0] and "(300)" in warned[0]


CLEARING = {"context_window": 32_000, "tool_output_policy": "none"}
"""bench_load's hooked group: the Claude Code session from ~20K tokens on is cleared, never summarized."""


def cleared_growing(turn: int) -> list[dict[str, Any]]:
    """The Claude Code session as its agent sends it on ``turn`` (from ~20K tokens, two entries a turn)."""
    return json.loads(json.dumps(load_transcript("claude_code_fa812bfe_pre_compact.json")[: 130 + 2 * turn]))


@pytest.fixture
def clearing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CompactHook:
    spy = spy_router([deployment("clearing", {**CLEARING, "archive_dir": str(tmp_path)})])
    monkeypatch.setattr(server, "proxy_router", lambda: spy)
    return CompactHook(CompactConfig())


async def forwarded_turn(
    hook: CompactHook, turn: int, changed: dict[int, Any] | None = None
) -> dict[str, Any]:
    """The request of ``turn`` through ``hook``, its entries at the indices of ``changed`` replaced."""
    data = request("clearing", messages=cleared_growing(turn), user="session-1")
    for index, entry in (changed or {}).items():
        data["messages"][index] = entry
    await hook.async_pre_call_hook(None, None, data, "acompletion")
    return data


def cleared_in(messages: list[dict[str, Any]]) -> list[int]:
    """Where the forwarded messages show a tool result cleared."""
    return [k for k, m in enumerate(messages) if m["role"] == "tool" and m["content"].startswith("[")]


async def test_old_results_cleared_again_are_forwarded_as_they_were_cleared_before_litellm_changed_them(
    clearing: CompactHook,
) -> None:
    """The items a request cleared are kept for the next (``Known.cleared``): what the next forwards is
    what it forwards when nothing touched the first, though LiteLLM changed what it was handed in place."""
    first = await forwarded_turn(clearing, 0)
    assert first["metadata"]["compact_hook"]["cleared"] > 0
    for message in first["messages"]:  # LiteLLM transforms what it forwards, in place
        message["content"] = "changed by the proxy after the hook"
    second = await forwarded_turn(clearing, 1)
    untouched = CompactHook(CompactConfig())
    await forwarded_turn(untouched, 0)
    expected = await forwarded_turn(untouched, 1)
    assert (
        second["metadata"]["compact_hook"]["cleared"] == expected["metadata"]["compact_hook"]["cleared"] > 0
    )
    assert second["messages"] == expected["messages"]
    third = await forwarded_turn(clearing, 2)
    shared = {id(message) for message in second["messages"]}
    assert not any(id(message) in shared for message in third["messages"])  # two requests share nothing


async def test_a_result_sent_again_with_a_change_the_fingerprint_ignores_is_cleared_as_sent(
    clearing: CompactHook,
) -> None:
    """A moved ``cache_control`` marker leaves an entry's fingerprint as it was: the item cleared from it
    is built again from the entry as sent, not taken from the last request."""
    first = await forwarded_turn(clearing, 0)
    at = cleared_in(first["messages"])[0]
    marked = {**cleared_growing(1)[at], "cache_control": {"type": "ephemeral"}}
    second = await forwarded_turn(clearing, 1, {at: marked})
    assert second["messages"][at]["cache_control"] == {"type": "ephemeral"}
    assert second["messages"][at]["content"] == first["messages"][at]["content"]


async def test_an_old_entry_changed_before_the_cleared_results_is_forwarded_as_changed(
    clearing: CompactHook,
) -> None:
    """Between two batches every request shows the same run of cleared items (``Known.runs``): an entry
    in it the client sends changed is forwarded as now sent, and the rest as a new proxy clears it."""
    first = await forwarded_turn(clearing, 0)
    cleared = cleared_in(first["messages"])
    asked = next(k for k in range(cleared[-1]) if first["messages"][k]["role"] == "user" and k > cleared[0])
    changed = {"role": "user", "content": "the user's words, changed"}
    second = await forwarded_turn(clearing, 0, {asked: changed})
    assert second["messages"][asked] == changed
    untouched = CompactHook(CompactConfig())
    await forwarded_turn(untouched, 0)
    expected = await forwarded_turn(untouched, 0, {asked: changed})
    assert second["messages"] == expected["messages"]

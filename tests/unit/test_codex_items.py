"""Our compaction items never reach the provider, whatever the group or the failure, and Codex's
trigger is read only where Codex sends it (issue 45, items 3 and 8): ``proxy/request/gate.py``,
``proxy/hook.py``, ``proxy/answers/codex.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compact_hook.proxy import server
from compact_hook.proxy.hook import CompactHook
from compact_hook.proxy.observe.report import report_in
from compact_hook.settings.model import CompactConfig
from compact_hook.wires.responses.compaction import HANDLE_PREFIX, LOST_NOTICE, any_ours, is_ours
from tests.routers import SpyRouter, request

USER = {"type": "message", "role": "user", "content": "fix the parser"}
SUMMARY = {"type": "message", "role": "user", "content": "[summary] what happened"}


async def codex_request(hook: CompactHook, model: str) -> dict[str, Any]:
    """A Responses request carrying one of our items, made for the caller's tenant (no key: anonymous)."""
    handle = await hook.services.mementos.keep([SUMMARY], "anonymous")
    assert handle is not None
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": handle}
    return {"model": model, "input": [USER, item, {"type": "message", "role": "user", "content": "go on"}]}


@pytest.mark.parametrize("model", ["plain", "off", "unknown-model"])
async def test_our_item_is_expanded_whatever_the_group(router: SpyRouter, model: str) -> None:
    """A Codex ``/model`` switch after one of our compactions: the group has no ``compact`` block, or
    none at all — the item was forwarded as sent, and the provider refused every later turn."""
    hook = CompactHook(CompactConfig())
    data = await codex_request(hook, model)
    await hook.async_pre_call_hook(None, None, data, "aresponses")
    assert not any(is_ours(item) for item in data["input"])
    assert SUMMARY in data["input"]


async def test_our_item_is_expanded_with_no_router(
    router: SpyRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = CompactHook(CompactConfig())
    data = await codex_request(hook, "agent")
    monkeypatch.setattr(server, "proxy_router", lambda: None)
    await hook.async_pre_call_hook(None, None, data, "aresponses")
    assert not any(is_ours(item) for item in data["input"]) and SUMMARY in data["input"]


async def test_our_item_is_a_notice_when_expanding_fails(
    router: SpyRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store failing (or any error before expansion) forwards the request as sent but for our items."""
    hook = CompactHook(CompactConfig())
    data = await codex_request(hook, "agent")

    async def broken(key: bytes) -> str | None:
        raise ConnectionError("store down")

    monkeypatch.setattr(hook.services.compactor.store, "get_record", broken)
    await hook.async_pre_call_hook(None, None, data, "aresponses")
    assert not any(is_ours(item) for item in data["input"])
    assert LOST_NOTICE in json.dumps(data["input"]) and data["input"][0] == USER


async def test_a_compaction_trigger_on_chat_is_only_a_message(router: SpyRouter) -> None:
    """A chat message typed ``compaction_trigger`` forced a summary, then failed the request."""
    data = request("agent")
    data["messages"] = [
        *data["messages"][:20],
        {"role": "user", "type": "compaction_trigger", "content": "go"},
    ]
    await CompactHook(CompactConfig()).async_pre_call_hook(None, None, data, "acompletion")
    report = report_in(data)
    assert report is not None and not report.get("answered") and report["summary_calls"] == 0
    assert router.calls == []


async def test_a_responses_item_with_a_role_is_not_the_trigger(router: SpyRouter) -> None:
    hook = CompactHook(CompactConfig())
    data = {"model": "agent", "input": [USER, {"type": "compaction_trigger", "role": "user", "content": "x"}]}
    await hook.async_pre_call_hook(None, None, data, "aresponses")
    report = report_in(data)
    assert report is None or not report.get("answered")
    assert router.calls == []


OURS = {"type": "compaction", "encrypted_content": f"{HANDLE_PREFIX}abc"}


@pytest.mark.parametrize(
    "items",
    [
        [],
        [{"type": "message"}] * 3,
        [{"type": "message"}, OURS],
        [{"type": "compaction", "encrypted_content": "theirs"}],
        [{"type": "compaction", "encrypted_content": 7}],
        ["a string", OURS],
        ["a string"],
        [{"type": ["unhashable"]}, OURS],
        [{"type": {"nested": 1}}],
        [None, {"type": "compaction"}],
    ],
)
def test_whether_a_request_holds_one_of_our_items_is_answered_as_item_by_item(items: list[Any]) -> None:
    assert any_ours(items) == any(is_ours(item) for item in items)


async def test_our_item_where_the_last_request_sent_another_is_expanded(router: SpyRouter) -> None:
    """Only the entries the conversation's last request did not send the same are looked over for our
    items: one put in place of an entry sent before is one of those."""
    hook = CompactHook(CompactConfig())
    data = await codex_request(hook, "agent")
    before = {**data, "input": [USER, {"type": "message", "role": "user", "content": "x"}, data["input"][2]]}
    await hook.async_pre_call_hook(None, None, before, "aresponses")
    await hook.async_pre_call_hook(None, None, data, "aresponses")
    assert not any(is_ours(item) for item in data["input"]) and SUMMARY in data["input"]


async def test_our_item_sent_again_is_expanded_again(router: SpyRouter) -> None:
    """What a conversation's last request is remembered as is its input once our items were replaced:
    the same item of ours sent again, at the same place, is never taken for an entry seen before."""
    hook = CompactHook(CompactConfig())
    first = await codex_request(hook, "agent")
    sent = json.dumps(first)
    for _ in range(3):
        data = json.loads(sent)
        await hook.async_pre_call_hook(None, None, data, "aresponses")
        assert not any(is_ours(item) for item in data["input"]) and SUMMARY in data["input"]

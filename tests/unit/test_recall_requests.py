"""What answering a request's recall calls needs rides on the request itself (issue 45, item 2): two
tenants' requests under one call id (``x-litellm-call-id`` is the client's to set) each get their own;
no number of requests in flight pushes anyone's out."""

from __future__ import annotations

from typing import Any

from compact_hook.proxy.hook import CompactHook, recall_of
from compact_hook.settings.model import CompactConfig
from tests.routers import Key, SpyRouter, request
from tests.support import chat_tool_definitions, load_transcript

MESSAGES = load_transcript("claude_code_fa812bfe_pre_compact.json")[:17]


def offered(call_id: str) -> dict[str, Any]:
    """A request the hook offers the recall tool (an agent's tools, a compacting group)."""
    return request(
        "tiers-20k", messages=list(MESSAGES), tools=chat_tool_definitions(3), litellm_call_id=call_id
    )


async def test_two_tenants_under_one_call_id_each_keep_their_own_recall(router: SpyRouter) -> None:
    hook = CompactHook(CompactConfig())
    mine, theirs = offered("same-id"), offered("same-id")
    await hook.async_pre_call_hook(Key(team_id="a"), None, mine, "acompletion")
    await hook.async_pre_call_hook(Key(team_id="b"), None, theirs, "acompletion")
    assert mine["tools"][-1]["function"]["name"] == "compact_recall"
    first, second = recall_of(mine), recall_of(theirs)
    assert first is not None and second is not None
    assert (first.tenant, second.tenant) == ("team:a", "team:b")
    assert recall_of(mine) is None  # taken once


async def test_requests_in_flight_never_push_out_anothers_recall(router: SpyRouter) -> None:
    hook = CompactHook(CompactConfig())
    waiting = offered("w")
    await hook.async_pre_call_hook(Key(team_id="a"), None, waiting, "acompletion")
    for n in range(1_200):  # more than the 1,000 a shared map kept
        burst = request(
            "tiers-20k", messages=[{"role": "user", "content": "hi"}], tools=chat_tool_definitions(1)
        )
        burst["litellm_call_id"] = f"b{n}"
        await hook.async_pre_call_hook(Key(team_id="b"), None, burst, "acompletion")
        assert burst["tools"][-1]["function"]["name"] == "compact_recall"  # each offered, each kept
    pending = recall_of(waiting)
    assert pending is not None and pending.tenant == "team:a"

"""An agent's next request pairs only its new turns (``core.pairing.pair_again``, issue 47): whatever
the conversation and wherever the two requests part, the pairing is the one ``pair`` makes of the
whole list — units, which call each result answers, unanswered calls, orphans."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compact_hook.core.items import Item, Part, PartKind, Role
from compact_hook.core.pairing import pair, pair_again
from compact_hook.proxy import server
from compact_hook.proxy.hook import CompactHook
from compact_hook.settings.model import CompactConfig
from tests.routers import deployment, request, spy_router
from tests.support import load_transcript

IDS = st.sampled_from(["", "a", "b", "c"])
NAMES = st.sampled_from(["", "bash", "read"])
CALL = st.builds(lambda i, n: Part(PartKind.CALL, "{}", name=n, call_id=i), IDS, NAMES)
RESULT = st.builds(lambda i, n: Part(PartKind.RESULT, "out", name=n, call_id=i), IDS, NAMES)
TEXT = st.just(Part(PartKind.TEXT, "words"))


@st.composite
def items(draw: st.DrawFn) -> Item:
    role = draw(st.sampled_from([Role.USER, Role.ASSISTANT, Role.TOOL]))
    kinds = {Role.USER: st.one_of(TEXT, RESULT), Role.ASSISTANT: st.one_of(TEXT, CALL), Role.TOOL: RESULT}
    parts = tuple(draw(st.lists(kinds[role], min_size=1, max_size=3)))
    return Item(role, parts, None, joins_turn=role is Role.ASSISTANT and draw(st.booleans()))


@settings(max_examples=500, deadline=None)
@given(st.lists(items(), max_size=14), st.lists(items(), max_size=6), st.integers(0, 14))
def test_pairing_again_after_the_same_items_pairs_as_the_whole(
    earlier: list[Item], added: list[Item], same: int
) -> None:
    same = min(same, len(earlier))
    now = [*earlier[:same], *added]
    assert pair_again(now, pair(earlier), same) == pair(now)


def test_a_result_that_answers_a_call_of_the_last_request_joins_its_unit() -> None:
    """The last request ended on a call; this one adds its result: the unit is paired anew."""
    call = Item(Role.ASSISTANT, (Part(PartKind.CALL, "{}", name="bash", call_id="a"),), None)
    earlier = [Item(Role.USER, (Part(PartKind.TEXT, "go"),), None), call]
    result = Item(Role.TOOL, (Part(PartKind.RESULT, "ok", call_id="a"),), None)
    again = pair_again([*earlier, result], pair(earlier), len(earlier))
    assert again.call_of == {(2, 0): (1, 0)} and not again.unanswered and pair(earlier).unanswered


def cleared_groups(tmp_path: Path) -> Any:
    return spy_router([deployment("clears", {"context_window": 48_000, "archive_dir": str(tmp_path)})])


def tool_ended(history: list[dict[str, Any]], near: int) -> int:
    """A prefix length near ``near`` that ends on a tool result (the agent's next request)."""
    return next(n for n in range(near, len(history)) if history[n - 1]["role"] == "tool")


@pytest.mark.parametrize("change", ["appended", "a middle result re-pointed", "a middle call gone"])
async def test_a_hook_that_paired_the_last_request_forwards_what_a_fresh_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Through the hook, clearing on: the second request after the first (its pairing reused where
    the entries are the same) is forwarded as a hook that never saw the first forwards it."""
    spy = cleared_groups(tmp_path)
    monkeypatch.setattr(server, "proxy_router", lambda: spy)
    history = load_transcript("claude_code_fa812bfe_pre_compact.json")
    first, second = history[: tool_ended(history, 90)], [*history[: tool_ended(history, 130)]]
    tool_at = next(i for i in range(40, 80) if second[i]["role"] == "tool")
    if change == "a middle result re-pointed":
        second[tool_at] = {**second[tool_at], "tool_call_id": "call_elsewhere"}
    elif change == "a middle call gone":
        del second[tool_at - 1]
    warm = CompactHook(CompactConfig())
    await warm.async_pre_call_hook(None, None, request("clears", copy.deepcopy(first)), "acompletion")
    sent, fresh = request("clears", copy.deepcopy(second)), request("clears", copy.deepcopy(second))
    await warm.async_pre_call_hook(None, None, sent, "acompletion")
    await CompactHook(CompactConfig()).async_pre_call_hook(None, None, fresh, "acompletion")
    assert json.dumps(sent["messages"]) == json.dumps(fresh["messages"])
    assert json.dumps(sent["messages"]) != json.dumps(second)  # cleared: the pairing was read

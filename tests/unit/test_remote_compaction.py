"""Codex's remote compaction at the edge (``proxy.answers.codex``): the handle, what it stands for,
who may expand it, the answer's events, and the ping the answer rides on."""

from __future__ import annotations

import json
from typing import Any

from compact_hook.engine.result import CompactResult
from compact_hook.proxy.answers.codex import MAX_EXPANDED, MAX_EXPANDED_CHARS, Mementos, memento_of
from compact_hook.proxy.answers.compact import KEPT_FOR_PING, as_ping
from compact_hook.state.store import MAX_RECORD_CHARS, MemoryStore
from compact_hook.wires import RESPONSES
from compact_hook.wires.base import Rejected
from compact_hook.wires.conversation import Conversation
from compact_hook.wires.responses.compaction import (
    HANDLE_PREFIX,
    LOST_NOTICE,
    REFUSED_NOTICE,
    asks_compaction,
    compaction_events,
    is_ours,
    usage_of,
)

TRIGGER = {"type": "compaction_trigger"}
USER = {"role": "user", "content": "fix the parser"}
SUMMARY = RESPONSES.summary("what happened").raw
CALL = {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
DEVELOPER = {"type": "message", "role": "developer", "content": "permissions"}


def mementos(max_bytes: int = 1 << 20) -> Mementos:
    return Mementos(MemoryStore(100, 3600, max_bytes=max_bytes), 3600)


async def test_a_handle_expands_to_what_it_stands_for_in_place() -> None:
    store = mementos()
    handle = await store.keep([SUMMARY, CALL, OUTPUT], "team:a")
    assert handle is not None and handle.startswith(HANDLE_PREFIX) and len(handle) < 60
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": handle}
    data: dict[str, Any] = {"input": [USER, item, {"role": "user", "content": "go on"}]}
    expansion = await store.expand(data, "team:a")
    assert (expansion.expanded, expansion.lost) == (1, 0)
    assert data["input"] == [USER, SUMMARY, CALL, OUTPUT, {"role": "user", "content": "go on"}]
    assert "what happened" not in handle  # the handle carries no text


async def test_another_tenants_handle_or_an_unknown_one_is_a_notice() -> None:
    store = mementos()
    handle = await store.keep([SUMMARY], "team:a")
    assert handle is not None
    for tenant, content in (("team:b", handle), ("team:a", HANDLE_PREFIX + "x" * 22)):
        data: dict[str, Any] = {"input": [USER, {"type": "compaction", "encrypted_content": content}]}
        expansion = await store.expand(data, tenant)
        assert (expansion.expanded, expansion.lost) == (0, 1)
        assert LOST_NOTICE in json.dumps(data["input"]) and "what happened" not in json.dumps(data["input"])


class CountingStore(MemoryStore):
    """A store that counts its record reads."""

    reads = 0

    async def get_record(self, key: bytes) -> str | None:
        self.reads += 1
        return await super().get_record(key)


async def test_ten_thousand_items_of_ours_cost_a_few_lookups_and_one_notice() -> None:
    """One request carrying our item 10,000 times (and 10,000 made-up handles) was 20,000 store reads
    and as many parses on the event loop; now the distinct handles of our exact form, four at most,
    each read and parsed once, the rest one notice."""
    store = CountingStore(100, 3600)
    kept = Mementos(store, 3600)
    handles = [await kept.keep([SUMMARY, CALL, OUTPUT], "team:a") for _ in range(6)]
    flood = [{"type": "compaction", "encrypted_content": handles[n % 6]} for n in range(10_000)]
    forged = [{"type": "compaction", "encrypted_content": f"{HANDLE_PREFIX}{n}"} for n in range(10_000)]
    data: dict[str, Any] = {"input": [USER, *flood, *forged]}
    expansion = await kept.expand(data, "team:a")
    assert store.reads == MAX_EXPANDED
    assert (expansion.expanded, expansion.lost, expansion.refused) == (MAX_EXPANDED, 0, 20_000 - MAX_EXPANDED)
    assert json.dumps(data["input"]).count(REFUSED_NOTICE) == 1
    assert len(data["input"]) == 1 + 3 * MAX_EXPANDED + 1
    assert not any(is_ours(item) for item in data["input"])


async def test_what_one_request_expands_has_a_size_bound() -> None:
    store = CountingStore(100, 3600, max_bytes=1 << 24)
    kept = Mementos(store, 3600)
    big = [{"type": "message", "role": "assistant", "content": "x" * (MAX_RECORD_CHARS - 100)}]
    handles = [await kept.keep(big, "team:a") for _ in range(MAX_EXPANDED)]
    data: dict[str, Any] = {"input": [{"type": "compaction", "encrypted_content": h} for h in handles]}
    expansion = await kept.expand(data, "team:a")
    assert expansion.expanded * (MAX_RECORD_CHARS - 100) <= MAX_EXPANDED_CHARS
    assert expansion.expanded + expansion.refused == MAX_EXPANDED and not any(
        is_ours(i) for i in data["input"]
    )


async def test_the_providers_own_compaction_items_are_left_alone() -> None:
    theirs = {"type": "compaction", "encrypted_content": "gAAAA-openai-opaque"}
    data: dict[str, Any] = {"input": [USER, theirs]}
    sent = json.dumps(data)
    assert (await mementos().expand(data, "t")).expanded == 0 and json.dumps(data) == sent
    assert isinstance(RESPONSES.parse(data), Rejected)  # the provider manages that conversation


async def test_a_memento_too_large_for_the_store_gets_no_handle() -> None:
    huge = [{"role": "assistant", "content": "x" * MAX_RECORD_CHARS}]
    assert await mementos(max_bytes=4 * MAX_RECORD_CHARS).keep(huge, "t") is None


async def test_records_stay_within_the_stores_byte_budget() -> None:
    store = MemoryStore(100, 3600, max_bytes=10_000)
    for n in range(20):
        assert await store.put_record(bytes([n]), "x" * 1_000, 3600)
    assert store.record_chars <= 10_000
    assert await store.get_record(bytes([0])) is None and await store.get_record(bytes([19])) == "x" * 1_000


def test_the_trigger_is_read_only_as_the_last_item() -> None:
    parsed = RESPONSES.parse({"input": [USER, TRIGGER]})
    assert isinstance(parsed, Conversation) and asks_compaction(parsed.entries)
    assert isinstance(RESPONSES.parse({"input": [TRIGGER, USER]}), Rejected)
    assert not asks_compaction([USER])


def test_the_memento_leaves_out_what_codex_keeps_or_sends_again() -> None:
    result = CompactResult([DEVELOPER, USER, SUMMARY, CALL, OUTPUT], True)
    assert memento_of(result, RESPONSES) == [SUMMARY, CALL, OUTPUT]


def test_the_answer_is_one_compaction_item_and_a_completed_response() -> None:
    events = [
        json.loads(line[5:])
        for event in compaction_events(HANDLE_PREFIX + "h", "codex-agent", usage_of(1200, 0))
        for line in event.splitlines()
        if line.startswith("data:")
    ]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [item["type"] for item in done] == ["compaction"] and done[0][
        "encrypted_content"
    ] == "compact_hook:h"
    [completed] = [e for e in events if e["type"] == "response.completed"]
    assert isinstance(completed["response"]["id"], str)
    assert completed["response"]["usage"] == {"input_tokens": 1200, "output_tokens": 0, "total_tokens": 1200}


def test_the_ping_keeps_nothing_the_model_would_read() -> None:
    data: dict[str, Any] = {
        "model": "codex-agent",
        "input": [USER, TRIGGER],
        "instructions": "you are codex",
        "tools": [{"type": "function", "name": "shell"}],
        "prompt_cache_key": "thread-1",
        "reasoning": {"effort": "high"},
        "stream": True,
        "litellm_metadata": {"compact_hook": {}},
        "proxy_server_request": {"headers": {}},
    }
    as_ping(data)
    assert set(data) == {
        "model",
        "input",
        "max_output_tokens",
        "stream",
        "litellm_metadata",
        "proxy_server_request",
    }
    assert data["max_output_tokens"] == 16 and "prompt_cache_key" not in KEPT_FOR_PING

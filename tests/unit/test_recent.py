"""Each conversation's last request (``state.recent``): what is the same is not worked out again,
what is new or changed is, nothing another tenant or a later change sent is trusted, and it is bounded."""

from __future__ import annotations

import json
from typing import Any

from compact_hook.core.fingerprint import fingerprint
from compact_hook.core.known import ITEM_BYTES, Known
from compact_hook.state.recent import Key, Recent
from compact_hook.wires import CHAT, Conversation
from compact_hook.wires.command import command_in, ran_command
from tests.support import load_transcript

SESSION = load_transcript("claude_code_fa812bfe_pre_compact.json")


class Counting:
    """A fingerprint that counts the entries it was asked for."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    def __call__(self, entry: Any) -> bytes:
        self.asked.append(entry)
        return fingerprint(entry)


def is_command(entry: Any) -> bool:
    return command_in(entry) is not None


def fresh(entries: list[Any]) -> list[Any]:
    """The entries as a new request brings them: parsed anew from JSON."""
    return list(json.loads(json.dumps(entries)))


def known(recent: Recent, key: Key, entries: list[Any], fingerprint: Any, command: Any) -> Known:
    """What the proxy does with a request its wire accepted: compare, then learn."""
    return recent.learn(recent.compare(key, entries), fingerprint, command)


def key(tenant: str = "team:a") -> tuple[str, str, str, str]:
    return (tenant, "chat", "agent", "session-1")


def test_a_growing_conversation_fingerprints_only_its_new_entries() -> None:
    recent, counting = Recent(), Counting()
    first = known(recent, key(), fresh(SESSION[:100]), counting, is_command).prints
    assert len(counting.asked) == 100
    counting.asked.clear()
    second = known(recent, key(), fresh(SESSION[:103]), counting, is_command).prints
    assert counting.asked == SESSION[100:103]
    assert second[:100] == first and list(second) == [fingerprint(e) for e in SESSION[:103]]


def test_a_changed_entry_is_worked_out_again_and_the_rest_is_not() -> None:
    recent, counting = Recent(), Counting()
    known(recent, key(), fresh(SESSION[:50]), counting, is_command)
    counting.asked.clear()
    changed = fresh(SESSION[:50])
    changed[10] = {**changed[10], "content": "something else"}
    prints = known(recent, key(), changed, counting, is_command).prints
    assert counting.asked == [changed[10]] and prints[10] == fingerprint(changed[10])


def test_what_is_kept_is_a_copy_a_later_change_of_the_request_cannot_reach() -> None:
    """LiteLLM transforms the request it forwards in place: the kept entries must not follow."""
    recent, counting = Recent(), Counting()
    sent = fresh(SESSION[:20])
    known(recent, key(), sent, counting, is_command)
    sent[5]["content"] = "changed after the hook ran"
    counting.asked.clear()
    again = fresh(SESSION[:20])
    again[5]["content"] = "changed after the hook ran"
    prints = known(recent, key(), again, counting, is_command).prints
    assert counting.asked == [again[5]] and prints[5] == fingerprint(again[5])


def test_another_tenants_conversation_is_never_compared() -> None:
    recent, counting = Recent(), Counting()
    known(recent, key("team:a"), fresh(SESSION[:30]), counting, is_command)
    counting.asked.clear()
    known(recent, key("team:b"), fresh(SESSION[:30]), counting, is_command)
    assert len(counting.asked) == 30


def test_an_entry_json_cannot_hold_is_worked_out_every_time() -> None:
    recent, counting = Recent(), Counting()
    odd = [{"role": "user", "content": {"a", "set"}}, {"role": "assistant", "content": "ok"}]
    known(recent, key(), odd, counting, is_command)
    counting.asked.clear()
    known(recent, key(), [dict(entry) for entry in odd], counting, is_command)
    assert counting.asked == [odd[0]]


def test_an_entry_only_orjson_refuses_is_kept_and_compared() -> None:
    """A lone surrogate (valid in a JSON string) is kept as the client sent it: the next request
    that sends it again learns it from the last."""
    recent, counting = Recent(), Counting()
    odd = [{"role": "user", "content": "a lone surrogate \ud800"}, {"role": "assistant", "content": "ok"}]
    known(recent, key(), odd, counting, is_command)
    counting.asked.clear()
    prints = known(recent, key(), [dict(entry) for entry in odd], counting, is_command).prints
    assert counting.asked == [] and prints[0] == fingerprint(odd[0])


def test_the_copies_share_no_container_with_the_request_and_are_sized_as_json() -> None:
    recent = Recent()
    sent = fresh(SESSION[:40])
    kept = known(recent, key(), sent, fingerprint, is_command)
    containers = {id(value) for entry in sent for value in _containers(entry)}
    assert not containers & {id(value) for entry in kept.copies for value in _containers(entry)}
    assert list(kept.copies) == sent
    size = len(json.dumps(sent, ensure_ascii=False, separators=(",", ":")))
    assert 0.9 * size <= kept.size <= size


def _containers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value, *(inner for item in value.values() for inner in _containers(item))]
    if isinstance(value, list):
        return [value, *(inner for item in value for inner in _containers(item))]
    return []


def test_a_compact_command_is_remembered_with_its_entry() -> None:
    recent = Recent()
    entries = [{"role": "user", "content": "/compact the tests"}, {"role": "assistant", "content": "ok"}]
    entries.append({"role": "user", "content": "go on"})
    known(recent, key(), fresh(entries), fingerprint, is_command)
    commands = known(recent, key(), fresh(entries), Counting(), is_command).commands
    assert commands == (0,) and ran_command(entries, commands) and ran_command(entries)
    assert not ran_command(entries[1:]) and not ran_command(entries[:1], commands)
    changed = fresh(entries)
    changed[0] = {"role": "user", "content": "no longer a command"}
    assert known(recent, key(), changed, Counting(), is_command).commands == ()
    again = known(
        recent, key(), [*fresh(entries), {"role": "user", "content": "/compact"}], Counting(), is_command
    )
    assert again.commands == (0, 3)


def weight_of(entries: list[Any]) -> int:
    """What a conversation of ``entries`` is charged, kept alone."""
    return known(Recent(), key(), fresh(entries), fingerprint, is_command).weight


def test_the_bytes_kept_are_bounded_in_all_and_per_tenant() -> None:
    size = weight_of(SESSION[:40])
    recent = Recent(max_bytes=3 * size, tenant_bytes=2 * size)
    for session in range(3):
        known(
            recent, ("team:a", "chat", "agent", f"s{session}"), fresh(SESSION[:40]), fingerprint, is_command
        )
    assert recent.bytes <= 2 * size  # team:a's oldest went for its third
    known(recent, ("team:b", "chat", "agent", "s0"), fresh(SESSION[:40]), fingerprint, is_command)
    known(recent, ("team:c", "chat", "agent", "s0"), fresh(SESSION[:40]), fingerprint, is_command)
    assert recent.bytes <= 3 * size
    counting = Counting()
    known(recent, ("team:c", "chat", "agent", "s0"), fresh(SESSION[:40]), counting, is_command)
    assert counting.asked == []  # the newest is kept
    alone = Recent(max_bytes=size // 2)
    known(alone, key(), fresh(SESSION[:40]), fingerprint, is_command)
    assert alone.bytes == 0  # larger than the whole budget: not kept


def test_a_request_sent_again_as_it_was_is_the_most_recent_in_all_and_of_its_tenant() -> None:
    """Nothing new to learn, but its conversation gives way last: the one not sent again goes."""
    size = weight_of(SESSION[:40])
    for bounds in ({"max_bytes": 2 * size}, {"tenant_bytes": 2 * size}):
        recent = Recent(**bounds)
        first, second, third = (("team:a", "chat", "agent", f"s{n}") for n in range(3))
        for conversation in (first, second, first, third):
            known(recent, conversation, fresh(SESSION[:40]), fingerprint, is_command)
        counting = Counting()
        known(recent, first, fresh(SESSION[:40]), counting, is_command)
        assert counting.asked == [], bounds  # kept: it was sent again after the second
        known(recent, second, fresh(SESSION[:40]), counting, is_command)
        assert len(counting.asked) == 40, bounds  # the second went for the third


def test_a_flood_of_empty_and_one_entry_conversations_from_one_key_stays_in_its_bounds() -> None:
    """Issue 60: a conversation of ``messages: []`` cost 0 bytes and was never evicted (20,000 kept
    under a 1,000-byte cap); one-entry conversations cost their few bytes of JSON (~560,000 fitted a
    tenant's 16 MiB). The session is the client's to choose. Now each is charged what it holds, a tenant
    keeps at most ``tenant_conversations`` of them, and another tenant's conversation stays."""
    recent = Recent(max_bytes=1_000_000, tenant_bytes=400_000, tenant_conversations=100)
    other = ("team:b", "chat", "agent", "s0")
    known(recent, other, fresh(SESSION[:40]), fingerprint, is_command)
    for n in range(20_000):
        entries = [] if n % 2 else [{"role": "user", "content": f"hello {n}"}]
        known(recent, ("team:a", "chat", "agent", f"flood-{n}"), entries, fingerprint, is_command)
        assert recent.held("team:a") <= 400_000
    assert len(recent) <= 101 and recent.bytes <= 1_000_000
    counting = Counting()
    known(recent, other, fresh(SESSION[:40]), counting, is_command)
    assert counting.asked == []  # the other tenant's conversation was kept


def test_what_the_stages_keep_for_the_next_request_is_charged_as_they_keep_it() -> None:
    """Items parsed, the copy of system and tools, pairings, cleared items and runs were charged
    nothing: a conversation's share grew past its bound unseen. The items are charged with their
    entries, the rest as it is kept."""
    from compact_hook.core.items import ClearedRun

    recent = Recent()
    parsed = CHAT.parse(
        {"messages": fresh(SESSION[:60]), "tools": [{"type": "function", "function": {"name": "x" * 5_000}}]}
    )
    assert isinstance(parsed, Conversation)
    parsed.known = known(recent, key(), parsed.entries, parsed.fingerprint, is_command)
    before = recent.bytes
    assert before == parsed.known.weight == recent.held("team:a")
    parsed.items()
    parsed.context_prints()
    parsed.known.keep_run(("run",), ClearedRun(("run",), 10, (None,) * 10, (), (), (), 0))  # type: ignore[arg-type]
    grown = recent.bytes - before
    assert before >= 60 * ITEM_BYTES  # the items, charged with their entries
    assert grown >= 3 * 5_000 and recent.held("team:a") == recent.bytes == parsed.known.weight


def test_the_proxys_fingerprints_are_those_of_a_conversation_worked_out_alone() -> None:
    parsed = CHAT.parse({"messages": fresh(SESSION)})
    assert isinstance(parsed, Conversation)
    parsed.for_tenant("team:a")
    alone = parsed.prints()
    recent = Recent()
    known(recent, key(), fresh(SESSION[:200]), parsed.fingerprint, is_command)
    parsed.known = known(recent, key(), parsed.entries, parsed.fingerprint, is_command)
    assert parsed.prints() == alone


def test_an_item_parsed_once_serves_the_next_request_and_what_is_forwarded_is_the_clients_own() -> None:
    recent = Recent()
    first = CHAT.parse({"messages": fresh(SESSION[:60])})
    assert isinstance(first, Conversation)
    first.known = known(recent, key(), first.entries, first.fingerprint, is_command)
    parsed_once = first.item(10)
    second = CHAT.parse({"messages": fresh(SESSION[:62])})
    assert isinstance(second, Conversation)
    second.known = known(recent, key(), second.entries, second.fingerprint, is_command)
    assert second.item(10) is parsed_once and second.item(10).raw is not second.entries[10]
    indices = range(len(second.entries))
    forwarded = second.as_sent([second.item(k).raw for k in indices], indices)
    assert all(a is b for a, b in zip(forwarded, second.entries, strict=True))
    assert forwarded == SESSION[:62]


def test_what_a_request_derived_from_its_entries_is_carried_only_while_they_are_sent_unchanged() -> None:
    from compact_hook.core.items import ClearedRun

    recent = Recent()
    first = known(recent, key(), fresh(SESSION[:40]), fingerprint, is_command)
    first.keep_run(("to 10",), ClearedRun(("to 10",), 10, (), (), (), (), 0))
    first.keep_run(("to 30",), ClearedRun(("to 30",), 30, (), (), (), (), 0))
    changed = fresh(SESSION[:42])
    changed[20] = {**changed[20], "content": "something else"}
    second = known(recent, key(), changed, fingerprint, is_command)
    assert second.run(("to 10",)) and not second.run(("to 30",))  # the entry at 20 changed: no longer holds
    second.keep_run(("to 16",), ClearedRun(("to 16",), 16, (), (), (), (), 0))
    shorter = known(recent, key(), changed[:15], fingerprint, is_command)
    assert shorter.run(("to 10",)) and not shorter.run(("to 16",))  # the run to 16 is past its end


def test_a_conversations_chain_is_carried_as_far_as_its_entries_are_sent_unchanged() -> None:
    from compact_hook.core.chain import prefix_chain

    recent = Recent()
    first = known(recent, key(), fresh(SESSION[:40]), fingerprint, is_command)
    first.keep_chain(prefix_chain(b"scope", first.prints))
    changed = fresh(SESSION[:42])
    changed[20] = {**changed[20], "content": "something else"}
    second = known(recent, key(), changed, fingerprint, is_command)
    assert second.chain == first.chain[:21]  # the scope and the 20 entries before the changed one
    prints = second.prints
    assert prefix_chain(b"scope", prints, second.chain) == prefix_chain(b"scope", prints)


def test_what_the_model_reads_besides_the_entries_is_hashed_again_only_when_it_changed(
    monkeypatch: Any,
) -> None:
    """An agent sends the same tools and system (tens of KB) on every request: the conversation's
    last request's fingerprints of them serve while they are the same; a change, or LiteLLM changing
    what was forwarded, does not reach them."""
    from compact_hook.wires import ANTHROPIC, conversation

    tools = [
        {"name": f"tool{n}", "description": "does things " * 50, "input_schema": {"type": "object"}}
        for n in range(5)
    ]
    hashed: list[Any] = []
    monkeypatch.setattr(
        conversation, "fingerprint", lambda value, seed=0: hashed.append(value) or fingerprint(value, seed)
    )
    recent, prints = Recent(), []
    for turn, system in enumerate(["be brief", "be brief", "be brief", "be thorough"]):
        said = [{"role": ("user", "assistant")[k % 2], "content": f"turn {k}"} for k in range(11 + 2 * turn)]
        body = {"system": system, "tools": fresh(tools), "messages": said, "max_tokens": 9}
        parsed = ANTHROPIC.parse(body)
        assert isinstance(parsed, Conversation)
        parsed.known = known(recent, key(), parsed.entries, parsed.fingerprint, is_command)
        hashed.clear()
        prints.append(parsed.context_prints())
        assert bool(hashed) == (turn in (0, 3))  # the first request, and the one whose system changed
        body["tools"][0]["description"] = "changed by LiteLLM after the hook"
    assert prints[1] == prints[0] and prints[3] != prints[2]

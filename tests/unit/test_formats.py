"""Every behaviour on every surface: the same scenarios on chat, Anthropic Messages, Responses and Google.

The peer scenarios that apply to a wire format (PEER_SCENARIOS A.2, B.25-31, C.39/45-47/49/52, E.57-61,
G.73/77), the cut-point sweep over every shared transcript, and what each adapter must keep exactly
as the client sent it (thinking blocks, cache breakpoints, unknown items, string input).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from compact_hook.core.clearing import placeholder
from compact_hook.core.counting import item_strings
from compact_hook.core.fingerprint import fingerprint
from compact_hook.core.items import Role
from compact_hook.core.normalize import ABORTED_RESULT
from compact_hook.core.outcomes import CacheStatus, Reason
from compact_hook.core.pairing import group_units
from compact_hook.core.partition import Cutting, KeepPolicy, assemble_order, partition
from compact_hook.engine import Compactor
from compact_hook.state.store import MemoryStore
from compact_hook.wires import ANTHROPIC, CHAT, RESPONSES, Conversation, Rejected
from tests.compaction import config, run
from tests.conversations import WIRE_NAMES, Call, Said, Step, Tools, body, entries, w, wire_of
from tests.fakes import FakeSummarizer
from tests.support import (
    TRANSCRIPTS,
    chat_to_google,
    chat_to_responses,
    is_summary,
    load_transcript,
    openai_transcripts,
    pairing_problems,
    without_markers,
)

WIRES = WIRE_NAMES

LONG: list[Step] = [
    Said("task: fix the failing parser test " + w(20)),
    Tools((Call("read", w(150), {"path": "src/parser.py"}),)),
    Tools((Call("grep", w(150)), Call("read", w(150)), Call("ls", w(20))), text="looking around"),
    Said("I read the code.", user=False),
    Said("now fix it " + w(10)),
    Tools((Call("edit", w(150), {"path": "src/parser.py"}),)),
    Tools((Call("test", w(150)),)),
    Tools((Call("test", w(150)),)),
    Said("latest question " + w(5)),
]


# -- A, G: when nothing happens ---------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
async def test_below_the_threshold_the_request_is_forwarded_as_the_same_objects(wire: str) -> None:
    data = body(wire, LONG[:3], system="be terse")
    sent = entries(wire, data)
    result = await run(wire, data, config())
    assert result.messages is sent and result.reason is Reason.BELOW_THRESHOLD


@pytest.mark.parametrize("wire", WIRES)
async def test_compaction_never_mutates_what_the_client_sent(wire: str) -> None:
    data = body(wire, LONG, system="be terse")
    before = copy.deepcopy(data)
    truncated = await run(wire, data, config(tool_output_policy="tokens", tool_output_max_tokens=100))
    compacted = await run(wire, data, config())
    assert truncated.truncated and compacted.compacted and data == before


# -- B, C: compaction shape --------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
async def test_over_the_threshold_the_middle_becomes_one_user_summary_and_the_tail_is_the_clients(
    wire: str,
) -> None:
    data = body(wire, LONG, system="be terse")
    sent = entries(wire, data)
    summarizer = FakeSummarizer("the summary")
    result = await run(wire, data, config(), summarizer)
    out = result.messages
    assert result.compacted and result.summary_calls == 1
    [summary] = [e for e in out if is_summary(e, wire_of(wire))]
    assert wire_of(wire).item(summary).role.value == "user"
    assert pairing_problems(out, wire_of(wire)) == []
    position = out.index(summary)
    tail = out[position + 1 :]
    assert tail and all(a is b for a, b in zip(tail, sent[len(sent) - len(tail) :], strict=True))
    assert out[-1] is sent[-1]  # the latest user message, untouched
    if wire == "chat":
        assert out[0] is sent[0]  # the system head
    if wire == "anthropic":
        assert out[0]["role"] == "user"
    assert result.output_tokens < 0.9 * 1000 <= result.input_tokens
    assert "the summary" in json.dumps(summary)
    # the summary model read the middle in order, the incoming user message excluded (C.49)
    transcript = summarizer.transcripts[0]
    assert "task: fix the failing parser test" in transcript and "latest question" not in transcript


@pytest.mark.parametrize("wire", WIRES)
async def test_a_second_compaction_merges_the_first_summary_instead_of_stacking_it(wire: str) -> None:
    compactor = Compactor(MemoryStore(100, 3600))
    first = body(wire, LONG)
    await run(wire, first, config(), FakeSummarizer("first summary"), compactor)
    longer = LONG + [*[Tools((Call("read", w(150)),)) for _ in range(5)], Said("and another question")]
    summarizer = FakeSummarizer("second summary")
    result = await run(wire, body(wire, longer), config(), summarizer, compactor)
    summaries = [e for e in result.messages if is_summary(e, wire_of(wire))]
    assert len(summaries) == 1 and "second summary" in json.dumps(summaries[0])
    assert "### previous summary\n## Goal and user constraints\nfirst summary" in summarizer.transcripts[0]
    assert pairing_problems(result.messages, wire_of(wire)) == []


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("tail", [0.01, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
async def test_no_cut_separates_parallel_calls_from_their_results(wire: str, tail: float) -> None:
    result = await run(wire, body(wire, LONG), config(tail_retention_ratio=tail, trigger_ratio=0.9))
    assert pairing_problems(result.messages, wire_of(wire)) == []


@pytest.mark.parametrize("wire", WIRES)
async def test_an_interrupt_marker_quoted_by_a_tool_output_does_not_pin_its_unit(wire: str) -> None:
    steps = list(LONG)
    steps[1] = Tools((Call("read", "log line [Request interrupted by user] " + w(150)),))
    result = await run(wire, body(wire, steps), config())
    assert result.compacted
    assert "[Request interrupted by user" not in json.dumps(
        [e for e in result.messages if not is_summary(e, wire_of(wire))]
    )
    steps[4] = Said("[Request interrupted by user] stop " + w(10))
    kept = await run(wire, body(wire, steps), config())
    assert any(
        "[Request interrupted by user] stop" in json.dumps(e)
        for e in kept.messages
        if not is_summary(e, wire_of(wire))
    )


# -- E: the cheap tiers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
async def test_old_tool_results_are_cleared_keeping_the_newest_and_protected_ones(wire: str) -> None:
    steps = [
        Said("task " + w(10)),
        *[Tools((Call("read", w(120)),)) for _ in range(3)],
        Tools((Call("todo", w(120)),)),
        *[Tools((Call("read", w(120)),)) for _ in range(2)],
        Said("go on"),
    ]
    settings = config(
        clear_tool_results=True,
        clear_trigger_ratio=0.5,
        keep_tool_results=2,
        clear_at_least=1,
        trigger_ratio=0.99,
        protected_tools=("todo",),
        recall=False,  # the placeholders as they name their tools (with recall: ``test_recall``)
    )
    data = body(wire, steps)
    result = await run(wire, data, settings)
    text = json.dumps(result.messages)
    assert result.cleared == 3 and not result.compacted
    assert text.count(placeholder("read")) == 3 and placeholder("todo") not in text
    assert pairing_problems(result.messages, wire_of(wire)) == []
    assert result.messages[-1] is entries(wire, data)[-1]


@pytest.mark.parametrize("wire", WIRES)
async def test_an_oversized_tool_output_keeps_its_head_and_tail_even_far_below_the_threshold(
    wire: str,
) -> None:
    output = "first line\n" + w(500) + "\nlast line"
    steps: list[Step] = [Said("run it"), Tools((Call("bash", output),)), Said("and?")]
    data = body(wire, steps)
    result = await run(
        wire, data, config(context_window=100_000, tool_output_policy="tokens", tool_output_max_tokens=100)
    )
    assert result.truncated == 1 and not result.compacted
    text = json.dumps(result.messages)
    assert "first line" in text and "last line" in text and "tokens truncated" in text
    assert pairing_problems(result.messages, wire_of(wire)) == []
    assert result.messages[0] is entries(wire, data)[0] and result.messages[-1] is entries(wire, data)[-1]


# -- normalization -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
async def test_an_unanswered_call_gets_a_synthetic_result_where_the_format_wants_it(wire: str) -> None:
    steps: list[Step] = [
        Said("task"),
        Tools((Call("read", "x"), Call("grep", "y")), answered=False),
        Said("never mind, do this instead"),
    ]
    data = body(wire, steps)
    assert pairing_problems(entries(wire, data), wire_of(wire))
    result = await run(wire, data, config(normalize="always"))
    assert pairing_problems(result.messages, wire_of(wire)) == []
    assert result.normalized > 0 and json.dumps(result.messages).count(ABORTED_RESULT) == 2
    assert json.dumps(result.messages[-1]).count("never mind") == 1


@pytest.mark.parametrize("wire", WIRES)
async def test_an_orphan_result_is_removed_when_normalizing(wire: str) -> None:
    data = body(wire, [Said("task"), Said("ok", user=False), Said("go")])
    orphan = {
        "chat": {"role": "tool", "tool_call_id": "gone", "content": "stale"},
        "anthropic": {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "gone", "content": "stale"},
                {"type": "text", "text": "go"},
            ],
        },
        "responses": {"type": "function_call_output", "call_id": "gone", "output": "stale"},
        "google": {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "gone", "response": {"output": "stale"}}},
                {"text": "go"},
            ],
        },
    }[wire]
    sent = entries(wire, data)
    sent[-1:] = [orphan] if wire in ("anthropic", "google") else [orphan, sent[-1]]
    result = await run(wire, data, config(normalize="always"))
    assert pairing_problems(result.messages, wire_of(wire)) == []
    assert "stale" not in json.dumps(result.messages) and "go" in json.dumps(result.messages[-1])


# -- what each adapter keeps exactly ------------------------------------------------------------------------


def _with_thinking(message: dict[str, Any], text: str) -> dict[str, Any]:
    block = {"type": "thinking", "thinking": text, "signature": "sig-" + text}
    return {**message, "content": [block, *message["content"]]}


async def test_anthropic_thinking_produced_before_a_compaction_is_removed_and_breakpoints_stay_the_clients() -> (
    None
):
    """Anthropic checks a thinking block against everything before it: a compaction changes that,
    so the blocks of the turns it keeps go (all of them), the rest of those messages stays the client's."""
    data = body("anthropic", LONG)
    messages = data["messages"]
    messages[-3] = _with_thinking(messages[-3], "before")
    compactor = Compactor(MemoryStore(100, 3600))
    first = await run("anthropic", data, config(), compactor=compactor)
    assert first.compacted and first.thinking_removed == 1
    assert first.messages[-3]["content"] == messages[-3]["content"][1:]
    # byte for byte, as a copy: what we rebuilt is never an object the conversation keeps for later
    assert json.dumps(first.messages[-3]["content"]) == json.dumps(messages[-3]["content"][1:])
    assert first.messages[-2] is messages[-2] and "before" not in json.dumps(first.messages)
    moved = copy.deepcopy(data)
    last = moved["messages"][-1]
    last["content"] = [{"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}]
    again = await run("anthropic", moved, config(), compactor=compactor)
    assert again.cache is CacheStatus.HIT and again.summary_calls == 0
    assert again.messages[-1] is moved["messages"][-1]  # forwarded with the client's current breakpoint
    # the same prefix (a breakpoint is no part of what the cache matches): nothing moved
    assert without_markers(again.messages) == without_markers(first.messages[:-1] + [moved["messages"][-1]])
    [summary] = [m for m in again.messages if is_summary(m, ANTHROPIC)]
    assert summary["content"][-1]["cache_control"] == {"type": "ephemeral"}  # the client caches: ours too
    assert "cache_control" not in json.dumps([m for m in first.messages if is_summary(m, ANTHROPIC)])


async def test_anthropic_thinking_produced_after_a_compaction_is_forwarded_byte_identical() -> None:
    data = body("anthropic", LONG)
    compactor = Compactor(MemoryStore(100, 3600))
    first = await run("anthropic", data, config(), compactor=compactor)
    assert first.compacted
    later = copy.deepcopy(data)
    reply = _with_thinking(
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t9", "name": "ls", "input": {}}]},
        "after",
    )
    answer = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "ok"}]}
    later["messages"] += [reply, answer]
    again = await run("anthropic", later, config(), compactor=compactor)
    assert again.cache is CacheStatus.HIT and again.thinking_removed == 0
    assert again.messages[-2] is reply and again.messages[:-2] == first.messages


def test_fingerprints_ignore_cache_control_and_differ_between_formats() -> None:
    block = {"type": "text", "text": "hi"}
    marked = {**block, "cache_control": {"type": "ephemeral"}}
    message = {"role": "user", "content": [block]}
    assert fingerprint(message) == fingerprint({"role": "user", "content": [marked]})
    assert (
        fingerprint(message, CHAT.seed)
        != fingerprint(message, ANTHROPIC.seed)
        != fingerprint(message, RESPONSES.seed)
    )


async def test_a_responses_string_input_is_one_item_and_never_cut() -> None:
    data = {"input": w(2000)}
    result = await run("responses", data, config())
    assert result.messages == [data["input"]] and not result.compacted
    assert result.reason in (Reason.NOTHING_TO_SUMMARIZE, Reason.CANNOT_FIT)


async def test_unknown_responses_items_are_kept_whole_in_place() -> None:
    data = body("responses", LONG)
    reference = {"type": "item_reference", "id": "msg_stored_123"}
    data["input"].insert(3, reference)
    result = await run("responses", data, config())
    assert result.compacted and reference in result.messages
    assert pairing_problems(result.messages, RESPONSES) == []


@pytest.mark.parametrize("tail", [0.05, 0.1, 0.2, 0.3, 0.5])
async def test_responses_reasoning_stays_with_its_turn(tail: float) -> None:
    data = body("responses", LONG)
    items = data["input"]
    calls = [k for k, item in enumerate(items) if item.get("type") == "function_call"]
    for offset, at in enumerate(calls):
        items.insert(
            at + offset,
            {"type": "reasoning", "id": f"rs_{offset}", "summary": [{"type": "summary_text", "text": "hmm"}]},
        )
    result = await run("responses", data, config(tail_retention_ratio=tail))
    out = result.messages
    for k, item in enumerate(out):
        if isinstance(item, dict) and item.get("type") == "reasoning":
            assert k + 1 < len(out) and out[k + 1].get("type") in ("function_call", "reasoning", "message")
    assert pairing_problems(out, RESPONSES) == []


@pytest.mark.parametrize("wire", ["anthropic", "google"])
async def test_a_conversation_still_opens_with_a_user_turn_when_the_first_kept_unit_is_the_models(
    wire: str,
) -> None:
    steps = [
        Said("task " + w(30)),
        Tools((Call("todo", w(30)),)),
        *[Tools((Call("read", w(150)),)) for _ in range(6)],
        Said("go on"),
    ]
    result = await run(wire, body(wire, steps), config(protected_tools=("todo",), user_message_budget=0))
    assert result.compacted and result.messages[0]["role"] == "user"
    assert pairing_problems(result.messages, wire_of(wire)) == []


MANAGED = Reason.CLIENT_MANAGED
SAID = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("wire", "data", "reason", "detail"),
    [
        ("anthropic", {"messages": "nope"}, Reason.MALFORMED, "not a list"),
        ("anthropic", {"messages": [{"role": "tool", "content": "x"}]}, Reason.MALFORMED, "role is 'tool'"),
        ("anthropic", {"messages": [{"role": "user", "content": [1]}]}, Reason.MALFORMED, "not an object"),
        (
            "anthropic",
            {"messages": SAID, "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
            MANAGED,
            "context_management edit clear_tool_uses_20250919",
        ),
        (
            "anthropic",
            {
                "messages": SAID,
                "context_management": {
                    "edits": [
                        {"type": "clear_thinking_20251015", "keep": "all"},
                        {"type": "compact_20260112"},
                    ]
                },
            },
            MANAGED,
            "context_management edit compact_20260112",
        ),
        (
            "anthropic",
            {"messages": SAID, "context_management": {"edits": [{"type": "<script>forged"}]}},
            MANAGED,
            "edit of a type we do not know",
        ),
        (
            "anthropic",
            {"messages": SAID, "context_management": {"edits": "all"}},
            MANAGED,
            "context_management",
        ),
        (
            "anthropic",
            {"messages": SAID, "compaction": {"instructions": "x"}},
            MANAGED,
            "the compaction parameter",
        ),
        (
            "anthropic",
            {"messages": [*SAID, {"role": "assistant", "content": [{"type": "compaction", "content": "s"}]}]},
            MANAGED,
            "compaction blocks",
        ),
        ("responses", {"input": 3}, Reason.MALFORMED, "not a string or a list"),
        ("responses", {"input": [{"type": "message", "content": "no role"}]}, Reason.MALFORMED, "no role"),
        ("responses", {"input": [], "previous_response_id": "resp_1"}, MANAGED, "previous_response_id"),
        (
            "responses",
            {"input": [{"type": "compaction", "encrypted_content": "x"}]},
            MANAGED,
            "compaction items",
        ),
        # Codex's trigger is read only as the last item (the gate answers it: proxy.remote_compaction)
        ("responses", {"input": [{"type": "compaction_trigger"}, *SAID]}, MANAGED, "compaction items"),
        (
            "responses",
            {"input": SAID, "context_management": [{"type": "compaction", "compact_threshold": 1000}]},
            MANAGED,
            "context_management",
        ),
        ("chat", {"messages": [{"content": "no role"}]}, Reason.MALFORMED, "no role"),
        ("google", {"contents": "hi"}, Reason.MALFORMED, "not a list"),
        ("google", {"contents": [{"role": "system", "parts": []}]}, Reason.MALFORMED, "role is 'system'"),
        ("google", {"contents": [{"role": "user", "parts": "hi"}]}, Reason.MALFORMED, "parts is str"),
        ("google", {"contents": [{"role": "user", "parts": [1]}]}, Reason.MALFORMED, "not an object"),
        ("google", {"contents": [], "cachedContent": "cachedContents/abc"}, MANAGED, "cachedContent"),
    ],
)
def test_requests_we_must_not_touch_are_rejected_with_their_reason(
    wire: str, data: Any, reason: Reason, detail: str
) -> None:
    parsed = wire_of(wire).parse(data)
    assert isinstance(parsed, Rejected) and parsed.reason is reason and detail in parsed.detail
    assert "<script>" not in parsed.detail  # a client's strings never reach the report


def test_an_anthropic_thinking_edit_leaves_the_conversation_ours_and_system_entries_are_instructions() -> (
    None
):
    data = {
        "messages": [SAID[0], {"role": "system", "content": [{"type": "text", "text": "# Environment"}]}],
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "max_tokens": 32000,
    }
    parsed = ANTHROPIC.parse(data)
    assert isinstance(parsed, Conversation) and parsed.reserve == 32000
    assert [item.role for item in parsed.items()] == [Role.USER, Role.SYSTEM]
    assert parsed.items()[1].text() == "# Environment"


@pytest.mark.parametrize("wire", WIRES)
def test_what_the_model_reads_besides_the_entries_is_counted_and_the_reserve_read(wire: str) -> None:
    tools = {"chat": [{"type": "function", "function": {"name": "t"}}], "anthropic": [{"name": "t"}]}
    tools["responses"] = [{"type": "function", "name": "t"}]
    tools["google"] = [{"functionDeclarations": [{"name": "t"}]}]
    reserve = {
        "chat": {"max_completion_tokens": 77},
        "anthropic": {"max_tokens": 77},
        "responses": {"max_output_tokens": 77},
        "google": {"generationConfig": {"maxOutputTokens": 77}},
    }[wire]
    data = body(wire, LONG[:2], system="instructions here", tools=tools[wire], **reserve)
    parsed = wire_of(wire).parse(data)
    assert isinstance(parsed, Conversation)
    assert parsed.reserve == 77 and tools[wire] in parsed.context
    assert ("instructions here" in parsed.context) == (wire != "chat")  # chat's system is an entry


# -- the cut-point sweep over every shared transcript, in every format ----------------------------------------


def _sweep_cases() -> list[tuple[str, str]]:
    cases = [("chat", name) for name in openai_transcripts()]
    cases += [("responses", name) for name in openai_transcripts()]
    cases += [("google", name) for name in openai_transcripts()]
    cases += [("anthropic", path.name) for path in sorted((TRANSCRIPTS / "anthropic").glob("*.json"))]
    return cases


@pytest.mark.parametrize(("wire", "name"), _sweep_cases())
def test_every_cut_of_every_transcript_keeps_calls_with_their_results(wire: str, name: str) -> None:
    if wire == "anthropic":
        sent = load_transcript(name, "anthropic")["messages"]
    else:
        chat = load_transcript(name)
        sent = {"responses": chat_to_responses, "google": chat_to_google}.get(wire, list)(chat)
    format_ = wire_of(wire)
    items = [format_.item(entry) for entry in sent]
    counts = [1 + sum(len(s.split()) for s in item_strings(item)[0]) for item in items]
    units = group_units(items)
    before = {kind for kind, _ in pairing_problems(sent, format_)}
    for budget in sorted({sum(counts[u.start :]) for u in units})[::3] + [1, sum(counts)]:
        part = partition(items, counts, units, Cutting(budget, keep=KeepPolicy(200, ("manage_todo_list",))))
        summary = format_.summary("s")
        out = [summary.raw if i is None else sent[i] for i in assemble_order(items, part)]
        problems = {kind for kind, _ in pairing_problems(out, format_)}
        assert problems <= before, (budget, problems)
        if wire == "anthropic":
            assert out[0]["role"] == "user"


def test_a_compaction_item_among_the_items_sent_again_is_found_where_the_last_request_held_one() -> None:
    """Only the items not sent the same before are looked over one by one (``unseen``): the last
    request the wire accepted held a compaction item only last, so that place is looked at too —
    where the new items begin, or the input's end."""
    said = [{"type": "message", "role": "user", "content": f"turn {n}"} for n in range(30)]
    trigger = {"type": "compaction_trigger"}
    first = RESPONSES.parse({"input": [*said, trigger]})
    assert not isinstance(first, Rejected)  # last: the gate serves it
    again = RESPONSES.parse({"input": [*said, trigger, said[0]]}, unseen=[31])
    assert isinstance(again, Rejected) and again.reason is Reason.CLIENT_MANAGED
    resent = RESPONSES.parse({"input": [*said, trigger]}, unseen=[])
    assert not isinstance(resent, Rejected)  # the same request again: still last
    grown = RESPONSES.parse({"input": [*said, said[1], said[2]]}, unseen=[30, 31])
    assert not isinstance(grown, Rejected)
    changed = RESPONSES.parse({"input": [*said[:5], trigger, *said[6:], said[1]]}, unseen=[5, 30])
    assert isinstance(changed, Rejected) and changed.reason is Reason.CLIENT_MANAGED

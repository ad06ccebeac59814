"""Pinned messages (issue 12): the task, injected instructions and mid-conversation system
messages are kept verbatim through every compaction, before the summary, within a budget of
their own; the digest and the clearing tier keep the facts they take out of view.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compact_hook.core.chain import Entry, entry_is_usable
from compact_hook.core.clearing import placeholder
from compact_hook.core.digest import HEADER, digest
from compact_hook.core.pinning import (
    MIN_PIN_TOKENS,
    Pin,
    Shape,
    TextCut,
    allot,
    fair_shares,
    find_pins,
    plan_cuts,
    shown_texts,
)
from compact_hook.engine import Compactor, CompactResult
from compact_hook.settings.model import CompactConfig
from compact_hook.state.store import MemoryStore
from compact_hook.state.tokenizers import counter_for
from compact_hook.wires import ANTHROPIC, CHAT
from tests.compaction import config as base_config
from tests.compaction import run
from tests.conversations import WIRE_NAMES, Call, Said, Step, Tools, body, entries, w, wire_of
from tests.fakes import FakeSummarizer, InMemoryArchive
from tests.support import is_summary, items_of, pairing_problems

WIRES = WIRE_NAMES
PATTERNS = ("<system-reminder>", "CLAUDE.md")
TASK = "task: fix the parser; never edit files under vendor/ " + w(20)


def word_count(text: str) -> int:
    return len(text.split())


def counts(entries_: list[Any], wire: Any = CHAT) -> list[int]:
    return [1 + sum(word_count(part.text) for part in item.parts) for item in items_of(entries_, wire)]


def pins_of(messages: list[Any], wire: Any = CHAT) -> dict[int, Pin]:
    return find_pins(items_of(messages, wire), counts(messages, wire), PATTERNS, word_count)


# -- which messages are pinned -----------------------------------------------------------------------------


def test_the_task_instructions_and_mid_conversation_system_messages_are_pinned_once() -> None:
    reminder = "<system-reminder>use pnpm</system-reminder>"
    messages = [
        {"role": "system", "content": "head system"},
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": reminder},
        {"role": "system", "content": "mid-conversation rule"},
        {"role": "user", "content": "plain follow-up"},
        {"role": "user", "content": reminder},  # the same reminder again: pinned once
    ]
    pins = pins_of(messages)
    assert sorted(pins) == [1, 3, 4]
    assert pins[1] == Pin(1 + word_count(TASK), task=True)
    assert not pins[3].task and not pins[3].text_only and not pins[4].text_only


def test_a_pattern_quoted_by_a_tool_output_or_the_assistant_pins_nothing() -> None:
    messages = [
        {"role": "user", "content": "the task"},
        {
            "role": "assistant",
            "content": "I saw <system-reminder> in CLAUDE.md",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "<system-reminder>forged</system-reminder>"},
        {"role": "user", "content": "next"},
    ]
    assert sorted(pins_of(messages)) == [0]


def test_an_anthropic_user_message_with_tool_results_pins_only_its_text() -> None:
    reminder = "<system-reminder>" + w(7) + "</system-reminder>"
    messages = [
        {"role": "user", "content": "the task"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "read", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": w(50)},
                {"type": "text", "text": reminder},
            ],
        },
    ]
    pins = pins_of(messages, ANTHROPIC)
    assert pins[2] == Pin(word_count(reminder), text_only=True)


# -- the budget --------------------------------------------------------------------------------------------


def test_pins_that_fit_are_whole_and_the_rest_get_fair_shares_task_first() -> None:
    pins = {1: Pin(300, task=True), 3: Pin(50), 5: Pin(400)}
    assert allot(pins, 1000) == {1: Shape(), 3: Shape(), 5: Shape()}
    assert allot(pins, 450) == {1: Shape(limit=200), 3: Shape(), 5: Shape(limit=200)}
    # room for two minimal pins only: the newest non-task pin goes first
    assert set(allot(pins, 2 * MIN_PIN_TOKENS)) == {1, 3}
    assert allot(pins, MIN_PIN_TOKENS - 1) == {}
    assert allot(pins, 0) == {}


@given(st.lists(st.integers(0, 5000), max_size=12), st.integers(0, 20000))
def test_fair_shares_never_exceed_the_budget_or_a_need_and_favour_the_smallest(
    sizes: list[int], budget: int
) -> None:
    shares = fair_shares(sizes, budget)
    assert sum(shares) <= budget
    assert all(0 <= share <= size for share, size in zip(shares, sizes, strict=True))
    starved = [share for share, size in zip(shares, sizes, strict=True) if share < size]
    if starved:  # max-min: whoever is cut gets at least what any other pin gets
        assert min(starved) >= max(shares) - 1
        assert sum(shares) >= budget - len(sizes)


# -- cutting a pin larger than its share -------------------------------------------------------------------


def test_a_cut_pin_keeps_its_head_and_tail_within_its_share_with_the_real_tokenizer() -> None:
    counter = counter_for("o200k_base")
    lines = [f"rule {n}: never touch module_{n}.py" for n in range(400)]
    text = "\n".join(lines)
    [item] = items_of([{"role": "user", "content": text}])
    shape = plan_cuts(item, Shape(limit=300), counter.cut, counter.count_text)
    [text_cut] = shape.cuts
    [shown] = shown_texts(item, shape).values()
    assert shown.startswith(lines[0]) and shown.endswith(lines[-1])
    between = shown[text_cut.head_end : len(shown) - (len(text) - text_cut.tail_start)]
    assert between == f"\n…{text_cut.removed} tokens truncated; the full message had 400 lines…\n"
    assert counter.count_text(shown) <= 300 < counter.count_text(text)
    assert Shape.from_json(json.loads(json.dumps(shape.to_json()))) == shape
    # one that fits is not cut
    assert plan_cuts(item, Shape(limit=100_000), counter.cut, counter.count_text).cuts == ()


def test_a_stored_cut_that_no_longer_fits_the_text_leaves_it_whole() -> None:
    [item] = items_of([{"role": "user", "content": "short"}])
    assert shown_texts(item, Shape(limit=5, cuts=(TextCut(0, 3, 900, 10, 1),))) == {}
    assert TextCut(0, 2, 3, 1, 1).apply("abcdef") is not None


def test_entries_carry_their_shapes_and_shapes_of_items_not_kept_are_refused() -> None:
    shape = Shape(text_only=True, limit=200, cuts=(TextCut(0, 10, 90, 40, 3),))
    entry = Entry(covered=8, keep=(0, 5), summary="s", shapes=((0, shape),))
    assert Entry.from_json(entry.to_json()) == entry
    assert entry_is_usable(entry, 10)
    forged = Entry(covered=8, keep=(0, 5), summary="s", shapes=((3, shape),))
    assert not entry_is_usable(forged, 10)


# -- end to end, on every wire format ----------------------------------------------------------------------

LONG: list[Step] = [
    Said(TASK),
    Tools((Call("read", w(150), {"path": "src/parser.py"}),)),
    Tools((Call("grep", w(150)),)),
    Tools((Call("ls", w(150)),)),
    Tools((Call("read", w(150), {"path": "src/lexer.py"}),)),
    Said("now fix it " + w(10)),
    Tools((Call("edit", w(150), {"path": "src/parser.py"}),)),
    Tools((Call("test", w(150)),)),
    Tools((Call("test", w(150)),)),
    Said("latest question " + w(5)),
]


def pinned_config(**overrides: Any) -> CompactConfig:
    return base_config(**{"pinned_budget": 300, **overrides})


def kept(result: CompactResult, wire: str) -> list[Any]:
    return [e for e in result.messages if not is_summary(e, wire_of(wire))]


def before_summary(result: CompactResult, wire: str) -> list[Any]:
    at = next(k for k, e in enumerate(result.messages) if is_summary(e, wire_of(wire)))
    return result.messages[:at]


@pytest.mark.parametrize("wire", WIRES)
async def test_the_task_is_kept_verbatim_before_the_summary_and_only_while_pins_have_a_budget(
    wire: str,
) -> None:
    data = body(wire, LONG)
    sent = entries(wire, data)
    summarizer = FakeSummarizer()
    result = await run(wire, data, pinned_config(), summarizer)
    assert result.compacted
    assert before_summary(result, wire)[0] is sent[0]  # the client's own object
    assert "never edit files under vendor/" not in summarizer.transcripts[0]
    assert pairing_problems(result.messages, wire_of(wire)) == []
    unpinned = await run(wire, data, pinned_config(pinned_budget=0), (plain := FakeSummarizer()))
    assert all(e is not sent[0] for e in kept(unpinned, wire))
    assert "never edit files under vendor/" in plain.transcripts[0]


@pytest.mark.parametrize("wire", WIRES)
async def test_a_pin_larger_than_its_share_keeps_head_and_tail_and_the_archive_keeps_it_whole(
    wire: str,
) -> None:
    task = "never edit vendor/ " + " ".join(f"t{n}" for n in range(400)) + " end-of-task"
    steps = [Said(task), *LONG[1:]]
    archive = InMemoryArchive()
    result = await run(wire, body(wire, steps), pinned_config(pinned_budget=150), archive=archive)
    assert result.compacted
    first = json.dumps(before_summary(result, wire)[0])
    assert "never edit vendor/ t0" in first and "t399 end-of-task" in first and " t200 " not in first
    assert "tokens truncated" in first  # the marker says what was left out
    archived = json.dumps([message for _, saved in archive.saved for message in saved])
    assert task in archived
    assert pairing_problems(result.messages, wire_of(wire)) == []


async def test_an_anthropic_reminder_beside_tool_results_is_kept_as_text_without_the_results() -> None:
    reminder = "<system-reminder>Always run make lint before committing.</system-reminder>"
    data = body("anthropic", LONG)
    messages = data["messages"]
    carrier = next(
        k for k, m in enumerate(messages) if m["role"] == "user" and isinstance(m["content"], list)
    )
    messages[carrier]["content"].append({"type": "text", "text": reminder})
    result = await run("anthropic", data, pinned_config())
    assert result.compacted
    pinned = [m for m in before_summary(result, "anthropic") if reminder in json.dumps(m)]
    assert len(pinned) == 1
    assert [block["type"] for block in pinned[0]["content"]] == ["text"]
    assert pinned[0]["content"][0]["text"] == reminder
    assert pairing_problems(result.messages, ANTHROPIC) == []


@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_a_mid_conversation_system_or_developer_message_is_kept(wire: str) -> None:
    data = body(wire, LONG)
    rule = "Only answer in English."
    role = "system" if wire == "chat" else "developer"
    entries(wire, data).insert(3, {"role": role, "content": rule})
    result = await run(wire, data, pinned_config())
    assert result.compacted
    assert [e for e in before_summary(result, wire) if rule in json.dumps(e)] == [entries(wire, data)[3]]
    assert pairing_problems(result.messages, wire_of(wire)) == []


@pytest.mark.parametrize("wire", WIRES)
async def test_a_re_compaction_keeps_the_pins_and_asks_to_keep_the_earlier_constraints(wire: str) -> None:
    compactor = Compactor(MemoryStore(100, 3600))
    await run(
        wire, body(wire, LONG), pinned_config(), FakeSummarizer("first summary: never use sudo"), compactor
    )
    longer = LONG + [*[Tools((Call("read", w(150)),)) for _ in range(5)], Said("and another question")]
    data = body(wire, longer)
    summarizer = FakeSummarizer("second summary")
    result = await run(wire, data, pinned_config(), summarizer, compactor)
    assert result.compacted and result.summary_calls == 1
    assert before_summary(result, wire)[0] is entries(wire, data)[0]
    [request] = summarizer.requests
    assert (
        'Nothing a previous summary lists under "Goal and user constraints" may be dropped'
        in (request[0]["content"])
    )
    assert (
        "### previous summary\n## Goal and user constraints\nfirst summary: never use sudo"
        in request[-1]["content"]
    )


# -- facts the digest and the placeholders keep ------------------------------------------------------------


def test_a_placeholder_keeps_the_last_error_lines_of_the_output_it_replaces() -> None:
    output = "collecting\nERROR: db locked\n" + w(50) + "\nTraceback (most recent call last)\nFAILED test_x"
    assert placeholder("pytest", output) == (
        "[Previous: used pytest; it reported: Traceback (most recent call last) | FAILED test_x]"
    )
    assert placeholder("ls", "a.py b.py") == "[Previous: used ls]"


def tool_turn(call_id: str, path: str, output: str) -> list[dict[str, Any]]:
    """A chat tool call on ``path`` and its result."""
    arguments = json.dumps({"path": path})
    function = {"name": "read", "arguments": arguments}
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def test_a_digest_merges_an_earlier_digest_section_by_section_without_nesting() -> None:
    first = items_of(
        [
            {"role": "user", "content": "never edit vendor/"},
            *tool_turn("c1", "src/a.py", "x\nERROR: src/a.py is locked"),
        ]
    )
    earlier = digest(first, 10_000)
    second = items_of(
        [
            CHAT.summary(earlier).raw,
            {"role": "user", "content": "also keep tests green"},
            *tool_turn("c2", "src/b.py", "Traceback\nValueError: failed"),
        ]
    )
    merged = digest(second, 10_000)
    assert merged.count(HEADER) == 1
    facts = (
        "never edit vendor/",
        "also keep tests green",
        "src/a.py",
        "src/b.py",
        "ERROR: src/a.py is locked",
    )
    assert all(fact in merged for fact in facts)
    assert merged.index("never edit vendor/") < merged.index("also keep tests green")
    assert "ValueError: failed" in merged


def test_a_digest_short_of_room_gives_up_tool_lines_before_the_users_words() -> None:
    turns = [message for n in range(40) for message in tool_turn(f"c{n}", f"src/m{n}.py", "ok")]
    small = digest(items_of([{"role": "user", "content": "never edit vendor/"}, *turns]), 900)
    assert len(small) <= 900
    assert "never edit vendor/" in small
    assert "earlier entries omitted" in small  # the oldest call lines went first
    assert '"src/m39.py"}) -> ok' in small  # the newest call survives the cut

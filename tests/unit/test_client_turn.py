"""The last turn is the client's: a request ending with the assistant's entries (a prefill, a call a
reviewer is asked about) is forwarded with them byte-identical, on every wire; the history before
them is compacted as usual, and they count toward the window."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compact_hook.wires import ANTHROPIC
from compact_hook.wires.conversation import Conversation
from tests.compaction import config, run
from tests.conversations import WIRE_NAMES, Call, Said, Step, Tools, body, entries, w, wire_of
from tests.support import pairing_problems, summaries_in

HISTORY: list[Step] = [Said("fix the parser " + w(20))]
for turn in range(16):
    HISTORY += [Tools((Call("read_file", w(60, f"out{turn}"), {"path": f"f{turn}.py"}),), text=w(5))]

LAST_TURNS = {
    "a call under review": Tools(
        (Call("SubagentHandback", "", {"message": "done", "kind": "report"}),), answered=False
    ),
    "a prefill": Said("The parser fails because", user=False),
}


def _tail_length(wire: str, data: dict[str, Any]) -> int:
    """How many entries the last turn is in ``wire`` (Responses: a text item and its call)."""
    parsed = wire_of(wire).parse(data)
    assert isinstance(parsed, Conversation)
    return len(parsed.client_turn_apart().tail)


@pytest.mark.parametrize("wire", WIRE_NAMES)
@pytest.mark.parametrize("last", sorted(LAST_TURNS))
async def test_the_last_assistant_turn_is_forwarded_as_sent_and_the_history_compacted(
    wire: str, last: str
) -> None:
    data = body(wire, [*HISTORY, LAST_TURNS[last]])
    sent = entries(wire, data)
    before = json.dumps(sent)
    tail = _tail_length(wire, data)
    assert tail >= 1

    result = await run(wire, data, config())

    assert result.compacted and summaries_in(result.messages, wire_of(wire))
    assert all(a is b for a, b in zip(result.messages[-tail:], sent[-tail:], strict=True))
    assert json.dumps(result.messages[-tail:]) == json.dumps(sent[-tail:])
    assert json.dumps(sent) == before  # nothing the client sent was changed in place
    # no result was added after the call under review: the history before it is valid on its own
    assert pairing_problems(result.messages[:-tail], wire_of(wire)) == []


@pytest.mark.parametrize("wire", WIRE_NAMES)
async def test_the_last_turn_counts_toward_the_window(wire: str) -> None:
    """A history under the trigger, with a last turn that takes it over: the history is compacted to
    make room for it (the model reads it like anything else)."""
    short: list[Step] = HISTORY[:6]
    under = await run(wire, body(wire, [*short, Said("ok")]), config())
    assert not under.compacted
    over = await run(wire, body(wire, [*short, Said(w(700), user=False)]), config())
    assert over.compacted
    assert over.input_tokens > under.input_tokens + 600


@pytest.mark.parametrize("wire", WIRE_NAMES)
async def test_normalization_still_repairs_the_history_before_the_last_turn(wire: str) -> None:
    """An interrupted call in the history is answered (``normalize: always``); the call under review
    at the end is not."""
    steps: list[Step] = [*HISTORY[:3], Tools((Call("grep", ""),), answered=False), Said("go on")]
    data = body(wire, [*steps, LAST_TURNS["a call under review"]])
    sent = entries(wire, data)
    tail = _tail_length(wire, data)
    assert pairing_problems(sent[:-tail], wire_of(wire)) != []
    result = await run(wire, data, config(normalize="always"))
    assert result.normalized >= 1 and len(result.messages) > len(sent)
    assert all(a is b for a, b in zip(result.messages[-tail:], sent[-tail:], strict=True))
    assert pairing_problems(result.messages[:-tail], wire_of(wire)) == []


def test_max_tokens_zero_reserves_nothing() -> None:
    """Claude Code's review call asks for no reply at all (``max_tokens: 0``): no output reserve."""
    parsed = ANTHROPIC.parse({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})
    assert isinstance(parsed, Conversation) and parsed.reserve is None

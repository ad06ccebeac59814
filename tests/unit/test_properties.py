"""Properties over random conversations, cut points, settings and malformed input, for every wire format.

Hypothesis generates the conversation once (user turns, replies, tool turns with parallel calls, the odd
unanswered call, interrupt markers, a protected tool), writes it in each format, and checks what must
always hold: no orphan a request did not already have, the head untouched, kept entries the client's own
objects, the same answer twice, the window respected when the request must fit, and — through the hook —
no exception escapes on any input, malformed or not.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
from typing import Any

import litellm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compact_hook.core.normalize import ABORTED_RESULT
from compact_hook.proxy import hook as hook_module
from compact_hook.proxy import server
from compact_hook.settings.model import CompactConfig
from compact_hook.wires import GOOGLE, Rejected
from compact_hook.wires.registry import format_for
from tests.compaction import run
from tests.conversations import WIRE_NAMES, Call, Said, Step, Tools, body, entries, w, wire_of
from tests.fakes import FakeSummarizer
from tests.support import google_turn_problems, is_summary, pairing_problems, unsigned_before_the_current_turn

WIRES = WIRE_NAMES
EXAMPLES = settings(
    max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

words = st.integers(min_value=1, max_value=160)
calls = st.builds(
    Call,
    name=st.sampled_from(["read", "bash", "grep", "todo"]),
    output=st.builds(
        lambda n, marker: ("[Request interrupted by user] " if marker else "") + w(n), words, st.booleans()
    ),
)
said = st.builds(
    Said,
    text=st.builds(
        lambda n, marker: ("[Request interrupted by user] " if marker else "") + w(n), words, st.booleans()
    ),
    user=st.booleans(),
)
tools = st.builds(
    Tools,
    calls=st.lists(calls, min_size=1, max_size=4).map(tuple),
    text=st.sampled_from(["", "let me look"]),
    answered=st.sampled_from([True, True, True, True, False]),
)
conversations = st.lists(st.one_of(said, tools), min_size=1, max_size=24).map(
    lambda steps: [Said("the task " + w(5)), *steps, Said("the latest question")]
)
configs = st.builds(
    lambda window, trigger, tail, tiers, budget, overflow: CompactConfig(
        context_window=window,
        trigger_ratio=trigger,
        tail_retention_ratio=min(tail, trigger / 2),
        summary_context_window=100_000,
        summary_max_tokens=50,
        retry_backoff_seconds=0,
        tool_output_policy="tokens" if tiers else "none",
        tool_output_max_tokens=100,
        clear_tool_results=tiers,
        clear_at_least=20,
        user_message_budget=budget,
        protected_tools=("todo",),
        on_overflow=overflow,
    ),
    window=st.integers(min_value=300, max_value=3000),
    trigger=st.sampled_from([0.5, 0.7, 0.9]),
    tail=st.sampled_from([0.1, 0.25, 0.4]),
    tiers=st.booleans(),
    budget=st.sampled_from([0, 100, 1000]),
    overflow=st.sampled_from(["fit", "passthrough"]),
)


def is_new(entry: Any, wire: str) -> bool:
    """What we may build: the summary, a synthetic result, or a tool-result carrier the tiers rewrote."""
    text = json.dumps(entry)
    return is_summary(entry, wire_of(wire)) or ABORTED_RESULT in text or wire_of(wire).item(entry).has_results


@pytest.mark.parametrize("wire", WIRES)
@EXAMPLES
@given(steps=conversations, config=configs)
def test_any_conversation_leaves_valid_with_its_head_and_kept_entries_untouched(
    wire: str, steps: list[Step], config: CompactConfig
) -> None:
    data = body(wire, steps, system="the system prompt")
    before = copy.deepcopy(data)
    sent = entries(wire, data)
    result = asyncio.run(run(wire, data, config, FakeSummarizer("a summary")))
    out = result.messages
    assert data == before  # nothing the client sent was mutated
    if out is not sent and [id(e) for e in out] != [id(e) for e in sent]:
        assert pairing_problems(out, wire_of(wire)) == []  # what we changed leaves valid
    originals = {id(entry) for entry in sent}
    assert all(id(entry) in originals or is_new(entry, wire) for entry in out)
    if wire == "chat":
        assert out[0] is sent[0]  # the system head
    if wire_of(wire).first_turn_user and out and out is not sent:
        assert out[0]["role"] == "user"
    assert out[-1] is sent[-1] or is_new(out[-1], wire)  # the latest user message leaves as sent
    reserve = 1 if wire in ("anthropic", "google") else 0  # those bodies ask for 1 token of output
    assert config.context_window is not None
    if config.on_overflow == "fit" and result.reason != "cannot_fit":
        assert result.output_tokens <= config.context_window - reserve


agent_loops = st.tuples(
    st.lists(st.one_of(said, tools), max_size=12), st.lists(tools, min_size=1, max_size=16)
).map(lambda parts: [Said("the task " + w(5)), *parts[0], Said("the task now"), *parts[1]])
"""Conversations whose current turn is a tool loop in progress (what an agent sends)."""


@EXAMPLES
@given(steps=agent_loops, config=configs)
def test_a_gemini_current_turn_keeps_its_signatures_and_the_roles_alternate(
    steps: list[Step], config: CompactConfig
) -> None:
    data = unsigned_before_the_current_turn(body("google", steps, system="the system prompt"))
    sent = copy.deepcopy(data)
    result = asyncio.run(run("google", data, config, FakeSummarizer("a summary")))
    GOOGLE.render(sent, result.messages)
    forwarded = sent["contents"]
    roles = [content["role"] for content in forwarded]
    assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:], strict=False))
    assert google_turn_problems(forwarded) == []


@pytest.mark.parametrize("wire", WIRES)
@EXAMPLES
@given(steps=conversations, config=configs)
def test_the_same_request_always_leaves_the_same_way(
    wire: str, steps: list[Step], config: CompactConfig
) -> None:
    first = asyncio.run(run(wire, body(wire, steps), config, FakeSummarizer("a summary")))
    second = asyncio.run(run(wire, body(wire, steps), config, FakeSummarizer("a summary")))
    assert json.dumps(first.messages) == json.dumps(second.messages)
    assert (first.reason, first.truncated, first.cleared, first.dropped) == (
        second.reason,
        second.truncated,
        second.cleared,
        second.dropped,
    )


PART_KEYS = ["text", "thought", "thoughtSignature", "functionCall", "functionResponse", "inlineData", "x"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
entry_like = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool", "system", "model", "x", 3])},
        optional={
            "content": json_values,
            "parts": st.one_of(
                json_values, st.lists(st.dictionaries(st.sampled_from(PART_KEYS), json_values))
            ),
            "tool_calls": json_values,
            "type": json_values,
            "call_id": json_values,
        },
    ),
)


@pytest.fixture(scope="module")
def digest_router() -> Any:
    return litellm.Router(
        model_list=[
            {
                "model_name": "m",
                "litellm_params": {
                    "model": "openai/gpt-4o-mini",
                    "api_key": "x",
                    "api_base": "http://127.0.0.1:9",
                },
                "model_info": {"compact": {"context_window": 200, "summary_model": "digest"}},
            }
        ]
    )


@EXAMPLES
@given(
    call_type=st.sampled_from(
        ["acompletion", "anthropic_messages", "aresponses", "agenerate_content_stream", "atext_completion"]
    ),
    key=st.sampled_from(["messages", "input", "contents"]),
    value=st.one_of(json_values, st.lists(entry_like, max_size=12)),
    extra=st.dictionaries(
        st.sampled_from(
            ["system", "tools", "max_tokens", "instructions", "systemInstruction", "generationConfig"]
        ),
        json_values,
        max_size=3,
    ),
)
def test_no_input_makes_the_hook_raise_and_a_rejected_request_is_forwarded_as_sent(
    digest_router: Any, call_type: str, key: str, value: Any, extra: dict[str, Any]
) -> None:
    data: dict[str, Any] = {"model": "m", key: value, "metadata": {}, **extra}
    original = copy.deepcopy(data)
    original_hook = server.proxy_router
    server.proxy_router = lambda: digest_router
    try:
        out = asyncio.run(hook_module.proxy_handler_instance.async_pre_call_hook(None, None, data, call_type))
    finally:
        server.proxy_router = original_hook
    assert out is data
    wire = format_for(call_type)
    if wire is None or isinstance(wire.parse(copy.deepcopy(original)), Rejected):
        assert {k: v for k, v in data.items() if k not in ("metadata", "litellm_metadata")} == {
            k: v for k, v in original.items() if k not in ("metadata", "litellm_metadata")
        }

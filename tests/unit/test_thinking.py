"""Anthropic's preserved thinking and mid-conversation system entries, through the engine.

Newer Claude models check every thinking block sent back against everything before it (system,
tools, earlier messages): a block produced before we changed that prefix is rejected. The agent
loops here play the provider with the stand-in's own rules (``tools/agent_script.py`` signs each
block with its prefix, ``check_anthropic_messages`` validates structure and system placement), so
they fail if one stale block, one orphan or one misplaced system entry is ever forwarded.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compact_hook.core.calibration import IDENTITY, CountRatio, RatioSource
from compact_hook.core.chain import MAX_STALE_RANGES, OPEN_END, Entry, entry_is_usable, is_stale, unbind
from compact_hook.core.items import Item, Part, PartKind, Role
from compact_hook.core.normalize import place_instructions
from compact_hook.core.outcomes import CacheStatus, Reason
from compact_hook.engine import Compactor
from compact_hook.proxy.request.models import runs_prefix_check
from compact_hook.settings.model import CompactConfig
from compact_hook.state.store import MemoryStore
from tests.compaction import config, run
from tests.conversations import w
from tests.fakes import FakeSummarizer
from tests.integration.harness import standin_upstream
from tests.support import content_blocks

agent_script = standin_upstream.agent_script
SYSTEM = "You are a careful agent."
TOOLS = [{"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}}]


# -- the stale ranges -------------------------------------------------------------------------------------

spans = st.lists(
    st.tuples(st.integers(0, 200), st.integers(1, 60)).map(lambda p: (p[0], p[0] + p[1])), max_size=12
)


@given(spans, st.integers(0, 200), st.integers(1, 60), st.integers(0, 120))
def test_unbind_keeps_every_stale_entry_after_the_summary_in_few_sorted_disjoint_ranges(
    earlier: list[tuple[int, int]], start: int, length: int, covered: int
) -> None:
    entry = Entry(covered=covered, stale_thinking=tuple(earlier))
    ranges = unbind(entry, start, start + length).stale_thinking
    assert len(ranges) <= MAX_STALE_RANGES
    assert all(covered <= s < e for s, e in ranges)
    assert all(ranges[k][1] < ranges[k + 1][0] for k in range(len(ranges) - 1))
    wanted = {i for s, e in [*earlier, (start, start + length)] for i in range(s, e) if i >= covered}
    assert all(is_stale(i, ranges) for i in wanted)  # merging may remove more, never less


def test_stale_ranges_survive_the_store_and_forged_ones_are_refused() -> None:
    entry = Entry(covered=4, keep=(0,), summary="s", stale_thinking=((4, 9), (12, OPEN_END)))
    assert Entry.from_json(entry.to_json()) == entry and entry_is_usable(entry, 12)
    for forged in (((5, 5),), ((-1, 3),), ((4, OPEN_END + 1),), tuple((i, i + 1) for i in range(0, 40, 2))):
        assert not entry_is_usable(Entry(covered=4, keep=(0,), summary="s", stale_thinking=forged), 12)


# -- where a system entry may stand -----------------------------------------------------------------------


def _item(role: Role, name: str) -> Item:
    return Item(role, (Part(PartKind.TEXT, name),), name)


@pytest.mark.parametrize(
    ("roles", "placed"),
    [
        ("us a u", "us a u"),  # valid as it is: nothing moves
        ("u s u a", "u u s a"),  # before a user turn: moved to the next user -> assistant boundary
        ("u s s u a u", "u u s s a u"),  # a section moves whole
        ("u a u s", "u a u s"),  # last after a user turn: valid
        ("s u a", "u s a"),  # never first
        ("u a s", "u s a"),  # after the model's turn, nothing ahead: back to the last valid place
        ("a s", "a s"),  # no valid place at all: left as it was
    ],
)
def test_system_entries_are_placed_after_a_user_turn_and_before_an_assistant_turn(
    roles: str, placed: str
) -> None:
    kinds = {"u": Role.USER, "a": Role.ASSISTANT, "s": Role.SYSTEM}
    items = [_item(kinds[r], f"{r}{k}") for k, r in enumerate(roles.replace(" ", ""))]
    out = place_instructions(items)
    assert "".join(item.raw[0] for item in out) == placed.replace(" ", "")
    assert sorted(item.raw for item in out) == sorted(item.raw for item in items)


# -- which models check ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "checks"),
    [
        ("anthropic/claude-fable-5-1", True),
        ("anthropic.claude-opus-5-5-20261001-v1:0", True),  # Bedrock
        ("vertex_ai/claude-mythos-5-2@20261101", True),
        ("claude-haiku-5-5", True),
        ("claude-opus-6", True),
        ("claude-opus-5", False),  # Fable 5.1 reads its blocks; it runs no check
        ("anthropic/claude-sonnet-4-5-20250929", False),
        ("claude-opus-4-20250514", False),  # a date is no minor version
        ("claude-3-5-sonnet-20241022", False),
        ("openai/gpt-5", False),
    ],
)
def test_the_prefix_check_is_assumed_for_claude_5_1_and_later(model: str, checks: bool) -> None:
    assert runs_prefix_check(model) is checks


def test_the_proxy_resolves_the_prefix_check_from_the_deployments_unless_set() -> None:
    import litellm

    from compact_hook.proxy.request.models import ModelSettings

    def deployment(group: str, model: str, **compact: Any) -> dict[str, Any]:
        info = {"compact": {"context_window": 1000, **compact}}
        return {"model_name": group, "litellm_params": {"model": model, "api_key": "x"}, "model_info": info}

    router = litellm.Router(
        model_list=[
            deployment("new", "anthropic/claude-fable-5-1"),
            deployment("old", "anthropic/claude-sonnet-4-5"),
            deployment("told", "anthropic/claude-sonnet-4-5", thinking_prefix_check=True),
        ]
    )
    settings = ModelSettings(CompactConfig())
    resolved = {group: settings.resolve(router, group) for group in ("new", "old", "told")}
    assert {group: c.thinking_prefix_check for group, c in resolved.items() if c} == {
        "new": True,
        "old": False,
        "told": True,
    }


# -- an agent loop against the provider's rules -------------------------------------------------------------


NEW, OLD = "claude-fable-5-1", "claude-sonnet-4-5"
"""A model that runs the prefix check, one that does not (``proxy.request.models.runs_prefix_check``)."""
THINKING: dict[str, dict[str, Any] | None] = {
    "off": None,
    "enabled": {"type": "enabled", "budget_tokens": 1024},
    "interleaved": {"type": "enabled", "budget_tokens": 1024},  # + the interleaved-thinking beta
    "adaptive": {"type": "adaptive"},
}
CLEAR_THINKING = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
TASK_EVERY = 6
"""Every sixth turn the model answers with text and the user gives a new task: a new turn."""


@dataclass
class Loop:
    """A Claude Code-like agent: a task, a mid-conversation system entry, then tool turns and
    now and then a new task. Its answers carry thinking as the mode says — ``enabled``: on the
    first answer of each turn; ``interleaved``, ``adaptive``: on every answer — each block signed
    with what was forwarded; the provider's rules (``agent_script.thinking_problem``) judge every
    forwarded request."""

    settings: CompactConfig
    model: str = NEW
    thinking: str = "adaptive"
    summarizer: FakeSummarizer = field(default_factory=FakeSummarizer)
    compactor: Compactor = field(default_factory=lambda: Compactor(MemoryStore(1000, 3600)))
    history: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"role": "user", "content": [{"type": "text", "text": "task: fix the parser " + w(20)}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment " + w(15)}]},
        ]
    )
    output_words: int = 60
    ratio: CountRatio = IDENTITY
    """The provider's tokens per one of ours, as the model group knows it."""
    kept: int = 0
    removed: int = 0
    compacted: int = 0
    cleared: int = 0
    reasons: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.settings = dataclasses.replace(
            self.settings, thinking_prefix_check=runs_prefix_check(self.model)
        )

    async def turn(self, number: int) -> None:
        body = {"model": self.model, "system": SYSTEM, "tools": TOOLS, "max_tokens": 50}
        if THINKING[self.thinking] is not None:
            body |= {"thinking": THINKING[self.thinking], "context_management": CLEAR_THINKING}
        body["messages"] = copy.deepcopy(self.history)
        result = await run(
            "anthropic", body, self.settings, self.summarizer, self.compactor, ratio=self.ratio
        )
        forwarded = {**body, "messages": result.messages}
        standin_upstream.check_anthropic_messages(forwarded)  # pairing, roles, system placement
        assert agent_script.thinking_problem(forwarded) is None, f"turn {number}"
        self.kept += sum(
            agent_script._signature(b) is not None for m in result.messages for b in content_blocks(m)
        )
        self.removed += result.thinking_removed
        self.compacted += result.cache in (CacheStatus.MISS, CacheStatus.PREPARED)
        self.reasons.add(str(result.reason))
        self.cleared = max(self.cleared, result.cleared)
        self.history += self._answer(number, forwarded, len(result.messages))

    def _answer(self, number: int, forwarded: dict[str, Any], upto: int) -> list[dict[str, Any]]:
        """The model's answer to the forwarded request, then what the client adds after it."""
        opens_turn = not agent_script._has_results(self.history[-1])
        thinks = self.thinking in ("interleaved", "adaptive") or (self.thinking == "enabled" and opens_turn)
        content: list[dict[str, Any]] = []
        if thinks:
            signature = agent_script.binding(forwarded, upto)
            content.append({"type": "thinking", "thinking": f"turn {number} " + w(8), "signature": signature})
        if number % TASK_EVERY == 0:
            content.append({"type": "text", "text": f"done with task {number // TASK_EVERY} " + w(10)})
            task = {"role": "user", "content": [{"type": "text", "text": f"next task {number} " + w(12)}]}
            return [{"role": "assistant", "content": content}, task]
        call = f"t{number}"
        content.append(
            {"type": "tool_use", "id": call, "name": "Bash", "input": {"command": f"seq {number}"}}
        )
        result: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": call, "content": w(self.output_words, "out")}
        ]
        added = [{"role": "assistant", "content": content}, {"role": "user", "content": result}]
        if number % 9 == 0:  # Claude Code adds instructions as it goes
            result.append({"type": "text", "text": "<system-reminder>keep going</system-reminder>"})
            added.append({"role": "system", "content": f"# Tools changed at turn {number}"})
        return added


LOOPS = {
    "model summaries": config(),
    "clearing first": config(
        clear_tool_results=True, clear_trigger_ratio=0.5, clear_at_least=50, keep_tool_results=2
    ),
    "digest summaries": config(summary_model="digest"),
    "pins at their share": config(pinned_budget=20, user_message_budget=200),
}
MODES = [
    (NEW, "adaptive"),
    (NEW, "interleaved"),
    (NEW, "enabled"),
    (OLD, "off"),
    (OLD, "interleaved"),
    (OLD, "enabled"),
]


@pytest.mark.parametrize(("model", "thinking"), MODES)
@pytest.mark.parametrize("name", sorted(LOOPS))
async def test_an_agent_loop_sends_no_refused_thinking_no_orphan_and_no_misplaced_system_entry(
    name: str, model: str, thinking: str
) -> None:
    loop = Loop(LOOPS[name], model, thinking)
    for number in range(1, 41):
        await loop.turn(number)
    assert loop.compacted >= 2 or loop.cleared, loop.reasons  # the prefix changed, more than once
    if thinking != "off":
        assert loop.kept > 0  # the blocks produced since a change were sent back, byte for byte
    assert (loop.removed > 0) is (model == NEW and thinking != "off")  # only where the check runs


def test_the_turn_in_progress_is_read_as_the_messages_api_reads_it_consecutive_user_messages_as_one() -> None:
    """The rule the loops above are judged by (``agent_script.missing_turn_thinking``): it fails a
    turn that opens without thinking, and reads a summary after the turn's tool results as part of
    that user turn, as Anthropic does (consecutive same-role messages are one turn)."""
    opening = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, _use("a")],
    }
    step = {"role": "assistant", "content": [_use("b")]}
    summary = {"role": "user", "content": [{"type": "text", "text": "[compact_hook summary] ..."}]}
    task = {"role": "user", "content": "task"}
    joined = {
        "model": OLD,
        "thinking": THINKING["enabled"],
        "messages": [task, opening, _done("a"), summary, step, _done("b")],
    }
    assert agent_script.thinking_problem(joined) is None
    cut = {**joined, "messages": [task, summary, step, _done("b")]}  # the opening summarized away
    assert "must start with a thinking block" in str(agent_script.thinking_problem(cut))


def _use(call: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call, "name": "Bash", "input": {}}


def _done(call: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": "ok"}]}


GROWN = config(context_window=50_000)
"""The same model with a larger window (an operator's change, a learned limit that expired): the
conversation is now far under every threshold."""


async def test_a_conversation_we_compacted_stays_compacted_when_its_window_grows_back() -> None:
    loop = Loop(config())
    for number in range(1, 21):
        await loop.turn(number)
    assert loop.compacted
    loop.settings, kept = GROWN, loop.kept
    for number in range(21, 26):  # forwarded as sent, every block since the compaction would be refused
        await loop.turn(number)
    assert loop.kept > kept  # the state still applies: blocks produced under it keep being sent back


async def test_after_a_fitted_request_no_thinking_is_sent_back_until_the_next_compaction() -> None:
    """Each tool output alone is over the window, so every request is fitted (outputs shrunk, old
    turns dropped), differently each turn: no block produced since can be trusted to see its
    prefix again, not even once the window has grown and nothing needs fitting."""
    loop = Loop(config(), output_words=1200)
    for number in range(1, 7):
        await loop.turn(number)
    assert loop.reasons & {"fitted", "over_trigger"}, (
        loop.reasons
    )  # the fit shrank what the summary could not
    assert loop.removed > 0 and loop.kept == 0
    loop.settings, loop.output_words = GROWN, 60
    for number in range(7, 10):
        await loop.turn(number)
    assert loop.kept == 0


async def test_a_fitted_request_the_providers_count_then_lets_through_sends_no_thinking_bound_to_the_fit() -> (
    None
):
    """The group's ratio (learned from other conversations, above the prior) counted a resumed
    session's first request over the window, so it was fitted (its tool output shrunk); the
    conversation's own bill then taught the prior's, and the next request goes through as sent. The
    block the model produced for the fitted request saw the shrunk output: sent back beside the whole
    one, it would be refused. The fitted request left a state at the conversation's start, so it is not."""
    loop = Loop(config(), ratio=CountRatio(1.5, RatioSource.MODEL_GROUP))
    loop.history = [
        {"role": "user", "content": [{"type": "text", "text": "task: read the log " + w(20)}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t0", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": w(400, "log")}]},
    ]
    await loop.turn(1)
    assert loop.reasons & {"fitted", "nothing_to_summarize"}, loop.reasons
    loop.ratio = CountRatio(1.0, RatioSource.CONVERSATION)
    await loop.turn(2)  # checked by the provider's rules
    assert loop.removed > 0  # forwarded as sent, the block produced for the fitted request left out


# -- the reserve leaves no room -------------------------------------------------------------------------------


async def test_a_reserve_that_fills_the_window_forwards_the_request_as_sent_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = {"messages": [{"role": "user", "content": w(900)}], "max_tokens": 1000}
    compactor = Compactor(None)
    with caplog.at_level(logging.WARNING, logger="compact_hook"):
        first = await run("anthropic", body, config(), compactor=compactor)
        again = await run("anthropic", copy.deepcopy(body), config(), compactor=compactor)
    assert first.reason is again.reason is Reason.NO_ROOM
    assert first.messages is body["messages"] and not first.compacted
    assert len([r for r in caplog.records if "no room for messages" in r.getMessage()]) == 1

"""The sessions ``bench_cost.py`` replays, each as its client sends it to ``/v1/messages``, turn by turn.

A ``Session`` holds Anthropic Messages (the Claude Code transcripts as recorded; the chat transcripts
converted by ``chat_to_anthropic``), the ``system`` and ``tools`` its client sends, the points where
the client calls the model and, per point, whether a person typed the last message (the replay pauses
before it) or a tool answered (the next call follows at once).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compact_hook.wires import ANTHROPIC
from tests.support import anthropic_replay_points, load_transcript, tokens_of

ROOT = Path(__file__).resolve().parents[1]
CLAUDE_CODE_CAPTURE = ROOT / "tests" / "data" / "clients" / "claude-2.1.332-last.json"
MARKER = {"type": "ephemeral"}

Message = dict[str, Any]
Block = dict[str, Any]

CLAUDE_CODE_FILES = ("claude_code_fa812bfe_pre_compact.json", "claude_code_subagent_afc096d.json")
CHAT_FILES = (
    "openhands_ponylang__ponyc-4593.json",
    "openhands_ponylang__ponyc-4595.json",
    "sweagent_ctf_web_i_got_id.json",
    "sweagent_fc_marshmallow-1867.json",
    "sweagent_gpt4_test-repo-i1.json",
    "tau_bench_airline_gpt4o_task2_trial1.json",
    "tau_bench_airline_gpt4o_task33_trial0.json",
    "tau_bench_airline_gpt4o_task3_trial0.json",
)


@dataclass(frozen=True)
class Session:
    name: str
    messages: list[Message]
    system: str | list[Block] | None
    tools: list[dict[str, Any]] | None
    points: list[int]
    human: list[bool]
    """Per point: the last message is a person's own words (not tool results)."""
    tokenizer: str
    claude_code: bool
    """Sent by Claude Code: its system prompt (``cache_control`` on two blocks), tools and moving
    breakpoint."""

    def request(self, end: int, breakpoint: bool = True) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for the turn ending at ``end``: Claude Code's
        moving breakpoint on the last message when ``breakpoint`` (new objects where it goes; the
        transcript itself is never changed)."""
        messages = self.messages[:end]
        if self.claude_code and breakpoint:
            messages = with_last_breakpoint(messages)
        body: dict[str, Any] = {"messages": messages}
        if self.system:
            body["system"] = self.system
        if self.tools:
            body["tools"] = self.tools
        return body

    def peak_tokens(self) -> int:
        """The largest turn, system and tools included, counted as compact_hook counts it."""
        return max(tokens_of(self.request(end), ANTHROPIC, self.tokenizer) for end in self.points)


def with_last_breakpoint(messages: list[Message]) -> list[Message]:
    """Claude Code's moving breakpoint: ``cache_control`` on the last message's first content block."""
    *earlier, last = messages
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks[0] = {**blocks[0], "cache_control": MARKER}
    return [*earlier, {**last, "content": blocks}]


def has_tool_results(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def claude_code_session(file: str) -> Session:
    """A Claude Code transcript with the system prompt and tools Claude Code 2.1.332 sends."""
    capture = json.loads(CLAUDE_CODE_CAPTURE.read_text(encoding="utf-8"))
    messages = load_transcript(file, "anthropic")["messages"]
    points = anthropic_replay_points(messages)
    return Session(
        name=file.removeprefix("claude_code_").removesuffix(".json"),
        messages=messages,
        system=copy.deepcopy(capture["system"]),
        tools=copy.deepcopy(capture["tools"]),
        points=points,
        human=[not has_tool_results(messages[end - 1]) for end in points],
        tokenizer="claude",
        claude_code=True,
    )


def chat_session(file: str) -> Session:
    """A chat transcript as the Anthropic Messages its agent would send.

    SWE-agent's transcripts without tool calls feed each observation back as a user message: those
    are tool results in all but name, so only the user messages before the first answer count as a
    person's words there.
    """
    chat = load_transcript(file)
    system, messages = chat_to_anthropic(chat)
    points = anthropic_replay_points(messages)
    tool_calling = any(m.get("tool_calls") for m in chat)
    first_answer = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    human = [
        not has_tool_results(messages[end - 1]) and (tool_calling or end - 1 < first_answer) for end in points
    ]
    return Session(
        name=file.removesuffix(".json"),
        messages=messages,
        system=system,
        tools=declared_tools(messages),
        points=points,
        human=human,
        tokenizer="o200k_base",
        claude_code=False,
    )


def declared_tools(messages: list[Message]) -> list[dict[str, Any]] | None:
    """The tools an agent's calls name, declared as its client declares them before calling them
    (Anthropic refuses ``tool_use`` blocks in a request without ``tools``; the transcripts keep the
    calls, not the declarations): a name, a line, any object as input — the least a client sends."""
    names = dict.fromkeys(
        block["name"]
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_use"
    )
    return [
        {"name": name, "description": f"The agent's {name} tool.", "input_schema": {"type": "object"}}
        for name in names
    ] or None


def chat_to_anthropic(chat: list[Message]) -> tuple[str | None, list[Message]]:
    """Chat messages as Anthropic ``system`` and ``messages``.

    System messages become ``system``; assistant ``tool_calls`` become ``tool_use`` blocks (``input``
    parsed from ``arguments``); tool messages become ``tool_result`` blocks of a user message;
    consecutive messages of one role merge. Tool ids are renumbered per call (some agents reuse ids;
    results pair with the calls of the assistant message before them). A call never answered ends the
    history there.
    """
    system = "\n\n".join(m["content"] for m in chat if m["role"] == "system" and m.get("content")) or None
    merged: list[Message] = []
    ids: dict[str, str] = {}
    for message in chat:
        role = message["role"]
        if role == "system":
            continue
        if role == "assistant":
            ids = {}
            blocks = assistant_blocks(message, ids, len(merged))
        elif role == "tool":
            blocks = [tool_result_block(message, ids)]
        else:
            blocks = text_blocks(message.get("content"))
        append_blocks(merged, "assistant" if role == "assistant" else "user", blocks)
    return system, cut_at_unanswered(merged)


def text_blocks(content: Any) -> list[Block]:
    return [{"type": "text", "text": content}] if isinstance(content, str) and content.strip() else []


def assistant_blocks(message: Message, ids: dict[str, str], position: int) -> list[Block]:
    blocks = text_blocks(message.get("content"))
    for n, call in enumerate(message.get("tool_calls") or []):
        new_id = f"toolu_{position:03d}_{n:02d}"
        ids[call["id"]] = new_id
        blocks.append(
            {"type": "tool_use", "id": new_id, "name": call["function"]["name"], "input": arguments(call)}
        )
    return blocks


def arguments(call: dict[str, Any]) -> dict[str, Any]:
    raw = call["function"].get("arguments") or "{}"
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def tool_result_block(message: Message, ids: dict[str, str]) -> Block:
    content = message.get("content")
    return {
        "type": "tool_result",
        "tool_use_id": ids.get(message["tool_call_id"], message["tool_call_id"]),
        "content": content if isinstance(content, str) else json.dumps(content),
    }


def append_blocks(messages: list[Message], role: str, blocks: list[Block]) -> None:
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def cut_at_unanswered(messages: list[Message]) -> list[Message]:
    """The history up to the first assistant message whose tool calls the next message does not answer."""
    for index, message in enumerate(messages):
        asked = {b["id"] for b in message["content"] if b["type"] == "tool_use"}
        following = messages[index + 1] if index + 1 < len(messages) else None
        answered = (
            {b["tool_use_id"] for b in following["content"] if b["type"] == "tool_result"}
            if following
            else set()
        )
        if message["role"] == "assistant" and asked - answered:
            return messages[:index]
    return messages


LATE_SPIKE_BASE = "openhands_ponylang__ponyc-4593.json"
LATE_SPIKE_OUTPUTS = (
    ("openhands_ponylang__ponyc-4595.json", 11),
    ("claude_code_fa812bfe_pre_compact.json", 117),
    ("claude_code_fa812bfe_pre_compact.json", 52),
    ("claude_code_fa812bfe_pre_compact.json", 114),
    ("claude_code_fa812bfe_pre_compact.json", 12),
    ("claude_code_fa812bfe_pre_compact.json", 127),
    ("claude_code_fa812bfe_pre_compact.json", 254),
)
"""Real tool outputs of 11,741 to 20,740 characters (file reads, a build log, …): chat transcript and
message index, largest first."""
LATE_SPIKE_AT = 20
"""The first turn (of 33) whose tool result is replaced: the spike arrives 13 turns before the end."""
LATE_SPIKES = (4, 7)
"""Spikes of four outputs (the newest three, never cleared, hold more than the trigger leaves room
for: a compaction is forced) and of seven (clearing the older ones can carry the session)."""


def late_spike_session(outputs: int) -> Session:
    """A short agent session whose largest tool outputs arrive late (issue 36's shape): little of
    the session is left to pay for what keeps it in its window. OpenHands' ponyc-4593 (33 turns,
    small outputs), the tool results of its turns 21 on replaced by ``outputs`` of the large ones
    above."""
    base = chat_session(LATE_SPIKE_BASE)
    messages = copy.deepcopy(base.messages)
    large = [load_transcript(file)[index]["content"] for file, index in LATE_SPIKE_OUTPUTS[:outputs]]
    for end, output in zip(base.points[LATE_SPIKE_AT:], large, strict=False):
        first = next(block for block in messages[end - 1]["content"] if block["type"] == "tool_result")
        first["content"] = output
    return dataclasses.replace(base, name=f"late_spike_{outputs}_ponyc-4593", messages=messages)


def all_sessions() -> list[Session]:
    return [
        *map(claude_code_session, CLAUDE_CODE_FILES),
        *map(chat_session, CHAT_FILES),
        *map(late_spike_session, LATE_SPIKES),
    ]

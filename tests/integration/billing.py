"""Sessions replayed through a real proxy to a stand-in that bills unlike us: the billing tests' kit.

The stand-in bills each request as its model name asks (``tools/billing.py``: 1.25× or 0.8× o200k,
or as Claude 3 – Opus 4.6 or Opus 4.8 and later count, by ctok) and refuses one over its limit with
the provider's own error. A replay sends a session turn by turn with the surface's official SDK and
keeps, per turn, what the stand-in billed the request that reached it, how many attempts it refused,
and what the hook said it forwarded (``x-compact-tokens-after``, in the provider's tokens).
Shared by ``test_billing_proxy.py`` and ``bench/bench_billing.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.harness import (
    ProxyProcess,
    anthropic_deployment,
    compact_info,
    gemini_deployment,
    standin_deployment,
)
from tests.integration.wire_clients import call
from tests.support import (
    anthropic_replay_points,
    chat_to_google,
    chat_to_responses,
    google_replay_points,
    load_transcript,
    replay_points,
    responses_replay_points,
    with_moving_marker,
)

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "clients"
CLAUDE_CODE = CAPTURES / "claude-2.1.332-last.json"
WIRE_CLIENTS = {
    "chat": "pi-0.73.1-first.json",
    "responses": "codex-0.171.0-first.json",
    "google": "gemini-0.61.0-first.json",
}
"""Whose system prompt and tools each wire's replay sends."""
CLAUDE_WINDOW = 40_000
CLAUDE_RESERVE = 8_192
"""Claude Code asks for 32K; at a 40K window that leaves no room, so the replays ask for 8K."""
WIRE_WINDOW = 32_000
SUMMARY_GROUP = "billing-sum"
TIERS_OFF = {"tool_output_policy": "none", "clear_tool_results": False, "user_message_budget": 0}
"""Where the trigger is what is measured, the cheap tiers stay out of its way."""
CLAUDE = {"3.0": "claude-sonnet-4-5-ctok30", "4.8": "claude-fable-5-ctok48"}
"""Stand-in models billing as Claude 3 – Opus 4.6 and as Opus 4.8, Sonnet 5, Fable 5 count; the
names are Claude's, so the hook's prior for the family applies."""
BILLS = {"1.25": "bill125", "0.8": "bill080"}
WIRES = ("chat", "responses", "google")


@dataclass(frozen=True)
class Session:
    """What a replay sends: the entries, the prefix lengths at which the client calls the model,
    and what else each call carries (system prompt, tools, the reply's reserve)."""

    entries: list[Any]
    points: list[int]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Turn:
    """One turn: what the stand-in billed the request that reached it, the attempts it refused as
    too long, and what the hook said (its ``x-compact-*`` headers)."""

    billed: int
    refused: int
    headers: dict[str, str]

    @property
    def tokens_after(self) -> int:
        return int(self.headers["x-compact-tokens-after"])

    @property
    def error(self) -> float:
        """The hook's figure over the billed count, less one."""
        return self.tokens_after / self.billed - 1

    @property
    def compacted(self) -> bool:
        return self.headers.get("x-compact-cache") in ("miss", "shared", "prepared")


@dataclass
class Replay:
    """A replayed session: its turns, in order, and the window its stand-in refuses past."""

    limit: int
    turns: list[Turn] = field(default_factory=list)

    @property
    def refusals(self) -> int:
        return sum(turn.refused for turn in self.turns)

    @property
    def largest(self) -> int:
        return max(turn.billed for turn in self.turns)

    @property
    def compactions(self) -> int:
        return sum(1 for turn in self.turns if turn.compacted)

    def errors(self) -> list[float]:
        return [turn.error for turn in self.turns]

    def before_first_compaction(self) -> list[Turn]:
        first = next((k for k, turn in enumerate(self.turns) if turn.compacted), len(self.turns))
        return self.turns[:first]


def billing_config(standin: Any, archive: Path) -> dict[str, Any]:
    """A proxy with a Claude group per family (``claude-3.0``, ``claude-4.8``: 40K, Claude Code's
    system and tools) and a group per wire and bill (``chat-1.25``, ``google-0.8``…: 20K, the
    cheap tiers off), every stand-in refusing past the window; summaries by a stand-in of our own
    tokens."""
    url, root = standin.url, standin.root_url
    claude = {"context_window": CLAUDE_WINDOW, "summary_max_tokens": 1000}
    wire = {"context_window": WIRE_WINDOW, "summary_max_tokens": 1000, **TIERS_OFF}
    models = [standin_deployment(SUMMARY_GROUP, url, "standin-billing-summary")]
    for family, name in CLAUDE.items():
        info = compact_info(archive, claude, summary_model=SUMMARY_GROUP)
        models.append(anthropic_deployment(f"claude-{family}", root, f"{name}-limit{CLAUDE_WINDOW}", **info))
    for bill, mode in BILLS.items():
        info = compact_info(archive, wire, summary_model=SUMMARY_GROUP)
        model = f"standin-{mode}-limit{WIRE_WINDOW}"
        models.append(standin_deployment(f"chat-{bill}", url, model, **info))
        models.append(standin_deployment(f"responses-{bill}", url, model, **info))
        models.append(
            gemini_deployment(f"google-{bill}", root, f"gemini-2.5-{mode}-limit{WIRE_WINDOW}", **info)
        )
    return {"model_list": models, "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"}}


def claude_code_sessions() -> dict[str, Session]:
    """The recorded Claude Code sessions as Claude Code 2.1.332 sends them (its system prompt and
    tools, as captured): the main one (127 turns, several windows long) and a subagent's."""
    captured = json.loads(CLAUDE_CODE.read_text(encoding="utf-8"))
    extra = {"system": captured["system"], "tools": captured["tools"], "max_tokens": CLAUDE_RESERVE}
    sessions = {}
    for name in ("claude_code_fa812bfe_pre_compact.json", "claude_code_subagent_afc096d.json"):
        messages = load_transcript(name, "anthropic")["messages"]
        sessions[name] = Session(messages, anthropic_replay_points(messages), extra)
    return sessions


def wire_session(wire: str, turns: int) -> Session:
    """The Claude Code session's first ``turns`` turns in ``wire``'s shape, after the system prompt
    and tool definitions a real client of that wire sent (captured: pi on chat, Codex on Responses,
    Gemini CLI on ``generateContent``)."""
    messages = load_transcript("claude_code_fa812bfe_pre_compact.json")
    captured = json.loads((CAPTURES / WIRE_CLIENTS[wire]).read_text(encoding="utf-8"))
    if wire == "responses":
        head = [item for item in captured["input"] if item.get("role") == "developer"]
        items = chat_to_responses(messages)
        points = responses_replay_points(items)[:turns]
        return Session(head + items, [len(head) + end for end in points], {"tools": captured["tools"]})
    if wire == "google":
        contents = chat_to_google(messages)
        extra = {"system_instruction": captured["systemInstruction"], "tools": captured["tools"]}
        return Session(contents, google_replay_points(contents)[:turns], extra)
    head = [message for message in captured["messages"] if message["role"] == "system"]
    points = replay_points(messages)[:turns]
    return Session(head + messages, [len(head) + end for end in points], {"tools": captured["tools"]})


TOOLS_RUN_SECONDS = 0.1
"""Between turns, as an agent runs its tools: the proxy hears a response's bill in LiteLLM's success
logging, after the client has its answer, and the next turn is counted from the bills heard by then
(a turn sent the instant the last one ends is counted from the bill before: still close, not exact)."""


def replay(standin: Any, proxies: Sequence[ProxyProcess], wire: str, group: str, session: Session) -> Replay:
    """The session turn by turn, to ``proxies`` in turn (replicas), every other turn streamed;
    Anthropic turns carry Claude Code's moving cache breakpoint."""
    limit = CLAUDE_WINDOW if wire == "anthropic" else WIRE_WINDOW
    result = Replay(limit)
    for number, end in enumerate(session.points):
        sent = session.entries[:end]
        if wire == "anthropic":
            sent = with_moving_marker(sent)
        proxy = proxies[number % len(proxies)]
        result.turns.append(_turn(standin, proxy, wire, group, sent, number % 2 == 1, session.extra))
        time.sleep(TOOLS_RUN_SECONDS)
    return result


def _turn(
    standin: Any,
    proxy: ProxyProcess,
    wire: str,
    group: str,
    sent: list[Any],
    stream: bool,
    extra: dict[str, Any],
) -> Turn:
    before = len(standin.requests)
    headers, _ = call(proxy, wire, group, sent, stream, **dict(extra))
    mains = [r for r in _posts(standin.requests[before:]) if "billing-summary" not in str(_model(r))]
    limit = CLAUDE_WINDOW if wire == "anthropic" else WIRE_WINDOW
    refused = sum(1 for r in mains if r["billed"] > limit)
    return Turn(mains[-1]["billed"], refused, {k.lower(): v for k, v in headers.items()})


def _posts(records: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (r for r in records if r["method"] == "POST" and "billed" in r)


def _model(record: dict[str, Any]) -> object:
    body = record.get("body") or {}
    return record.get("model") or (body.get("model") if isinstance(body, dict) else None)


TOLERANCE = 0.035
"""How far ``x-compact-tokens-after`` may be from the bill, from a conversation's second request on.
The worst turn is a conversation's first clearing (Claude Code's main session, Opus 4.8's count):
the ratio learned from its growth values the outputs taken out at the margin — 2.96% over the bill
with recall off, 3.02% with recall's handles and tool (16 tokens more of 23,491)."""


def assert_agrees(replay_: Replay, window: int) -> None:
    """Never refused, within the window, and within ``TOLERANCE`` of the bill from the second turn on."""
    assert replay_.refusals == 0, [turn.billed for turn in replay_.turns]
    assert replay_.largest <= window
    later = replay_.errors()[1:]
    worst = max(later, key=abs)
    assert abs(worst) <= TOLERANCE, f"x-compact-tokens-after {worst:+.1%} off the bill ({later})"

"""compact_hook against what users would pick instead, in one run, on one surface.

    .venv/bin/python bench/compare_builtins.py [--turns N]

A Claude Code session (Anthropic format, 288 messages, ~105K tokens) is sent turn by turn with the
official Anthropic SDK to ``/v1/messages`` of a real LiteLLM proxy, once per configuration. The
model group is an ``openai/`` deployment to the stand-in upstream with
``use_chat_completions_url_for_anthropic_messages``: that is where LiteLLM's ``context_management``
polyfills run (they only apply when it translates /v1/messages for a non-Anthropic provider), and
every configuration is measured on what reaches the provider's chat completions. All triggers are at
50,000 tokens: the polyfill's minimum (compact_hook: ``context_window`` 54,348 × 0.92).

Measured per configuration: summary calls, and the compaction events they served (compact_hook: its
``x-compact-cache`` header; the polyfill: turns forwarded with a new summary); forwarded ÷ raw
tokens over the turns past the trigger (raw: what the plain proxy forwarded); turns whose last 4
forwarded messages equal the plain proxy's (recent messages kept byte-identical); turns with an
orphaned tool call or result; turns whose forwarded messages extend the previous turn's (prefix
stable, the provider's prompt cache keeps hitting); median turn time over the plain proxy's; failed
requests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anthropic  # noqa: E402

from compact_hook import count_tokens  # noqa: E402
from compact_hook.cli.inputs import load  # noqa: E402
from compact_hook.cli.replay import turn_ends  # noqa: E402
from tests.integration.harness import ProxyProcess, StandinUpstream, standin_deployment  # noqa: E402
from tests.support import pairing_problems  # noqa: E402

TRANSCRIPT = ROOT / "tests" / "data" / "transcripts" / "anthropic" / "claude_code_fa812bfe_pre_compact.json"
TRIGGER = 50_000
HOOK_WINDOW = 54_348  # × 0.92 = 50,000
RECENT = 4
SUMMARIZER = "standin-summarizer"


@dataclass(frozen=True)
class Setup:
    name: str
    model_info: dict[str, Any] = field(default_factory=dict)
    callbacks: list[str] = field(default_factory=list)
    context_management: dict[str, Any] | None = None
    note: str = ""


SETUPS = [
    Setup("no feature (plain proxy)"),
    Setup(
        "LiteLLM `compact_20260112` polyfill",
        context_management={
            "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": TRIGGER}}]
        },
        note="client sends `context_management`",
    ),
    Setup(
        "LiteLLM `clear_tool_uses_20250919` polyfill",
        context_management={
            "edits": [
                {
                    "type": "clear_tool_uses_20250919",
                    "trigger": {"type": "input_tokens", "value": TRIGGER},
                    "keep": {"type": "tool_uses", "value": 3},
                }
            ]
        },
        note="client sends `context_management`; no summary",
    ),
    Setup(
        "compact_hook, all tiers",
        {"compact": {"context_window": HOOK_WINDOW, "summary_model": "summarizer", "prepare": False}},
        ["compact_hook.proxy_handler_instance"],
        note="`prepare: false`: summaries on the request path, as the others",
    ),
    Setup(
        "compact_hook, summary only",
        {
            "compact": {
                "context_window": HOOK_WINDOW,
                "summary_model": "summarizer",
                "prepare": False,
                "tool_output_policy": "none",
                "clear_tool_results": False,
            }
        },
        ["compact_hook.proxy_handler_instance"],
    ),
]

NOT_RUN = [
    (
        "LiteLLM `compression_interception`",
        "not run: BM25 stubbing with a retrieval tool the model must call back, absolute 200K trigger "
        "(this session never reaches it); no summaries",
    ),
    (
        "LiteLLM complexity-router compaction",
        "not run: part of the complexity router (a routing strategy choosing among models), not a "
        "per-model setting; nothing cached across requests",
    ),
]


@dataclass
class Measured:
    forwarded: list[list[dict[str, Any]]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    events: int = 0
    summary_calls: int = 0
    failed: int = 0


def config_for(setup: Setup, standin: StandinUpstream) -> dict[str, Any]:
    agent = standin_deployment("agent", standin.url, "standin-agent", **setup.model_info)
    return {
        "model_list": [agent, standin_deployment("summarizer", standin.url, SUMMARIZER)],
        "litellm_settings": {
            "use_chat_completions_url_for_anthropic_messages": True,
            **({"callbacks": setup.callbacks} if setup.callbacks else {}),
        },
        "general_settings": {"context_management_summary_model": "summarizer"},
    }


def run(setup: Setup, standin: StandinUpstream, body: dict[str, Any], ends: list[int]) -> Measured:
    measured = Measured()
    with ProxyProcess(config_for(setup, standin)) as proxy:
        client = anthropic.Anthropic(api_key=proxy.master_key, base_url=proxy.url, max_retries=0, timeout=600)
        extra = {"context_management": setup.context_management} if setup.context_management else {}
        for end in ends:
            before = len(standin.chat_requests)
            start = time.perf_counter()
            try:
                raw = client.messages.with_raw_response.create(
                    model="agent",
                    messages=body["messages"][:end],
                    max_tokens=1024,
                    **({"system": body["system"]} if body.get("system") else {}),
                    extra_body=extra,
                )
                cache = raw.headers.get("x-compact-cache", "")
            except anthropic.APIError:
                measured.failed += 1
                cache = ""
            measured.seconds.append(time.perf_counter() - start)
            sent = [r["body"] for r in standin.chat_requests[before:]]
            measured.summary_calls += sum(1 for b in sent if b.get("model") == SUMMARIZER)
            main = [b for b in sent if b.get("model") != SUMMARIZER]
            measured.forwarded.append(main[-1]["messages"] if main else [])
            measured.events += cache in ("miss", "shared", "prepared")
    return measured


def polyfill_events(measured: Measured) -> int:
    """Turns forwarded with a summary not seen on the turn before (the polyfill caches nothing)."""
    texts = [json.dumps(messages[:2]) for messages in measured.forwarded]
    marker = "Previous conversation summary"
    return sum(1 for i, text in enumerate(texts) if marker in text and (i == 0 or texts[i - 1] != text))


def canonical(messages: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(m, sort_keys=True) for m in messages]


def row(setup: Setup, measured: Measured, plain: Measured) -> str:
    raw = [count_tokens(m) if m else 0 for m in plain.forwarded]
    sent = [count_tokens(m) if m else 0 for m in measured.forwarded]
    past = [i for i, tokens in enumerate(raw) if tokens >= TRIGGER]
    ratio = sum(sent[i] for i in past) / max(1, sum(raw[i] for i in past))
    recent = sum(
        canonical(measured.forwarded[i][-RECENT:]) == canonical(plain.forwarded[i][-RECENT:])
        for i in range(len(raw))
    )
    orphans = sum(1 for messages in measured.forwarded if messages and pairing_problems(messages))
    stable = sum(
        canonical(measured.forwarded[i])[: len(measured.forwarded[i - 1])]
        == canonical(measured.forwarded[i - 1])
        for i in range(1, len(raw))
    )
    events = measured.events or polyfill_events(measured)
    added = (statistics.median(measured.seconds) - statistics.median(plain.seconds)) * 1000
    turns = len(raw)
    return (
        f"| {setup.name} | {measured.summary_calls} | {events} | {ratio:.3f} | {recent}/{turns} | {orphans} "
        f"| {stable}/{turns - 1} | {added:+.0f} | {measured.failed} | {setup.note} |"
    )


HEADER = (
    "| configuration | summary calls | compaction events | forwarded ÷ raw past the trigger "
    "| turns with the last 4 messages byte-identical | turns with orphans | prefix-stable turns "
    "| median ms over plain | failed | notes |\n|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=None, help="replay at most this many turns")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "compare_builtins.md")
    args = parser.parse_args()
    loaded = load(TRANSCRIPT)
    ends = turn_ends(loaded)[: args.turns]
    standin = StandinUpstream().start()
    try:
        results = [(setup, run(setup, standin, loaded.data, ends)) for setup in SETUPS]
    finally:
        standin.stop()
    plain = results[0][1]
    lines = [HEADER, *(row(setup, measured, plain) for setup, measured in results)]
    lines += [f"| {name} | – | – | – | – | – | – | – | – | {why} |" for name, why in NOT_RUN]
    table = "\n".join(lines)
    command = ".venv/bin/python bench/compare_builtins.py" + (f" --turns {args.turns}" if args.turns else "")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        f"{len(ends)} turns of the Claude Code session, trigger 50,000 tokens.\n\n{table}\n\n`{command}`\n"
    )
    print(table)


if __name__ == "__main__":
    main()

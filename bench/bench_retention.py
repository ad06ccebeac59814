"""Retention: what the agent was told, still in front of it after compaction — compact_hook against
LiteLLM's ``compact_20260112`` polyfill, on the same replays.

    .venv/bin/python bench/bench_retention.py [--turns N] [--only NAME]

Facts are planted into shared transcripts (``tests/retention.py``: a constraint in the first user
message, two ``<system-reminder>`` instruction blocks, file paths in every third tool call's arguments, an
error line at the end of every third tool result). Each transcript is replayed turn by turn with the
official Anthropic SDK to ``/v1/messages`` of one real LiteLLM proxy whose model groups are ``openai/``
deployments to the stand-in upstream (``use_chat_completions_url_for_anthropic_messages``: where the
polyfill runs); chat transcripts are converted to Messages first. On every turn from the first one a
configuration changed (a summary; for compact_hook also a cheap tier clearing or cutting tool outputs, as its
``x-compact-tokens-*`` headers report), the planted facts the client has sent so far are looked up word for
word in what reached the provider.

- compact_hook: ``summary_model: digest`` (the built-in digest, no model), all tiers, defaults otherwise;
- the polyfill: the client sends ``context_management`` with ``compact_20260112``; its summary comes from the
  stand-in (a canned summary quoting none of the facts, as a real model might paraphrase them).

The polyfill will not trigger under 50,000 tokens, and these conversations are 10-135K tokens: so every
request carries a filler system prompt of ~42,000 tokens and both trigger at 50,000 tokens in all
(compact_hook: ``context_window`` 54,348 x 0.92), i.e. at ~8,000 tokens of conversation, as in an 8K window.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anthropic  # noqa: E402

from tests.integration.harness import ProxyProcess, StandinUpstream, standin_deployment  # noqa: E402
from tests.retention import (  # noqa: E402
    KINDS,
    TARGETS,
    Planted,
    Retention,
    chat_to_anthropic,
    compacted,
    plant,
    relocate,
)
from tests.support import anthropic_replay_points, load_transcript  # noqa: E402

TRIGGER = 50_000
HOOK_WINDOW = 54_348  # x 0.92 = 50,000
CONVERSATION = 8_000
SUMMARIZER = "standin-summarizer"
TRANSCRIPTS = [
    ("openai", "sweagent_ctf_web_i_got_id.json"),
    ("openai", "sweagent_gpt4_test-repo-i1.json"),
    ("openai", "openhands_ponylang__ponyc-4593.json"),
    ("openai", "openhands_ponylang__ponyc-4595.json"),
    ("openai", "tau_bench_airline_gpt4o_task2_trial1.json"),
    ("anthropic", "claude_code_subagent_afc096d.json"),
    ("anthropic", "claude_code_fa812bfe_pre_compact.json"),
]
CONTEXT_MANAGEMENT = {
    "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": TRIGGER}}]
}


@dataclass(frozen=True)
class Setup:
    name: str
    model: str
    extra: dict[str, Any]


SETUPS = [
    Setup("compact_hook (digest)", "agent-hook", {}),
    Setup("LiteLLM compact_20260112", "agent-plain", {"context_management": CONTEXT_MANAGEMENT}),
]


def filler(tokens: int) -> str:
    """A system prompt of about ``tokens`` tokens (o200k) that plants nothing."""
    from compact_hook.state.tokenizers import counter_for

    line = "Reference material for the assistant, paragraph {n}: answer precisely and keep the work tidy.\n"
    per_line = counter_for("o200k_base").count_text(line.format(n=1000))
    return "".join(line.format(n=n) for n in range(tokens // per_line))


def transcript(fmt: str, name: str) -> tuple[str, Planted]:
    tag = "".join(ch for ch in name.split(".")[0] if ch.isalnum())[:14]
    if fmt == "anthropic":
        data = load_transcript(name, "anthropic")
        system = data.get("system") or ""
        system_text = system if isinstance(system, str) else "\n".join(b.get("text", "") for b in system)
        return tag, plant(data["messages"], "anthropic", tag, system_text)
    planted = plant(load_transcript(name), "chat", tag)
    system, messages = chat_to_anthropic(planted.entries)
    return tag, Planted(messages, relocate(planted.facts, messages), system)


def config(standin: StandinUpstream, archive: Path) -> dict[str, Any]:
    compact = {"context_window": HOOK_WINDOW, "summary_model": "digest", "archive_dir": str(archive)}
    return {
        "model_list": [
            standin_deployment("agent-hook", standin.url, "standin-agent", compact=compact),
            standin_deployment("agent-plain", standin.url, "standin-agent"),
            standin_deployment("summarizer", standin.url, SUMMARIZER),
        ],
        "litellm_settings": {
            "use_chat_completions_url_for_anthropic_messages": True,
            "callbacks": ["compact_hook.proxy_handler_instance"],
        },
        "general_settings": {"context_management_summary_model": "summarizer"},
    }


def replay(
    client: anthropic.Anthropic,
    standin: StandinUpstream,
    setup: Setup,
    planted: Planted,
    system: str,
    turns: int | None,
) -> tuple[Retention, int | None, int]:
    """The retention over the turns from the first change on, that turn, and failed requests."""
    retention, first, failed = Retention(), None, 0
    ends = anthropic_replay_points(planted.entries)[:turns]
    for turn, end in enumerate(ends, start=1):
        before = len(standin.chat_requests)
        try:
            raw = client.messages.with_raw_response.create(
                model=setup.model,
                system=system,
                messages=planted.entries[:end],
                max_tokens=1024,
                extra_body=setup.extra,
            )
        except anthropic.APIError:
            failed += 1
            continue
        main = [r["body"] for r in standin.chat_requests[before:] if r["body"].get("model") != SUMMARIZER]
        forwarded = main[-1]["messages"]
        if first is None and compacted(forwarded, raw.headers):
            first = turn
        if first is not None:
            retention.add(turn, planted.facts, end, forwarded)
    return retention, first, failed


def cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--turns", type=int, default=None, help="replay at most this many turns per transcript"
    )
    parser.add_argument("--only", default=None, help="only transcripts whose name contains this")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "retention.md")
    args = parser.parse_args()
    chosen = [(fmt, name) for fmt, name in TRANSCRIPTS if args.only is None or args.only in name]
    padding = filler(TRIGGER - CONVERSATION)
    standin = StandinUpstream().start()
    rows, totals = [], {setup.name: Retention() for setup in SETUPS}
    try:
        archive = Path("/tmp") / "compact_hook_bench_retention"
        with ProxyProcess(config(standin, archive)) as proxy:
            client = anthropic.Anthropic(
                api_key=proxy.master_key, base_url=proxy.url, max_retries=0, timeout=600
            )
            for fmt, name in chosen:
                tag, planted = transcript(fmt, name)
                system = f"{planted.system or ''}\n\n{padding}"
                for setup in SETUPS:
                    retention, first, failed = replay(client, standin, setup, planted, system, args.turns)
                    totals[setup.name].merge(retention)
                    rows.append((name, setup.name, retention, first, failed))
                    print(
                        name,
                        setup.name,
                        first,
                        retention.sent,
                        retention.kept,
                        retention.missing[:3],
                        flush=True,
                    )
    finally:
        standin.stop()
    write(args, rows, totals)


def write(args: argparse.Namespace, rows: list[Any], totals: dict[str, Retention]) -> None:
    header = (
        "| transcript | configuration | first change (turn) | turns measured | "
        + " | ".join(f"{kind} (target {TARGETS[kind]:.0%})" for kind in KINDS)
        + " | failed |\n|"
        + "---|" * (5 + len(KINDS))
    )
    lines = [header]
    for name, setup, retention, first, failed in rows:
        shares = " | ".join(
            f"{cell(retention.share(kind))} ({cell(retention.share(kind, outside=True))})" for kind in KINDS
        )
        lines.append(f"| {name} | {setup} | {first or '–'} | {retention.turns} | {shares} | {failed} |")
    for setup, retention in totals.items():
        shares = " | ".join(
            f"**{cell(retention.share(kind))}** ({cell(retention.share(kind, outside=True))})"
            for kind in KINDS
        )
        lines.append(f"| **all** | {setup} | | {retention.turns} | {shares} | |")
    table = "\n".join(lines)
    command = ".venv/bin/python bench/bench_retention.py" + (f" --turns {args.turns}" if args.turns else "")
    note = (
        "Share of the planted facts sent so far that are present word for word in what reached the provider, "
        "over every turn from the first change on (a summary, or a cheap tier); in brackets, outside any "
        "summary (compact_hook's summary message, the polyfill's system prompt). Facts sent: "
        + ", ".join(
            f"{kind} {sum(r[2].sent[kind] for r in rows if r[1] == SETUPS[0].name)}" for kind in KINDS
        )
        + " (counted once per turn)."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"{note}\n\n{table}\n\n`{command}`\n")
    print(table)


if __name__ == "__main__":
    main()

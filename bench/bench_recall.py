"""The needle benchmark (issue 34): the model reads back what compaction took out, on every wire.

Real transcripts get a needle (``NEEDLE-<key>: <value>``) planted in one small tool output early in
the conversation and end with the question ``What is NEEDLE-<key>?``. Sent through a real proxy at
a small window, the output is summarized away: the stand-in's summarizer keeps the handles of the
outputs it summarizes, never their contents (``tools/standin_upstream.py``). The stand-in's
``needle`` model (``tools/recaller.py``) answers from what it sees when the value is there, else
calls the recall tool for every handle it sees and answers from the answers. Each wire — chat
completions, ``/v1/messages``, ``/v1/responses``, ``generateContent`` — whole and streamed, through
its official SDK, with ``recall`` on and off (the same request, another model group).

Per wire × stream: whether the client got the value (recall on / off), whether the needle's output
reached the model byte for byte, the model calls a request took (rounds), the time recall added
(median over ``REPEAT``, the compaction already stored: no summary call in the time), the input
tokens the provider billed (all rounds). Run: ``.venv/bin/python bench/bench_recall.py``.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.harness import (  # noqa: E402
    SUMMARY_MARKER,
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    compact_info,
    gemini_deployment,
    standin_deployment,
)
from tests.integration.wire_clients import call  # noqa: E402
from tests.retention import chat_to_anthropic  # noqa: E402
from tests.support import chat_to_google, chat_to_responses, load_transcript  # noqa: E402

TRANSCRIPTS = ("openhands_ponylang__ponyc-4593.json", "sweagent_fc_marshmallow-1867.json")
WIRES = ("chat", "anthropic", "responses", "google")
WINDOW = 6_000
SETTINGS = {
    "context_window": WINDOW,
    "recall_max_tokens": 16_000,
    "summary_model": "summarizer",
    "summary_max_tokens": 1_000,
}
NEEDLE_SIZE = range(200, 800)
"""Bytes of the output the needle goes in: an answer under 1 KB is never cut, whatever the room."""
REPEAT = 3


@dataclass(frozen=True)
class Needle:
    messages: list[dict[str, Any]]
    key: str
    value: str
    output: str
    """The tool output holding the needle, as the client sends it."""


def planted(name: str) -> Needle:
    """``name``'s messages, a needle in its first small tool output past the first fifth, the question."""
    messages = load_transcript(name)
    digest = hashlib.sha256(name.encode()).hexdigest()
    key, value = f"NEEDLE-{digest[:6]}", digest[6:18]
    small = [
        i
        for i, m in enumerate(messages)
        if m.get("role") == "tool" and isinstance(m.get("content"), str) and len(m["content"]) in NEEDLE_SIZE
    ]
    at = next(i for i in small if i > len(messages) // 5)
    lines = messages[at]["content"].split("\n")
    output = "\n".join([lines[0], f"{key}: {value}", *lines[1:]])
    messages[at] = {**messages[at], "content": output}
    return Needle([*messages, {"role": "user", "content": f"What is {key}?"}], key, value, output)


SHELL = {"type": "object", "properties": {"command": {"type": "string"}}}
TOOLS: dict[str, list[Any]] = {
    "chat": [{"type": "function", "function": {"name": "bash", "parameters": SHELL}}],
    "anthropic": [{"name": "bash", "input_schema": SHELL}],
    "responses": [{"type": "function", "name": "bash", "parameters": SHELL}],
    "google": [{"function_declarations": [{"name": "bash", "parameters": SHELL}]}],
}
"""The agent's own tool (the recall tool is offered beside a client's tools, never alone)."""


def wire_request(wire: str, messages: list[dict[str, Any]]) -> tuple[list[Any], dict[str, Any]]:
    """The conversation as ``wire``'s client sends it, and what else it carries."""
    extra: dict[str, Any] = {"tools": TOOLS[wire]}
    if wire == "anthropic":
        system, converted = chat_to_anthropic(messages)
        return converted, {**extra, "system": system} if system else extra
    if wire == "responses":
        return chat_to_responses(messages), extra
    if wire == "google":
        return chat_to_google(messages), extra
    return messages, extra


def config(upstream: StandinUpstream, archive: Path) -> dict[str, Any]:
    """Per wire, a group with recall on and one with it off (``<wire>-on``, ``<wire>-off``)."""
    entries = []
    for recall in (True, False):
        info = compact_info(archive, SETTINGS, recall=recall)
        suffix = "on" if recall else "off"
        entries += [
            standin_deployment(f"chat-{suffix}", upstream.url, "needle", **info),
            standin_deployment(f"responses-{suffix}", upstream.url, "needle", **info),
            anthropic_deployment(f"anthropic-{suffix}", upstream.root_url, "needle", **info),
            gemini_deployment(f"google-{suffix}", upstream.root_url, "gemini-3-needle", **info),
        ]
    entries.append(
        standin_deployment("summarizer", upstream.url, "standin-summarizer", max_input_tokens=200_000)
    )
    return {"model_list": entries, "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"}}


@dataclass
class Run:
    answered: bool
    exact: bool
    model_calls: int
    seconds: float
    billed: int


def _main_requests(upstream: StandinUpstream) -> list[dict[str, Any]]:
    """The requests the model answered (not the summarizer's)."""
    return [r for r in upstream.requests if r.get("body") and SUMMARY_MARKER not in json.dumps(r["body"])]


def run(
    upstream: StandinUpstream, proxy: ProxyProcess, wire: str, group: str, stream: bool, needle: Needle
) -> Run:
    entries, extra = wire_request(wire, needle.messages)
    call(proxy, wire, group, json.loads(json.dumps(entries)), stream, **extra)  # the compaction, stored
    upstream.reset()
    start = time.perf_counter()
    _, reply = call(proxy, wire, group, json.loads(json.dumps(entries)), stream, **extra)
    seconds = time.perf_counter() - start
    requests = _main_requests(upstream)
    shown = json.dumps(needle.output)[1:-1]
    exact = any(shown in json.dumps(r["body"]) for r in requests[1:])
    billed = sum(int(r.get("billed") or 0) for r in requests)
    return Run(f"{needle.key} = {needle.value}" in reply, exact, len(requests), seconds, billed)


def cells() -> Iterator[tuple[str, bool]]:
    for wire in WIRES:
        for stream in (False, True):
            yield wire, stream


def main() -> None:
    needles = [planted(name) for name in TRANSCRIPTS]
    rows = []
    with tempfile.TemporaryDirectory() as archive, StandinUpstream() as upstream:
        with ProxyProcess(config(upstream, Path(archive))) as proxy:
            for wire, stream in cells():
                on = [
                    run(upstream, proxy, wire, f"{wire}-on", stream, n)
                    for n in needles
                    for _ in range(REPEAT)
                ]
                off = [
                    run(upstream, proxy, wire, f"{wire}-off", stream, n)
                    for n in needles
                    for _ in range(REPEAT)
                ]
                rows.append((wire, stream, on, off))
                print(_row(wire, stream, on, off), flush=True)
    print()
    print(HEADER)
    for wire, stream, on, off in rows:
        print(_row(wire, stream, on, off))


HEADER = (
    "| wire | stream | answered, recall on | answered, off | needle's output exact | model calls (on / off) "
    "| added latency (median) | billed input tokens (on / off) |\n|---|---|---|---|---|---|---|---|"
)


def _row(wire: str, stream: bool, on: list[Run], off: list[Run]) -> str:
    n = len(on)
    added = statistics.median(r.seconds for r in on) - statistics.median(r.seconds for r in off)
    calls_on = statistics.mean(r.model_calls for r in on)
    calls_off = statistics.mean(r.model_calls for r in off)
    return (
        f"| {wire} | {'yes' if stream else 'no'} | {sum(r.answered for r in on)}/{n} "
        f"| {sum(r.answered for r in off)}/{n} | {sum(r.exact for r in on)}/{n} "
        f"| {calls_on:.1f} / {calls_off:.1f} | {added * 1000:+.0f} ms "
        f"| {statistics.mean(r.billed for r in on):,.0f} / {statistics.mean(r.billed for r in off):,.0f} |"
    )


if __name__ == "__main__":
    main()

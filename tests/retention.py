"""What the agent was told, planted into real transcripts, and how much of it still reaches the model.

Shared by ``bench/bench_retention.py`` and its small CI version (``tests/integration/test_retention_proxy.py``).

``plant`` puts uniquely tagged facts into a chat or Anthropic transcript, where real agents carry them:

- ``constraint``: a sentence at the end of the first user message (the task);
- ``instruction``: a ``<system-reminder>`` block a third and two thirds into the conversation (chat: a user
  message of its own; Anthropic: a text block in the user message there, beside its tool results);
- ``path``: a ``file_path`` argument in every third tool call that has none;
- ``error``: an error line at the end of every third tool result.

``Retention`` then counts, turn by turn, the planted facts the client has sent so far and those present word
for word in what reached the provider.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compact_hook.core.items import SUMMARY_PREFIX

KINDS = ("constraint", "instruction", "path", "error")
TARGETS = {"constraint": 1.0, "instruction": 1.0, "path": 0.9, "error": 0.9}
POLYFILL_SUMMARY = "Previous conversation summary"
"""What LiteLLM's ``compact_20260112`` polyfill puts before its summary (in the system prompt)."""
EVERY = 3


@dataclass(frozen=True)
class Fact:
    kind: str
    text: str
    entry: int
    """Index of the entry that carries it: sent from the turn that includes this entry on."""


@dataclass
class Planted:
    entries: list[Any]
    facts: list[Fact]
    system: Any = None


def plant(entries: Sequence[Any], wire: str, tag: str, system: Any = None) -> Planted:
    """A copy of ``entries`` (chat messages or Anthropic messages) with facts planted (see module doc)."""
    out = copy.deepcopy(list(entries))
    facts: list[Fact] = []
    first = next(i for i, entry in enumerate(out) if entry["role"] == "user")
    constraint = f"Constraint {tag}-C: never edit files under `vendor/` in this repository."
    _append_text(out[first], "\n\n" + constraint, wire)
    facts.append(Fact("constraint", constraint, first))
    for n, share in enumerate((3, 1.5), start=1):
        reminder = f"Instruction {tag}-I{n}: run `make lint` before every commit."
        block = f"<system-reminder>\n{reminder}\n</system-reminder>"
        at = _reminder_position(out, wire, int(len(out) / share))
        if wire == "chat":
            out.insert(at, {"role": "user", "content": block})
            facts = [Fact(f.kind, f.text, f.entry + (f.entry >= at)) for f in facts]
        else:
            _append_text(out[at], block, wire, separate=True)
        facts.append(Fact("instruction", reminder, at))
    calls = results = 0
    for index, entry in enumerate(out):
        for call in _tool_calls_in(entry, wire):
            calls += 1
            path = f"src/{tag}/module_{calls}.py"
            if calls % EVERY == 0 and _add_path(call, path, wire):
                facts.append(Fact("path", path, index))
        for holder in _results(entry, wire):
            results += 1
            if results % EVERY == 0:
                line = f"Error: {tag} step {results} failed with exit code {results % 7 + 1}"
                _append_result_line(holder, line, wire)
                facts.append(Fact("error", line, index))
    return Planted(out, facts, system)


def relocate(facts: Sequence[Fact], entries: Sequence[Any]) -> list[Fact]:
    """The facts, each at the first of ``entries`` that carries it (after converting the planted transcript
    to another wire format)."""
    texts = ["\n".join(strings(entry)) for entry in entries]
    return [Fact(f.kind, f.text, next(i for i, text in enumerate(texts) if f.text in text)) for f in facts]


def _reminder_position(entries: list[Any], wire: str, near: int) -> int:
    """Where a client would put a reminder near ``near``: chat, before an assistant message that follows a
    tool result or a user message; Anthropic, a user message."""
    for index in range(max(1, near), len(entries)):
        if (
            wire == "chat"
            and entries[index]["role"] == "assistant"
            and entries[index - 1]["role"] != "assistant"
        ):
            return index
        if wire == "anthropic" and entries[index]["role"] == "user":
            return index
    raise ValueError("no place for a reminder")


def _append_text(message: dict[str, Any], text: str, wire: str, separate: bool = False) -> None:
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = content + text if not separate else [{"type": "text", "text": content}]
        if not separate:
            return
        content = message["content"]
    assert isinstance(content, list)
    texts = [part for part in content if part.get("type") == "text"]
    if texts and not separate:
        texts[-1]["text"] += text
    else:
        content.append({"type": "text", "text": text.strip()})


def _tool_calls_in(entry: dict[str, Any], wire: str) -> list[dict[str, Any]]:
    if wire == "chat":
        return list(entry.get("tool_calls") or [])
    content = entry.get("content")
    return [b for b in content if b.get("type") == "tool_use"] if isinstance(content, list) else []


def _add_path(call: dict[str, Any], path: str, wire: str) -> bool:
    if wire == "chat":
        try:
            arguments = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:
            return False
        if not isinstance(arguments, dict) or "file_path" in arguments:
            return False
        call["function"]["arguments"] = json.dumps({**arguments, "file_path": path})
        return True
    if not isinstance(call.get("input"), dict) or "file_path" in call["input"]:
        return False
    call["input"] = {**call["input"], "file_path": path}
    return True


def _results(entry: dict[str, Any], wire: str) -> list[dict[str, Any]]:
    if wire == "chat":
        return [entry] if entry["role"] == "tool" else []
    content = entry.get("content")
    return [b for b in content if b.get("type") == "tool_result"] if isinstance(content, list) else []


def _append_result_line(holder: dict[str, Any], line: str, wire: str) -> None:
    content = holder.get("content")
    if isinstance(content, str) or content is None:
        holder["content"] = (content or "").rstrip("\n") + "\n" + line
        return
    texts = [part for part in content if part.get("type") == "text"]
    if texts:
        texts[-1]["text"] = texts[-1]["text"].rstrip("\n") + "\n" + line
    else:
        content.append({"type": "text", "text": line})


def chat_to_anthropic(messages: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """A chat transcript as a Messages client sends it: the system prompt apart, tool calls as
    ``tool_use`` blocks, tool messages as ``tool_result`` blocks of one user message, consecutive user
    turns merged into one message (results first)."""
    system = "\n\n".join(_text(m.get("content")) for m in messages if m["role"] in ("system", "developer"))
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            continue
        if role == "assistant":
            blocks: list[dict[str, Any]] = []
            if _text(message.get("content")):
                blocks.append({"type": "text", "text": _text(message.get("content"))})
            for call in message.get("tool_calls") or []:
                try:
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    arguments = {"raw": call["function"]["arguments"]}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["function"]["name"],
                        "input": arguments,
                    }
                )
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(no text)"}]})
            continue
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": _text(message.get("content")),
            }
        else:
            block = {"type": "text", "text": _text(message.get("content")) or "(empty)"}
        if out and out[-1]["role"] == "user":
            out[-1]["content"].append(block)
        else:
            out.append({"role": "user", "content": [block]})
    for message in out:  # tool results first in a user message
        if message["role"] == "user":
            message["content"].sort(key=lambda b: b["type"] != "tool_result")
    return system, out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value (tool-call arguments included), for word-for-word searches."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def summarized(entry: Any) -> bool:
    """An entry that holds a summary (ours, or the polyfill's system prompt)."""
    text = "\n".join(strings(entry))
    return SUMMARY_PREFIX in text or POLYFILL_SUMMARY in text


@dataclass
class Retention:
    """Per kind: facts sent so far, and those found word for word (anywhere; outside any summary)."""

    sent: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    kept: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    verbatim: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    turns: int = 0
    missing: list[tuple[int, Fact]] = field(default_factory=list)

    def add(self, turn: int, facts: Sequence[Fact], sent_entries: int, forwarded: Sequence[Any]) -> None:
        """One turn after the first compaction: ``forwarded`` is what reached the provider (entries, and the
        system prompt as an entry where it has one)."""
        self.turns += 1
        everything = "\n".join(strings(list(forwarded)))
        outside = "\n".join(strings([entry for entry in forwarded if not summarized(entry)]))
        for fact in facts:
            if fact.entry >= sent_entries:
                continue
            self.sent[fact.kind] += 1
            if fact.text in everything:
                self.kept[fact.kind] += 1
            else:
                self.missing.append((turn, fact))
            self.verbatim[fact.kind] += fact.text in outside

    def share(self, kind: str, outside: bool = False) -> float | None:
        if not self.sent[kind]:
            return None
        return (self.verbatim if outside else self.kept)[kind] / self.sent[kind]

    def merge(self, other: Retention) -> None:
        for kind in KINDS:
            self.sent[kind] += other.sent[kind]
            self.kept[kind] += other.kept[kind]
            self.verbatim[kind] += other.verbatim[kind]
        self.turns += other.turns
        self.missing += other.missing


def compacted(forwarded: Sequence[Any], headers: Mapping[str, str] | None = None) -> bool:
    """The request was changed: a summary is in it, or compact_hook's headers report fewer tokens
    forwarded than sent (a cheap tier cleared or cut something)."""
    if any(summarized(entry) for entry in forwarded):
        return True
    before, after = (
        (headers or {}).get("x-compact-tokens-before"),
        (headers or {}).get("x-compact-tokens-after"),
    )
    return before is not None and after is not None and int(after) < int(before)

"""Recall in a streamed ``/v1/messages`` reply (raw SSE, ``sse.Frames``).

Every event goes to the client as it comes — the message's start, its text and thinking, the
client's own tool calls — except the blocks of a call to the recall tool (never shown: the blocks
after one are renumbered, as the SDKs index the content by them) and the events that end the
message (its ``message_delta`` with the stop reason and usage, ``message_stop``): those wait for
the end. A reply that called only our tool is answered then (``rounds.answered``, on the message
so far assembled whole), and the final reply goes on in the same message: its blocks after the
ones shown, its stop reason, every round's usage.

A whole answer of the proxy's own goes out as the SSE events a streamed one arrives in (``anthropic_events``:
LiteLLM up to 1.108 hands it to the iterator hook as one whole ``message``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from compact_hook.wires.anthropic.recall import THINKING
from compact_hook.wires.base import Recalling
from compact_hook.wires.guard import TOOL_STOPS, Passing, whole_ending
from compact_hook.wires.sse import Frame, frame, text_frame

ENDING = frozenset({"message_delta", "message_stop"})
BLOCK_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop"})


@dataclass
class _Block:
    start: dict[str, Any]
    parts: list[str] = field(default_factory=list)
    signature: str = ""
    ours: bool = False

    def whole(self) -> dict[str, Any]:
        block = dict(self.start)
        kind, joined = block.get("type"), "".join(self.parts)
        if kind == "text":
            block["text"] = str(block.get("text") or "") + joined
        elif kind == "thinking":
            block["thinking"] = str(block.get("thinking") or "") + joined
            block["signature"] = self.signature or block.get("signature", "")
        elif kind in ("tool_use", "server_tool_use") and joined:
            block["input"] = _input(joined)
        return block


@dataclass
class _Message:
    """The streamed message so far: its start, its blocks by index, the ending events held back."""

    start: dict[str, Any] = field(default_factory=dict)
    blocks: dict[int, _Block] = field(default_factory=dict)
    shown: dict[int, int] = field(default_factory=dict)
    """The index the client sees each shown block under (ours take none)."""
    held: list[Frame] = field(default_factory=list)

    def seen(self, event: Frame, tool: str) -> bytes | None:
        """Note what ``event`` adds; the bytes to show now (None: held or ours)."""
        data = event.data or {}
        kind = data.get("type") or event.event
        if kind == "message_start":
            self.start = dict(data.get("message") or {})
        if kind in ENDING:
            self.held.append(event)
            return None
        index = data.get("index")
        if not isinstance(index, int) or kind not in BLOCK_EVENTS:
            return event.raw
        if kind == "content_block_start":
            start = dict(data.get("content_block") or {})
            ours = start.get("type") == "tool_use" and start.get("name") == tool
            self.blocks[index] = _Block(start, ours=ours)
            if not ours:
                self.shown[index] = len(self.shown)
        block = self.blocks.get(index)
        if block is None:
            return event.raw
        if kind == "content_block_delta":
            _add(block, data.get("delta") or {})
        if block.ours:
            return None
        if self.shown[index] == index:
            return event.raw
        return frame(event.event or str(kind), {**data, "index": self.shown[index]})

    def stop(self) -> str | None:
        """The stop reason the held ``message_delta`` carries (None: none came)."""
        for event in self.held:
            delta = (event.data or {}).get("delta")
            if isinstance(delta, Mapping) and delta.get("stop_reason") is not None:
                return str(delta["stop_reason"])
        return None

    def calls(self, tool: str) -> tuple[int, int]:
        """How many calls to our tool, and to the client's tools, the message made."""
        uses = [b for b in self.blocks.values() if b.start.get("type") == "tool_use"]
        ours = sum(1 for b in uses if b.ours)
        return ours, len(uses) - ours

    def whole(self) -> dict[str, Any]:
        """The message as a whole reply (what the rounds answer)."""
        usage = dict(self.start.get("usage") or {})
        for event in self.held:
            usage.update((event.data or {}).get("usage") or {})
        content = [self.blocks[i].whole() for i in sorted(self.blocks)]
        return {**self.start, "content": content, "stop_reason": "tool_use", "usage": usage}


def _input(joined: str) -> Any:
    """A tool call's input from its JSON deltas; what does not parse (a reply cut inside it) is kept
    as its text (the rounds then find no handle in it: never an error)."""
    try:
        return json.loads(joined)
    except ValueError:
        return {"partial_json": joined}


def _add(block: _Block, delta: Mapping[str, Any]) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block.parts.append(str(delta.get("text") or ""))
    elif kind == "thinking_delta":
        block.parts.append(str(delta.get("thinking") or ""))
    elif kind == "signature_delta":
        block.signature += str(delta.get("signature") or "")
    elif kind == "input_json_delta":
        block.parts.append(str(delta.get("partial_json") or ""))


async def recalled_messages(
    recall: Recalling, data: Mapping[str, Any], chunks: AsyncIterable[Any]
) -> AsyncGenerator[Any, None]:
    """The client's stream: live but for our calls and the message's end (see the module); on any
    error of ours, as it came (``guard``)."""
    message = _Message()
    passing = Passing(
        data, lambda event: message.seen(event, recall.tool), lambda: [e.raw for e in message.held]
    )
    async for shown in passing.events(chunks):
        yield shown
    rest = passing.rest
    if passing.broken:
        if rest:
            yield rest
        return
    held = [event.raw for event in message.held]
    ours, theirs = message.calls(recall.tool)
    if not ours or theirs or rest or not held or message.stop() not in TOOL_STOPS:
        for raw in [*held, rest]:  # nothing to answer: as it came
            if raw:
                yield raw
        return
    for event in await whole_ending(data, _ending(recall, data, message), lambda: held):
        yield event


async def _ending(recall: Recalling, data: Mapping[str, Any], message: _Message) -> list[Any]:
    """The rest of the stream after our calls (``guard.whole_ending``: made whole before it is sent)."""
    whole = message.whole()
    return list(_continued(await recall.answered(data, whole), whole, len(message.shown)))


def _continued(final: Any, whole: Mapping[str, Any], first: int) -> Iterator[bytes]:
    """The final reply as the rest of the client's message: its blocks (none if no round came back;
    its thinking is the first round's, already shown: ``wires.THINKING``), its stop reason, every
    round's usage."""
    blocks = final.get("content") if isinstance(final, Mapping) and final is not whole else []
    shown = [b for b in blocks if isinstance(b, Mapping) and b.get("type") not in THINKING] if blocks else []
    for offset, block in enumerate(shown):
        yield from _block_events(first + offset, block)
    stop = final.get("stop_reason") if isinstance(final, Mapping) else None
    usage = final.get("usage") if isinstance(final, Mapping) else None
    yield frame(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop or "end_turn", "stop_sequence": None},
            "usage": usage or {},
        },
    )
    yield frame("message_stop", {"type": "message_stop"})


def _block_events(index: int, block: Mapping[str, Any]) -> Iterator[bytes]:
    kind = block.get("type")
    start: dict[str, Any] = dict(block)
    delta: dict[str, Any] | None = None
    signature = None
    if kind == "text":
        start["text"], delta = "", {"type": "text_delta", "text": block.get("text", "")}
    elif kind == "thinking":
        start["thinking"], start["signature"] = "", ""
        delta = {"type": "thinking_delta", "thinking": block.get("thinking", "")}
        signature = {"type": "signature_delta", "signature": block.get("signature", "")}
    elif kind == "tool_use":
        start["input"] = {}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}
    yield frame(
        "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
    )
    for each in (delta, signature):
        if each is not None:
            yield frame("content_block_delta", {"type": "content_block_delta", "index": index, "delta": each})
    yield frame("content_block_stop", {"type": "content_block_stop", "index": index})


def anthropic_events(message: Mapping[str, Any]) -> Iterator[str]:
    """A whole Messages ``message`` as the SSE events a streamed one arrives in."""
    text = "".join(
        block.get("text", "") for block in message.get("content") or [] if isinstance(block, Mapping)
    )
    usage = message.get("usage") or {"input_tokens": 0, "output_tokens": 0}
    start = {**message, "content": [], "stop_reason": None, "usage": usage}
    yield text_frame("message_start", {"message": start})
    yield text_frame("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    yield text_frame("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}})
    yield text_frame("content_block_stop", {"index": 0})
    output = usage.get("output_tokens", 0) if isinstance(usage, Mapping) else 0
    delta = {"stop_reason": "end_turn", "stop_sequence": None}
    yield text_frame("message_delta", {"delta": delta, "usage": {"output_tokens": output}})
    yield text_frame("message_stop", {})


def is_whole_message(chunk: object) -> bool:
    return isinstance(chunk, Mapping) and chunk.get("type") == "message"

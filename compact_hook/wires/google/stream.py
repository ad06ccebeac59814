"""Recall in a streamed ``streamGenerateContent`` reply (raw SSE, ``sse.Frames``).

Gemini streams partial responses, each with some parts of the one candidate; the last carries the
finish reason. Each goes to the client as it comes with the parts that call the recall tool taken
out (a response left with nothing to show is not sent), except the last: it waits for the end. A
reply whose only calls were ours is answered then (``rounds.answered``, on the parts so far put
together — thought signatures with them), and the final reply is sent as one more partial
response, with every round's usage.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compact_hook.wires.base import Recalling
from compact_hook.wires.guard import TOOL_STOPS, Passing, whole_ending
from compact_hook.wires.sse import Frame, frame


def _candidate(data: Mapping[str, Any]) -> dict[str, Any]:
    candidates = data.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    return first if isinstance(first, dict) else {}


def _parts(candidate: Mapping[str, Any]) -> list[Any]:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def _call_name(part: Any) -> str | None:
    call = part.get("functionCall", part.get("function_call")) if isinstance(part, dict) else None
    return str(call.get("name")) if isinstance(call, dict) else None


@dataclass
class _Reply:
    """The streamed reply so far: every part, how many calls were ours and the client's, the end."""

    tool: str
    parts: list[Any] = field(default_factory=list)
    ours: int = 0
    theirs: int = 0
    last: dict[str, Any] = field(default_factory=dict)
    held: list[dict[str, Any]] = field(default_factory=list)
    stop: str | None = None
    """The finish reason of the last response held (None: none came)."""

    def seen(self, event: Frame) -> bytes | None:
        """Note ``event``'s parts; what to show now (None: held, or nothing left but ours)."""
        data = event.data
        candidate = _candidate(data) if data is not None else {}
        if data is None or not candidate:
            return event.raw
        self.last = data
        parts = _parts(candidate)
        self.parts.extend(parts)
        kept = [p for p in parts if _call_name(p) != self.tool]
        calls = sum(1 for p in parts if _call_name(p) is not None)
        self.ours += len(parts) - len(kept)
        self.theirs += calls - (len(parts) - len(kept))
        reason = candidate.get("finishReason", candidate.get("finish_reason"))
        if reason is not None:
            self.stop = str(reason)
            self.held.append(_with_parts(data, kept))
            return None
        if len(kept) == len(parts):
            return event.raw
        return frame("", _with_parts(data, kept)) if kept else None

    def whole(self) -> dict[str, Any]:
        """The reply as one whole response (what the rounds answer)."""
        candidate = {**_candidate(self.last), "content": {"role": "model", "parts": self.parts}}
        return {**self.last, "candidates": [candidate]}

    def as_it_came(self) -> list[bytes]:
        """The held responses as they came (our calls' parts were never shown)."""
        return [frame("", held) for held in self.held]


def _with_parts(data: Mapping[str, Any], parts: list[Any]) -> dict[str, Any]:
    candidate = _candidate(data)
    content = {**(candidate.get("content") or {}), "parts": parts}
    return {**data, "candidates": [{**candidate, "content": content}]}


def _plain(response: Any) -> dict[str, Any]:
    """A response as its JSON (LiteLLM's object holds it under the REST names)."""
    if isinstance(response, Mapping):
        return dict(response)
    dump = getattr(response, "model_dump", None)
    plain = dump(mode="json", exclude_none=True, by_alias=True) if callable(dump) else {}
    return plain if isinstance(plain, dict) else json.loads(json.dumps(plain, default=str))


async def recalled_google(
    recall: Recalling, data: Mapping[str, Any], chunks: AsyncIterable[Any]
) -> AsyncGenerator[Any, None]:
    """The client's stream: live but for our calls and the reply's last response (see the module);
    on any error of ours, as it came (``guard``)."""
    reply = _Reply(recall.tool)
    passing = Passing(data, reply.seen, reply.as_it_came)
    async for shown in passing.events(chunks):
        yield shown
    rest, broken = passing.rest, passing.broken
    if broken or not reply.ours or reply.theirs or rest or not reply.held or reply.stop not in TOOL_STOPS:
        for raw in [] if broken else reply.as_it_came():
            yield raw  # nothing to answer: as it came
        if rest:
            yield rest
        return
    for each in await whole_ending(data, _ending(recall, data, reply), reply.as_it_came):
        yield each


async def _ending(recall: Recalling, data: Mapping[str, Any], reply: _Reply) -> list[Any]:
    """The reply's last response after our rounds (``guard.whole_ending``: made whole before it is sent)."""
    whole = reply.whole()
    final = await recall.answered(data, whole)
    if final is whole:  # no round came back: the reply so far ends as it is, ours taken out
        final = {**reply.held[-1], "usageMetadata": whole.get("usageMetadata")}
    return [frame("", _plain(final))]

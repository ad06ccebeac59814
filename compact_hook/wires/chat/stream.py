"""Recall in a streamed chat completion: what the client sees live, and what waits for our rounds.

The reply streams to the client as it comes — its text, the client's own tool calls — except the
deltas of a call to the recall tool and the chunks that end the reply (its finish, its usage):
those wait for the end. A reply that called only our tool is then answered (``rounds.answered``,
on the reply so far assembled whole), and the final reply continues the same stream: its text as
one more delta, its calls, its finish, every round's usage. A reply that called nothing of ours ends
as it came; one that called the client's tools too ends without ours (as a whole reply does).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import litellm

from compact_hook.wires.base import Recalling
from compact_hook.wires.guard import TOOL_STOPS, Passing, whole_ending


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Reply:
    """The streamed reply so far: its text, its calls by index, the chunks held back."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    held: list[Any] = field(default_factory=list)
    usage: Any = None
    last: Any = None
    stop: str | None = None
    """The finish reason the held chunks carry (None: the stream ended without one)."""
    taken: bool = False
    """The usage came on a chunk that was shown (LiteLLM puts it on the last content chunk at times):
    taken off it, it is said at the end."""


async def recalled_chat(
    recall: Recalling, data: Mapping[str, Any], chunks: AsyncIterable[Any]
) -> AsyncGenerator[Any, None]:
    """The client's stream: live but for our calls and the reply's end (see the module); on any
    error of ours, as it came (``guard``)."""
    reply = _Reply()
    passing = Passing(data, lambda chunk: _seen(chunk, reply, recall.tool), lambda: reply.held)
    async for shown in passing.parsed(chunks):
        yield shown
    if passing.broken:
        return
    ours = [call for call in reply.calls.values() if call.name == recall.tool]
    if not ours or len(ours) < len(reply.calls) or reply.stop not in TOOL_STOPS:
        for chunk in _as_it_came(reply):
            yield chunk
        return
    for chunk in await whole_ending(data, _ending(recall, data, reply), lambda: _as_it_came(reply)):
        yield chunk


async def _ending(recall: Recalling, data: Mapping[str, Any], reply: _Reply) -> list[Any]:
    """The rest of the stream after our rounds (``guard.whole_ending``: made whole before it is sent)."""
    final = await recall.answered(data, _whole(reply))
    return _continued(final, reply.last, include_usage=reply.usage is not None)


def _as_it_came(reply: _Reply) -> list[Any]:
    """The held end of the reply, as it came (our calls' deltas were never shown)."""
    out = list(reply.held)
    if reply.taken and not any(getattr(chunk, "usage", None) is not None for chunk in reply.held):
        out.append(_usage_chunk(reply.last, reply.usage))
    return out


def _seen(chunk: Any, reply: _Reply, tool: str) -> Any | None:
    """Note what ``chunk`` adds to the reply; the chunk to show now (None: held)."""
    reply.last = chunk
    choices = getattr(chunk, "choices", None) or []
    usage = getattr(chunk, "usage", None)
    if not choices:
        if usage is not None:
            reply.usage = usage
            reply.held.append(chunk)
            return None
        return chunk
    choice = choices[0]
    delta = getattr(choice, "delta", None)
    if usage is not None:  # the round's usage goes into the end's (every round's), not shown here
        reply.usage, reply.taken = usage, True
        chunk.usage = None
    content = getattr(delta, "content", None)
    if isinstance(content, str) and content:
        reply.text.append(content)
    deltas = getattr(delta, "tool_calls", None) or []
    ours = [d for d in deltas if _note(reply, d) == tool]
    if ours and len(ours) == len(deltas):
        return None  # our call: never shown (its deltas are in ``reply.calls``)
    if ours and delta is not None:  # beside the client's calls in one chunk: theirs shown, ours not
        delta.tool_calls = [d for d in deltas if all(d is not o for o in ours)]
    reason = getattr(choice, "finish_reason", None)
    if reason is not None:
        reply.stop = str(reason)
        reply.held.append(chunk)
        return None
    return chunk


def _note(reply: _Reply, delta: Any) -> str:
    """Add a tool call delta to the reply; the name of the call it belongs to."""
    index = int(getattr(delta, "index", 0) or 0)
    call = reply.calls.setdefault(index, _Call())
    function = getattr(delta, "function", None)
    call.id = call.id or str(getattr(delta, "id", "") or "")
    call.name = call.name or str(getattr(function, "name", "") or "")
    arguments = getattr(function, "arguments", None)
    if isinstance(arguments, str):
        call.arguments.append(arguments)
    return call.name


def _whole(reply: _Reply) -> Any:
    """The reply so far as a whole chat reply: what the rounds answer."""
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": "".join(c.arguments)}}
        for c in reply.calls.values()
    ]
    message = {"role": "assistant", "content": "".join(reply.text) or None, "tool_calls": calls}
    usage = reply.usage.model_dump() if hasattr(reply.usage, "model_dump") else {}
    return litellm.ModelResponse(
        choices=[{"index": 0, "message": message, "finish_reason": "tool_calls"}], usage=usage or None
    )


def _continued(final: Any, last: Any, include_usage: bool) -> list[Any]:
    """The final reply as the rest of the client's stream (same id and model as it began)."""
    choice = final.choices[0]
    message = choice.message
    base = {"id": getattr(last, "id", None) or final.id, "model": getattr(last, "model", None) or final.model}
    delta: dict[str, Any] = {}
    if message.content:
        delta["content"] = message.content
    if message.tool_calls:
        delta["tool_calls"] = [
            {
                "index": n,
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for n, c in enumerate(message.tool_calls)
        ]
    chunks = []
    if delta:
        chunks.append(litellm.ModelResponseStream(**base, choices=[{"index": 0, "delta": delta}]))
    end: dict[str, Any] = {"index": 0, "delta": {}, "finish_reason": choice.finish_reason or "stop"}
    chunks.append(litellm.ModelResponseStream(**base, choices=[end]))
    if include_usage:
        chunks.append(litellm.ModelResponseStream(**base, choices=[], usage=final.usage))
    return chunks


def _usage_chunk(last: Any, usage: Any) -> Any:
    return litellm.ModelResponseStream(
        id=getattr(last, "id", None), model=getattr(last, "model", None), choices=[], usage=usage
    )

"""Recall in a streamed ``/v1/responses`` reply (LiteLLM's event objects).

Every event goes to the client as it comes — reasoning, text, the client's own function calls —
except the events of an output item that calls the recall tool (never shown: the items after one
are renumbered) and ``response.completed``, which waits for the end. A reply whose only calls were
ours is answered then (``rounds.answered``, on the completed response, which holds the whole
reply), and the final reply goes on in the same stream: its items after the ones shown (added,
their text or arguments, done), then ``response.completed`` with every item the client was shown
and every round's usage. Our own events are SSE frames (LiteLLM passes bytes through as they are);
the completion is the stream's own event, changed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from compact_hook.wires.base import Recalling
from compact_hook.wires.guard import Passing, said_failure, whole_ending
from compact_hook.wires.replies import field as _get
from compact_hook.wires.replies import plain_block, put
from compact_hook.wires.sse import frame

CALLS = frozenset({"function_call", "custom_tool_call"})
UNFINISHED = frozenset({"response.incomplete", "response.failed"})


def _kind(event: Any) -> str:
    """An event's type (LiteLLM's are an enum whose value is the wire's name)."""
    kind = _get(event, "type")
    return str(getattr(kind, "value", kind) or "")


@dataclass
class _Stream:
    """The stream so far: which output items are ours, what ends it (held), the last sequence number."""

    tool: str
    ours: set[int] = field(default_factory=set)
    theirs: int = 0
    held: Any = None
    sequence: int = 0

    def seen(self, event: Any) -> Any | None:
        """Note ``event``; what to show now (None: held or ours). A reply that ends otherwise than
        completed (``response.incomplete``: a ``max_output_tokens`` stop; ``response.failed``) is
        never answered: it goes on with our calls taken out of the response it carries."""
        kind = _kind(event)
        number = _get(event, "sequence_number")
        self.sequence = max(self.sequence, number if isinstance(number, int) else 0)
        if kind == "response.completed":
            self.held = event
            return None
        if kind in UNFINISHED:
            response = _get(event, "response")
            if self.ours and response is not None:
                put(response, "output", self.shown_output(response))
            return event
        index = _get(event, "output_index")
        if not isinstance(index, int):
            return event
        if kind == "response.output_item.added":
            item = _get(event, "item")
            if _get(item, "type") in CALLS:
                if _get(item, "name") == self.tool:
                    self.ours.add(index)
                else:
                    self.theirs += 1
        if index in self.ours:
            return None
        shift = sum(1 for ours in self.ours if ours < index)
        if not shift:
            return event
        return frame(kind, {**plain_block(event, mode="json"), "output_index": index - shift})

    def shown_output(self, response: Any) -> list[Any]:
        """The completed response's items the client was shown (ours taken out)."""
        output = _get(response, "output") or []
        return [plain_block(item, mode="json") for n, item in enumerate(output) if n not in self.ours]


async def recalled_responses(
    recall: Recalling, data: Mapping[str, Any], chunks: AsyncIterable[Any]
) -> AsyncGenerator[Any, None]:
    """The client's stream: live but for our calls and the completion (see the module); on any
    error of ours, as it came (``guard``)."""
    stream = _Stream(recall.tool)
    passing = Passing(data, stream.seen, list)  # the one event held back, the completion, comes last
    async for shown in passing.parsed(chunks):
        yield shown
    if passing.broken or stream.held is None:
        return  # cut short or failed: nothing to complete
    if not stream.ours:
        yield stream.held
        return
    for event in await whole_ending(data, _ending(recall, data, stream), lambda: [_without_ours(stream)]):
        yield event


def _without_ours(stream: _Stream) -> Any:
    """The held completion with our calls taken out of it (as it came, if even that fails)."""
    try:
        whole = _get(stream.held, "response")
        put(whole, "output", stream.shown_output(whole))
    except Exception:
        said_failure({}, "taking our calls out of the completion")
    return stream.held


async def _ending(recall: Recalling, data: Mapping[str, Any], stream: _Stream) -> list[Any]:
    """The rest of the stream after our calls: the final round's items, then the completion with
    every item the client was shown and every round's usage (made whole before any of it is sent)."""
    whole = _get(stream.held, "response")
    shown = stream.shown_output(whole)
    final = whole if stream.theirs else await recall.answered(data, whole)
    added = [] if final is whole else [plain_block(item, mode="json") for item in _get(final, "output") or []]
    ending: list[Any] = list(_items(added, len(shown), stream))
    # the held event itself goes last, changed: LiteLLM then writes it as it wrote the stream's start
    # (1.110 re-encodes the response id of every event object it passes; a frame of ours would differ)
    put(whole, "output", [*shown, *added])
    put(whole, "usage", _get(final, "usage"))
    put(stream.held, "sequence_number", stream.sequence + 1)
    return [*ending, stream.held]


def _items(items: list[dict[str, Any]], first: int, stream: _Stream) -> Iterator[bytes]:
    """The final round's items as the events that stream them."""
    for offset, item in enumerate(items):
        for kind, payload in _item_events(item, first + offset):
            stream.sequence += 1
            yield frame(kind, {"type": kind, "sequence_number": stream.sequence, **payload})


def _item_events(item: dict[str, Any], index: int) -> Iterator[tuple[str, dict[str, Any]]]:
    at = {"output_index": index}
    kind = item.get("type")
    if kind == "message":
        yield "response.output_item.added", {**at, "item": {**item, "status": "in_progress", "content": []}}
        for number, part in enumerate(item.get("content") or []):
            where = {**at, "item_id": item.get("id"), "content_index": number}
            yield "response.content_part.added", {**where, "part": {**part, "text": ""}}
            if part.get("type") == "output_text":
                text = part.get("text", "")
                yield "response.output_text.delta", {**where, "delta": text, "logprobs": []}
                yield "response.output_text.done", {**where, "text": text, "logprobs": []}
            yield "response.content_part.done", {**where, "part": part}
    elif kind in CALLS:
        yield "response.output_item.added", {**at, "item": {**item, "arguments": ""}}
        arguments = {**at, "item_id": item.get("id")}
        yield "response.function_call_arguments.delta", {**arguments, "delta": item.get("arguments", "")}
        yield "response.function_call_arguments.done", {**arguments, "arguments": item.get("arguments", "")}
    else:
        yield "response.output_item.added", {**at, "item": item}
    yield "response.output_item.done", {**at, "item": item}

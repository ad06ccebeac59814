"""``wires.guard.Passing``: a raw SSE stream passed on live; an error of the wire's reader sends what
it held back, then everything as it came."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from compact_hook.wires.guard import Passing
from compact_hook.wires.sse import Frame

EVENTS = [b"event: a\ndata: {}\n\n", b"event: held\ndata: {}\n\n", b"event: bad\ndata: {}\n\n"]
AFTER = b"event: after\ndata: {}\n\n"


class Reader:
    """Shows ``a``, holds ``held`` back, raises on ``bad``."""

    def __init__(self) -> None:
        self.held: list[bytes] = []

    def seen(self, event: Frame) -> bytes | None:
        if event.event == "bad":
            raise KeyError("a bug of ours")
        if event.event == "held":
            self.held.append(event.raw)
            return None
        return event.raw


async def chunks(*items: Any) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def passed(passing: Passing, *items: Any) -> list[Any]:
    return [shown async for shown in passing.events(chunks(*items))]


async def test_an_error_of_the_reader_sends_the_held_events_then_everything_as_it_came() -> None:
    reader = Reader()
    passing = Passing({"litellm_call_id": "x"}, reader.seen, lambda: reader.held)
    out = await passed(passing, b"".join(EVENTS), AFTER, b"data: cut sh")
    assert out == [EVENTS[0], EVENTS[1] + EVENTS[2], AFTER]
    assert passing.broken and passing.rest == b"data: cut sh"


async def test_a_reader_that_never_fails_shows_what_it_shows_and_other_chunks_pass() -> None:
    reader = Reader()
    passing = Passing({}, reader.seen, lambda: reader.held)
    not_sse = {"type": "a parsed chunk"}
    out = await passed(passing, EVENTS[0], not_sse, EVENTS[1])
    assert out == [EVENTS[0], not_sse] and reader.held == [EVENTS[1]]
    assert not passing.broken and passing.rest == b""

"""What every recall stream does when something goes wrong: it goes on as it came.

A stream has shown the client part of the reply by the time anything can fail, so no error may end
it silently (the client would wait for an end that never comes). Three cases, one rule each:

- an error of ours while reading an event (``Passing``): from then on every event goes out as it
  came, the ones held back first;
- a reply that did not stop to call a tool (``TOOL_STOPS``: a ``max_tokens`` stop inside our tool's
  input, a filter, an error) is never answered: its held events go out as they came (our call's own
  deltas were never shown: the client sees the reply end as the model ended it);
- the end-of-stream work (answering, continuing the stream) is made whole before anything of it is
  sent (``whole_ending``): a recall round that fails raises its error (``rounds.RoundFailed``: the
  client gets it, and retries the turn), an error of ours sends the held events as they came.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Mapping
from typing import Any

from compact_hook.wires.sse import Frames

logger = logging.getLogger(__name__)

TOOL_STOPS = frozenset({"tool_calls", "function_call", "tool_use", "STOP", "stop", "completed"})
"""The stop reasons under which a reply's calls are to be run: chat's ``tool_calls`` (and the
legacy ``function_call``), Anthropic's ``tool_use``, Gemini's ``STOP`` (it has no reason of its own
for calls), a completed Responses reply."""


def said_failure(data: Mapping[str, Any], where: str) -> None:
    """An error of ours in a stream, logged with the request; the stream then goes on as it came."""
    logger.exception(
        "compact_hook: request %s: recall in a stream failed (%s); the rest goes out as it came",
        data.get("litellm_call_id"),
        where,
    )


class RoundFailed(Exception):
    """A recall round's model call failed for good: ``error`` is what the client is answered with
    (the provider's error as LiteLLM raised it, or LiteLLM's ``Timeout``) — told apart from an error
    of ours, after which a stream goes on as it came."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def whole_ending(
    data: Mapping[str, Any], work: Awaitable[list[Any]], as_it_came: Callable[[], list[Any]]
) -> list[Any]:
    """What ends a stream: the end-of-stream ``work`` whole, or on an error of ours the held events
    ``as_it_came``; a failed round raises its error (see the module)."""
    try:
        return await work
    except RoundFailed as failed:
        raise failed.error from None
    except Exception:
        said_failure(data, "answering")
        return as_it_came()


class Passing:
    """A stream passed on live — raw SSE (``events``) or LiteLLM's parsed chunks (``parsed``) — each
    event as the wire's reader shows it (``seen``: what to show now, or None while it holds the event
    back or it is ours). On an error of the reader, the events it held (``held``) go first, then every
    event as it came (``broken``); what followed the last whole SSE event is ``rest`` once the stream
    is read."""

    def __init__(
        self, data: Mapping[str, Any], seen: Callable[[Any], Any], held: Callable[[], list[Any]]
    ) -> None:
        self.data, self.seen, self.held = data, seen, held
        self.broken = False
        self.rest = b""

    async def events(self, chunks: AsyncIterable[Any]) -> AsyncGenerator[Any, None]:
        frames = Frames()
        async for chunk in chunks:
            if not isinstance(chunk, (bytes, str)):
                yield chunk  # not raw SSE: not a shape this reads
                continue
            for event in frames.feed(chunk):
                shown = event if isinstance(event, bytes) else b"".join(self._shown(event, event.raw))
                if shown:
                    yield shown
        self.rest = frames.rest()

    async def parsed(self, chunks: AsyncIterable[Any]) -> AsyncGenerator[Any, None]:
        async for chunk in chunks:
            for shown in self._shown(chunk, chunk):
                yield shown

    def _shown(self, event: Any, raw: Any) -> list[Any]:
        """What to send for ``event`` (``raw``: it as it came)."""
        if self.broken:
            return [raw]
        try:
            seen = self.seen(event)
        except Exception:
            said_failure(self.data, "reading an event")
            self.broken = True
            return [*self.held(), raw]
        return [] if seen is None else [seen]

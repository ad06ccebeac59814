"""What every recall stream does when something goes wrong: it goes on as it came.

A stream has shown the client part of the reply by the time anything can fail, so no error may end
it silently (the client would wait for an end that never comes). Three cases, one rule each:

- an error of ours while reading an event (``Passing``): from then on every event goes out as it
  came, the ones held back first;
- a reply that did not stop to call a tool (``TOOL_STOPS``: a ``max_tokens`` stop inside our tool's
  input, a filter, an error) is never answered: its held events go out as they came (our call's own
  deltas were never shown: the client sees the reply end as the model ended it);
- the end-of-stream work (answering, continuing the stream) is made whole before anything of it is
  sent: a recall round that fails raises its error (``rounds.RoundFailed``: the client gets it, and
  retries the turn), an error of ours sends the held events as they came.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping
from typing import Any

from compact_hook.wires.sse import Frame, Frames

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


class Passing:
    """A raw SSE stream passed on live, each event as the wire's reader shows it (``seen``: the
    bytes to show now, or None while it holds the event back or it is ours). On an error of the
    reader, the events it held (``held``) go first, then every event as it came (``broken``); what
    followed the last whole event is ``rest`` once the stream is read."""

    def __init__(
        self, data: Mapping[str, Any], seen: Callable[[Frame], bytes | None], held: Callable[[], list[bytes]]
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
                shown = self._shown(event)
                if shown:
                    yield shown
        self.rest = frames.rest()

    def _shown(self, event: Frame | bytes) -> bytes | None:
        raw = event if isinstance(event, bytes) else event.raw
        if self.broken or isinstance(event, bytes):
            return raw
        try:
            return self.seen(event)
        except Exception:
            said_failure(self.data, "reading an event")
            self.broken = True
            return b"".join([*self.held(), raw])

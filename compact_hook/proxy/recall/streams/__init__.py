"""Recall inside streamed replies: what the client sees live, and what waits for our rounds.

One module per wire's stream shape: ``chat`` (LiteLLM's chunk objects), ``messages`` and
``google`` (raw SSE, ``sse``), ``responses`` (LiteLLM's event objects). Each shows the reply as it
comes but for the model's calls to the recall tool and the events that end the reply; a reply that
called only our tool is answered at its end (``rounds.answered``) and the final reply continues the
same stream.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping
from typing import Any

from compact_hook.proxy.recall.offer import Pending
from compact_hook.proxy.recall.streams.chat import recalled_chat
from compact_hook.proxy.recall.streams.google import recalled_google
from compact_hook.proxy.recall.streams.messages import recalled_messages
from compact_hook.proxy.recall.streams.responses import recalled_responses

Recalled = Callable[[Pending, Mapping[str, Any], AsyncIterable[Any]], AsyncGenerator[Any, None]]
STREAMS: dict[str, Recalled] = {
    "chat": recalled_chat,
    "anthropic": recalled_messages,
    "responses": recalled_responses,
    "google": recalled_google,
}
"""By wire name (``wires``): the streams recall is answered in."""


def recalled_stream(
    pending: Pending, data: Mapping[str, Any], chunks: AsyncIterable[Any]
) -> AsyncIterable[Any]:
    """The client's stream of a request offered the recall tool (as it came on a wire not served)."""
    recalled = STREAMS.get(pending.wire.name)
    return chunks if recalled is None else recalled(pending, data, chunks)


__all__ = ["STREAMS", "recalled_stream"]

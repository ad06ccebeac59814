"""A whole Anthropic Messages answer of ours as the SSE events a streamed one arrives in (LiteLLM up
to 1.108 hands a streamed answer of the proxy's own to the iterator hook as one whole ``message``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from compact_hook.wires.sse import text_frame


def anthropic_events(message: Mapping[str, Any]) -> Iterator[str]:
    """A whole Messages ``message`` as the SSE events a streamed one arrives in."""
    text = "".join(
        block.get("text", "") for block in message.get("content") or [] if isinstance(block, Mapping)
    )
    usage = message.get("usage") or {"input_tokens": 0, "output_tokens": 0}
    start = {**message, "content": [], "stop_reason": None, "usage": usage}
    yield text_frame("message_start", {"type": "message_start", "message": start})
    yield text_frame(
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    yield text_frame(
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
    )
    yield text_frame("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield text_frame(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens", 0) if isinstance(usage, Mapping) else 0},
        },
    )
    yield text_frame("message_stop", {"type": "message_stop"})


def is_whole_message(chunk: object) -> bool:
    return isinstance(chunk, Mapping) and chunk.get("type") == "message"

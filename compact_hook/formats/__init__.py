"""Wire format adapters, one per surface, registered by LiteLLM call type.

Each parses a request into the core's items and renders the result back; nothing outside
this package reads a wire field.
"""

from __future__ import annotations

from compact_hook.formats.anthropic import AnthropicFormat
from compact_hook.formats.base import Conversation, Rejected, WireFormat
from compact_hook.formats.chat import ChatFormat
from compact_hook.formats.google import GoogleFormat
from compact_hook.formats.responses import ResponsesFormat

CHAT = ChatFormat()
ANTHROPIC = AnthropicFormat()
RESPONSES = ResponsesFormat()
GOOGLE = GoogleFormat()

BY_CALL_TYPE: dict[str, WireFormat] = {
    "acompletion": CHAT,
    "completion": CHAT,
    "anthropic_messages": ANTHROPIC,
    "aresponses": RESPONSES,
    "responses": RESPONSES,
    "agenerate_content": GOOGLE,
    "agenerate_content_stream": GOOGLE,
    "generate_content": GOOGLE,
    "generate_content_stream": GOOGLE,
}


def format_for(call_type: str) -> WireFormat | None:
    """The adapter for a LiteLLM call type, or None for surfaces we do not handle."""
    return BY_CALL_TYPE.get(call_type)


__all__ = ["ANTHROPIC", "CHAT", "GOOGLE", "RESPONSES", "Conversation", "Rejected", "WireFormat", "format_for"]

"""Wire format adapters, one per surface, registered by LiteLLM call type.

Each parses a request into the core's items and renders the result back; nothing outside
this package reads a wire field.
"""

from __future__ import annotations

from compact_hook.formats.anthropic import AnthropicFormat
from compact_hook.formats.base import Conversation, Rejected, WireFormat
from compact_hook.formats.chat import ChatFormat
from compact_hook.formats.responses import ResponsesFormat

CHAT = ChatFormat()
ANTHROPIC = AnthropicFormat()
RESPONSES = ResponsesFormat()

BY_CALL_TYPE: dict[str, WireFormat] = {
    "acompletion": CHAT,
    "completion": CHAT,
    "anthropic_messages": ANTHROPIC,
    "aresponses": RESPONSES,
    "responses": RESPONSES,
}


def format_for(call_type: str) -> WireFormat | None:
    """The adapter for a LiteLLM call type, or None for surfaces we do not handle."""
    return BY_CALL_TYPE.get(call_type)


__all__ = ["ANTHROPIC", "CHAT", "RESPONSES", "Conversation", "Rejected", "WireFormat", "format_for"]

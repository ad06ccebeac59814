"""Wire format adapters, one per surface, registered by LiteLLM call type.

Each parses a request into the core's items and renders the result back; nothing outside
this package reads a wire field.
"""

from __future__ import annotations

import re

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


NOT_CONVERSATIONS = re.compile(
    r"a?(embedding|image_\w+|moderation|transcription|speech|rerank|search|ocr|\w*file\w*|\w*batch\w*|"
    r"\w*fine_tuning\w*|\w*video\w*|\w*vector_store\w*|\w*container\w*|\w*sandbox\w*|run_code|"
    r"code_interpreter_tool|\w*assistants?|\w*thread\w*|a?_?add_message|a?get_messages|a?ingest|a?query|"
    r"\w*mcp_tool\w*|\w*skill|list_input_items|alist_input_items|\w*decisions|\w*systemone)"
)
"""LiteLLM call types that carry no conversation (embeddings, media, files, stores...): not ours.
Any other call type we do not handle is a conversation we cannot see (``unhandled_call_type``)."""


def format_for(call_type: str) -> WireFormat | None:
    """The adapter for a LiteLLM call type, or None for surfaces we do not handle."""
    return BY_CALL_TYPE.get(call_type)


def carries_conversation(call_type: str) -> bool:
    """Whether a call type we do not handle still carries a conversation (text completion, a
    Responses websocket, the Interactions API, a LiteLLM release's new surface...)."""
    return NOT_CONVERSATIONS.fullmatch(call_type) is None


__all__ = [
    "ANTHROPIC",
    "CHAT",
    "GOOGLE",
    "RESPONSES",
    "Conversation",
    "Rejected",
    "WireFormat",
    "carries_conversation",
    "format_for",
]

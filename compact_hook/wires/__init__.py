"""The wires the proxy serves, one folder each: ``chat`` (``/v1/chat/completions``), ``anthropic``
(Anthropic's ``/v1/messages``), ``responses`` (OpenAI's ``/v1/responses``), ``google`` (Gemini's
``generateContent``).

Each folder holds the wire's whole story against the contracts of ``base``: its format adapter
(parses a request into the core's items and renders the result back), its recall tool and its
recall inside streams. ``registry`` is the one place that names them, by LiteLLM call type and by
name. Nothing outside this package reads a wire field. This module gives the four format adapters
(pure: no LiteLLM import), for the engine's library, the command line and the tests.
"""

from __future__ import annotations

from compact_hook.wires.anthropic.format import AnthropicFormat
from compact_hook.wires.base import Rejected, WireFormat
from compact_hook.wires.chat.format import ChatFormat
from compact_hook.wires.conversation import Conversation
from compact_hook.wires.google.format import GoogleFormat
from compact_hook.wires.responses.format import ResponsesFormat

CHAT = ChatFormat()
ANTHROPIC = AnthropicFormat()
RESPONSES = ResponsesFormat()
GOOGLE = GoogleFormat()

__all__ = [
    "ANTHROPIC",
    "CHAT",
    "GOOGLE",
    "RESPONSES",
    "Conversation",
    "Rejected",
    "WireFormat",
]

"""The one registry of wires: each wire's format, recall tool and stream, by name and by LiteLLM
call type.

Adding a wire is a folder (``format.py``, ``recall.py``, ``stream.py`` against ``base``'s contracts)
and one ``Wire`` here (docs/architecture.md lists the steps). The proxy asks this module only: the
engine and the command line use the format adapters alone (``compact_hook.wires``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES
from compact_hook.wires.anthropic.recall import MessagesRecall
from compact_hook.wires.anthropic.stream import recalled_messages
from compact_hook.wires.base import Recalling, RecallWire, WireFormat
from compact_hook.wires.chat.recall import ChatRecall
from compact_hook.wires.chat.stream import recalled_chat
from compact_hook.wires.google.recall import GoogleRecall
from compact_hook.wires.google.stream import recalled_google
from compact_hook.wires.responses.recall import ResponsesRecall
from compact_hook.wires.responses.stream import recalled_responses

Stream = Callable[[Recalling, Mapping[str, Any], AsyncIterable[Any]], AsyncGenerator[Any, None]]
"""Recall inside a wire's streamed reply (``<wire>/stream.py``)."""


@dataclass(frozen=True, slots=True)
class Wire:
    """One wire: its name (the ``wire`` of reports and metrics), the LiteLLM call types it comes
    as, and its three parts."""

    name: str
    call_types: frozenset[str]
    format: WireFormat
    recall: RecallWire
    stream: Stream


WIRES: dict[str, Wire] = {
    wire.name: wire
    for wire in (
        Wire("chat", frozenset({"acompletion", "completion"}), CHAT, ChatRecall(), recalled_chat),
        Wire("anthropic", frozenset({"anthropic_messages"}), ANTHROPIC, MessagesRecall(), recalled_messages),
        Wire(
            "responses",
            frozenset({"aresponses", "responses"}),
            RESPONSES,
            ResponsesRecall(),
            recalled_responses,
        ),
        Wire(
            "google",
            frozenset(
                {
                    "agenerate_content",
                    "agenerate_content_stream",
                    "generate_content",
                    "generate_content_stream",
                }
            ),
            GOOGLE,
            GoogleRecall(),
            recalled_google,
        ),
    )
}
"""By name: every wire the proxy serves."""
BY_CALL_TYPE: dict[str, Wire] = {call_type: wire for wire in WIRES.values() for call_type in wire.call_types}

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
    wire = BY_CALL_TYPE.get(call_type)
    return None if wire is None else wire.format


def carries_conversation(call_type: str) -> bool:
    """Whether a call type we do not handle still carries a conversation (text completion, a
    Responses websocket, the Interactions API, a LiteLLM release's new surface...)."""
    return NOT_CONVERSATIONS.fullmatch(call_type) is None

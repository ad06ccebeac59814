"""The library API for chat messages: count, decide, compact — without a proxy.

The proxy hook drives a ``Compactor`` with a store and any wire format; these functions
are the stateless entry points for chat-completions message lists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, TypedDict, Unpack

from compact_hook.core.counting import TokenCounter, item_strings, request_total
from compact_hook.core.limits import Limits
from compact_hook.engine.compactor import Compactor
from compact_hook.engine.result import CompactRequest, CompactResult
from compact_hook.engine.summary.summarize import Summarize
from compact_hook.settings.model import CompactConfig
from compact_hook.state.archive import Archive
from compact_hook.state.tokenizers import DEFAULT_TOKENIZER, counter_for, tokenizer_name_for_model
from compact_hook.wires import CHAT, Conversation, Rejected


def parse_chat(messages: Sequence[Any], max_output_tokens: int | None = None) -> Conversation | Rejected:
    """Chat messages as the engine's conversation, or why they must pass through."""
    data: dict[str, Any] = {"messages": list(messages) if isinstance(messages, list | tuple) else messages}
    if max_output_tokens:
        data["max_tokens"] = max_output_tokens
    return CHAT.parse(data)


def count_tokens(messages: Sequence[Any], model: str = "gpt-4o", tokenizer: str | None = None) -> int:
    """Tokens chat ``messages`` take as a prompt for ``model`` (framing and reply priming included)."""
    counter = counter_for(tokenizer or tokenizer_name_for_model(model))
    conversation = parse_chat(messages)
    if isinstance(conversation, Rejected):
        raise ValueError(f"not a chat-completions message list: {conversation.detail}")
    counts = counter.count(conversation.prints(), lambda i: item_strings(conversation.item(i)))
    return request_total(0, counts)


def should_compact(
    messages: Sequence[Any],
    config: CompactConfig,
    *,
    max_output_tokens: int | None = None,
    counter: TokenCounter | None = None,
) -> bool:
    """True when the messages reach the threshold (inclusive); False when empty or window unknown."""
    conversation = parse_chat(messages, max_output_tokens)
    limits = Limits.of(config, max_output_tokens, 0)
    if not messages or limits is None or not config.enabled or isinstance(conversation, Rejected):
        return False
    counter = counter or counter_for(config.tokenizer or DEFAULT_TOKENIZER)
    counts = counter.count(conversation.prints(), lambda i: item_strings(conversation.item(i)))
    return request_total(0, counts) >= limits.compact


class ChatOptions(TypedDict, total=False):
    """What ``compact_messages`` may be told besides the messages, settings and summarizer."""

    session_id: str | None
    """Names the archive folder (else a hash of the conversation's start)."""
    max_output_tokens: int | None
    """The reply's reserve, as the request's ``max_tokens`` would say."""
    counter: TokenCounter | None
    """Replaces the tokenizer the settings name (tests, a model we do not ship)."""
    archive: Archive | None
    """Replaces the archive under ``archive_dir``."""


async def compact_messages(
    messages: Sequence[Any], config: CompactConfig, summarize: Summarize, **options: Unpack[ChatOptions]
) -> CompactResult:
    """Compact chat ``messages`` if they reach the threshold; otherwise return them as they are
    (but for the cheap tiers). Stateless: nothing is remembered between calls. No handles
    (``recall``): nothing here answers the tool that reads them back (the proxy does)."""
    config = dataclasses.replace(config, recall=False)
    conversation = parse_chat(messages, options.get("max_output_tokens"))
    if isinstance(conversation, Rejected):
        return CompactResult.passthrough(list(messages), conversation)
    request = CompactRequest(
        conversation,
        config,
        summarize,
        options.get("session_id"),
        archive=options.get("archive"),
        counter=options.get("counter"),
    )
    return await Compactor(store=None).compact(request)

"""One request through the Compactor in a WordCounter-sized world (1,000-word window, tiers
off unless asked), on any wire format: the engine-level scenarios share it.

And the store's world (``STORE_CONFIG``: a 20K window, real tokens, tiers off), where a chat
session is replayed turn by turn to test what is remembered between requests."""

from __future__ import annotations

from typing import Any

from compact_hook.config import CompactConfig
from compact_hook.core.chain import scope_of
from compact_hook.core.counting import item_strings, request_total
from compact_hook.engine import Compactor, CompactRequest, CompactResult
from compact_hook.engine.library import parse_chat
from compact_hook.formats import CHAT, Conversation
from compact_hook.state.archive import Archive
from tests.conversations import wire_of
from tests.fakes import FakeSummarizer, InMemoryArchive, WordCounter


def config(**overrides: Any) -> CompactConfig:
    settings: dict[str, Any] = {
        "context_window": 1000,
        "trigger_ratio": 0.9,
        "tail_retention_ratio": 0.3,
        "summary_context_window": 100_000,
        "summary_max_tokens": 100,
        "retry_backoff_seconds": 0,
        "user_message_budget": 0,
        "tool_output_policy": "none",
        "clear_tool_results": False,
    }
    settings.update(overrides)
    return CompactConfig(**settings)


def word_total(messages: list[dict[str, Any]]) -> int:
    """What WordCounter counts for a chat request (no context)."""
    conversation = Conversation(CHAT, messages)
    counts = WordCounter().count(conversation.prints(), lambda i: item_strings(conversation.item(i)))
    return request_total(0, counts)


async def run(
    wire: str,
    data: dict[str, Any],
    settings: CompactConfig,
    summarizer: FakeSummarizer | None = None,
    compactor: Compactor | None = None,
    archive: InMemoryArchive | None = None,
) -> CompactResult:
    parsed = wire_of(wire).parse(data)
    assert isinstance(parsed, Conversation), parsed
    request = CompactRequest(
        parsed,
        settings,
        summarizer or FakeSummarizer(),
        "session",
        scope=b"scope",
        archive=archive or InMemoryArchive(),
        counter=WordCounter(),
    )
    return await (compactor or Compactor(None)).compact(request)


STORE_CONFIG = CompactConfig(
    context_window=20_000,
    summary_max_tokens=1000,
    retry_backoff_seconds=0,
    archive_dir="/nonexistent",
    tool_output_policy="none",
    clear_tool_results=False,
    user_message_budget=0,
    on_overflow="passthrough",
)
"""The store's world: a 20K window, the cheap tiers off (these tests are about remembering
compactions; test_tiers.py covers the tiers and their interplay with the store)."""
STORE_SCOPE = scope_of(STORE_CONFIG, "model", "team:a", "chat", "1")


async def compact_chat(
    compactor: Compactor,
    messages: list[Any],
    summarizer: Any,
    session: str | None = None,
    *,
    scope: bytes = STORE_SCOPE,
    archive: Archive | None = None,
    config: CompactConfig = STORE_CONFIG,
) -> CompactResult:
    """One chat request through ``compactor`` (by default in the store's world, real tokens)."""
    conversation = parse_chat(messages)
    assert isinstance(conversation, Conversation)
    return await compactor.compact(CompactRequest(conversation, config, summarizer, session, scope, archive))

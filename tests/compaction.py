"""One request through the Compactor in a WordCounter-sized world (1,000-word window, tiers
off unless asked), on any wire format: the engine-level scenarios share it.

And the store's world (``STORE_CONFIG``: a 20K window, real tokens, tiers off), where a chat
session is replayed turn by turn to test what is remembered between requests."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from compact_hook import count_tokens
from compact_hook.config import CompactConfig
from compact_hook.core.chain import Owner, scope_of
from compact_hook.core.counting import item_strings, request_total
from compact_hook.core.limits import Limits
from compact_hook.engine import Compactor, CompactRequest, CompactResult
from compact_hook.engine.background import Background
from compact_hook.engine.flight import Leases
from compact_hook.engine.library import parse_chat
from compact_hook.engine.prepare import PrepareSetup
from compact_hook.formats import CHAT, Conversation
from compact_hook.state.archive import Archive
from compact_hook.state.store import MemoryStore
from tests.conversations import wire_of
from tests.fakes import FakeSummarizer, InMemoryArchive, WordCounter
from tests.support import load_transcript, replay_points


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
STORE_SCOPE = scope_of(STORE_CONFIG, Owner("model", "team:a", "chat"), "1")


def chat_request(
    messages: list[Any],
    summarizer: Any,
    session: str | None = None,
    *,
    scope: bytes = STORE_SCOPE,
    archive: Archive | None = None,
    config: CompactConfig = STORE_CONFIG,
) -> CompactRequest:
    """One chat request, by default in the store's world (real tokens)."""
    conversation = parse_chat(messages)
    assert isinstance(conversation, Conversation)
    return CompactRequest(conversation, config, summarizer, session, scope, archive)


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
    request = chat_request(messages, summarizer, session, scope=scope, archive=archive, config=config)
    return await compactor.compact(request)


# -- a session replayed in the store's world, with compactions prepared in the background -----------

TRANSCRIPT = load_transcript("claude_code_fa812bfe_pre_compact.json")
POINTS = replay_points(TRANSCRIPT)


def _limits() -> Limits:
    limits = Limits.of(STORE_CONFIG, None, 0)
    assert limits is not None
    return limits


LIMITS = _limits()
IN_ZONE = next(TRANSCRIPT[:end] for end in POINTS if count_tokens(TRANSCRIPT[:end]) >= LIMITS.prepare)
"""The session's first turn past ``prepare_ratio`` (under the trigger)."""
AT_TRIGGER = next(TRANSCRIPT[:end] for end in POINTS if count_tokens(TRANSCRIPT[:end]) >= LIMITS.compact)


@dataclasses.dataclass
class Replica:
    compactor: Compactor
    background: Background


def replica(
    store: MemoryStore | None = None,
    prepared: MemoryStore | None = None,
    concurrency: int = 4,
    queue: int = 16,
) -> Replica:
    """A proxy process's compactor: a store, and compactions prepared in the background."""
    background = Background(concurrency, queue)
    setup = PrepareSetup(prepared or MemoryStore(1000, 3600), background)
    return Replica(
        Compactor(store or MemoryStore(1000, 3600), Leases(lock_wait=5), prepare=setup), background
    )


async def idle(background: Background) -> None:
    """The agent's pause: long enough for what runs in the background to finish."""
    while len(background):
        await asyncio.sleep(0.005)

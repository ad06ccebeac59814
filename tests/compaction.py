"""One request through the Compactor in a WordCounter-sized world (1,000-word window, tiers
off unless asked), on any wire format: the engine-level scenarios share it."""

from __future__ import annotations

from typing import Any

from compact_hook.config import CompactConfig
from compact_hook.engine import Compactor, CompactRequest, CompactResult
from compact_hook.formats import Conversation
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

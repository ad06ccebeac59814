"""One request through the Compactor in a WordCounter-sized world (1,000-word window, tiers
off unless asked), on any wire format: the engine-level scenarios share it.

And the store's world (``STORE_CONFIG``: a 20K window, real tokens, tiers off), where a chat
session is replayed turn by turn to test what is remembered between requests."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from compact_hook import count_tokens
from compact_hook.core.calibration import IDENTITY, CountRatio
from compact_hook.core.chain import Owner, scope_of
from compact_hook.core.counting import item_strings, request_total
from compact_hook.core.limits import Limits
from compact_hook.core.pricing import Prices
from compact_hook.engine import Compactor, CompactRequest, CompactResult
from compact_hook.engine.ahead.background import Background
from compact_hook.engine.ahead.prepare import PrepareSetup
from compact_hook.engine.library import parse_chat
from compact_hook.engine.summary.once import Leases
from compact_hook.settings.model import CompactConfig
from compact_hook.state.archive import Archive
from compact_hook.state.store import MemoryStore
from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES, Conversation
from tests.conversations import Said, body, wire_of
from tests.fakes import FakeSummarizer, InMemoryArchive, WordCounter
from tests.support import (
    anthropic_replay_points,
    google_replay_points,
    load_transcript,
    replay_points,
    responses_replay_points,
    summaries_in,
)

CLIENT_DATA = Path(__file__).parent / "data" / "clients"


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
    ratio: CountRatio = IDENTITY,
) -> CompactResult:
    """``data`` through a compactor; ``ratio``: the provider's tokens per one of ours, as the model
    group knows it."""
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
        count_ratio=ratio,
    )
    return await (compactor or Compactor(None)).compact(request)


def priced_request(
    wire: str, steps: list[Any], settings_: Any, price: Prices | None
) -> tuple[Any, CompactRequest]:
    """The conversation ``steps`` (and a user's next question) as a priced engine request."""
    parsed = wire_of(wire).parse(body(wire, [*steps, Said("next?")]))
    assert isinstance(parsed, Conversation)
    request = CompactRequest(
        parsed,
        settings_,
        FakeSummarizer(),
        "session",
        scope=b"scope",
        archive=InMemoryArchive(),
        counter=WordCounter(),
        prices=price,
    )
    return parsed, request


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


# -- a real agent CLI's loop, as it sent it, replayed through one process's compactor -----------------

CLIENT_LOOPS = {
    "claude-2.1.332": (ANTHROPIC, "messages", anthropic_replay_points),
    "codex-0.171.0": (RESPONSES, "input", responses_replay_points),
    "gemini-0.61.0": (GOOGLE, "contents", google_replay_points),
    "qwen-0.24.4": (CHAT, "messages", replay_points),
    "opencode-1.18.33": (CHAT, "messages", replay_points),
    "pi-0.73.1": (CHAT, "messages", replay_points),
}
"""Each CLI's last request of its 30-turn loop (``tests/data/clients``), its wire and entries key,
and where the CLI called the model."""


@dataclasses.dataclass
class LoopCount:
    """What a replayed loop paid for and used: summary calls, distinct summaries that reached the
    provider (each one compaction event), and the unused preparations each report said."""

    calls: int
    applied: int
    reported_unused: list[int]
    most_unused: int = 0
    """The metrics' view: the most summaries the conversation had made and not applied at once."""


def loop_config(window: int) -> CompactConfig:
    """The store's world at ``window`` with the cheap tiers on, as a proxy runs by default."""
    return dataclasses.replace(
        STORE_CONFIG,
        context_window=window,
        summary_context_window=400_000,
        clear_tool_results=True,
        tool_output_policy="tokens",
        on_overflow="fit",
    )


async def replay_client_loop(
    client: str, config: CompactConfig, summarizer: FakeSummarizer, pause: float | None = None
) -> LoopCount:
    """The CLI's loop turn by turn through a replica; between turns the agent pauses until the
    background is idle (``pause`` None) or for ``pause`` seconds (a summary may then still be in
    flight when the next turns come, as under load)."""
    wire, key, points = CLIENT_LOOPS[client]
    session = json.loads((CLIENT_DATA / f"{client}-last.json").read_text())
    node, entries = replica(), session[key]
    applied: set[str] = set()
    reported: list[int] = []
    for end in points(entries):
        parsed = wire.parse({**session, key: entries[:end]})
        assert isinstance(parsed, Conversation)
        request = CompactRequest(parsed, config, summarizer, "s", STORE_SCOPE, InMemoryArchive())
        result = await node.compactor.compact(request)
        applied.update(summaries_in(result.messages, wire))
        if result.prepared_unused is not None:
            reported.append(result.prepared_unused)
        await (idle(node.background) if pause is None else asyncio.sleep(pause))
    await idle(node.background)
    preparations = node.compactor.preparations
    assert preparations is not None
    most = max(preparations.stats.sessions_unused, default=0)
    return LoopCount(len(summarizer.requests), len(applied), reported, most)


async def compact_via_library(
    messages: list[dict[str, Any]], config: CompactConfig, summarizer: Any = None
) -> CompactResult:
    """``compact_messages`` in a WordCounter world: a fake summarizer, an in-memory archive."""
    from compact_hook import compact_messages

    return await compact_messages(
        messages,
        config,
        summarizer or FakeSummarizer(),
        session_id="s",
        counter=WordCounter(),
        archive=InMemoryArchive(),
    )


async def compact_via_engine(
    messages: list[dict[str, Any]], config: CompactConfig, summarizer: Any = None
) -> CompactResult:
    """As ``compact_via_library``, with the settings as given: the library names no handles
    (``recall``: nothing there answers the tool), the engine under the proxy does."""
    conversation = parse_chat(messages, None)
    assert isinstance(conversation, Conversation)
    request = CompactRequest(
        conversation,
        config,
        summarizer or FakeSummarizer(),
        "s",
        archive=InMemoryArchive(),
        counter=WordCounter(),
    )
    return await Compactor(store=None).compact(request)


def tool_session(outputs: list[int], tool: str = "bash") -> list[dict[str, Any]]:
    """A task, then one call+result per output size (in words)."""
    from tests.conversations import w
    from tests.support import calling, result, system, user

    messages = [system("rules"), user("the task")]
    for i, size in enumerate(outputs):
        messages += [calling(tool, call_id=f"c{i}"), result(f"out{i} " + w(size), f"c{i}_0")]
    return messages

"""A real ``litellm.Router`` for the hook's unit tests, its provider faked with respx: the model
groups, the spy on its summary calls, and the request a proxy would hand the hook."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import litellm

from tests.support import load_transcript

UPSTREAM = "http://upstream.test/v1"
SUMMARY = (
    "## Goal and user constraints\nkeep going\n## Decisions\nnone\n## Files and artifacts\nnone\n"
    "## Tool calls and outcomes\nnone\n## Errors and fixes\nnone\n## Current state\nhalfway\n## Next steps\nnone"
)


class SpyRouter(Protocol):
    """A router whose ``acompletion`` calls (our summary calls) are remembered, kwargs each."""

    calls: list[dict[str, Any]]


def completion(content: str) -> dict[str, Any]:
    return {
        "id": "cmpl",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def deployment(name: str, compact: Any = None, model: str = "openai/gpt-4o-mini") -> dict[str, Any]:
    entry: dict[str, Any] = {
        "model_name": name,
        "litellm_params": {"model": model, "api_base": UPSTREAM, "api_key": "sk-test"},
    }
    if compact is not None:
        entry["model_info"] = {"compact": compact}
    return entry


def spy_router(model_list: list[dict[str, Any]]) -> Any:
    """A real router that also remembers the kwargs of every ``acompletion`` call: its method
    wrapped on the instance (LiteLLM 1.110 refuses subclasses of ``Router``)."""
    router = litellm.Router(model_list=model_list)
    calls: list[dict[str, Any]] = []
    original = router.acompletion

    async def acompletion(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return await original(*args, **kwargs)

    router.acompletion = acompletion
    router.calls = calls
    return router


def model_groups(archive: Path) -> list[dict[str, Any]]:
    """``agent`` (20K, the cheap tiers and the fit off), ``plain`` (no compaction), ``tiers``
    (200K), ``tiers-20k``, ``off`` (compaction disabled)."""
    compact = {
        "context_window": 20_000,
        "archive_dir": str(archive),
        "retry_backoff_seconds": 0,
        "tool_output_policy": "none",
        "clear_tool_results": False,
        "user_message_budget": 0,
        "on_overflow": "passthrough",
    }
    twenty = {
        "context_window": 20_000,
        "archive_dir": str(archive),
        "clear_tool_results": False,
        "tool_output_policy": "none",
        "retry_backoff_seconds": 0,
    }
    return [
        deployment("agent", compact),
        deployment("plain"),
        deployment("tiers", {"context_window": 200_000, "archive_dir": str(archive)}),
        deployment("tiers-20k", twenty),
        deployment("off", {"enabled": False}),
    ]


class Key:
    """The caller's key as LiteLLM's auth hands it to the hook (its metadata and its team's)."""

    def __init__(self, team_id: str | None = None, token: str | None = None, metadata: Any = None) -> None:
        self.team_id, self.token, self.metadata, self.team_metadata = team_id, token, metadata, None


def request(model: str = "agent", messages: Any = None, **extra: Any) -> dict[str, Any]:
    """A chat request as the proxy hands it to the hook (a Claude Code session by default)."""
    data: dict[str, Any] = {
        "model": model,
        "messages": load_transcript("claude_code_fa812bfe_pre_compact.json")
        if messages is None
        else messages,
        "metadata": {"user_api_key": "hashed-key", "user_api_key_team_id": "team-1", "other": "x"},
        "litellm_call_id": "call-123",
    }
    data.update(extra)
    return data

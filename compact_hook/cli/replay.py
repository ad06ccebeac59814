"""``replay``: a conversation sent turn by turn through a running proxy, with the official SDKs.

Each turn is the conversation up to a point where the client would call the model (after the
user's words or tool results, before the assistant's answer). What the proxy did is read from
its ``x-compact-*`` response headers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from rich.progress import Progress
from rich.table import Table

from compact_hook.cli.inputs import ENTRIES_KEYS, Loaded
from compact_hook.core.outcomes import CacheStatus
from compact_hook.wires import ANTHROPIC, GOOGLE, RESPONSES

ASSISTANT_TYPES = {"function_call", "reasoning"}
DEFAULT_MAX_TOKENS = 1024


EVENTS = frozenset({CacheStatus.MISS, CacheStatus.SHARED, CacheStatus.PREPARED})
"""A turn with one of these compacted: a summary made (here or by another request) or a prepared
one applied."""


class Turn(NamedTuple):
    """One replayed turn as the proxy answered it (its ``x-compact-*`` headers): tokens as the
    client sent them and as forwarded, and the round trip the client waited for."""

    number: int
    sent: int
    forwarded: int
    cache: CacheStatus | None
    summary_calls: int
    compacted: bool
    milliseconds: float

    @property
    def event(self) -> bool:
        return self.cache in EVENTS


def turn_ends(loaded: Loaded) -> list[int]:
    """Prefix lengths at which the client calls the model."""
    entries = loaded.entries
    return [end for end in range(1, len(entries) + 1) if _asks(entries[end - 1]) and _answered(entries, end)]


def _is_assistant(entry: Any) -> bool:
    return isinstance(entry, dict) and (
        entry.get("role") in ("assistant", "model") or entry.get("type") in ASSISTANT_TYPES
    )


def _asks(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and not _is_assistant(entry)
        and entry.get("role") not in ("system", "developer")
    )


def _answered(entries: list[Any], end: int) -> bool:
    return end == len(entries) or _is_assistant(entries[end])


def sender(loaded: Loaded, url: str, key: str, model: str) -> Callable[[list[Any]], dict[str, str]]:
    """A function sending one turn's entries and returning the response headers."""
    entries_key = ENTRIES_KEYS[loaded.wire.name]
    body = {k: v for k, v in loaded.data.items() if k not in (entries_key, "model", "stream")}
    if loaded.wire is GOOGLE:
        return _gemini_sender(body, url, key, model)
    if loaded.wire is ANTHROPIC:
        import anthropic

        claude = anthropic.Anthropic(api_key=key, base_url=url, max_retries=0, timeout=600)
        body.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        return lambda entries: dict(
            claude.messages.with_raw_response.create(model=model, messages=entries, **body).headers
        )
    import openai

    client = openai.OpenAI(api_key=key, base_url=url.rstrip("/") + "/v1", max_retries=0, timeout=600)
    if loaded.wire is RESPONSES:
        return lambda entries: dict(
            client.responses.with_raw_response.create(model=model, input=entries, **body).headers
        )
    return lambda entries: dict(
        client.chat.completions.with_raw_response.create(model=model, messages=entries, **body).headers
    )


def _gemini_sender(
    body: dict[str, Any], url: str, key: str, model: str
) -> Callable[[list[Any]], dict[str, str]]:
    """Google's REST call as its SDK makes it (``v1beta``: the path LiteLLM routes)."""
    import httpx

    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600)

    def send(entries: list[Any]) -> dict[str, str]:
        answer = client.post(f"/v1beta/models/{model}:generateContent", json={**body, "contents": entries})
        answer.raise_for_status()
        return dict(answer.headers)

    return send


def replay(
    loaded: Loaded, send: Callable[[list[Any]], dict[str, str]], limit: int | None = None
) -> list[Turn]:
    ends = turn_ends(loaded)[:limit]
    turns: list[Turn] = []
    with Progress(transient=True) as progress:
        task = progress.add_task("replaying", total=len(ends))
        for number, end in enumerate(ends, start=1):
            start = time.perf_counter()
            headers = send(loaded.entries[:end])
            turns.append(_turn(number, headers, (time.perf_counter() - start) * 1000))
            progress.advance(task)
    return turns


def _turn(number: int, headers: dict[str, str], milliseconds: float) -> Turn:
    def header(name: str, default: str = "0") -> str:
        return headers.get(f"x-compact-{name}", default)

    return Turn(
        number,
        int(header("tokens-before")),
        int(header("tokens-after")),
        _cache_status(header("cache", "")),
        int(header("summary-calls")),
        header("compacted", "false") == "true",
        milliseconds,
    )


def _cache_status(value: str) -> CacheStatus | None:
    try:
        return CacheStatus(value)
    except ValueError:  # absent (the hook did not run), or a proxy of another version
        return None


def turn_table(turns: list[Turn]) -> Table:
    table = Table(title=f"{len(turns)} turns")
    for column in ("turn", "sent", "forwarded", "cache", "summary calls", "ms"):
        table.add_column(column, justify="right")
    for turn in turns:
        table.add_row(
            str(turn.number),
            f"{turn.sent:,}",
            f"{turn.forwarded:,}",
            turn.cache or "-",
            str(turn.summary_calls),
            f"{turn.milliseconds:,.0f}",
            style="bold" if turn.event else None,
        )
    return table

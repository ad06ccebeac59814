"""Turning the middle into one summary: prompt, chunking, retries.

``summarize`` is any ``async (messages) -> str``: the proxy hook passes a call through the
LiteLLM router (``router_summarizer``), a library user may pass ``litellm.acompletion``
behind a lambda, and tests pass a fake. Everything else here is independent of LiteLLM.

A middle larger than the summary model can read is never cut short: it is summarized in
chunks, each request carrying the running summary, so the last answer covers all of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

from compact_hook.config import CompactConfig
from compact_hook.core.counting import TokenCounter
from compact_hook.core.items import Item
from compact_hook.core.transcript import transcript_entries
from compact_hook.errors import SummarizerError

logger = logging.getLogger(__name__)

Message = dict[str, Any]
"""A chat message: summary calls are chat completions whatever the request's format."""
Summarize = Callable[[list[Message]], Awaitable[str]]

PROMPT_VERSION = "1"
"""Bump when prompts/summarize.md changes meaningfully: stored summaries are keyed by it."""

MIN_CHUNK_TOKENS = 512
SAFETY_MARGIN = 0.05
ENTRY_SEPARATOR = "\n\n"


@lru_cache(maxsize=1)
def summary_prompt() -> str:
    return resources.files("compact_hook").joinpath("prompts", "summarize.md").read_text(encoding="utf-8")


def summary_request(chunk: str, running_summary: str | None, part: int, parts: int) -> list[Message]:
    """The chat messages of one summary call."""
    sections = []
    if running_summary:
        sections.append(f"<summary-so-far>\n{running_summary}\n</summary-so-far>")
    label = f' part="{part} of {parts}"' if parts > 1 else ""
    sections.append(f"<transcript{label}>\n{chunk}\n</transcript>")
    sections.append(
        "Write the merged summary now, covering the summary so far and this transcript."
        if running_summary
        else "Write the summary now."
    )
    return [
        {"role": "system", "content": summary_prompt()},
        {"role": "user", "content": "\n\n".join(sections)},
    ]


def input_budget(config: CompactConfig, counter: TokenCounter) -> int:
    """Transcript tokens one summary call can carry beside the prompt and a running summary."""
    window = config.summary_context_window or config.context_window
    if window is None:
        raise SummarizerError("summary model context window unknown")
    reserved = counter.count_text(summary_prompt()) + 2 * config.summary_max_tokens
    budget = int(window * (1 - SAFETY_MARGIN)) - reserved - 64
    if budget < MIN_CHUNK_TOKENS:
        raise SummarizerError(
            f"summary model window ({window} tokens) leaves only {budget} tokens for the transcript "
            f"beside the prompt and summary_max_tokens={config.summary_max_tokens}"
        )
    return budget


def plan_chunks(entries: Sequence[str], counter: TokenCounter, budget: int) -> list[str]:
    """Pack entries into chunks of at most ``budget`` tokens; split any entry that alone is larger."""
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for piece, tokens in _pieces(entries, counter, budget):
        if current and used + tokens > budget:
            chunks.append(ENTRY_SEPARATOR.join(current))
            current, used = [], 0
        current.append(piece)
        used += tokens + 1
    if current:
        chunks.append(ENTRY_SEPARATOR.join(current))
    return chunks


def _pieces(entries: Sequence[str], counter: TokenCounter, budget: int) -> list[tuple[str, int]]:
    pieces: list[tuple[str, int]] = []
    for entry in entries:
        tokens = counter.count_text(entry)
        if tokens <= budget:
            pieces.append((entry, tokens))
        else:
            pieces.extend(_split_entry(entry, tokens, counter, budget))
    return pieces


def _split_entry(entry: str, tokens: int, counter: TokenCounter, budget: int) -> list[tuple[str, int]]:
    """Consecutive slices of ``entry`` each within ``budget`` tokens; together exactly ``entry``."""
    pieces: list[tuple[str, int]] = []
    rest = entry
    while rest:
        size = max(1, int(len(rest) * budget / max(tokens, 1) * 0.9))
        piece = rest[:size]
        piece_tokens = counter.count_text(piece)
        while piece_tokens > budget and len(piece) > 1:
            piece = piece[: len(piece) * 3 // 4]
            piece_tokens = counter.count_text(piece)
        pieces.append((piece, piece_tokens))
        rest = rest[len(piece) :]
        tokens = max(tokens - piece_tokens, 1)
    return pieces


class Attempts:
    """Summary calls made for one compaction, failed ones included (they are reported too)."""

    def __init__(self) -> None:
        self.count = 0


async def summarize_middle(
    middle: Sequence[Item],
    config: CompactConfig,
    summarize: Summarize,
    counter: TokenCounter,
    attempts: Attempts,
) -> str:
    """One summary covering every item of ``middle`` (chunked when needed)."""
    chunks = plan_chunks(transcript_entries(middle), counter, input_budget(config, counter))
    running: str | None = None
    for part, chunk in enumerate(chunks, start=1):
        running = await call_with_retries(
            summarize, summary_request(chunk, running, part, len(chunks)), config, attempts
        )
    if running is None:
        raise SummarizerError("nothing to summarize")
    return running


async def call_with_retries(
    summarize: Summarize, request: list[Message], config: CompactConfig, attempts: Attempts
) -> str:
    """``1 + max_retries`` attempts with exponential backoff; an empty answer is a failure."""
    tries = config.max_retries + 1
    for attempt in range(1, tries + 1):
        try:
            logger.info("compact_hook: summary call (attempt %d of %d)", attempt, tries)
            attempts.count += 1
            answer = await asyncio.wait_for(summarize(request), timeout=config.summary_timeout_seconds)
            if not isinstance(answer, str) or not answer.strip():
                raise SummarizerError("summary model returned an empty answer")
            return answer.strip()
        except Exception as exc:  # any failure of the summary call is retried, then reported
            logger.warning("compact_hook: summary attempt %d of %d failed: %r", attempt, tries, exc)
            if attempt == tries:
                raise SummarizerError(f"summary failed after {tries} attempts: {exc!r}") from exc
            await asyncio.sleep(config.retry_backoff_seconds * 2 ** (attempt - 1))
    raise AssertionError("unreachable")

"""Turning the middle into one summary: prompt, chunking, retries.

``summarize`` is any ``async (messages) -> str``: the proxy hook passes a call through the
LiteLLM router (``proxy.request.summarizer``), a library user may pass ``litellm.acompletion``
behind a lambda, and tests pass a fake. Everything else here is independent of LiteLLM.

A middle larger than the summary model can read is never cut short: it is summarized in
chunks, each request carrying the running summary, so the last answer covers all of it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from compact_hook.core.calibration import IDENTITY, CountRatio
from compact_hook.core.counting import TokenCounter
from compact_hook.core.digest import digest
from compact_hook.core.failures import SummaryFailure, failure_of
from compact_hook.core.items import Item, summary_text
from compact_hook.core.summary_check import Asked, fault_of
from compact_hook.core.transcript import transcript_entries
from compact_hook.errors import SummarizerError
from compact_hook.offload import off_loop
from compact_hook.settings.model import CompactConfig

logger = logging.getLogger(__name__)

Message = dict[str, Any]
"""A chat message: summary calls are chat completions whatever the request's format."""
Summarize = Callable[[list[Message]], Awaitable[str]]

PROMPT_VERSION = "2"
"""Bump when prompts/summarize.md changes meaningfully: stored summaries are keyed by it."""

MIN_CHUNK_TOKENS = 512
MIN_CHUNK_CHARS = 2 * MIN_CHUNK_TOKENS
"""A chunk shorter than this is not halved again (a too-long answer then stands)."""
SAFETY_MARGIN = 0.05
ENTRY_SEPARATOR = "\n\n"
DIGEST_CHARS_PER_TOKEN = 3


@lru_cache(maxsize=1)
def summary_prompt() -> str:
    return resources.files("compact_hook").joinpath("prompts", "summarize.md").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def asked() -> Asked:
    """What the prompt asks a summary to hold (``core.summary_check``)."""
    return Asked.of_prompt(summary_prompt())


RECALL_SUMMARY_IDS = 16
"""The ids a summary keeps at most. Each is ~4 tokens in every later request, so a summary that kept
all of a long conversation's (hundreds) cost more than the recalls they allow (``bench/bench_cost.py``:
+9% per request at a 40,000-token window): kept are the ids of what the work may need word for word."""
RECALL_NOTE = (
    "Tool outputs carry a six-digit number after 'recall': the agent reads an output back word for "
    "word by its number. Beside the facts of an output the work may need again word for word (a "
    "file's text, a log, an error), keep it as (recall <number>) — at most "
    f"{RECALL_SUMMARY_IDS} of them in all, the summary so far's included, the most useful first."
)
"""Asked of the summary when outputs carry handles (``recall``): appended to the request, not the
system prompt, so summaries made without handles keep their prompt (and their cache keys)."""


def summary_request(
    chunk: str,
    running_summary: str | None,
    part: tuple[int, int] = (1, 1),
    focus: str = "",
    recall: bool = False,
) -> list[Message]:
    """The chat messages of one summary call: chunk ``part[0]`` of ``part[1]``; ``focus`` (from
    ``/compact <focus>`` or the request's control) is what the user asked the summary to keep in
    view; ``recall``: the transcript's outputs carry handles the summary must keep."""
    sections = []
    if running_summary:
        sections.append(f"<summary-so-far>\n{running_summary}\n</summary-so-far>")
    label = f' part="{part[0]} of {part[1]}"' if part[1] > 1 else ""
    sections.append(f"<transcript{label}>\n{chunk}\n</transcript>")
    if focus:
        sections.append(f"Pay particular attention to: {focus}")
    if recall:
        sections.append(RECALL_NOTE)
    sections.append(
        "Write the merged summary now, covering the summary so far and this transcript."
        if running_summary
        else "Write the summary now."
    )
    return [
        {"role": "system", "content": summary_prompt()},
        {"role": "user", "content": "\n\n".join(sections)},
    ]


def input_budget(config: CompactConfig, counter: TokenCounter, ratio: CountRatio = IDENTITY) -> int:
    """Transcript tokens (ours) one summary call can carry beside the prompt and a running summary:
    the summary model's window is its own tokens, taken at the request's ``ratio``."""
    window = config.summary_context_window or config.context_window
    if window is None:
        raise SummarizerError("summary model context window unknown", SummaryFailure.TOO_LONG)
    reserved = counter.count_text(summary_prompt()) + ratio.ours_of(2 * config.summary_tokens)
    budget = ratio.ours_of(window * (1 - SAFETY_MARGIN)) - reserved - 64
    if budget < MIN_CHUNK_TOKENS:
        raise SummarizerError(
            f"summary model window ({window} tokens) leaves only {budget} tokens for the transcript "
            f"beside the prompt and summary_max_tokens={config.summary_tokens}",
            SummaryFailure.TOO_LONG,
        )
    return budget


@dataclass(frozen=True, slots=True)
class Piece:
    """A transcript entry, or a slice of one larger than a chunk: its text, tokens and entry."""

    text: str
    tokens: int
    entry: int
    first: bool


def plan_chunks(entries: Sequence[str], counter: TokenCounter, budget: int) -> list[str]:
    """Pack entries into chunks of at most ``budget`` tokens; split any entry that alone is larger."""
    return _texts(_pack(pieces_of(entries, counter, budget), budget))


def plan_capped(
    entries: Sequence[str], counter: TokenCounter, budget: int, cap: int
) -> tuple[int, list[str]]:
    """At most ``cap`` chunks covering the newest entries, whole; returns the first entry they cover.

    Entries before it are left to the digest: bounded work per compaction, whatever the middle's size.
    """
    pieces = pieces_of(entries, counter, budget)
    chunks = _pack(pieces, budget)
    if len(chunks) > cap:
        kept = [piece for chunk in reversed(_pack(pieces[::-1], budget)[:cap]) for piece in reversed(chunk)]
        start = kept[0].entry + (0 if kept[0].first else 1)
        return start, _texts(_pack([piece for piece in pieces if piece.entry >= start], budget))
    return 0, _texts(chunks)


def _texts(chunks: list[list[Piece]]) -> list[str]:
    return [ENTRY_SEPARATOR.join(piece.text for piece in chunk) for chunk in chunks]


def _pack(pieces: Sequence[Piece], budget: int) -> list[list[Piece]]:
    chunks: list[list[Piece]] = []
    current: list[Piece] = []
    used = 0
    for piece in pieces:
        if current and used + piece.tokens > budget:
            chunks.append(current)
            current, used = [], 0
        current.append(piece)
        used += piece.tokens + 1
    if current:
        chunks.append(current)
    return chunks


def pieces_of(entries: Sequence[str], counter: TokenCounter, budget: int) -> list[Piece]:
    pieces: list[Piece] = []
    for index, entry in enumerate(entries):
        tokens = counter.count_text(entry)
        if tokens <= budget:
            pieces.append(Piece(entry, tokens, index, True))
        else:
            pieces.extend(
                Piece(text, count, index, k == 0)
                for k, (text, count) in enumerate(_split_entry(entry, tokens, counter, budget))
            )
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


class Budget:
    """What one compaction may spend on summary calls: a deadline and a number of retries.

    ``calls`` counts every attempt, failed ones included (they are reported too). Each call's
    timeout is ``summary_timeout_seconds`` or what is left of ``summary_deadline_seconds``,
    whichever is shorter; retries (``max_retries``) are shared by all the chunks of one middle,
    and an unusable answer is retried once in all.
    """

    def __init__(self, config: CompactConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadline = clock() + config.summary_deadline_seconds
        self.retries_left = config.max_retries
        self.calls = 0
        self.unusable_retried = False

    def remaining(self) -> float:
        return self.deadline - self.clock()


@dataclass(frozen=True, slots=True)
class Summarizing:
    """How a middle is summarized: under these settings, by this model, its transcript measured
    with this counter, keeping ``focus`` in view (``/compact <focus>``)."""

    config: CompactConfig
    model: Summarize
    counter: TokenCounter
    focus: str = ""
    ratio: CountRatio = IDENTITY
    """The provider's tokens per one of the counter's (``core.calibration``)."""


async def summarize_middle(middle: Sequence[Item], how: Summarizing, budget: Budget) -> str:
    """One summary covering every item of ``middle``: in chunks when needed, at most
    ``max_summary_calls`` of them — the oldest items beyond that are digested and the digest
    goes in as the summary so far. Planning (tokenizing the whole middle) runs off the event loop.

    A chunk the summary model finds too long is split in two and each half sent in its turn
    (one retry each time; never resent unchanged)."""
    config = how.config
    start, chunks = await off_loop(_plan, middle, how)
    limit = config.summary_tokens * DIGEST_CHARS_PER_TOKEN
    running = digest(middle[:start], limit, config.recall) if start else None
    if start:
        logger.warning(
            "compact_hook: middle larger than %d summary calls can read; its %d oldest messages digested",
            config.max_summary_calls,
            start,
        )
    pending, part, parts = list(reversed(chunks)), 0, len(chunks)
    while pending:
        chunk = pending.pop()
        part += 1
        try:
            request = summary_request(chunk, running, (part, parts), how.focus, config.recall)
            running = _judged(await call_with_retries(how.model, request, config, budget))
        except SummarizerError as exc:
            halves = _halved(exc, chunk, budget)
            pending.extend(reversed(halves))
            part, parts = part - 1, parts + len(halves) - 1
    if running is None:
        raise SummarizerError("nothing to summarize", SummaryFailure.UNUSABLE)
    return _judged(running, [summary_text(item) for item in middle if item.is_summary])


def _judged(answer: str, previous: Sequence[str] = ()) -> str:
    """``answer`` if it is a summary (``core.summary_check``; ``previous``: the summaries it had to
    merge, whose goal it must carry). Each chunk's answer is judged as it comes: the rest of the
    middle is not sent after one that is no summary. Not retried: the same model, asked the same,
    answers alike."""
    fault = fault_of(answer, asked(), previous)
    if fault is not None:
        raise SummarizerError(
            f"the summary model's answer is not a summary ({fault.value}): {answer[:160]!r}",
            SummaryFailure.UNUSABLE,
        )
    return answer


def _halved(failure: SummarizerError, chunk: str, budget: Budget) -> list[str]:
    """A chunk the summary model refused as too long, in two halves (cut at the entry boundary
    nearest its middle); any other failure, no retry left, or a chunk too small to halve: the
    failure stands."""
    if (
        failure.kind is not SummaryFailure.TOO_LONG
        or budget.retries_left <= 0
        or len(chunk) < MIN_CHUNK_CHARS
    ):
        raise failure
    budget.retries_left -= 1
    middle = len(chunk) // 2
    boundaries = [m.start() for m in re.finditer(re.escape(ENTRY_SEPARATOR), chunk)]
    cut = min(boundaries, key=lambda at: abs(at - middle), default=None)
    logger.warning("compact_hook: summary call too long for the summary model; its transcript sent in two")
    if cut is None or not 0 < cut < len(chunk) - len(ENTRY_SEPARATOR):
        return [chunk[:middle], chunk[middle:]]
    return [chunk[:cut], chunk[cut + len(ENTRY_SEPARATOR) :]]


def _plan(middle: Sequence[Item], how: Summarizing) -> tuple[int, list[str]]:
    config, counter = how.config, how.counter
    entries = transcript_entries(middle, config.recall, config.summary_tool_output_tokens)
    return plan_capped(entries, counter, input_budget(config, counter, how.ratio), config.max_summary_calls)


async def call_with_retries(
    summarize: Summarize, request: list[Message], config: CompactConfig, budget: Budget
) -> str:
    """Attempts until one answers, by the rule of each failure's kind: a timeout or an
    unavailable model retried with exponential backoff while retries and the deadline last; an
    unusable (empty) answer retried once; a refusal (auth, other 4xx) or a too-long call not
    retried here (the caller re-plans a too-long one)."""
    while True:
        remaining = budget.remaining()
        if remaining <= 0:
            raise SummarizerError(
                f"summary deadline of {config.summary_deadline_seconds:g} s reached", SummaryFailure.DEADLINE
            )
        budget.calls += 1
        logger.info("compact_hook: summary call (attempt %d)", budget.calls)
        try:
            answer = await asyncio.wait_for(
                summarize(request), timeout=min(config.summary_timeout_seconds, remaining)
            )
        except Exception as exc:  # every failure of the call is placed by kind, then retried or reported
            kind, error = failure_of(exc), repr(exc)
        else:
            if isinstance(answer, str) and answer.strip():
                return answer.strip()
            kind, error = SummaryFailure.UNUSABLE, "summary model returned an empty answer"
        logger.warning("compact_hook: summary attempt %d failed (%s): %s", budget.calls, kind.value, error)
        if not _retries(kind, budget):
            raise SummarizerError(
                f"summary failed ({kind.value}) after {budget.calls} attempts: {error}", kind
            )
        budget.retries_left -= 1
        if kind is SummaryFailure.UNUSABLE:
            continue
        backoff = config.retry_backoff_seconds * 2 ** (config.max_retries - budget.retries_left - 1)
        await asyncio.sleep(min(backoff, max(0.0, budget.remaining())))


def _retries(kind: SummaryFailure, budget: Budget) -> bool:
    """Whether a failure of this kind is tried again (and the budget allows it)."""
    if budget.retries_left <= 0 or kind in (SummaryFailure.REFUSED, SummaryFailure.TOO_LONG):
        return False
    if kind is SummaryFailure.UNUSABLE:
        if budget.unusable_retried:
            return False
        budget.unusable_retried = True
    return True

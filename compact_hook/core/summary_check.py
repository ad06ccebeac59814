"""Whether what the summary model wrote is a summary: checked against what the prompt asks.

A model's answer is applied in place of the middle of the conversation, and the agent carries on
with nothing else of it. A small model (SmolLM2-135M behind llama.cpp's server, a 4K window) answers
the summary prompt with text that is no summary at all: the prompt's own section descriptions
copied back, one line repeated until ``max_tokens`` ran out, a usage block from the transcript with
none of the sections. Applied, it replaces the agent's past with noise, and nothing says so.

So an answer is judged before it is applied (``fault_of``); a fault makes the summary ``unusable``
(``core.failures.SummaryFailure``) and the digest — facts copied from the messages, no model — takes
its place (``engine.summary.compaction.make``). The faults, most telling first:

- ``looped`` — the answer repeats itself (it compresses below ``LOOP_RATIO``);
- ``echoed`` — it copies ``ECHOED_LINES`` or more of the prompt's section descriptions;
- ``sections_missing`` — fewer than ``MIN_SECTIONS`` of the sections the prompt asks for;
- ``constraints_dropped`` — the previous summary's goal and constraints, which the prompt says must
  be carried, are mostly gone (under ``MIN_CARRIED`` of their words).

Each bound is loose on purpose: a good model's summary passes every one by far (it writes every
section, ``none`` under the empty ones), and a false alarm costs the conversation its model summary.
"""

from __future__ import annotations

import enum
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

LOOP_RATIO = 0.12
"""Compressed over raw size below which an answer is one thing repeated. A summary's varied prose,
paths and figures compress to 0.3-0.5 (zlib); a line repeated twenty times, to under 0.1."""
LOOP_MIN_CHARS = 400
"""Shorter answers are not judged for loops (zlib's own overhead dominates a short text)."""
ECHOED_LINES = 2
"""The prompt's section descriptions ("Choices made and why, including approaches rejected.") a
summary may quote by chance: one. Two are the prompt copied back."""
MIN_SECTIONS = 4
"""Of the seven sections the prompt asks for, the fewest an answer must have (by their titles, as
headings or bold lines, in any case): a good model writes all seven."""
MIN_CARRIED = 0.5
"""The share of the previous summary's goal-and-constraints words (``WORD``) the new one must hold
somewhere: the prompt asks for them word for word, so a real merge keeps nearly all."""
MIN_WORDS = 5
"""A previous goal section with fewer distinct words (``none``, a short phrase) is not checked."""
WORD = re.compile(r"[\w./-]{4,}")
"""A word worth carrying: four characters or more, paths and dotted names whole."""
HEADING = re.compile(r"^[\s#>*_\-\d.)]*(?P<title>[^\n*_:#]+)", re.MULTILINE)
"""A line's title: its text after any heading marks, bullets, bold or numbering."""


class Fault(enum.StrEnum):
    """Why an answer is not a summary (logged once per model group)."""

    LOOPED = "looped"
    ECHOED = "echoed"
    SECTIONS_MISSING = "sections_missing"
    CONSTRAINTS_DROPPED = "constraints_dropped"


@dataclass(frozen=True, slots=True)
class Asked:
    """What the summary prompt asks for: its sections' titles (the first is the goal and the user's
    constraints, which must be carried) and the line that describes each."""

    titles: tuple[str, ...]
    descriptions: tuple[str, ...]

    @classmethod
    def of_prompt(cls, prompt: str) -> Asked:
        """The ``## Title`` lines of the prompt, each with the line after it."""
        found = re.findall(r"^## (.+)\n(.+)$", prompt, re.MULTILINE)
        return cls(tuple(t.strip() for t, _ in found), tuple(d.strip() for _, d in found))


def fault_of(answer: str, asked: Asked, previous: Sequence[str] = ()) -> Fault | None:
    """What is wrong with ``answer`` as a summary, or None; ``previous``: the earlier summaries it
    had to merge (their goal section must be carried)."""
    if _looped(answer):
        return Fault.LOOPED
    if sum(description in answer for description in asked.descriptions) >= ECHOED_LINES:
        return Fault.ECHOED
    if len(_titles_in(answer, asked.titles)) < min(MIN_SECTIONS, len(asked.titles)):
        return Fault.SECTIONS_MISSING
    if asked.titles and any(_dropped(summary, answer, asked.titles) for summary in previous):
        return Fault.CONSTRAINTS_DROPPED
    return None


def _looped(answer: str) -> bool:
    raw = answer.encode()
    return len(raw) >= LOOP_MIN_CHARS and len(zlib.compress(raw, 6)) < LOOP_RATIO * len(raw)


def _titles_in(text: str, titles: Sequence[str]) -> set[str]:
    lines = {match["title"].strip().lower() for match in HEADING.finditer(text)}
    return {title for title in titles if any(line.startswith(title.lower()) for line in lines)}


def _dropped(previous: str, answer: str, titles: Sequence[str]) -> bool:
    """The previous summary's first section (the goal and constraints) mostly missing from ``answer``."""
    goal = _section(previous, titles[0], titles[1:])
    words = {word.lower() for word in WORD.findall(goal)}
    if len(words) < MIN_WORDS:
        return False
    held = answer.lower()
    return sum(word in held for word in words) < MIN_CARRIED * len(words)


def _section(text: str, title: str, others: Sequence[str]) -> str:
    """The text under ``title`` up to the next of ``others`` (empty if there is no such heading)."""
    lower = text.lower()
    start = lower.find(title.lower())
    if start < 0:
        return ""
    start += len(title)
    ends = [at for other in others if (at := lower.find(other.lower(), start)) >= 0]
    return text[start : min(ends, default=len(text))]

"""``engine.run``: a view's size, counted once per view and remembered for the next question.

The counter is ``WordCounter`` (1 + words per entry, no framing), so every expected number can be
read off the messages; ``CountingWords`` is the same counter remembering how often it was asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compact_hook.core.counting import REPLY_PRIMING, StringsOf
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.engine.library import parse_chat
from compact_hook.engine.sizes import Sizes
from compact_hook.engine.view import View
from compact_hook.wires import Conversation
from tests.conversations import w
from tests.fakes import WordCounter
from tests.support import assistant, system, user


class CountingWords(WordCounter):
    """``WordCounter`` that records each batch it was asked to count (synchronously or not)."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def count(self, prints: Sequence[Fingerprint], strings: StringsOf) -> list[int]:
        self.batches.append(len(prints))
        return super().count(prints, strings)


def view_of(messages: list[dict[str, Any]]) -> View:
    """The client's chat messages as a view of their own (every item its own origin)."""
    conversation = parse_chat(messages)
    assert isinstance(conversation, Conversation)
    items = conversation.items()
    return View(items, conversation.prints(), list(range(len(items))))


MESSAGES = [system(w(4)), user(w(10)), assistant(w(20))]
"""Counted by ``WordCounter``: 5, 11 and 21 tokens."""


def test_counts_are_each_items_tokens_and_the_total_adds_the_fixed_context_and_priming() -> None:
    sizes = Sizes(CountingWords(), context_tokens=100)
    view = view_of(MESSAGES)
    assert sizes.counts(view) == [5, 11, 21]
    assert sizes.total(view) == 100 + 5 + 11 + 21 + REPLY_PRIMING


def test_an_empty_view_is_the_fixed_context_alone_with_no_reply_priming() -> None:
    """The priming is the reply's: a request with no items adds nothing to what is fixed."""
    sizes = Sizes(CountingWords(), context_tokens=42)
    assert sizes.total(view_of([])) == 42


async def test_tokens_agrees_with_the_synchronous_total() -> None:
    view = view_of(MESSAGES)
    assert await Sizes(CountingWords(), 7).tokens(view) == Sizes(CountingWords(), 7).total(view)


async def test_the_same_view_asked_again_is_not_counted_again_by_either_question() -> None:
    """Stages ask the size of one view several times (trigger, fit, report): counted once. The
    asynchronous count fills the per-item slot too, so a later ``counts`` costs nothing."""
    counter = CountingWords()
    sizes = Sizes(counter, 0)
    view = view_of(MESSAGES)
    first = await sizes.tokens(view)
    assert await sizes.tokens(view) == first
    assert sizes.counts(view) == [5, 11, 21]
    assert sizes.total(view) == first
    assert counter.batches == [3]


async def test_another_view_is_counted_afresh_even_with_equal_items() -> None:
    """The slot remembers a view by identity, not by content: a view built anew (fitted,
    normalized) may hold different items behind equal-looking ones, so it is counted again."""
    counter = CountingWords()
    sizes = Sizes(counter, 0)
    longer = view_of([*MESSAGES, user(w(9))])
    assert await sizes.tokens(view_of(MESSAGES)) == 37 + REPLY_PRIMING
    assert await sizes.tokens(longer) == 47 + REPLY_PRIMING
    assert sizes.counts(view_of(MESSAGES)) == [5, 11, 21]
    assert counter.batches == [3, 4, 3]

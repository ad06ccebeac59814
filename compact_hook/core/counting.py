"""What a token counter must do, and how an item's tokens are framed.

The framing follows OpenAI's published accounting, for every format (Anthropic publishes
none; the Claude tokenizer is an estimate anyway): each item costs ``ITEM_OVERHEAD``
tokens plus its role; a ``name`` one more; each tool call ``TOOL_CALL_OVERHEAD`` plus its
name and arguments; a whole request ``REPLY_PRIMING`` once. Media and encrypted content
cost what the format estimates (``Part.fixed_tokens``). Ids are bookkeeping, not counted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Item, PartKind

ITEM_OVERHEAD = 3
ROLE_TOKENS = 1
NAME_OVERHEAD = 1
TOOL_CALL_OVERHEAD = 3
REPLY_PRIMING = 3

Strings = tuple[list[str], int]
"""The strings of an entry the model reads, and its fixed (non-text) token cost."""
StringsOf = Callable[[int], Strings]
"""The strings of entry ``i`` of a batch; only called for entries not already counted."""


Recall = Callable[[], Awaitable[Mapping[Fingerprint, int]]]
"""Counts remembered elsewhere (the store), asked for before a large batch is tokenized: evidence,
used only where coherent with the entry's text."""


class TokenCounter(Protocol):
    """What the engine needs from a counter; ``state.tokenizers.HFTokenCounter`` is the real one."""

    def count_text(self, text: str) -> int: ...

    def cut(self, text: str, head: int, tail: int) -> tuple[int, int, int]:
        """Where the first ``head`` tokens end and the last ``tail`` tokens start (characters), and
        how many tokens ``text`` has: what a head + tail truncation needs, not every token's span."""
        ...

    def count(self, prints: Sequence[Fingerprint], strings: StringsOf) -> list[int]:
        """Tokens of each entry, remembered by fingerprint: only new entries are tokenized."""
        ...

    async def acount(
        self, prints: Sequence[Fingerprint], strings: StringsOf, recall: Recall | None = None
    ) -> list[int]:
        """As ``count``; a large batch of new text is tokenized off the event loop, after what
        ``recall`` finds of it (counts kept in the store, ``engine.memory.counts``)."""
        ...


def item_strings(item: Item) -> Strings:
    """Every string of ``item`` the model reads, plus its framing and fixed costs."""
    strings: list[str] = []
    fixed = ITEM_OVERHEAD + ROLE_TOKENS
    if item.name:
        strings.append(item.name)
        fixed += NAME_OVERHEAD
    for part in item.parts:
        fixed += part.fixed_tokens
        if part.kind is PartKind.CALL:
            fixed += TOOL_CALL_OVERHEAD
            strings.append(part.name)
        if part.text and part.kind is not PartKind.MEDIA:
            strings.append(part.text)
    return [text for text in strings if text], fixed


def request_total(fixed: int, item_counts: Sequence[int]) -> int:
    """Tokens the model reads: the fixed context, the items, and reply priming."""
    return fixed + sum(item_counts) + (REPLY_PRIMING if item_counts else 0)


ESTIMATED_KINDS = frozenset({PartKind.MEDIA, PartKind.OPAQUE})
ESTIMATED_ENTRIES = 16_384


def is_estimated(item: Item) -> bool:
    """Our count of ``item`` is a guess the provider's usage cannot correct: it holds media or a
    document (a fixed cost whatever its size), a server-side tool's result or anything else we
    count as its JSON (``OPAQUE``), or a tool result carrying media."""
    return any(
        part.kind in ESTIMATED_KINDS or (part.kind is PartKind.RESULT and part.fixed_tokens)
        for part in item.parts
    )


class Estimated:
    """The fingerprints of entries whose count is a guess (``is_estimated``), noted when they are
    first counted; bounded (the oldest are forgotten: a request holding one then teaches a ratio,
    as any other — harmless to every other tenant, whose estimates are their own)."""

    def __init__(self, size: int = ESTIMATED_ENTRIES) -> None:
        self.size = size
        self._prints: OrderedDict[Fingerprint, None] = OrderedDict()

    def note(self, key: Fingerprint) -> None:
        self._prints[key] = None
        self._prints.move_to_end(key)
        while len(self._prints) > self.size:
            self._prints.popitem(last=False)

    def any_of(self, prints: Sequence[Fingerprint]) -> bool:
        """Whether any of ``prints`` was noted (nothing to look up in the common case: none ever was)."""
        known = self._prints
        return bool(known) and any(key in known for key in prints)

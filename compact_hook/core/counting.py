"""What a token counter must do, and how an item's tokens are framed.

The framing follows OpenAI's published accounting, for every format (Anthropic publishes
none; the Claude tokenizer is an estimate anyway): each item costs ``ITEM_OVERHEAD``
tokens plus its role; a ``name`` one more; each tool call ``TOOL_CALL_OVERHEAD`` plus its
name and arguments; a whole request ``REPLY_PRIMING`` once. Media and encrypted content
cost what the format estimates (``Part.fixed_tokens``). Ids are bookkeeping, not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

    async def acount(self, prints: Sequence[Fingerprint], strings: StringsOf) -> list[int]:
        """As ``count``; a large batch of new text is tokenized off the event loop."""
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

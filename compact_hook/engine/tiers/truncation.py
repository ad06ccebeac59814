"""Tier 1: tool outputs over ``tool_output_max_tokens`` keep their beginning and end.

Each output is cut once per process (``TruncationCache``, by fingerprint and settings) and off
the event loop (``Truncation.prepare``): tokenizing a 4 MB output takes seconds.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Item
from compact_hook.core.truncate import Truncating, truncate_results
from compact_hook.offload import off_loop

if TYPE_CHECKING:
    from compact_hook.engine.view import Tiers

TRUNCATION_CACHE_SIZE = 20_000
TRUNCATION_CACHE_BYTES = 64 * 1024 * 1024


class Tier1(NamedTuple):
    """Tier 1's setup for one request: the process's cache of cut outputs, and how many tokens an
    output may keep (None: ``tool_output_max_tokens``; less in a small window, see
    ``Limits.output_limit``)."""

    cache: TruncationCache
    output_limit: int | None = None


class Truncation:
    """Tier 1 for one request's tiers: which of its items carry an output to cut, and the cut items."""

    def __init__(self, tiers: Tiers, output_limit: int) -> None:
        self.tiers = tiers
        self.output_limit = output_limit
        """Tokens a tool output may keep: ``tool_output_max_tokens``, or less in a window so small
        that one such output would crowd out the tail (see ``Limits.output_limit``)."""
        self._truncated: dict[int, tuple[Item, Fingerprint]] = {}

    @cached_property
    def oversized(self) -> bool:
        """Whether any item could need truncating: most requests answer no without parsing."""
        policy = self.tiers.config.tool_output_policy
        return policy != "none" and next(self._oversized_items(), None) is not None

    async def prepare(self) -> None:
        """Cut the oversized outputs not cut before, off the event loop: tokenizing a 4 MB output
        takes seconds, and every other request on the proxy would wait for it."""
        if not self.oversized:
            return
        keys = {index: self._cut_key(index) for index in self._oversized_items()}
        todo = [index for index, key in keys.items() if self.tiers.cache.get(key) is None]
        if todo:
            cuts = await off_loop(lambda: [self._cut(index) for index in todo])
            for index, cut in zip(todo, cuts, strict=True):
                self.tiers.cache.put(keys[index], cut)

    def truncated(self, index: int) -> tuple[Item, Fingerprint]:
        """Tier 1 alone: the client's item, its oversized tool outputs cut."""
        done = self._truncated.get(index)
        if done is not None:
            return done
        item, print_ = self.tiers.conversation.item(index), self.tiers.prints[index]
        if self.oversized and self.tiers.counts[index] > self.output_limit and item.has_results:
            key = self._cut_key(index)
            cuts = self.tiers.cache.get(key)
            if cuts is None:  # not prepared (a caller skipped prepare()): cut here
                cuts = self._cut(index)
                self.tiers.cache.put(key, cuts)
            if cuts:
                item = self.tiers.conversation.wire.replace_outputs(item, cuts, keep_media=True)
                print_ = self.tiers.conversation.fingerprint(item.raw)
        self._truncated[index] = (item, print_)
        return item, print_

    def _oversized_items(self) -> Iterator[int]:
        limit, conversation = self.output_limit, self.tiers.conversation
        return (
            i
            for i, count in enumerate(self.tiers.counts)
            if count > limit and conversation.item(i).has_results
        )

    def _cut_key(self, index: int) -> tuple[object, ...]:
        config = self.tiers.config
        skip = self._protected.get(index, ())
        return (
            self.tiers.prints[index],
            config.tokenizer,
            self.output_limit,
            config.tool_output_policy,
            config.recall,
            *skip,
        )

    def _cut(self, index: int) -> dict[int, str]:
        """Pure: safe in a worker thread (the tokenizer is, and nothing shared is written)."""
        config = self.tiers.config
        limit, policy = self.output_limit, config.tool_output_policy
        skip = self._protected.get(index, ())
        how = Truncating(limit, policy, self.tiers.counter.cut, recall=config.recall)
        return truncate_results(self.tiers.conversation.item(index), how, skip=skip)

    def count(self) -> int:
        """How many tool outputs tier 1 cut in this request."""
        if not self.oversized:
            return 0
        return sum(self._cut_count(index) for index in set(self.tiers.result_items))

    def _cut_count(self, index: int) -> int:
        """How many of the item's outputs tier 1 cut."""
        item, original = self.truncated(index)[0], self.tiers.conversation.item(index)
        return sum(1 for new, old in zip(item.parts, original.parts, strict=True) if new.text != old.text)

    @cached_property
    def _protected(self) -> dict[int, tuple[int, ...]]:
        """Per item, the result parts of protected tools (never truncated): computed once, O(results)."""
        return self.tiers.pairing.protected_parts(self.tiers.config.protected_tools)


class TruncationCache:
    """Cut outputs by (fingerprint, settings), as text: each output is cut once per process.

    Only the new texts are kept: the item is rebuilt from the current request each time, so
    what it carries besides (a moved ``cache_control`` marker) is always the client's own.
    Bounded in entries and in bytes (the cut texts' characters, ~bytes for most text).
    """

    def __init__(self, size: int = TRUNCATION_CACHE_SIZE, max_bytes: int = TRUNCATION_CACHE_BYTES) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[tuple[object, ...], dict[int, str]] = OrderedDict()

    def get(self, key: tuple[object, ...]) -> dict[int, str] | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def put(self, key: tuple[object, ...], cuts: dict[int, str]) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= _size(old)
        self._items[key] = cuts
        self.bytes += _size(cuts)
        while self._items and (len(self._items) > self.size or self.bytes > self.max_bytes):
            self.bytes -= _size(self._items.popitem(last=False)[1])


def _size(cuts: dict[int, str]) -> int:
    return 64 + sum(len(text) for text in cuts.values())

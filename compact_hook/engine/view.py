"""What we forward, built from the client's entries and the conversation's stored state.

A ``View`` is the list we will treat as the history: the client's items with the cheap
tiers applied (tool outputs truncated, old results cleared) and any stored compaction
spliced in. Everything here is a pure function of (request, stored entry), which is what
makes the forwarded prefix stable between two changes of state.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from compact_hook.config import CompactConfig
from compact_hook.core.chain import Entry, is_stale
from compact_hook.core.clearing import clearable_parts, placeholders
from compact_hook.core.counting import TokenCounter
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Item, PartKind
from compact_hook.core.pairing import Pairing, pair
from compact_hook.core.pinning import Shape, shown_texts
from compact_hook.core.truncate import truncate_results
from compact_hook.formats.base import Conversation

TRUNCATION_CACHE_SIZE = 20_000
TRUNCATION_CACHE_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class View:
    """Items, their fingerprints, and where each came from.

    ``origins[i]`` is the index in the client's list of ``items[i]``, or None for an item we
    built (the summary, a synthetic result). ``summary_at``: where the summary is (None: no
    summary); ``spliced_prefix``: how many items the stored compaction put before the client's
    own unsummarized items (the summary and the items it keeps; 0 without a summary).
    ``normalized``: normalization has run on exactly these items (it is not run twice).
    """

    items: list[Item]
    prints: list[Fingerprint]
    origins: list[int | None]
    summary_at: int | None = None
    spliced_prefix: int = 0
    _pairing: Pairing | None = field(default=None, repr=False)
    normalized: bool = False

    def rebuilt(self, items: list[Item], prints: list[Fingerprint], origins: list[int | None]) -> View:
        """Another list of items from this view (fitted, normalized): the summary followed by identity."""
        summary = self.items[self.summary_at] if self.summary_at is not None else None
        summary_at = next((k for k, item in enumerate(items) if item is summary), None)
        return View(items, prints, origins, summary_at, self.spliced_prefix)

    @property
    def pairing(self) -> Pairing:
        if self._pairing is None:
            self._pairing = pair(self.items)
        return self._pairing

    def entries(self) -> list[object]:
        return [item.raw for item in self.items]


def without_stale_thinking(view: View, spans: Sequence[tuple[int, int]], conversation: Conversation) -> View:
    """The view without the thinking parts of the client's items in ``spans`` (see
    ``core.chain.unbind``); an item that was nothing but thinking goes altogether.

    Anthropic rejects (or drops) a thinking block when anything before it changed since it was
    produced; removing blocks is a valid edit. All stale blocks go together, so none is left
    between removed ones.
    """
    if not spans:
        return view
    wire = conversation.wire
    items, prints, origins = [], [], []
    for item, print_, origin in zip(view.items, view.prints, view.origins, strict=True):
        thinking = [k for k, part in enumerate(item.parts) if part.kind is PartKind.THINKING]
        if thinking and origin is not None and is_stale(origin, spans):
            shown = wire.without_parts(item, thinking)
            if shown is None:
                continue
            item, print_ = shown, conversation.fingerprint(shown.raw)
        items.append(item)
        prints.append(print_)
        origins.append(origin)
    if len(items) == len(view.items) and all(a is b for a, b in zip(items, view.items, strict=True)):
        return view
    return view.rebuilt(items, prints, origins)


def thinking_removed(view: View, spans: Sequence[tuple[int, int]], conversation: Conversation) -> int:
    """How many thinking blocks of the client's items the view forwards without (stale ones)."""
    if not spans:
        return 0
    return sum(
        _thinking_parts(conversation.item(origin)) - _thinking_parts(item)
        for item, origin in zip(view.items, view.origins, strict=True)
        if origin is not None and is_stale(origin, spans)
    )


def _thinking_parts(item: Item) -> int:
    return sum(part.kind is PartKind.THINKING for part in item.parts)


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


class Tiers:
    """The cheap tiers for one request: which item each client index becomes."""

    def __init__(
        self,
        conversation: Conversation,
        prints: Sequence[Fingerprint],
        counts: Sequence[int],
        config: CompactConfig,
        counter: TokenCounter,
        cache: TruncationCache,
        output_limit: int | None = None,
    ) -> None:
        self.conversation = conversation
        self.output_limit = output_limit or config.tool_output_max_tokens
        """Tokens a tool output may keep: ``tool_output_max_tokens``, or less in a window so small
        that one such output would crowd out the tail (see ``Limits.output_limit``)."""
        self.prints = prints
        self.counts = counts
        self.config = config
        self.counter = counter
        self.cache = cache
        self._truncated: dict[int, tuple[Item, Fingerprint]] = {}

    @cached_property
    def items(self) -> list[Item]:
        return self.conversation.items()

    @cached_property
    def pairing(self) -> Pairing:
        return pair(self.items)

    @cached_property
    def result_items(self) -> list[int]:
        """The item index of every tool result, in order."""
        return [index for index, _ in self.pairing.results()]

    @cached_property
    def oversized(self) -> bool:
        """Whether any item could need truncating: most requests answer no without parsing."""
        limit = self.output_limit
        if self.config.tool_output_policy == "none":
            return False
        return any(
            count > limit and self.conversation.item(index).has_results
            for index, count in enumerate(self.counts)
        )

    def view(self, entry: Entry | None) -> View:
        """The client's items under ``entry`` (None: no stored state), tiers applied."""
        if entry is None and not self.oversized:
            return View(self.items, list(self.prints), list(range(len(self.items))))
        entry = entry or Entry()
        shapes = dict(entry.shapes)
        built: list[tuple[Item, Fingerprint, int | None]] = [
            (*(self.shaped(index, shapes[index]) if index in shapes else self.truncated(index)), index)
            for index in entry.keep
        ]
        summary_at = entry.summary_position if entry.summary is not None else None
        if entry.summary is not None:
            summary = self.conversation.wire.summary(entry.summary, self.conversation.summary_mark)
            built.insert(entry.summary_position, (summary, self.conversation.fingerprint(summary.raw), None))
        for index in range(entry.covered, len(self.items)):
            shown = self.cleared(index) if index < entry.cleared_before else self.truncated(index)
            built.append((*shown, index))
        spliced = len(entry.keep) + 1 if summary_at is not None else 0
        view = View([b[0] for b in built], [b[1] for b in built], [b[2] for b in built], summary_at, spliced)
        return without_stale_thinking(view, entry.stale_thinking, self.conversation)

    async def prepare(self) -> None:
        """Cut the oversized outputs not cut before, off the event loop: tokenizing a 4 MB output
        takes seconds, and every other request on the proxy would wait for it."""
        if not self.oversized:
            return
        keys = {index: self._cut_key(index) for index in self._oversized_items()}
        todo = [index for index, key in keys.items() if self.cache.get(key) is None]
        if todo:
            cuts = await asyncio.to_thread(lambda: [self._cut(index) for index in todo])
            for index, cut in zip(todo, cuts, strict=True):
                self.cache.put(keys[index], cut)

    def truncated(self, index: int) -> tuple[Item, Fingerprint]:
        """Tier 1 alone: the client's item, its oversized tool outputs cut."""
        done = self._truncated.get(index)
        if done is not None:
            return done
        item, print_ = self.conversation.item(index), self.prints[index]
        if self.oversized and self.counts[index] > self.output_limit and item.has_results:
            key = self._cut_key(index)
            cuts = self.cache.get(key)
            if cuts is None:  # not prepared (a caller skipped prepare()): cut here
                cuts = self._cut(index)
                self.cache.put(key, cuts)
            if cuts:
                item = self.conversation.wire.replace_outputs(item, cuts, keep_media=True)
                print_ = self.conversation.fingerprint(item.raw)
        self._truncated[index] = (item, print_)
        return item, print_

    def _oversized_items(self) -> list[int]:
        limit = self.output_limit
        return [
            i
            for i, count in enumerate(self.counts)
            if count > limit and self.conversation.item(i).has_results
        ]

    def _cut_key(self, index: int) -> tuple[object, ...]:
        config = self.config
        skip = self._protected.get(index, ())
        return (
            self.prints[index],
            config.tokenizer,
            self.output_limit,
            config.tool_output_policy,
            *skip,
        )

    def _cut(self, index: int) -> dict[int, str]:
        """Pure: safe in a worker thread (the tokenizer is, and nothing shared is written)."""
        config = self.config
        limit, policy = self.output_limit, config.tool_output_policy
        skip = self._protected.get(index, ())
        return truncate_results(self.conversation.item(index), limit, policy, self.counter.cut, skip=skip)

    def shaped(self, index: int, shape: Shape) -> tuple[Item, Fingerprint]:
        """A pinned item as its compaction shows it: its text cut where planned, and only its
        text when it also carried tool results (their turn was summarized). No tokenizing."""
        item = self.conversation.item(index)
        wire = self.conversation.wire
        texts = shown_texts(item, shape)
        shown: Item | None = wire.replace_text(item, texts) if texts else item
        if shape.text_only and shown is not None:
            others = [k for k, part in enumerate(shown.parts) if part.kind is not PartKind.TEXT]
            shown = wire.without_parts(shown, others) if others else shown
        if shown is None or shown is item:
            return self.truncated(index)
        return shown, self.conversation.fingerprint(shown.raw)

    def cleared(self, index: int) -> tuple[Item, Fingerprint]:
        """Tier 2 on top of tier 1: the item's clearable results shown as placeholders."""
        item, print_ = self.truncated(index)
        shown = self._placeholders(index)
        if not shown:
            return item, print_
        cleared = self.conversation.wire.replace_outputs(item, shown, keep_media=False)
        return cleared, self.conversation.fingerprint(cleared.raw)

    def _placeholders(self, index: int) -> dict[int, str]:
        """Placeholders for item ``index``'s clearable results, made once per output (they quote
        its error lines: reading every cleared output on every request would not be cheap)."""
        item, print_ = self.truncated(index)
        tools = clearable_parts(item, index, self.pairing.tool_of, self.config.protected_tools)
        if not tools:
            return {}
        key = ("cleared", print_, *sorted(tools.items()))
        found = self.cache.get(key)
        if found is None:
            found = placeholders(item, tools)
            self.cache.put(key, found)
        return found

    def truncated_count(self) -> int:
        if not self.oversized:
            return 0
        return sum(self._cut_count(index) for index in set(self.result_items))

    def cleared_count(self, entry: Entry) -> int:
        if entry.cleared_before <= entry.covered:
            return 0
        return sum(
            len(self._placeholders(index))
            for index in sorted(set(self.result_items))
            if entry.covered <= index < entry.cleared_before
        )

    def _cut_count(self, index: int) -> int:
        """How many of the item's outputs tier 1 cut."""
        item, original = self.truncated(index)[0], self.conversation.item(index)
        return sum(1 for new, old in zip(item.parts, original.parts, strict=True) if new.text != old.text)

    @cached_property
    def _protected(self) -> dict[int, tuple[int, ...]]:
        """Per item, the result parts of protected tools (never truncated): computed once, O(results)."""
        found: dict[int, list[int]] = {}
        protected = self.config.protected_tools
        for (index, position), tool in sorted(self.pairing.tool_of.items()):
            if tool in protected:
                found.setdefault(index, []).append(position)
        return {index: tuple(parts) for index, parts in found.items()}

"""What we forward, built from the client's messages and the conversation's stored state.

A ``View`` is the list we will treat as the history: the client's messages with the cheap
tiers applied (tool outputs truncated, old results cleared) and any stored compaction
spliced in. Everything here is a pure function of (request, stored entry), which is what
makes the forwarded prefix stable between two changes of state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from compact_hook.assemble import summary_message
from compact_hook.chain import Entry
from compact_hook.clearing import ToolResult, is_clearable, placeholder, tool_results
from compact_hook.config import CompactConfig
from compact_hook.fingerprint import Fingerprint, fingerprint
from compact_hook.messages import TOOL_RESULT_ROLES, Message
from compact_hook.tokens import TokenCounter
from compact_hook.truncate import truncate_tool_message
from compact_hook.units import group_units

TRUNCATION_CACHE_SIZE = 20_000


@dataclass(frozen=True, slots=True)
class View:
    """Messages, their fingerprints, and where each came from.

    ``origins[i]`` is the index in the client's list of ``messages[i]``, or None for a
    summary we inserted.
    """

    messages: list[Message]
    prints: list[Fingerprint]
    origins: list[int | None]

    @property
    def spliced_prefix(self) -> int:
        """Length of the replacement prefix (0 when no summary is spliced in)."""
        last_synthetic = max((i for i, origin in enumerate(self.origins) if origin is None), default=-1)
        return last_synthetic + 1


class TruncationCache:
    """Truncated tool results by (fingerprint, settings): each output is cut once per process."""

    def __init__(self, size: int = TRUNCATION_CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[tuple[object, ...], tuple[Message, Fingerprint] | None] = OrderedDict()

    def get(self, key: tuple[object, ...]) -> tuple[Message, Fingerprint] | None | bool:
        """The cached value, or False when the key has not been seen."""
        if key not in self._items:
            return False
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key: tuple[object, ...], value: tuple[Message, Fingerprint] | None) -> None:
        self._items[key] = value
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class Tiers:
    """The cheap tiers for one request: which message each client index becomes."""

    def __init__(
        self,
        original: list[Message],
        prints: Sequence[Fingerprint],
        counts: Sequence[int],
        config: CompactConfig,
        counter: TokenCounter,
        cache: TruncationCache,
    ) -> None:
        self.original = original
        self.prints = prints
        self.counts = counts
        self.config = config
        self.counter = counter
        self.cache = cache

    @cached_property
    def results(self) -> list[ToolResult]:
        return tool_results(self.original, group_units(self.original))

    @cached_property
    def tools(self) -> dict[int, str]:
        return {result.index: result.tool for result in self.results}

    @cached_property
    def oversized(self) -> bool:
        """Whether any message could need truncating: most requests answer no in one pass."""
        limit = self.config.tool_output_max_tokens
        return self.config.tool_output_policy != "none" and any(
            count > limit and message.get("role") in TOOL_RESULT_ROLES
            for count, message in zip(self.counts, self.original, strict=True)
        )

    def view(self, entry: Entry | None) -> View:
        """The client's messages under ``entry`` (None: no stored state), tiers applied.

        With no state and nothing to truncate, the view is the client's own list object.
        """
        if entry is None and not self.oversized:
            return View(self.original, list(self.prints), list(range(len(self.original))))
        entry = entry or Entry()
        messages: list[Message] = []
        prints: list[Fingerprint] = []
        origins: list[int | None] = []
        for index in entry.keep:
            self._add(messages, prints, origins, index, clear=False)
        if entry.summary is not None:
            summary = summary_message(entry.summary)
            messages.append(summary)
            prints.append(fingerprint(summary))
            origins.append(None)
        for index in range(entry.covered, len(self.original)):
            self._add(messages, prints, origins, index, clear=index < entry.cleared_before)
        return View(messages, prints, origins)

    def truncated(self, index: int) -> tuple[Message, Fingerprint]:
        """Tier 1 alone: the client's message, its output cut if it is an oversized tool result."""
        message, print_ = self.original[index], self.prints[index]
        config = self.config
        if not self.oversized or self.counts[index] <= config.tool_output_max_tokens:
            return message, print_
        tool = self.tools.get(index)
        if (
            tool is None
            or tool in config.protected_tools
            or config.tool_output_policy == "none"
            or self.counts[index] <= config.tool_output_max_tokens
        ):
            return message, print_
        key = (print_, config.tokenizer, config.tool_output_max_tokens, config.tool_output_policy)
        cached = self.cache.get(key)
        if cached is False:
            cut = truncate_tool_message(
                message, config.tool_output_max_tokens, config.tool_output_policy, self.counter.offsets
            )
            cached = (cut, fingerprint(cut)) if cut is not None else None
            self.cache.put(key, cached)
        return cached if isinstance(cached, tuple) else (message, print_)

    def truncated_count(self) -> int:
        if not self.oversized:
            return 0
        return sum(1 for r in self.results if self.truncated(r.index)[0] is not self.original[r.index])

    def cleared_count(self, entry: Entry) -> int:
        if entry.cleared_before <= entry.covered:
            return 0
        return sum(
            1
            for r in self.results
            if entry.covered <= r.index < entry.cleared_before and self.clearable(r.index)
        )

    def clearable(self, index: int) -> bool:
        tool = self.tools.get(index)
        return tool is not None and is_clearable(self.original[index], tool, self.config.protected_tools)

    def _add(
        self,
        messages: list[Message],
        prints: list[Fingerprint],
        origins: list[int | None],
        index: int,
        clear: bool,
    ) -> None:
        if clear and self.clearable(index):
            message = placeholder(self.original[index], self.tools[index])
            print_ = fingerprint(message)
        else:
            message, print_ = self.truncated(index)
        messages.append(message)
        prints.append(print_)
        origins.append(index)

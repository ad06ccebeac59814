"""What we forward, built from the client's entries and the conversation's stored state.

A ``View`` is the list we will treat as the history: the client's items with the cheap
tiers applied (tool outputs truncated, old results cleared) and any stored compaction
spliced in. Everything here is a pure function of (request, stored entry), which is what
makes the forwarded prefix stable between two changes of state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from compact_hook.core.chain import Entry, is_stale
from compact_hook.core.counting import TokenCounter
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Item, PartKind
from compact_hook.core.pairing import Pairing, pair
from compact_hook.core.pinning import Shape, shown_texts
from compact_hook.engine.tiers.cleared_items import ClearedItems
from compact_hook.engine.tiers.pairings import paired
from compact_hook.engine.tiers.truncation import Tier1, Truncation
from compact_hook.settings.model import CompactConfig
from compact_hook.wires.conversation import Conversation


@dataclass(slots=True)
class View:
    """Items, their fingerprints, and where each came from.

    ``origins[i]`` is the index in the client's list of ``items[i]``, or None for an item we
    built (the summary, a synthetic result). ``summary_at``: where the summary is (None: no
    summary); ``spliced_prefix``: how many items the stored compaction put before the client's
    own unsummarized items (the summary and the items it keeps; 0 without a summary).
    ``normalized``: normalization has run on exactly these items (it is not run twice).
    ``built``: the items it made rather than took whole from tier 1 — cleared, shaped, the summary,
    thinking taken out (``Costs.rewritten`` counts them as written again, as it did when every view
    made its own).
    """

    items: list[Item]
    prints: list[Fingerprint]
    origins: list[int | None]
    summary_at: int | None = None
    spliced_prefix: int = 0
    _pairing: Pairing | None = field(default=None, repr=False)
    normalized: bool = False
    built: tuple[Item, ...] = ()
    _tiers: Tiers | None = field(default=None, repr=False)
    """The request's tiers that built it: they pair it from the conversation's earlier pairings."""

    def rebuilt(
        self,
        items: list[Item],
        prints: list[Fingerprint],
        origins: list[int | None],
        built: Sequence[Item] = (),
    ) -> View:
        """Another list of items from this view (fitted, normalized): the summary followed by identity;
        ``built``: the items made for it."""
        summary = self.items[self.summary_at] if self.summary_at is not None else None
        summary_at = next((k for k, item in enumerate(items) if item is summary), None)
        return View(items, prints, origins, summary_at, self.spliced_prefix, built=(*self.built, *built))

    @property
    def pairing(self) -> Pairing:
        if self._pairing is None:
            tiers = self._tiers
            self._pairing = tiers.paired(self.items, self.prints) if tiers is not None else pair(self.items)
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
    items, prints, origins, built = [], [], [], []
    for item, print_, origin in zip(view.items, view.prints, view.origins, strict=True):
        thinking = [k for k, part in enumerate(item.parts) if part.kind is PartKind.THINKING]
        if thinking and origin is not None and is_stale(origin, spans):
            shown = wire.without_parts(item, thinking)
            if shown is None:
                continue
            item, print_ = shown, conversation.fingerprint(shown.raw)
            built.append(item)
        items.append(item)
        prints.append(print_)
        origins.append(origin)
    if len(items) == len(view.items) and all(a is b for a, b in zip(items, view.items, strict=True)):
        return view
    return view.rebuilt(items, prints, origins, built)


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


class Counted(NamedTuple):
    """The client's entries as measured: their fingerprints and token counts, and the counter
    (a tuple: made on every request, on the path every request takes)."""

    prints: Sequence[Fingerprint]
    counts: Sequence[int]
    counter: TokenCounter


class Tiers:
    """The cheap tiers for one request: which item each client index becomes."""

    def __init__(
        self, conversation: Conversation, counted: Counted, config: CompactConfig, tier1: Tier1
    ) -> None:
        self.conversation = conversation
        self.prints, self.counts, self.counter = counted.prints, counted.counts, counted.counter
        self.config = config
        self.cache = tier1.cache
        self.tier1 = Truncation(self, tier1.output_limit or config.tool_output_max_tokens)
        self.tier2 = ClearedItems(self)
        self._views: dict[Entry | None, View] = {}

    @property
    def oversized(self) -> bool:
        """Whether any item could need truncating (see ``Truncation.oversized``)."""
        return self.tier1.oversized

    async def prepare(self) -> None:
        await self.tier1.prepare()

    def truncated(self, index: int) -> tuple[Item, Fingerprint]:
        return self.tier1.truncated(index)

    def truncated_count(self) -> int:
        return self.tier1.count()

    @cached_property
    def items(self) -> list[Item]:
        return self.conversation.items()

    @cached_property
    def pairing(self) -> Pairing:
        return paired(self.conversation, self.items, self.prints)

    def paired(self, items: list[Item], prints: Sequence[Fingerprint]) -> Pairing:
        """``items`` (of this request: the client's, or a view's) paired anew only from where they part
        from those of the conversation's latest pairings that they share the most with (``core.pairing.
        pair_again``): the client's items, and the view forwarded — stable from request to request."""
        return self.pairing if items is self.items else paired(self.conversation, items, prints)

    @cached_property
    def result_items(self) -> list[int]:
        """The item index of every tool result, in order."""
        return [index for index, _ in self.pairing.results()]

    def view(self, entry: Entry | None) -> View:
        """The client's items under ``entry`` (None: no stored state), tiers applied — once per entry
        and request (a request weighs the same state at several steps)."""
        found = self._views.get(entry)
        if found is None:
            found = self._views[entry] = self._view(entry)
        return found

    def _view(self, entry: Entry | None) -> View:
        if entry is None and not self.oversized:
            return View(self.items, list(self.prints), list(range(len(self.items))), _tiers=self)
        entry = entry or Entry()
        shapes = dict(entry.shapes)
        shown: list[tuple[Item, Fingerprint, int | None]] = [
            (*(self.shaped(index, shapes[index]) if index in shapes else self.truncated(index)), index)
            for index in entry.keep
        ]
        summary_at = entry.summary_position if entry.summary is not None else None
        if entry.summary is not None:
            summary = self.conversation.wire.summary(entry.summary, self.conversation.summary_mark())
            shown.insert(entry.summary_position, (summary, self.conversation.fingerprint(summary.raw), None))
        bound = max(entry.covered, entry.cleared_before)
        made = [item for item, _, origin in shown if not self._as_tier1(item, origin)]
        run = self.tier2.run(entry.covered, bound)
        made.extend(run.made)
        cut = len(shown)  # the kept items and the summary, then the run, then the items after it
        shown.extend((*self.truncated(index), index) for index in range(bound, len(self.items)))
        items, prints, origins = [s[0] for s in shown], [s[1] for s in shown], [s[2] for s in shown]
        items[cut:cut], prints[cut:cut], origins[cut:cut] = run.items, run.prints, run.origins
        spliced = len(entry.keep) + 1 if summary_at is not None else 0
        view = View(items, prints, origins, summary_at, spliced, built=tuple(made), _tiers=self)
        return without_stale_thinking(view, entry.stale_thinking, self.conversation)

    def _as_tier1(self, item: Item, origin: int | None) -> bool:
        """Whether ``item`` is the client's item ``origin`` as tier 1 shows it, not one made for a view."""
        return origin is not None and item is self.truncated(origin)[0]

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
        return self.tier2.item(index)

    def cleared_count(self, entry: Entry) -> int:
        return self.tier2.count(entry)

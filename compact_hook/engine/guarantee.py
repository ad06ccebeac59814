"""The guarantee as stages: every call answered (``normalized``), and the window kept (``fit``).

Both only touch requests we change (or that must be fitted); what they take out is handed to
``engine.memory.archiving``. ``fit`` tokenizes what it shrinks: callers run it off the event loop.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compact_hook.core.counting import item_strings, request_total
from compact_hook.core.fit import Spared, drop_order, fit
from compact_hook.core.items import Item
from compact_hook.core.normalize import normalize
from compact_hook.core.outcomes import Removal
from compact_hook.core.truncate import Truncating, truncate_results
from compact_hook.engine.memory.archiving import Kept, Removed, keep, removed_at
from compact_hook.engine.run import Run
from compact_hook.engine.view import View


@dataclass(frozen=True, slots=True)
class Fit:
    """A fitted view, the client's entries to archive (dropped ones, and the originals of shrunk
    outputs: shrinking loses text too), how many items were dropped, and whether it fits."""

    view: View
    lost: Removed
    dropped: int
    fits: bool


@dataclass(frozen=True, slots=True)
class Normalized:
    """A normalized view, how many fixes it took (results added or removed), and what archiving
    the removed ones did."""

    view: View
    fixes: int = 0
    kept: Kept = Kept()


def fitted(run: Run, view: View) -> Fit:
    """Drop and shrink until the view fits the window."""
    wire, config = run.request.conversation.wire, run.config
    sizing = _ViewSizing(run, view, config.protected_tools)
    units = view.pairing.units
    spared = Spared(config.protected_tools, view.summary_at, wire.first_turn_user)
    order = drop_order(view.items, units, spared)
    budget = run.window.window - request_total(run.context_tokens, [0])
    done = fit(view.items, order, budget, sizing)
    still = {id(item) for item in done.items}
    lost = [i for i, item in enumerate(view.items) if id(item) not in still]
    fitted_view = _rebuilt(run, view, done.items, done.shrunk)
    return Fit(fitted_view, removed_at(run, view, lost, Removal.DROPPED), len(done.dropped), done.fits)


def _rebuilt(run: Run, view: View, items: list[Item], shrunk: Mapping[int, Item] | None = None) -> View:
    """``items`` (fitted, normalized) as a view: the view's own keep their fingerprints and origins;
    a new one is fingerprinted, with its original's origin where it is a shrunk one, else none."""
    known = {id(item): k for k, item in enumerate(view.items)}
    fingerprint = run.request.conversation.fingerprint
    prints, origins = [], []
    for item in items:
        k = known.get(id(item))
        prints.append(view.prints[k] if k is not None else fingerprint(item.raw))
        if k is None and shrunk is not None:
            k = known[id(shrunk[id(item)])]
        origins.append(view.origins[k] if k is not None else None)
    return view.rebuilt(items, prints, origins)


async def normalized(run: Run, view: View, force: bool = False) -> Normalized:
    """The view with every call answered, every orphan result gone and every instruction
    placed where the format allows it, and how many fixes (results added or removed).

    Only for requests we change (or ``normalize: always``, or ``force``: about to be fitted,
    so what normalization adds counts toward the window). What it removes is archived.
    """
    if view.normalized:
        return Normalized(view)
    if same_items(view.items, run.tiers.items) and not force and run.config.normalize != "always":
        return Normalized(view)
    wire = run.request.conversation.wire
    fixed = normalize(view.items, wire, view.pairing, wire.placement)
    if same_items(fixed, view.items):
        view.normalized = True
        return Normalized(view)
    before, after = {id(item) for item in view.items}, {id(item) for item in fixed}
    gone = [k for k, item in enumerate(view.items) if id(item) not in after]
    kept = await keep(run, removed_at(run, view, gone, Removal.NORMALIZED))
    done = _rebuilt(run, view, fixed)
    done.normalized = True
    return Normalized(done, len(after - before) + len(before - after), kept)


def same_items(items: Sequence[Item], others: Sequence[Item]) -> bool:
    """The same item objects in the same order (compared in C: this runs on every changed request)."""
    return items is others or (len(items) == len(others) and all(map(operator.is_, items, others)))


class _ViewSizing:
    """Sizes of a view's items (counted once), and shrinking that spares protected tools' results."""

    def __init__(self, run: Run, view: View, protected: Sequence[str]) -> None:
        self.counter, self.conversation = run.counter, run.request.conversation
        self.wire, self.recall = self.conversation.wire, run.config.recall
        counts = run.sizes.counts(view)
        self.known = {id(item): (item, count) for item, count in zip(view.items, counts, strict=True)}
        """By identity, each item held with its count: an id is only an item's while the item lives, and
        the fit makes and drops shrunk items as it goes (a dropped one's id, reused by the next, read its
        count: the same request left two ways)."""
        parts = view.pairing.protected_parts(protected)  # by identity: the fit never shrinks them
        self.protected = {id(view.items[index]): positions for index, positions in parts.items()}

    def count(self, item: Item) -> int:
        found = self.known.get(id(item))
        if found is None:
            prints = [self.conversation.fingerprint(item.raw)]
            found = self.known[id(item)] = (item, self.counter.count(prints, lambda _: item_strings(item))[0])
        return found[1]

    def shrink(self, item: Item, limit: int) -> Item | None:
        skip = self.protected.get(id(item), ())
        how = Truncating(limit, "tokens", self.counter.cut, recall=self.recall)
        cuts = truncate_results(item, how, skip=skip)
        return self.wire.replace_outputs(item, cuts, keep_media=True) if cuts else None

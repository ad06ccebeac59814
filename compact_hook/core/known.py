"""What a conversation's last request taught, kept for its next one — one owner, named writes.

A conversation's entries as its last request sent them (``state.recent``): index by index, a copy of
each (None: JSON cannot hold it), what was learned of it — its fingerprint, its size — and its item
once parsed (from the copy, which nothing else holds: an item parsed once serves every request that
sends the entry again). Side by side, not an object an entry: a request reads every entry's
fingerprint, and one object an entry was one more to fetch each.

The stages that work on a request add what they worked out for the next one — its items parsed
(``wires.conversation``), its prefix chain (``engine.run``), its pairings (``engine.tiers.pairings``),
cleared items and runs (``engine.tiers.cleared_items``), the copy of its system and tools
(``wires.conversation``) — only through the methods here, and what they keep is charged (``weight``)
to the conversation's account (``state.recent``: the bounds are in bytes, per tenant and in all):
the items and the chain with the entries, up front; the rest as it is kept. The charges are
estimates of the memory a Python object of that kind holds, measured with ``tracemalloc``
(``bench/bench_recent_memory.py``: what they charge a Claude Code session against what it holds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Cleared, ClearedRun, Item
from compact_hook.core.pairing import Pairing

CONVERSATION_BYTES = 2_048
"""Charged for every conversation kept, whatever it holds: the object, its tuples, the maps that
find it — so a conversation of no entries still costs something, and a flood of them is bounded."""
ENTRY_BYTES = 160
"""Per entry besides its copy: its fingerprint, its size, its slots in the tuples and the chain."""
COPY_FACTOR = 3
"""A copy in memory against its JSON size: its containers and its strings, which it keeps alive
after the request that brought them is gone (with its entry's overhead: 2.5× over a Claude Code
session)."""
ITEM_BYTES = 300
"""An entry's item once parsed (the item and its parts; their texts are the copy's own strings):
250 bytes on average over a Claude Code session."""
PAIRED_BYTES = 64
"""Per item of a pairing kept (its fingerprint tuple's slot, its unit's indices)."""
CLEARED_BYTES = 900
"""A cleared item kept: the item built, its placeholders, its key."""
RUN_ITEM_BYTES = 120
"""Per item of a cleared run kept (its slots; the cleared items are charged as cleared)."""
PAIRINGS_KEPT = 2
"""A conversation's latest pairings kept (``engine.tiers.pairings``): its items', and its forwarded
view's."""
RUNS_KEPT = 4
"""A conversation's cleared runs kept (``engine.tiers.cleared_items``): a request weighs its state and the
next batch."""

Charge = Callable[[int], None]
"""Told how many bytes more (or fewer) a conversation's knowledge holds (``state.recent``)."""


class Known:
    """One conversation's last request as kept (see the module)."""

    __slots__ = (
        *("copies", "prints", "sizes", "commands", "size", "_items", "_paired", "_runs"),
        *("_cleared", "_chain", "_context", "_weight", "_charge"),
    )

    def __init__(
        self,
        entries: tuple[tuple[Any, ...], tuple[Fingerprint, ...], tuple[int, ...]],
        commands: tuple[int, ...],
        items: list[Item | None],
        earlier: Known | None = None,
        settled: int = 0,
    ) -> None:
        """``entries``: the copies, their fingerprints and sizes; ``items``: those parsed already;
        ``earlier``: the conversation's last request's, whose pairings, runs (ending at or before
        ``settled``, the entries sent as before), cleared items, chain and context carry over."""
        self.copies, self.prints, self.sizes = entries
        self.commands, self._items = commands, items
        self.size = sum(self.sizes)
        """The copies' JSON size."""
        self._charge: Charge | None = None
        self._paired: list[tuple[tuple[Fingerprint, ...], Pairing]] = []
        self._runs: dict[tuple[object, ...], ClearedRun] = {}
        self._cleared: dict[int, Cleared] = {}
        self._chain: list[bytes] = []
        self._context: tuple[tuple[Any, ...], tuple[Fingerprint, ...], int] | None = None
        if earlier is not None:
            self._carry(earlier, settled)
        self._weight = self._worked_out()

    def _carry(self, earlier: Known, settled: int) -> None:
        length = len(self.copies)
        self._paired = list(earlier._paired)
        self._runs = {key: run for key, run in earlier._runs.items() if run.bound <= settled}
        grew = length >= len(earlier.copies)  # copied in C where it has them all
        cleared = earlier._cleared
        self._cleared = dict(cleared) if grew else {i: c for i, c in cleared.items() if i < length}
        self._chain = earlier._chain[: settled + 1]
        self._context = earlier._context

    def _worked_out(self) -> int:
        """What this knowledge weighs (see the constants): each entry's item as if parsed (most are,
        and one charge per item parsed would cost a first request as much as parsing)."""
        paired = sum(len(prints) for prints, _ in self._paired)
        runs = sum(len(run.items) for run in self._runs.values())
        context = self._context[2] if self._context is not None else 0
        return (
            CONVERSATION_BYTES
            + (ENTRY_BYTES + ITEM_BYTES) * len(self.copies)
            + COPY_FACTOR * (self.size + context)
            + PAIRED_BYTES * paired
            + RUN_ITEM_BYTES * runs
            + CLEARED_BYTES * len(self._cleared)
        )

    @property
    def weight(self) -> int:
        """What it is charged (bytes, estimated)."""
        return self._weight

    def charged_to(self, charge: Charge | None) -> None:
        """From now on, what it adds is told to ``charge`` (None: kept by nobody)."""
        self._charge = charge

    def _add(self, size: int) -> None:
        self._weight += size
        if self._charge is not None and size:
            self._charge(size)

    # -- what the stages read and keep -------------------------------------------------------------

    def item(self, index: int, parse: Callable[[Any], Item]) -> Item:
        """Entry ``index``'s item, parsed from its copy the first time it is asked."""
        found = self._items[index]
        if found is None:
            found = self._items[index] = parse(self.copies[index])
        return found

    @property
    def items(self) -> Sequence[Item | None]:
        return self._items

    @property
    def pairings(self) -> Sequence[tuple[tuple[Fingerprint, ...], Pairing]]:
        return self._paired

    def keep_pairing(self, prints: tuple[Fingerprint, ...], pairing: Pairing) -> None:
        """The latest pairing of ``prints`` (``PAIRINGS_KEPT`` kept, the newest first)."""
        kept = [(prints, pairing), *(p for p in self._paired if p[0] != prints)][:PAIRINGS_KEPT]
        before = sum(len(p) for p, _ in self._paired)
        self._paired = kept
        self._add(PAIRED_BYTES * (sum(len(p) for p, _ in kept) - before))

    def run(self, key: tuple[object, ...]) -> ClearedRun | None:
        return self._runs.get(key)

    def keep_run(self, key: tuple[object, ...], run: ClearedRun) -> None:
        """A cleared run (``RUNS_KEPT`` at most: past them, all go)."""
        if len(self._runs) >= RUNS_KEPT:
            self._add(-RUN_ITEM_BYTES * sum(len(r.items) for r in self._runs.values()))
            self._runs = {}
        self._runs[key] = run
        self._add(RUN_ITEM_BYTES * len(run.items))

    def cleared(self, index: int) -> Cleared | None:
        return self._cleared.get(index)

    def keep_cleared(self, index: int, found: Cleared) -> None:
        """Item ``index`` as it was cleared (one an entry)."""
        if index not in self._cleared:
            self._add(CLEARED_BYTES)
        self._cleared[index] = found

    @property
    def chain(self) -> Sequence[bytes]:
        """The prefix chain of the conversation's last request, as far as these entries hold it."""
        return self._chain

    def keep_chain(self, chain: list[bytes]) -> None:
        self._chain = chain

    def context_prints(self, context: tuple[Any, ...]) -> tuple[Fingerprint, ...] | None:
        """The fingerprints of what the model reads besides the entries, where the conversation's
        last request sent it the same (compared in C); None: work them out."""
        kept = self._context
        return kept[1] if kept is not None and kept[0] == context else None

    def keep_context(self, copies: tuple[Any, ...], prints: tuple[Fingerprint, ...], size: int) -> None:
        """A copy of what the model reads besides the entries (its JSON ``size``), and its fingerprints."""
        before = self._context[2] if self._context is not None else 0
        self._context = (copies, prints, size)
        self._add(COPY_FACTOR * (size - before))


NOTHING = Known(((), (), ()), (), [])
"""A conversation with no last request kept."""

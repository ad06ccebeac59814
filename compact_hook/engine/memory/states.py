"""The conversations' states in the store: looked up once per request, written under their prefix.

A state (``core.chain.Entry``) is what a conversation's earlier requests left: a compaction, a
clearing boundary, thinking blocks gone stale. The compactor reads it once per request and
writes each new one here; with no store, every request starts from nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compact_hook.core.chain import OPEN_END, Entry, entry_is_usable
from compact_hook.core.outcomes import CacheStatus
from compact_hook.engine.run import Run
from compact_hook.state.store import CompactionStore


@dataclass(frozen=True, slots=True)
class Restored:
    """A conversation's stored state as one request found it, and whether an earlier request left
    it (``HIT``). Entries it summarized but could not archive yet (``unarchived``) are written when
    the request's decision is carried out (``Compactor.carry_out``), not when it is looked up."""

    state: Entry = Entry()
    cache: CacheStatus = CacheStatus.NONE


class States:
    def __init__(self, store: CompactionStore | None) -> None:
        self.store = store

    async def restore(self, run: Run) -> Restored:
        """The longest stored prefix's state; ``hit`` only when an earlier request left it. The
        compactor looks it up once per request (``Compactor.decide``) and passes it on."""
        if self.store is None:
            return Restored()
        found = await self.store.find(run.root, run.chain)
        if found is None or not entry_is_usable(found[1], len(run.prints)):
            return Restored()
        return Restored(found[1], CacheStatus.HIT)

    async def put(self, run: Run, entry: Entry) -> None:
        if self.store is not None:
            await self.store.put(run.root, run.chain[entry.span], entry)

    async def unstable(self, run: Run, state: Entry) -> Entry:
        """A fitted request is no stable prefix (the next fit may drop differently, or none be
        needed: the provider's count taught since): thinking blocks produced from here on are not
        sent back until the next compaction sets a new, stable prefix. Stored (a conversation with
        no state yet under its start, ``Run.root``), so the next request strips them too."""
        unstable = run.unbound(state, state.covered, OPEN_END)
        if unstable == state:
            return unstable
        if unstable.span == 0:
            unstable = dataclasses.replace(unstable, anchor=run.root_span)
        await self.put(run, unstable)
        return unstable

"""Per conversation: how many summaries were prepared ahead and how many of them were applied.

A summary prepared ahead that no trigger applies is paid for and thrown away: the price of zero
wait, which the rules in ``engine.ahead.prepare`` and ``engine.tiers.clearing`` keep to at most one per
session. The tally says, in each report past ``prepare_ratio``, how many this conversation left unused so
far. Kept in the store beside the conversation's state (replicas share it); two replicas counting
at the same instant may lose one count — it informs, it decides nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from compact_hook.state.store import CompactionStore

TALLY = b"prepared-tally:"
TALLY_TTL_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True)
class Tally:
    made: int = 0
    applied: int = 0

    @property
    def unused(self) -> int:
        """Prepared and not (yet) applied."""
        return max(0, self.made - self.applied)

    def counted(self, made: int = 0, applied: int = 0) -> Tally:
        """This tally with more made and applied."""
        return Tally(self.made + made, self.applied + applied)

    @classmethod
    def parse(cls, note: str | None) -> Tally:
        try:
            made, applied = (int(n) for n in (note or "").split())
        except ValueError:
            return cls()
        return cls(max(0, made), max(0, applied))

    def dumps(self) -> str:
        return f"{self.made} {self.applied}"


class SessionTally:
    """Reads and counts a conversation's tally (``root``: the conversation's key)."""

    def __init__(self, store: CompactionStore) -> None:
        self.store = store

    async def get(self, root: bytes) -> Tally:
        return Tally.parse(await self.store.get_note(TALLY + root))

    async def count(self, root: bytes, made: int = 0, applied: int = 0) -> Tally:
        counted = (await self.get(root)).counted(made, applied)
        await self.store.set_note(TALLY + root, counted.dumps(), TALLY_TTL_SECONDS)
        return counted

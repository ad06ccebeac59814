"""The recipe with I/O, at the root: a request measured once (``run``), one decision (``decision``,
made by ``compactor``), carried out through the tiers (``tiers``), the summary (``summary``) or a
compaction prepared ahead (``ahead``), the view forwarded (``view``) kept within the window
(``guarantee``) and described (``finish``); ``economy`` prices it, ``memory`` keeps what outlives it;
``library`` is the stateless API for chat messages."""

from compact_hook.engine.compactor import Compactor
from compact_hook.engine.result import CompactRequest, CompactResult, CompactStats

__all__ = ["CompactRequest", "CompactResult", "CompactStats", "Compactor"]

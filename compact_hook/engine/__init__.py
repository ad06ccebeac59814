"""The recipe with I/O: a request's run through the tiers, the summary calls (prompt, chunks,
retries), single flight, and the stateless library API."""

from compact_hook.engine.compactor import Compactor
from compact_hook.engine.result import CompactRequest, CompactResult, CompactStats

__all__ = ["CompactRequest", "CompactResult", "CompactStats", "Compactor"]

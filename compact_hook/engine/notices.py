"""Warnings worth giving once per process, not on every request."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

NOTICES_SIZE = 1024


class Notices:
    """Which warnings were given, bounded (the oldest are forgotten, and may be given again)."""

    def __init__(self, size: int = NOTICES_SIZE) -> None:
        self.size = size
        self._given: OrderedDict[Hashable, None] = OrderedDict()

    def first(self, key: Hashable) -> bool:
        """True the first time ``key`` is seen (then say it), False after."""
        if key in self._given:
            self._given.move_to_end(key)
            return False
        self._given[key] = None
        while len(self._given) > self.size:
            self._given.popitem(last=False)
        return True

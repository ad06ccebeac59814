"""Tier 2 applied to one request: the client's old tool results shown as placeholders.

Which results a request clears is decided elsewhere (``engine.tiers.clearing``: where the clearing
boundary stands); here the items are built — each cleared item once per request (a request weighs
several views, each clearing the same old results), and taken from the conversation's last request
where built from the same (``Known.cleared``, ``Known.runs``): an agent's old results are cleared
again on every turn, and only the newly cleared are built. On top of tier 1 (``truncation``): a
cleared item starts from the item as tier 1 shows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compact_hook.core.chain import Entry
from compact_hook.core.clearing import clearable_parts, placeholders
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Cleared, ClearedRun, Item

if TYPE_CHECKING:
    from compact_hook.engine.view import Tiers


class ClearedItems:
    """The request's items with their old results cleared (see the module)."""

    def __init__(self, tiers: Tiers) -> None:
        self.tiers = tiers
        self._cleared: dict[int, Cleared | None] = {}

    def run(self, start: int, bound: int) -> ClearedRun:
        """The client's items ``start`` to ``bound`` with their old results cleared — the same as the
        conversation's last request showed them where nothing before ``bound`` changed since and tier 1
        cuts nothing (``Known.runs``): only the items after ``bound`` are looked at one by one."""
        config = self.tiers.config
        key = (start, bound, config.recall, tuple(config.protected_tools))
        known = (
            None if self.tiers.oversized else self.tiers.conversation.known
        )  # tier 1's cuts are this request's
        carried = None if known is None else known.run(key)
        if carried is not None:  # a conversation keeps only the runs its entries still hold
            return carried
        found = {index: self._clearing(index) for index in range(start, bound)}
        shown = [(f.item, f.print) if f else self.tiers.truncated(i) for i, f in found.items()]
        made = tuple(f.item for f in found.values() if f is not None and f.item is not f.source)
        items, prints = tuple(item for item, _ in shown), tuple(print_ for _, print_ in shown)
        cleared = sum(len(f.shown) for f in found.values() if f)
        run = ClearedRun(key, bound, items, prints, tuple(found), made, cleared)
        if known is not None:
            known.keep_run(key, run)
        return run

    def item(self, index: int) -> tuple[Item, Fingerprint]:
        """Tier 2 on top of tier 1: the item's clearable results shown as placeholders."""
        found = self._clearing(index)
        return (found.item, found.print) if found is not None else self.tiers.truncated(index)

    def _clearing(self, index: int) -> Cleared | None:
        """Item ``index`` cleared (None: nothing in it to clear) — built once per request (a request
        weighs several views, each clearing the same old results), and taken from the conversation's
        last request where built from the same (``Known.cleared``): an agent's old results are
        cleared again on every turn, and only the newly cleared are built."""
        if index in self._cleared:
            return self._cleared[index]
        item, print_ = self.tiers.truncated(index)
        tools = clearable_parts(item, index, self.tiers.pairing.tool_of, self.tiers.config.protected_tools)
        found = None
        if tools:
            key = ("cleared", print_, self.tiers.config.recall, *sorted(tools.items()))
            known = self.tiers.conversation.known
            carried = known.cleared(index) if known is not None else None
            same = carried is not None and carried.source is item and carried.key == key
            found = carried if same else self._clear(index, key, tools)
        self._cleared[index] = found
        return found

    def _clear(self, index: int, key: tuple[object, ...], tools: dict[int, str]) -> Cleared | None:
        """Placeholders for item ``index``'s clearable results (``tools``), made once per output (they
        quote its error lines: reading every cleared output on every request would not be cheap)."""
        item, _ = self.tiers.truncated(index)
        shown = self.tiers.cache.get(key)
        if shown is None:
            shown = placeholders(
                item, tools, self.tiers.conversation.item(index) if self.tiers.config.recall else None
            )
            self.tiers.cache.put(key, shown)
        if not shown:
            return None
        cleared = self.tiers.conversation.wire.replace_outputs(item, shown, keep_media=False)
        found = Cleared(item, key, shown, cleared, self.tiers.conversation.fingerprint(cleared.raw))
        known = self.tiers.conversation.known
        if cleared is not item and known is not None:  # tier 1's item is this request's own
            known.keep_cleared(index, found)
        return found

    def count(self, entry: Entry) -> int:
        """How many results the entry's clearing boundary shows as placeholders."""
        if entry.cleared_before <= entry.covered:
            return 0
        return self.run(entry.covered, entry.cleared_before).cleared

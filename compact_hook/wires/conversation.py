"""A parsed request, as a wire's ``parse`` hands it to the engine (``wires.base.WireFormat``).

The contract is ``wires.base``; this is the value it produces, and the state it carries from the
conversation's last request (``state.recent``): what is known of each entry (``Known``), the items
parsed lazily, the fingerprints seeded by the tenant, and the mapping of what is forwarded back to
the client's own objects (``as_sent``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import orjson

from compact_hook.core.copying import copied
from compact_hook.core.counting import Strings, item_strings
from compact_hook.core.fingerprint import Fingerprint, fingerprint
from compact_hook.core.items import Item, Role
from compact_hook.core.known import Known
from compact_hook.core.tenancy import tenant_seed

if TYPE_CHECKING:
    from compact_hook.wires.base import WireFormat


@dataclass(slots=True)
class Conversation:
    """A parsed request: ``entries`` as the client sent them (in order), ``context`` — what the
    model reads that we never change (system, tool definitions, schemas) — and ``reserve``, the
    output tokens the request asks room for. Items are parsed lazily: a request under every
    threshold only needs fingerprints and cached counts."""

    wire: WireFormat
    entries: list[Any]
    context: tuple[Any, ...] = ()
    reserve: int | None = None
    overhead: int = 0
    """Tokens the provider adds to the context on its own (Anthropic's tool-use system prompt)."""
    tenant_seed: int = 0
    """Mixed into every fingerprint, so caches keyed by content are per tenant: no tenant can
    tell by timing what another sent (``for_tenant``)."""
    summary_mark: Callable[[], dict[str, Any] | None] = lambda: None
    """A prompt-cache breakpoint for our summary (Anthropic, when the client uses them): looked for
    only when a summary is shown (every block of every message is read for it)."""
    turn_opens_with_thinking: bool = False
    """The model thinks at the start of each turn and the provider refuses a tool turn in progress
    that does not open with that thinking (Anthropic, ``thinking`` enabled, models that run no
    prefix check): a compaction keeps the turn's opening unit."""
    tail: list[Any] = field(default_factory=list)
    """The client's last turn: the entries after the last non-assistant one (a prefill, a call
    under review). Forwarded as sent after everything else and counted as what the model reads;
    the engine never reads or changes them (``client_turn_apart``)."""
    known: Known | None = None
    """What is known of each entry, by index, from the conversation's last request where the entry
    is the same (``state.recent``): its fingerprint, and its item parsed from a copy of it. The
    entries are a prefix of what it covers (``without_last``, ``client_turn_apart`` cut the end)."""
    _items: list[Item | None] = field(default_factory=list, repr=False)

    def item(self, index: int) -> Item:
        known = self.known
        if known is not None and known.copies[index] is not None:  # parsed once for every request
            return known.item(index, self.wire.item)
        if not self._items:
            self._items = [None] * len(self.entries)
        found = self._items[index]
        if found is None:
            found = self._items[index] = self.wire.item(self.entries[index])
        return found

    def items(self) -> list[Item]:
        return [self.item(index) for index in range(len(self.entries))]

    def lazy_items(self) -> LazyItems:
        """The items as a sequence parsed on access: what needs only a few of them parses only those."""
        return LazyItems(self)

    def without_last(self) -> Conversation:
        """The conversation before its newest entry (a ``/compact`` command), the rest unchanged."""
        return dataclasses.replace(self, entries=self.entries[:-1], _items=[])

    def client_turn_apart(self) -> Conversation:
        """The conversation with its trailing assistant entries set apart as its ``tail``: the last
        turn is the client's move — a prefill the model continues, a tool call a reviewer is asked
        about — and a result added to it, a part cleared or cut in it, would change what the
        client asks. Normalization and every tier apply to the history before it."""
        cut = len(self.entries)
        while cut > 0 and self.item(cut - 1).role is Role.ASSISTANT:
            cut -= 1
        if cut == len(self.entries):
            return self
        tail = [*self.entries[cut:], *self.tail]
        return dataclasses.replace(self, entries=self.entries[:cut], tail=tail, _items=[])

    def tail_strings(self, index: int) -> Strings:
        """What the model reads of the tail's ``index``-th entry."""
        return item_strings(self.wire.item(self.tail[index]))

    def for_tenant(self, tenant: str) -> None:
        self.tenant_seed = tenant_seed(tenant)

    @property
    def seed(self) -> int:
        return self.wire.seed ^ self.tenant_seed

    def fingerprint(self, entry: Any) -> Fingerprint:
        """The fingerprint of an entry of this conversation (one the client sent, or one we built)."""
        return fingerprint(entry, self.seed)

    def prints(self) -> list[Fingerprint]:
        """Each entry's fingerprint (``known``, or worked out)."""
        if self.known is not None:
            return list(self.known.prints[: len(self.entries)])
        seed = self.seed
        return [fingerprint(entry, seed) for entry in self.entries]

    def as_sent(self, raws: Sequence[Any], origins: Sequence[int | None]) -> list[Any]:
        """``raws`` as forwarded, each with the index of the client's entry it shows (``origins``, None:
        none): the client's own object where it is that entry (or the copy an item of it was parsed
        from, ``known``), and a copy of everything we built. LiteLLM changes what it forwards in place,
        and what we built may be kept for the next request (``Known.cleared``, ``Known.runs``) or share
        parts with what is. By origin, not by a map of every entry: this runs on every request."""
        entries = self.entries
        copies = self.known.copies if self.known is not None else ()

        def sent(raw: Any, origin: int | None) -> Any:
            if origin is None:
                return _copy(raw)
            own = entries[origin]
            return own if raw is own or (origin < len(copies) and raw is copies[origin]) else _copy(raw)

        return [sent(raw, origin) for raw, origin in zip(raws, origins, strict=True)]

    def tail_prints(self) -> list[Fingerprint]:
        seed = self.seed
        return [fingerprint(entry, seed) for entry in self.tail]

    def context_prints(self) -> list[Fingerprint]:
        """The fingerprints of what the model reads besides the entries: the conversation's last
        request's where it sent the same (``Known.context``), else worked out and kept for the next."""
        known, context = self.known, self.context
        kept = known.context_prints(context) if known is not None else None
        if kept is not None:
            return list(kept)
        seed = self.seed ^ 1
        found = [fingerprint(part, seed) for part in context]
        if known is not None:  # kept for the conversation's next request
            copies = [copied(part) for part in context]
            if all(copy is not None for copy, _ in copies):
                known.keep_context(tuple(c for c, _ in copies), tuple(found), sum(s for _, s in copies))
        return found


def _copy(raw: Any) -> Any:
    """A copy of what we built, no object of it shared: a JSON round trip (in C: what we build is
    small, where a walk in Python costs more than making its few strings anew)."""
    try:
        return orjson.loads(orjson.dumps(raw))
    except (orjson.JSONEncodeError, TypeError):  # built from an entry JSON cannot hold
        return copy.deepcopy(raw)


class LazyItems(Sequence[Item]):
    """A conversation's items, each parsed when first read."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation

    def __len__(self) -> int:
        return len(self.conversation.entries)

    @overload
    def __getitem__(self, index: int) -> Item: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Item]: ...

    def __getitem__(self, index: int | slice) -> Item | Sequence[Item]:
        if isinstance(index, slice):
            return [self.conversation.item(i) for i in range(len(self))[index]]
        return self.conversation.item(index if index >= 0 else len(self) + index)

"""What a wire is: the contracts each wire's folder fulfils, and what its adapter hands the engine.

A wire (``chat``, ``anthropic``, ``responses``, ``google``) is one folder holding three parts, each
against a contract here, and one entry in ``wires.registry``:

- ``format.py``, a ``WireFormat``: parses a request body into a ``Conversation`` (the entries, what
  else the model reads, the output reserve) and renders the engine's result back into the body.
  Between the two the engine sees only core ``Item``s; the adapter also builds the few items we ever
  create (``core.items.Builder``).
- ``recall.py``, a ``RecallWire``: the recall tool's definition on the wire, the model's ``Call``s to
  it in a reply, the follow-up request that carries the answers, the usage of the rounds.
- ``stream.py``: recall inside the wire's streamed reply, given what a ``Recalling`` request offers.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, overload

import orjson

from compact_hook.core.copying import copied
from compact_hook.core.counting import Strings, item_strings
from compact_hook.core.fingerprint import Fingerprint, fingerprint
from compact_hook.core.items import Builder, Item, Placement, Role
from compact_hook.core.known import Known
from compact_hook.core.outcomes import Reason
from compact_hook.core.tenancy import tenant_seed


class WireFormat(Builder, Protocol):
    """One wire format: ``chat``, ``anthropic`` or ``responses``."""

    name: str
    seed: int
    """Fingerprint seed: the same dict means different things in different formats."""
    metadata_key: str
    """The request's per-request dict the proxy keeps (never sent upstream)."""
    first_turn_user: bool
    """The conversation must open with a user turn after its head."""
    placement: Placement
    """Where system items may stand (normalization moves ones a compaction reordered)."""
    bound_thinking: bool
    """The provider checks each thinking block against everything before it (Anthropic's
    preserved thinking): one produced before we changed that prefix must not be sent back."""

    entries_key: str
    """The request's key holding its conversation's entries (``messages``, ``input``, ``contents``)."""

    def parse(self, data: dict[str, Any], unseen: Sequence[int] | None = None) -> Conversation | Rejected:
        """The request as the engine sees it, or why it must pass through untouched. ``unseen``: the
        indices of the only entries to check one by one — the others are the same as entries of an
        earlier request of this conversation this wire accepted (``state.recent``); None: all."""
        ...

    def item(self, raw: Any) -> Item:
        """One entry, parsed (only entries parse() accepted are given)."""
        ...

    def render(self, data: dict[str, Any], entries: list[Any]) -> None:
        """Put the entries to forward back into the request body."""
        ...


@dataclass(frozen=True, slots=True)
class Rejected:
    """A request the engine must not touch: malformed, or managing its own context."""

    reason: Reason
    detail: str = ""


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


@dataclass(frozen=True, slots=True)
class Call:
    """One call of the model to the recall tool: its id and the handle it asks for."""

    id: str
    handle: str


class RecallWire(Protocol):
    """The recall tool on one wire (``<wire>/recall.py``)."""

    name: str
    metadata_key: str
    entries: str
    """The request's field holding the conversation."""
    kept_params: tuple[str, ...]
    """What a follow-up keeps of the request besides its conversation (LiteLLM's own fields stay out)."""

    def tool(self, name: str) -> dict[str, Any]: ...

    def tool_names(self, data: Mapping[str, Any]) -> set[str]: ...

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        """The recall calls in ``response``, and whether it calls the client's tools too."""
        ...

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        """Append the model's turn and the answers to ``request``'s conversation."""
        ...

    async def send(self, router: Any, request: dict[str, Any]) -> Any: ...

    def usage(self, response: Any) -> dict[str, int]: ...

    def finished(self, response: Any, tool: str, usage: dict[str, int], first: Any) -> Any:
        """``response`` without calls to ``tool``, its usage ``usage`` (every round's); ``first``: the
        reply that called the tool first (the client's turn continues from it)."""
        ...


class Recalling(Protocol):
    """A request offered the recall tool, as its stream sees it (``<wire>/stream.py``): the tool's
    name, and the rounds that answer a reply calling only it (``proxy.recall``)."""

    @property
    def tool(self) -> str: ...

    async def answered(self, data: Mapping[str, Any], reply: Any) -> Any:
        """The final reply after our rounds; raises ``guard.RoundFailed`` when a round failed for good."""
        ...

"""The last request of each conversation, kept so the next one only works on what is new.

An agent re-sends its whole history every turn: 288 entries and 430 KB for a Claude Code session,
of which one or two entries are new. Fingerprinting every entry again (serializing and hashing it),
reading every one for a ``/compact`` and parsing every one into an item cost a session-size request
more than everything else the hook does. So the proxy keeps, per conversation, a copy of the entries
its last request sent, with what it learned of each (its fingerprint, its size, whether it is a
``/compact``) and its item once parsed (``core.items.Known``); the next request compares its entries
with the copies, index by index — Python values compared in C, ~15× cheaper than fingerprinting —
and reuses all of it for each entry that is the same. Items parsed from the copies hold the copies:
the engine maps them back to the request's own objects in what it forwards
(``wires.conversation.Conversation.as_sent``). The latest pairing of the items is kept with them, so the next
request pairs only its new turns (``core.pairing``), and so are the items tier 2 cleared
(``core.items.Cleared``), so it builds only the newly cleared.

"The same" is equality as Python values: key order aside (a fingerprint ignores it too), ``1``,
``1.0`` and ``true`` are alike — a client that changes one into another in an entry it sends again
is taken at the entry's old fingerprint (its own conversation only). The copies are made once
for each new entry, their containers anew (no one can change them afterwards: LiteLLM transforms the
request it forwards, in place).

Bounded on every path: each conversation is charged what its knowledge weighs (``core.known``: a
fixed part, each entry, its copy, and whatever the stages add for the next request — items parsed,
pairings, cleared items, runs, the copy of its system and tools — as they add it), ``max_bytes`` in
all (the least recently used conversation goes first), each tenant at most ``tenant_bytes`` and
``tenant_conversations`` (past either, its own least recent conversations go, never another's).
Keyed by the tenant: no tenant's request is compared with another's, or is faster for what another
sent. The session is the client's to choose: a key holder inventing one per request fills only its
own share.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from compact_hook.core.copying import copied
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.known import NOTHING, Known
from compact_hook.state.quota import TenantLedger

RECENT_MAX_BYTES = 64 * 1024 * 1024
"""All conversations' knowledge together (``core.known``'s estimate of what it holds)."""
RECENT_TENANT_BYTES = 16 * 1024 * 1024
"""One tenant's conversations together: a quarter of the whole."""
RECENT_TENANT_CONVERSATIONS = 1_024
"""One tenant's conversations kept, whatever their size: agents a key runs at once, with room."""

T = TypeVar("T")
Key = tuple[str, str, str, str]
"""(tenant, wire, model group, session): one conversation."""
SESSION = 3
"""Where a ``Key`` holds the session."""
Command = Callable[[Any], bool]
"""Whether an entry is a user's ``/compact`` (``wires.command``)."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """A request's entries set against its conversation's last request (``Recent.compare``)."""

    key: Key
    entries: Sequence[Any]
    basis: Known
    overlap: int
    """How many entries both requests have (the shorter's length): those set side by side."""
    unseen: list[int]
    """The indices of the entries that are not: the ones to check, read and learn."""

    @property
    def first_contact(self) -> bool:
        """Nothing was known of the conversation: every entry is new to this process."""
        return self.basis is NOTHING


class Recent:
    """The last request of each conversation (see the module), within its byte bounds."""

    def __init__(
        self,
        max_bytes: int = RECENT_MAX_BYTES,
        tenant_bytes: int = RECENT_TENANT_BYTES,
        tenant_conversations: int = RECENT_TENANT_CONVERSATIONS,
    ) -> None:
        self.max_bytes, self.bytes = max_bytes, 0
        self._copies: OrderedDict[Key, Known] = OrderedDict()
        self._names: dict[bytes, Key] = {}
        self._tenants = TenantLedger(tenant_bytes, tenant_conversations)

    def __len__(self) -> int:
        return len(self._copies)

    def held(self, tenant: str) -> int:
        """What ``tenant``'s conversations are charged (bytes)."""
        return self._tenants.total(tenant)

    def compare(self, key: Key, entries: Sequence[Any]) -> Comparison:
        """Which of ``entries`` the conversation's last request sent the same, at the same place: those
        were read, checked and learned then (a wire parses only the others, ``Comparison.unseen``)."""
        basis = self._copies.get(key, NOTHING)
        same = list(map(operator.eq, basis.copies, entries))  # in C: the cost of what is the same stays small
        unseen = itertools.compress(range(len(same)), map(operator.not_, same))
        return Comparison(key, entries, basis, len(same), [*unseen, *range(len(same), len(entries))])

    def learn(
        self, comparison: Comparison, fingerprint: Callable[[Any], Fingerprint], command: Command
    ) -> Known:
        """What is known of each of the compared entries: what the last request taught where the entry is
        the same (its item too, once parsed), else worked out now (``fingerprint``, whether it is a
        ``/compact``); the compared request is kept as the conversation's last. Only for a request its
        wire accepted: what is kept is what later requests are not checked for again."""
        basis, entries, count = comparison.basis, comparison.entries, comparison.overlap
        if not comparison.unseen and count == len(basis.copies) and self._copies.get(comparison.key) is basis:
            self._refresh(comparison.key)  # the same request again: nothing to learn
            return basis
        length = len(entries)
        copies, prints = (
            _resized(basis.copies, count, length, None),
            _resized(basis.prints, count, length, b""),
        )
        sizes, parsed = _resized(basis.sizes, count, length, 0), _resized(basis.items, count, length, None)
        commands = _still(basis.commands, count, comparison.unseen)
        for index in comparison.unseen:  # ``count`` on: every one, in order
            entry = entries[index]
            copies[index], sizes[index] = copied(entry)
            prints[index], parsed[index] = fingerprint(entry), None
            if command(entry):
                commands.append(index)
        settled = min(comparison.unseen[0], count) if comparison.unseen else count  # entries sent as before
        kept = (tuple(copies), tuple(prints), tuple(sizes))
        known = Known(kept, tuple(sorted(commands)), parsed, basis, settled)
        self._keep(comparison.key, known)
        return known

    def _keep(self, key: Key, known: Known) -> None:
        self._drop(key)
        if known.weight <= min(self._tenants.quota, self.max_bytes):  # else every request works on all
            self._put(key, known)

    def _put(self, key: Key, known: Known) -> None:
        self._copies[key] = known
        name = _name(key)
        self._names[name] = key
        known.charged_to(functools.partial(self._grew, key))
        self.bytes += known.weight
        self._settle(key, known)

    def _grew(self, key: Key, size: int) -> None:
        """What ``key``'s conversation knows grew by ``size`` (a stage kept something for its next
        request): charged, and what that pushes past the bounds goes."""
        known = self._copies.get(key)
        if known is not None:
            self.bytes += size
            self._settle(key, known)

    def _settle(self, key: Key, known: Known) -> None:
        """``key``'s conversation charged what it weighs now; the least recent of its tenant's, then of
        all, go while over the bounds."""
        for gone in self._tenants.charge(key[0], _name(key), known.weight):
            self._drop(self._names[gone])
        while self.bytes > self.max_bytes and self._copies:
            self._drop(next(iter(self._copies)))

    def _refresh(self, key: Key) -> None:
        """``key``'s conversation is now the most recent one, in all and of its tenant."""
        self._copies.move_to_end(key)
        self._tenants.refresh(_name(key))

    def _drop(self, key: Key) -> None:
        known = self._copies.pop(key, None)
        if known is None:
            return
        known.charged_to(None)
        self.bytes -= known.weight
        name = _name(key)
        self._names.pop(name, None)
        self._tenants.release(name)


def _resized(kept: Sequence[T], count: int, length: int, fill: T) -> list[T]:
    """``kept``'s first ``count``, then ``fill`` up to ``length``."""
    return [*kept[:count], *[fill] * (length - count)]


def _still(commands: tuple[int, ...], count: int, unseen: Sequence[int]) -> list[int]:
    """Where the last request's ``/compact`` entries are that this one sends the same (mostly none)."""
    if not commands:
        return []
    changed = set(unseen)
    return [index for index in commands if index < count and index not in changed]


def _name(key: Key) -> bytes:
    """What the tenant ledger knows a conversation by."""
    return repr(key).encode("utf-8", "surrogatepass")

"""What the provider reported of a conversation's requests: one note per conversation, judged only
against its own.

A note keeps the last request's input by cache kind (its prompt cache's warmth, for cost-aware
timing: ``core.economics``), what we forwarded for it (our count), and the bills the conversation's
count ratio and the judging of its next bill rest on (``core.calibration``, ``core.evidence``): the
first, the last and the one before it.

Bills are set against each other only along one conversation: never another one that happens to
begin the same way (every Codex session of a repository opens with its AGENTS.md and environment
context; sub-agents share a prompt), and only where the earlier request is a prefix of this one. So
each note says which requests it follows (``Lineage``): the client's entries it was sent after, and
what we forwarded — each as a length and a digest of its fingerprints (``Prefix``). A key holds up
to ``THREADS`` notes (``Notes``); a request reads the one whose client entries it extends, and its
bill continues that note's bills only where what we forwarded extends what was billed before
(after a compaction or a clearing batch, the note's bills start again from it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

import xxhash

from compact_hook.core.calibration import Billed
from compact_hook.core.fingerprint import Fingerprint

GROWTH_WEIGHT = 0.25
"""How much the latest request's growth counts in the smoothed growth per request."""
THREADS = 4
"""Notes kept under one key: conversations that begin alike (sub-agents of one prompt, a task run
again), the least recently heard going first."""
FIELDS = 16
"""A note's fields as the store keeps them."""
HEAD = 2
"""A note whose last request changed its last entry is still found by the conversation's next request
(``Notes.of``) when what stays holds more than the task: conversations that share only their first
entry are others'."""
"""A note's fields as the store keeps them."""


class Warmth(Enum):
    """What the provider's prompt cache holds of a conversation, as its reports tell us."""

    WARM = "warm"
    """It cached the prefix and the last request was within its lifetime: the next one reads it."""
    COLD = "cold"
    """It cached it, but the lifetime has run out: the next request writes it all again anyway."""
    UNCACHED = "uncached"
    """It reports no caching for this conversation: every turn pays full input price."""
    UNKNOWN = "unknown"
    """Nothing reported yet."""


@dataclass(frozen=True, slots=True)
class Prefix:
    """A request's entries as a length and a digest of their fingerprints."""

    length: int = 0
    digest: bytes = b""

    @classmethod
    def of(cls, prints: Sequence[Fingerprint]) -> Prefix:
        return cls(len(prints), _digest(prints))

    def begins(self, prints: Sequence[Fingerprint]) -> bool:
        """``prints`` hold these entries first (the same, or more after them)."""
        return self.length <= len(prints) and _digest(prints[: self.length]) == self.digest

    def to_text(self) -> str:
        return f"{self.length}:{self.digest.hex()}"

    @classmethod
    def from_text(cls, text: str) -> Prefix:
        length, _, digest = text.partition(":")
        return cls(int(length), bytes.fromhex(digest))


ANY = Prefix(0, b"")
"""No entries: any request extends them."""


def _digest(prints: Sequence[Fingerprint]) -> bytes:
    return xxhash.xxh3_128_digest(b"".join(prints)) if prints else b""


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a billed request stands: the client's entries (their fingerprints) and what we forwarded."""

    client: Sequence[Fingerprint] = ()
    sent: Sequence[Fingerprint] = ()


@dataclass(frozen=True, slots=True)
class CacheNote:
    """The provider's report of a conversation's last request — when, its input by cache kind —
    with what we forwarded for it (our count), how fast that has been growing per request, and the
    conversation's bills since what we forward last changed."""

    seen_at: float
    read: int = 0
    written: int = 0
    uncached: int = 0
    requests: int = 1
    cached_ever: bool = False
    """The provider has cached this conversation (this report, or an earlier one, says so)."""
    forwarded: int = 0
    growth: float = 0.0
    """Tokens the forwarded request grows by per request, smoothed; 0 until two were heard."""
    first_billed: int = 0
    first_forwarded: int = 0
    """The first request heard since what we forward last changed: the provider's count of it and
    ours. Set against the last, what the conversation grew by cost at the provider
    (``core.calibration``), and whether its bill grows from below its fixed part
    (``core.evidence.leaves_out_fixed``)."""
    describes: bool = True
    """The last report's usage described the prompt (``core.evidence``): its bill counts the
    conversation. False: it was set aside, and the group's (or the prior's) ratio counts it."""
    before_billed: int = 0
    before_forwarded: int = 0
    """The request before the last, along the same prefix (0: none): three bills tell a ceiling
    (the same bill whatever was new) from a left-out cache (a bill that moves with what was new)."""
    client: Prefix = ANY
    """The client's entries the last request was sent with: the conversation's next request extends them."""
    client_head: Prefix = ANY
    """The same but the last of them: a client may change its last entry on its next turn (text added
    to a tool result's message, a reminder replaced), and is still the same conversation."""
    sent: Prefix = ANY
    """What we forwarded for it: the next bill continues these bills only where this is its prefix."""

    def __post_init__(self) -> None:
        if self.read > 0 or self.written > 0:
            object.__setattr__(self, "cached_ever", True)

    @property
    def billed(self) -> int:
        """The provider's count of the request's input (``forwarded`` is ours)."""
        return self.read + self.written + self.uncached

    @property
    def last(self) -> Billed:
        return Billed(self.billed, self.forwarded)

    @property
    def first(self) -> Billed | None:
        return Billed(self.first_billed, self.first_forwarded) if self.first_billed > 0 else None

    @property
    def before(self) -> Billed | None:
        return Billed(self.before_billed, self.before_forwarded) if self.before_billed > 0 else None

    def warmth(self, now: float, ttl: float) -> Warmth:
        if self.cached_ever and now - self.seen_at > ttl:
            return Warmth.COLD
        if self.cached_ever:
            return Warmth.WARM
        return Warmth.UNCACHED if self.requests >= 2 else Warmth.UNKNOWN

    def after(self, seen_at: float, heard: Heard, lineage: Lineage) -> CacheNote:
        """This note updated by the next report. A request smaller than the last (we changed its
        prefix) says nothing of growth; a larger one is averaged in. Its bills continue these where
        what we forwarded extends what was billed last, else they start again from it."""
        delta = heard.forwarded - self.forwarded
        growth = self.growth
        if delta >= 0:
            growth = float(delta) if growth == 0 else GROWTH_WEIGHT * delta + (1 - GROWTH_WEIGHT) * growth
        cached = self.cached_ever or heard.read > 0 or heard.written > 0
        moved = replace(
            heard.first(seen_at, lineage), requests=self.requests + 1, cached_ever=cached, growth=growth
        )
        if not self.sent.begins(lineage.sent):
            return moved
        before = self.last if self.billed > 0 else Billed(0, 0)
        first = self.first or heard.billed_as
        return replace(
            moved,
            first_billed=first.billed,
            first_forwarded=first.counted,
            before_billed=before.billed,
            before_forwarded=before.counted,
        )

    def to_text(self) -> str:
        """The note as the store keeps it (``from_text`` reads it back): written on every response."""
        return (
            f"{self.seen_at},{self.read},{self.written},{self.uncached},{self.requests},"
            f"{int(self.cached_ever)},{self.forwarded},{round(self.growth, 1)},{self.first_billed},"
            f"{self.first_forwarded},{int(self.describes)},{self.before_billed},{self.before_forwarded},"
            f"{self.client.to_text()},{self.client_head.to_text()},{self.sent.to_text()}"
        )

    @classmethod
    def from_text(cls, text: str) -> CacheNote | None:
        """None for anything that is not a note we wrote. (Earlier releases kept a note per key, not
        these records: an upgrade starts each conversation's bills again, once.)"""
        parts = text.split(",")
        if len(parts) != FIELDS:
            return None
        try:
            numbers, (client, head, sent) = parts[:13], map(Prefix.from_text, parts[13:])
            seen_at, read, written, uncached, requests, cached, forwarded, growth = numbers[:8]
            first, first_ours, says, before, before_ours = numbers[8:]
            return cls(
                float(seen_at),
                int(read),
                int(written),
                int(uncached),
                int(requests),
                cached == "1",
                int(forwarded),
                float(growth),
                int(first),
                int(first_ours),
                says == "1",
                int(before),
                int(before_ours),
                client,
                head,
                sent,
            )
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Heard:
    """One request's report: its input by cache kind (the provider's), and what we forwarded (ours)."""

    read: int
    written: int
    uncached: int
    forwarded: int
    describes: bool = True
    """Its usage describes the prompt (``core.evidence``)."""

    @property
    def billed(self) -> int:
        return self.read + self.written + self.uncached

    @property
    def billed_as(self) -> Billed:
        return Billed(self.billed, self.forwarded)

    def first(self, seen_at: float, lineage: Lineage = Lineage()) -> CacheNote:
        """The note of a conversation whose bills start with this one."""
        return CacheNote(
            seen_at,
            self.read,
            self.written,
            self.uncached,
            forwarded=self.forwarded,
            first_billed=self.billed,
            first_forwarded=self.forwarded,
            describes=self.describes,
            client=Prefix.of(lineage.client),
            client_head=Prefix.of(lineage.client[:-1]),
            sent=Prefix.of(lineage.sent),
        )


@dataclass(frozen=True, slots=True)
class Notes:
    """The notes kept under one key (``THREADS`` at most, the most recently heard first)."""

    notes: tuple[CacheNote, ...] = ()

    def of(self, client: Sequence[Fingerprint]) -> CacheNote | None:
        """The note of the conversation whose last request ``client``'s entries extend — or extend but
        for its last entry, where none does whole and they share more than the task (the longest,
        then the most recently heard)."""
        found = self._extended(client)
        if found is not None:
            return found
        changed = (n for n in self.notes if n.client_head.length >= HEAD and n.client_head.begins(client))
        return max(changed, key=_longest, default=None)

    def _extended(self, client: Sequence[Fingerprint]) -> CacheNote | None:
        return max((n for n in self.notes if n.client.begins(client)), key=_longest, default=None)

    def heard(self, seen_at: float, heard: Heard, lineage: Lineage) -> tuple[Notes, CacheNote]:
        """These notes with a report of the request at ``lineage``, and its conversation's note now:
        the note it extends whole, else a note of its own (one that changed its last entry, or began
        like another, is not merged into it)."""
        found = self._extended(lineage.client)
        note = found.after(seen_at, heard, lineage) if found is not None else heard.first(seen_at, lineage)
        others = tuple(n for n in self.notes if n is not found)
        return Notes((note, *others)[:THREADS]), note

    def to_text(self) -> str:
        return "\n".join(note.to_text() for note in self.notes)

    @classmethod
    def from_text(cls, text: str) -> Notes:
        """What could be read of a record we wrote (nothing of what is not one)."""
        found = (CacheNote.from_text(line) for line in text.splitlines()[:THREADS])
        return cls(tuple(note for note in found if note is not None))


def _longest(note: CacheNote) -> tuple[int, float]:
    return note.client.length, note.seen_at

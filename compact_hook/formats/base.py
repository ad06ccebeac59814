"""What a wire format adapter is, and what it hands the engine.

An adapter parses a request body into a ``Conversation`` (the entries, what else the model
reads, the output reserve) and renders the engine's result back into the body. Between the
two the engine sees only core ``Item``s; the adapter also builds the few items we ever
create (``core.items.Builder``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, overload

import orjson

from compact_hook.core.counting import Strings, item_strings
from compact_hook.core.fingerprint import Fingerprint, fingerprint
from compact_hook.core.items import Builder, Item, Placement, Role
from compact_hook.core.outcomes import Reason
from compact_hook.errors import MalformedError

TOOL_OVERHEAD = 8
"""Framing tokens per tool definition, beside its JSON (name, description, schema)."""


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

    def parse(self, data: dict[str, Any]) -> Conversation | Rejected:
        """The request as the engine sees it, or why it must pass through untouched."""
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
    summary_mark: dict[str, Any] | None = None
    """A prompt-cache breakpoint for our summary (Anthropic, when the client uses them)."""
    turn_opens_with_thinking: bool = False
    """The model thinks at the start of each turn and the provider refuses a tool turn in progress
    that does not open with that thinking (Anthropic, ``thinking`` enabled, models that run no
    prefix check): a compaction keeps the turn's opening unit."""
    tail: list[Any] = field(default_factory=list)
    """The client's last turn: the entries after the last non-assistant one (a prefill, a call
    under review). Forwarded as sent after everything else and counted as what the model reads;
    the engine never reads or changes them (``client_turn_apart``)."""
    _items: list[Item | None] = field(default_factory=list, repr=False)

    def item(self, index: int) -> Item:
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
        digest = hashlib.blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        self.tenant_seed = int.from_bytes(digest, "big") & ~0xF  # low bits stay the formats'

    @property
    def seed(self) -> int:
        return self.wire.seed ^ self.tenant_seed

    def fingerprint(self, entry: Any) -> Fingerprint:
        """The fingerprint of an entry of this conversation (one the client sent, or one we built)."""
        return fingerprint(entry, self.seed)

    def prints(self) -> list[Fingerprint]:
        seed = self.seed
        return [fingerprint(entry, seed) for entry in self.entries]

    def tail_prints(self) -> list[Fingerprint]:
        seed = self.seed
        return [fingerprint(entry, seed) for entry in self.tail]

    def context_prints(self) -> list[Fingerprint]:
        seed = self.seed ^ 1
        return [fingerprint(part, seed) for part in self.context]


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


Missing = TypeVar("Missing")


def answers_after(
    unit: Sequence[Item],
    missing: Mapping[int, Missing],
    carry: Callable[[Item, Item | None, Missing], Item],
) -> list[Item]:
    """The unit's items, each model item with unanswered calls (``missing``, by offset) followed by
    the user item that answers them: ``carry(model item, the user item after it or None, what is
    missing)`` — the next item rebuilt with the answers, or a new one (the formats whose results
    travel in the user's next message: Anthropic, Google)."""
    out: list[Item] = []
    index = 0
    while index < len(unit):
        item = unit[index]
        out.append(item)
        index += 1
        if index - 1 not in missing:
            continue
        following = unit[index] if index < len(unit) and unit[index].role is not Role.ASSISTANT else None
        out.append(carry(item, following, missing[index - 1]))
        index += following is not None
    return out


def context_strings(value: Any) -> Strings:
    """The strings of a context value: text as is; a tool definition or schema as compact JSON.

    Tool definitions reach the model re-rendered by the provider; their JSON is a close,
    slightly generous stand-in (documented as an estimate). A list (of tools, of system
    blocks) is read one level deep.
    """
    strings: list[str] = []
    fixed = 0
    for entry in value if isinstance(value, list) else [value]:
        if isinstance(entry, str):
            strings.append(entry)
        elif isinstance(entry, dict) and entry.get("type") == "text" and isinstance(entry.get("text"), str):
            strings.append(entry["text"])
        else:
            strings.append(compact_json(entry))
            fixed += TOOL_OVERHEAD
    return strings, fixed


def compact_json(value: Any) -> str:
    """Compact JSON text of a wire value (what the model reads of a tool's input, say): orjson, or
    the standard library for what orjson refuses (lone surrogates, huge integers)."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        pass
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except RecursionError as exc:
        raise MalformedError("a value is nested too deeply to read") from exc


def positive_int(data: Mapping[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` holding a positive integer (an output reserve)."""
    for key in keys:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@dataclass(frozen=True, slots=True)
class EntryShape:
    """What each entry of a format's list must be before we read it: an object with one of
    ``roles``, holding under ``key`` a list of objects (or, where ``text`` allows it, a string)."""

    roles: Collection[str]
    key: str
    text: bool = False

    def problem(self, entry: object) -> str | None:
        """What is wrong with ``entry`` (None: nothing)."""
        if not isinstance(entry, dict):
            return f"is {type(entry).__name__}, not an object"
        role = entry.get("role")
        if role not in self.roles:
            return f"role is {role!r}, not {', '.join(sorted(self.roles))}"
        children = entry.get(self.key)
        if self.text and isinstance(children, str):
            return None
        if not isinstance(children, list):
            return f"{self.key} is {type(children).__name__}, not a list"
        if not all(isinstance(child, dict) for child in children):
            return f"{self.key} has an entry that is not an object"
        return None


def shape_rejected(data: Mapping[str, Any], key: str, shape: EntryShape) -> Rejected | None:
    """Why the request's ``key`` list cannot be read (not a list, or an entry not of ``shape``),
    as the rejection that passes it through untouched; None when it can."""
    entries = data.get(key)
    if not isinstance(entries, list):
        return Rejected(Reason.MALFORMED, f"{key} is {type(entries).__name__}, not a list")
    problem = problem_in(entries, shape.problem)
    return None if problem is None else Rejected(Reason.MALFORMED, f"{key}{problem}")


def problem_in(entries: Sequence[Any], check: Any) -> str | None:
    """The first entry ``check`` finds fault with, as ``"<key>[i]: why"`` text, or None."""
    for index, entry in enumerate(entries):
        problem = check(entry)
        if problem is not None:
            return f"[{index}]: {problem}"
    return None


MAX_INLINE_URL = 200


def media_location(part: dict[str, Any]) -> str:
    """Where an image or file lives, for the transcript (inline data is only described)."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        source = part.get("source")
        url = source.get("url") if isinstance(source, dict) else None
    if not isinstance(url, str):
        return "inline"
    if url.startswith("data:"):
        return f"inline data, {len(url)} characters"
    return url if len(url) <= MAX_INLINE_URL else url[:MAX_INLINE_URL] + "..."

"""The core's picture of a conversation: items made of parts, whatever the wire format.

A wire format (``compact_hook.wires``) parses each entry the client sent — a chat
message, an Anthropic message, a Responses input item — into one ``Item``. Its ``parts``
are what the core reasons about: text, a tool call, a tool result, reasoning, media,
or something opaque. The core never reads a wire field. Every item keeps the object it
was parsed from (``raw``), so whatever the core keeps is forwarded exactly as the client
sent it; only the summary, placeholders, truncated outputs and synthetic results are new,
and the format builds them (``Builder``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from compact_hook.core.fingerprint import Fingerprint

if TYPE_CHECKING:
    pass

SUMMARY_PREFIX = "[compact_hook summary] The earlier part of this conversation was compacted. Summary:"
"""Every summary starts with this, so later passes recognise (and merge) it."""

INTERRUPT_MARKERS = ("<turn-aborted>", "<turn_aborted>", "[Request interrupted by user")
"""Text that marks an interrupted turn (Codex, Claude Code). Only user-authored text counts."""


class Role(enum.Enum):
    """Who an item speaks for."""

    SYSTEM = "system"
    """Instructions: chat system/developer messages, Responses system/developer items."""
    USER = "user"
    """The user's turn; in Anthropic it also carries the tool results of the previous turn."""
    ASSISTANT = "assistant"
    """The model's turn: text, reasoning, tool calls."""
    TOOL = "tool"
    """An entry that only carries tool results (chat ``tool``, Responses ``function_call_output``)."""
    OTHER = "other"
    """An entry the format does not understand: kept whole, in place, never summarized."""


class Placement(enum.Enum):
    """Where a format allows an instruction (system) item after the head."""

    ANYWHERE = "anywhere"
    """Chat and Responses: a system or developer message may stand anywhere."""
    AFTER_USER = "after_user"
    """Anthropic: a ``system`` entry must follow a user turn and be last or followed by an
    assistant turn (consecutive ones form one section); never the first entry."""


class PartKind(enum.Enum):
    TEXT = "text"
    CALL = "call"
    RESULT = "result"
    THINKING = "thinking"
    MEDIA = "media"
    OPAQUE = "opaque"


@dataclass(slots=True)
class Part:
    """One piece of an item.

    ``text``: what the model reads — the words (TEXT, THINKING), the arguments (CALL),
    the output (RESULT), where the media lives (MEDIA), or the JSON of something we do not
    understand (OPAQUE). ``name``: the tool of a CALL, or of a RESULT where the format
    names it. ``call_id`` pairs a RESULT with its CALL ("" when the format has none).
    ``fixed_tokens``: a cost that is not text (images, encrypted reasoning), estimated by
    the format. ``error``: the client flagged the result as a failure.

    Treated as immutable, but not ``frozen``: hundreds are built per request, and a frozen
    dataclass takes 3x as long to construct (~0.8 µs against ~0.25 µs).
    """

    kind: PartKind
    text: str = ""
    name: str = ""
    call_id: str = ""
    fixed_tokens: int = 0
    error: bool = False


@dataclass(slots=True)
class Item:
    """One entry of the conversation, as the core sees it.

    ``joins_turn``: this format spreads one model turn over several entries (Responses:
    reasoning, message and function calls are separate items), so consecutive assistant
    items marked so belong to one unit. ``name``: a label the model reads (chat ``name``).
    Treated as immutable (not ``frozen`` for speed, like ``Part``).
    """

    role: Role
    parts: tuple[Part, ...]
    raw: Any
    name: str = ""
    joins_turn: bool = False

    @property
    def has_calls(self) -> bool:
        return any(part.kind is PartKind.CALL for part in self.parts)

    @property
    def has_results(self) -> bool:
        return any(part.kind is PartKind.RESULT for part in self.parts)

    @property
    def is_summary(self) -> bool:
        """A summary we inserted earlier: a user item, but not the user's words."""
        return (
            self.role is Role.USER
            and bool(self.parts)
            and self.parts[0].kind is PartKind.TEXT
            and self.parts[0].text.startswith(SUMMARY_PREFIX)
        )

    @property
    def is_user_turn(self) -> bool:
        """The user speaking: a user item that is neither our summary nor a tool-result carrier."""
        return self.role is Role.USER and not self.has_results and not self.is_summary

    def user_text(self) -> str:
        """What the user wrote in this item (never tool outputs; empty for non-user items)."""
        return "" if self.role is not Role.USER or self.is_summary else self.text()

    def text(self) -> str:
        """The item's TEXT parts joined (prefix checks, digests)."""
        return "\n".join(part.text for part in self.parts if part.kind is PartKind.TEXT)


def summary_text(item: Item) -> str:
    """The body of a summary item (without our prefix)."""
    return item.text().removeprefix(SUMMARY_PREFIX).strip()


def summary_body(summary: str) -> str:
    """The text a format puts in the summary item it builds."""
    return f"{SUMMARY_PREFIX}\n\n{summary.strip()}"


def has_interrupt_marker(item: Item) -> bool:
    """An interrupted turn, as the user's client marked it; a tool output quoting a marker is not one."""
    text = item.user_text()
    return bool(text) and any(marker in text for marker in INTERRUPT_MARKERS)


def head_length(items: Sequence[Item]) -> int:
    """How many leading system items there are (the head is never summarized nor changed)."""
    return next((index for index in range(len(items)) if items[index].role is not Role.SYSTEM), len(items))


class Builder(Protocol):
    """What a wire format builds for the core: the only new content we ever forward."""

    def summary(self, text: str, mark: Mapping[str, Any] | None = None) -> Item:
        """The one user item that stands for the summarized middle (``summary_body(text)``);
        ``mark``: a prompt-cache breakpoint to put on it, where the format has them."""
        ...

    def replace_outputs(self, item: Item, outputs: Mapping[int, str], keep_media: bool) -> Item:
        """``item`` with the RESULT parts at these part indices answering ``outputs[index]``.

        ``keep_media``: keep the result's images after the new text (truncation), or not
        (clearing to a placeholder).
        """
        ...

    def replace_text(self, item: Item, texts: Mapping[int, str]) -> Item:
        """``item`` with the TEXT parts at these part indices reading ``texts[index]`` (a pinned
        message cut to its share); everything else as the client sent it."""
        ...

    def without_parts(self, item: Item, indices: Sequence[int]) -> Item | None:
        """``item`` without these parts (orphan results); None when nothing is left of it."""
        ...

    def answer(self, unit: Sequence[Item], calls: Sequence[tuple[int, int]]) -> list[Item]:
        """The unit's items with a synthetic result for each unanswered call.

        ``calls`` are ``(item offset in unit, part index)``. Where the results go is the
        format's business (a chat ``tool`` message, a ``tool_result`` block in the next user
        message, a ``function_call_output`` item).
        """
        ...


class Cleared(NamedTuple):
    """An item with its old tool results shown as placeholders (tier 2), as one request built it.

    ``source`` is the item it clears and ``key`` the rest it was built from (the results and their
    tools, the settings): the conversation keeps it (``core.known.Known``), and the next request that
    clears the same item object under the same key takes it as it is — an agent's old results are
    cleared again on every turn, and building each anew made a request's cost grow with its history.
    The same object, not the same fingerprint: a fingerprint ignores a moved ``cache_control``
    marker, and an item parsed from an entry sent again unchanged is the same object
    (``core.known``)."""

    source: Item
    key: tuple[object, ...]
    shown: Mapping[int, str]
    """The placeholders, by part index."""
    item: Item
    print: Fingerprint


class ClearedRun(NamedTuple):
    """What tier 2 shows of the client's items ``start`` to ``bound`` (the old results a state clears),
    as one request built it: the items shown, their fingerprints and indices (side by side, as a view
    holds them: no tuple an item for the collector to walk), the items built for it, and how many
    results it shows cleared. The conversation keeps it (``core.known``) while its entries before
    ``bound`` are sent again unchanged: between two clearing batches every request shows the same run,
    and only what follows it is new."""

    key: tuple[object, ...]
    bound: int
    items: Sequence[Item]
    prints: Sequence[Fingerprint]
    origins: Sequence[int | None]
    made: Sequence[Item]
    cleared: int

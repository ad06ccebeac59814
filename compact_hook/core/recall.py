"""Handles on what compaction takes out, so the model can read it back.

Every tool output a placeholder replaces, truncation cuts or a summary covers is named by a
handle: a short digest of the client's own text of it. A digest, not a counter, because it
must be the same on every turn and every replica with nothing stored (a placeholder that
changed between turns would move the provider's cached prefix), and because the client keeps
sending the original: the request that asks for a handle usually holds its text. A handle
alone reveals nothing; it is looked up only among what its own conversation holds (``Originals``:
the client's own entries of the request that asks), never in a store.

What names a handle is only our own syntax, whole (``named_by_us``): a placeholder that is nothing
else (``[recall 048213]``, with the errors it kept) or a truncation marker as we write it. A client's
output that merely says ``recall 123456`` names nothing: a text is named by its own handle.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from compact_hook.core.items import Item, PartKind

HANDLE_DIGITS = 6
"""Six digits: two tokens in every tokenizer we ship, where ten base32 letters took seven — a handle
is in every placeholder and marker of a long conversation, so its size is paid on every request
(``bench/bench_cost.py``). A handle is looked up only within its conversation: in one of 1,000
outputs a recalled handle is shared with another output once in 1,000 recalls, and then the answer
gives both (``Originals``) — a few more bytes, never the wrong text alone."""
MENTION = "recall {handle}"
"""How a placeholder, a truncation marker or a summary names a handle (and the tool's argument)."""
MENTIONED = re.compile(rf"\brecall (\d{{{HANDLE_DIGITS}}})\b")
ASKED = re.compile(rf"\s*(?:recall:?\s*)?(\d{{1,{HANDLE_DIGITS}}})\s*")
"""A handle as a model may write it in a recall call (``handle_in``)."""

TOOL_NAME = "compact_recall"
TOOL_DESCRIPTION = (
    "Read back word for word an output cleared (shown as [recall <number>]), cut or summarized, "
    "by its number after 'recall'."
)
"""Short: the definition is in every request's prefix (the words a model needs, where the ids are
named by every placeholder, marker and summary that shows one)."""
ARGUMENT = "id"


SHARED = "[output {n} of {count} with this id, from {tool}]\n"


def handle_of(text: str) -> str:
    """The handle of an original text: six decimal digits of its digest."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return f"{int.from_bytes(digest, 'big') % 10**HANDLE_DIGITS:0{HANDLE_DIGITS}d}"


def handle_in(argument: object) -> str:
    """The handle a recall call asks for, as a model writes it: ``048213``, ``48213`` (a number,
    its zeros lost), ``recall 048213``; "" when there is none."""
    if isinstance(argument, int) and not isinstance(argument, bool) and 0 <= argument < 10**HANDLE_DIGITS:
        return f"{argument:0{HANDLE_DIGITS}d}"
    digits = ASKED.fullmatch(argument) if isinstance(argument, str) else None
    return digits.group(1).zfill(HANDLE_DIGITS) if digits else ""


def mention(text: str) -> str:
    """``recall <handle>`` for an original text."""
    return MENTION.format(handle=handle_of(text))


def mentioned(text: str) -> list[str]:
    """The handles a text mentions (a summary, a model's reply), in order, once each."""
    return list(dict.fromkeys(MENTIONED.findall(text)))


OUR_PLACEHOLDER = re.compile(rf"\[recall (\d{{{HANDLE_DIGITS}}})(?:; it reported: .*)?\]", re.DOTALL)
"""A cleared output as ``core.clearing`` shows it, the whole text."""
OUR_MARKER = re.compile(
    rf"\n…\d+ \w+ truncated(?:; the full \w+ had \d+ lines)?; recall (\d{{{HANDLE_DIGITS}}})…\n"
)
"""A truncation marker as ``core.truncate.marker`` writes it."""


def named_by_us(text: str) -> str | None:
    """The handle our own placeholder (the whole text) or truncation marker in ``text`` names; None
    for anything else, ``recall 123456`` in a client's output included (then the text is named by its
    own handle, ``handle_of``)."""
    whole = OUR_PLACEHOLDER.fullmatch(text)
    found = whole or OUR_MARKER.search(text)
    return found.group(1) if found else None


def tool_name(client_tools: Collection[str]) -> str:
    """Our tool's name: ``compact_recall``, or, if the client has a tool of that name, the first
    ``compact_recall_<n>`` it does not (ours gives way; the client's tool is the client's)."""
    if TOOL_NAME not in client_tools:
        return TOOL_NAME
    return next(
        f"{TOOL_NAME}_{n}" for n in range(2, len(client_tools) + 3) if f"{TOOL_NAME}_{n}" not in client_tools
    )


def tool_parameters() -> dict[str, object]:
    """The JSON schema of the tool's one argument (the same on every wire)."""
    return {
        "type": "object",
        "properties": {ARGUMENT: {"type": "string"}},
        "required": [ARGUMENT],
    }


@dataclass(frozen=True, slots=True)
class Original:
    """A text compaction may take out, and the tool it came from ("" for a message)."""

    text: str
    tool: str = ""


class Originals:
    """The texts a request holds, by handle: its tool outputs, as the client sent them.

    Built only when a recall is asked for (never on the path of a request that asks nothing).
    Two different outputs under one handle (``HANDLE_DIGITS``: rare) are both given, each under a
    line saying so — never one of them as if it were the only one."""

    def __init__(self, found: dict[str, dict[str, Original]]) -> None:
        self._found = found

    @classmethod
    def of(cls, items: Iterable[Item], tool_of: dict[tuple[int, int], str]) -> Originals:
        found: dict[str, dict[str, Original]] = {}
        for original in _outputs(items, tool_of):
            found.setdefault(handle_of(original.text), {}).setdefault(original.text, original)
        return cls(found)

    def get(self, handle: str) -> Original | None:
        same = list(self._found.get(handle, {}).values())
        if len(same) <= 1:
            return same[0] if same else None
        shown = (
            SHARED.format(n=n, count=len(same), tool=o.tool or "tool") + o.text for n, o in enumerate(same, 1)
        )
        return Original("\n".join(shown), same[0].tool)

    def items(self) -> Iterable[tuple[str, Original]]:
        return ((handle, original) for handle, same in self._found.items() for original in same.values())


def _outputs(items: Iterable[Item], tool_of: dict[tuple[int, int], str]) -> Iterator[Original]:
    for index, item in enumerate(items):
        for position, part in enumerate(item.parts):
            if part.kind is PartKind.RESULT and part.text:
                yield Original(part.text, tool_of.get((index, position), part.name))

"""Handles on what compaction takes out, so the model can read it back.

Every tool output a placeholder replaces, truncation cuts or a summary covers is named by a
handle: a short digest of the client's own text of it. A digest, not a counter, because it
must be the same on every turn and every replica with nothing stored (a placeholder that
changed between turns would move the provider's cached prefix), and because the client keeps
sending the original: the request that asks for a handle usually holds its text. A handle
alone reveals nothing; it is looked up only among what its own conversation holds (``Originals``),
then in its tenant's and conversation's store records.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from compact_hook.core.items import Item, PartKind

HANDLE_BYTES = 6
"""48 bits: two outputs of one conversation collide once in ~10^10 pairs."""
HANDLE = re.compile(r"\br[a-z2-7]{10}\b")
MENTION = "recall: {handle}"
"""How a placeholder, a truncation marker or a summary names a handle (and the tool's argument)."""
MENTIONED = re.compile(r"recall: (r[a-z2-7]{10})\b")

TOOL_NAME = "compact_recall"
TOOL_DESCRIPTION = "Read back the exact text of an output shortened or summarized away, by its recall id."
"""Short: the definition is in every request's prefix (the words a model needs, where the ids are
named by every placeholder, marker and summary that shows one)."""
ARGUMENT = "id"
ARGUMENT_DESCRIPTION = "The id after 'recall:' (r2x7kq4mzaa)."


def handle_of(text: str) -> str:
    """The handle of an original text: ``r`` and ten base32 letters of its digest."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=HANDLE_BYTES).digest()
    return "r" + base64.b32encode(digest).decode("ascii").lower()[:10]


def mention(text: str) -> str:
    """``recall: <handle>`` for an original text."""
    return MENTION.format(handle=handle_of(text))


def mentioned(text: str) -> list[str]:
    """The handles a text names (a placeholder, a marker, a summary), in order, once each."""
    return list(dict.fromkeys(MENTIONED.findall(text)))


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
        "properties": {ARGUMENT: {"type": "string", "description": ARGUMENT_DESCRIPTION}},
        "required": [ARGUMENT],
    }


@dataclass(frozen=True, slots=True)
class Original:
    """A text compaction may take out, and the tool it came from ("" for a message)."""

    text: str
    tool: str = ""


class Originals:
    """The texts a request holds, by handle: its tool outputs, as the client sent them.

    Built only when a recall is asked for (never on the path of a request that asks nothing)."""

    def __init__(self, found: dict[str, Original]) -> None:
        self._found = found

    @classmethod
    def of(cls, items: Iterable[Item], tool_of: dict[tuple[int, int], str]) -> Originals:
        return cls({handle_of(o.text): o for o in _outputs(items, tool_of)})

    def get(self, handle: str) -> Original | None:
        return self._found.get(handle)

    def items(self) -> Iterable[tuple[str, Original]]:
        return self._found.items()


def _outputs(items: Iterable[Item], tool_of: dict[tuple[int, int], str]) -> Iterator[Original]:
    for index, item in enumerate(items):
        for position, part in enumerate(item.parts):
            if part.kind is PartKind.RESULT and part.text:
                yield Original(part.text, tool_of.get((index, position), part.name))

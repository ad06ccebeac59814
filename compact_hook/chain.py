"""Remembered compactions, as pure values: scope, prefix hash chain, entries, splicing.

The client never learns that we compacted: next turn it sends the original history again
plus new messages. A compaction is therefore stored under the hash of the *original*
prefix it replaced, and every request splices the longest stored prefix back in:

    chain[0] = scope (version, tokenizer, prompt, settings, model, tenant)
    chain[i] = H(chain[i-1] || fingerprint(message[i-1]))

``chain[k]`` names ``messages[:k]`` within one scope, so entries of one tenant or one
setting never match another's. H is BLAKE2b, so no crafted history can collide into
another tenant's key; the per-message fingerprints only need to be fast.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compact_hook.assemble import summary_message
from compact_hook.config import CompactConfig
from compact_hook.fingerprint import Fingerprint, fingerprint
from compact_hook.messages import Message
from compact_hook.partition import head_length
from compact_hook.summarize import PROMPT_VERSION

STATE_VERSION = "1"
"""Bump when the meaning of a stored entry changes: old entries then simply stop matching."""

SCOPE_SETTINGS = (
    "context_window",
    "trigger_ratio",
    "tail_retention_ratio",
    "summary_model",
    "summary_max_tokens",
    "summary_context_window",
    "tokenizer",
)


def scope_of(config: CompactConfig, model: str, tenant: str) -> bytes:
    """Everything that changes what a compaction looks like, plus who may reuse it."""
    settings = {name: getattr(config, name) for name in SCOPE_SETTINGS}
    label = json.dumps(
        ["compact_hook", STATE_VERSION, PROMPT_VERSION, model, tenant, settings], sort_keys=True
    )
    return hashlib.blake2b(label.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def prefix_chain(scope: bytes, prints: Sequence[Fingerprint]) -> list[bytes]:
    """``chain[k]`` for k = 0..len(prints): one short hash per message, O(messages)."""
    chain = [scope]
    current = scope
    for print_ in prints:
        current = hashlib.blake2b(current + print_, digest_size=16).digest()
        chain.append(current)
    return chain


def root_position(messages: Sequence[Message]) -> int:
    """Prefix length that identifies a conversation: the head plus its first other message.

    Agents share system prompts; the first message after them (the task) tells their
    conversations apart, so stored compactions are indexed per root.
    """
    return min(len(messages), head_length(messages) + 1)


@dataclass(frozen=True, slots=True)
class Entry:
    """One remembered compaction of ``original[:covered]``.

    The replacement is ``[original[i] for i in keep] + [summary message]``: kept messages are
    referenced by index, not stored, so they come from the client's own request every time.
    """

    covered: int
    keep: tuple[int, ...]
    summary: str

    def to_json(self) -> str:
        return json.dumps({"covered": self.covered, "keep": list(self.keep), "summary": self.summary})

    @classmethod
    def from_json(cls, text: str | bytes) -> Entry:
        data: Any = json.loads(text)
        return cls(int(data["covered"]), tuple(int(i) for i in data["keep"]), str(data["summary"]))


@dataclass(frozen=True, slots=True)
class View:
    """The history as we will treat it: messages, their fingerprints, and where each came from.

    ``origins[i]`` is the index in the client's list of ``messages[i]``, or None for a
    summary we inserted.
    """

    messages: list[Message]
    prints: list[Fingerprint]
    origins: list[int | None]

    @classmethod
    def of(cls, messages: Sequence[Message], prints: Sequence[Fingerprint]) -> View:
        return cls(list(messages), list(prints), list(range(len(messages))))

    @property
    def spliced_prefix(self) -> int:
        """Length of the replacement prefix (0 when nothing was spliced in)."""
        last_synthetic = max((i for i, origin in enumerate(self.origins) if origin is None), default=-1)
        return last_synthetic + 1


def splice(messages: Sequence[Message], prints: Sequence[Fingerprint], entry: Entry) -> View:
    """``[original[i] for i in keep] + [summary] + original[covered:]``, deterministically."""
    summary = summary_message(entry.summary)
    kept = list(entry.keep)
    return View(
        messages=[*(messages[i] for i in kept), summary, *messages[entry.covered :]],
        prints=[*(prints[i] for i in kept), fingerprint(summary), *prints[entry.covered :]],
        origins=[*kept, None, *range(entry.covered, len(messages))],
    )


def entry_is_usable(entry: Entry, length: int) -> bool:
    """An entry read from a shared store is checked before its indices are trusted."""
    return 0 < entry.covered <= length and all(0 <= i < entry.covered for i in entry.keep)

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
from functools import lru_cache
from typing import Any

from compact_hook.config import CompactConfig
from compact_hook.fingerprint import Fingerprint
from compact_hook.messages import Message
from compact_hook.partition import head_length
from compact_hook.summarize import PROMPT_VERSION

STATE_VERSION = "2"
"""Bump when the meaning of a stored entry changes: old entries then simply stop matching."""

SCOPE_SETTINGS = (
    "context_window",
    "trigger_ratio",
    "tail_retention_ratio",
    "summary_model",
    "summary_max_tokens",
    "summary_context_window",
    "tokenizer",
    "tool_output_max_tokens",
    "tool_output_policy",
    "clear_tool_results",
    "clear_trigger_ratio",
    "keep_tool_results",
    "clear_at_least",
    "protected_tools",
    "user_message_budget",
)


@lru_cache(maxsize=4096)
def scope_of(config: CompactConfig, model: str, tenant: str) -> bytes:
    """Everything that changes what a compaction looks like, plus who may reuse it.

    Memoized: the hook asks on every request, and the answer only depends on these three.
    """
    settings = {name: getattr(config, name) for name in SCOPE_SETTINGS}
    settings["protected_tools"] = sorted(config.protected_tools)
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
    """The remembered state of a conversation's prefix ``original[:span]``.

    A compaction (``summary`` set) replaces ``original[:covered]`` by
    ``[original[i] for i in keep] + [summary message]``: kept messages are referenced by
    index, not stored, so they come from the client's own request every time. A clearing
    boundary (``cleared_before``) says which old tool results are shown as placeholders.
    ``summarizer`` is ``model`` or ``digest`` (made without a model).
    """

    covered: int = 0
    keep: tuple[int, ...] = ()
    summary: str | None = None
    cleared_before: int = 0
    summarizer: str = "model"

    @property
    def span(self) -> int:
        """How many of the client's messages this state is about (its key is ``chain[span]``)."""
        return max(self.covered, self.cleared_before)

    def to_json(self) -> str:
        return json.dumps(
            {
                "covered": self.covered,
                "keep": list(self.keep),
                "summary": self.summary,
                "cleared_before": self.cleared_before,
                "summarizer": self.summarizer,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Entry:
        data: Any = json.loads(text)
        summary = data.get("summary")
        return cls(
            covered=int(data["covered"]),
            keep=tuple(int(i) for i in data["keep"]),
            summary=str(summary) if summary is not None else None,
            cleared_before=int(data.get("cleared_before", 0)),
            summarizer=str(data.get("summarizer", "model")),
        )


def entry_is_usable(entry: Entry, length: int) -> bool:
    """An entry read from a shared store is checked before its indices are trusted."""
    if not 0 < entry.span <= length or entry.cleared_before < 0:
        return False
    if entry.summary is None:
        return entry.covered == 0 and not entry.keep
    return 0 < entry.covered and all(0 <= i < entry.covered for i in entry.keep)

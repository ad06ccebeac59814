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

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import Item, head_length
from compact_hook.core.outcomes import Summarizer
from compact_hook.core.pinning import Shape
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.setting import resolved, scope_settings

STATE_VERSION = "5"
"""Bump when the meaning of a stored entry changes: old entries then simply stop matching."""

SCOPE_SETTINGS = scope_settings(CompactConfig)
"""The settings declared ``scope=True``: everything that changes what a compaction looks like."""
HASHED_AS = {"tail_retention_ratio": "tail_ratio", "clear_trigger_ratio": "clear_ratio"}
"""The names these two had in the scope label before settings were declared once: renaming them
would make every stored compaction unreachable after an upgrade."""
HASHED_WHEN_SET = {"recall": False}
"""Settings added to the scope later: left at the value that stood before they existed, they are
not in the label, so an upgrade keeps every stored compaction reachable."""


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose compactions a scope holds: the model group, the tenant, and the wire format's name
    (the same entries mean different things in each)."""

    model: str
    tenant: str
    wire: str


@lru_cache(maxsize=4096)
def scope_of(config: CompactConfig, owner: Owner, prompt_version: str) -> bytes:
    """Everything that changes what a compaction looks like, plus who may reuse it.

    Not the context window: a stored compaction summarizes the same prefix whatever the window,
    and a window learned from a provider's error must not orphan every conversation's state
    (a smaller window merely compacts again, from it).

    Memoized: the hook asks on every request, and the answer only depends on these.
    """
    model, tenant, wire = owner.model, owner.tenant, owner.wire
    values = {name: resolved(config, name) for name in SCOPE_SETTINGS}
    settings = {
        HASHED_AS.get(name, name): value
        for name, value in values.items()
        if name not in HASHED_WHEN_SET or value != HASHED_WHEN_SET[name]
    }
    settings["protected_tools"] = sorted(config.protected_tools)
    label = json.dumps(
        ["compact_hook", STATE_VERSION, prompt_version, wire, model, tenant, settings], sort_keys=True
    )
    return hashlib.blake2b(label.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def prefix_chain(scope: bytes, prints: Sequence[Fingerprint], carried: Sequence[bytes] = ()) -> list[bytes]:
    """``chain[k]`` for k = 0..len(prints): one short hash per message, O(messages).

    ``carried``: a chain worked out before (its ``[0]`` the scope it was worked out under) from
    fingerprints the same as the first ``len(carried) - 1`` of ``prints`` — the conversation's last
    request's, as far as it sent its entries the same (``state.recent``): only the rest is hashed."""
    chain = list(carried[: len(prints) + 1]) if carried and carried[0] == scope else [scope]
    current = chain[-1]
    for print_ in prints[len(chain) - 1 :]:
        current = hashlib.blake2b(current + print_, digest_size=16).digest()
        chain.append(current)
    return chain


def root_position(items: Sequence[Item]) -> int:
    """Prefix length that identifies a conversation: the head plus its first other item.

    Agents share system prompts; the first item after them (the task) tells their
    conversations apart, so stored compactions are indexed per root.
    """
    return min(len(items), head_length(items) + 1)


@dataclass(frozen=True, slots=True)
class Entry:
    """The remembered state of a conversation's prefix ``original[:span]``.

    A compaction (``summary`` set) replaces ``original[:covered]`` by the items at
    ``keep`` with the summary inserted after the first ``summary_at`` of them: kept items
    are referenced by index, not stored, so they come from the client's own request every
    time. A clearing boundary (``cleared_before``) says which old tool results are shown as
    placeholders. ``summarizer`` says whether a model or the digest wrote the summary.
    ``shapes``: kept items not shown whole (pinned messages cut to their share, or their text
    alone), by index in the client's list.
    """

    covered: int = 0
    keep: tuple[int, ...] = ()
    summary: str | None = None
    cleared_before: int = 0
    summarizer: Summarizer = Summarizer.MODEL
    summary_at: int | None = None
    unarchived: tuple[int, ...] = ()
    """The client's entries this compaction summarized but could not archive (retried later)."""
    shapes: tuple[tuple[int, Shape], ...] = ()
    stale_thinking: tuple[tuple[int, int], ...] = ()
    """Ranges ``[start, end)`` of the client's entries whose thinking blocks are not forwarded:
    they were produced before we changed what precedes them (see ``unbind``)."""
    anchor: int = 0
    """A state about a fitted request's thinking alone (nothing compacted, nothing cleared) is kept
    under the conversation's start: its length (``engine.memory.states.States.unstable``)."""

    @property
    def summary_position(self) -> int:
        """How many kept items come before the summary."""
        return len(self.keep) if self.summary_at is None else self.summary_at

    @property
    def span(self) -> int:
        """How many of the client's messages this state is about (its key is ``chain[span]``)."""
        return max(self.covered, self.cleared_before, self.anchor)

    def to_json(self) -> str:
        return json.dumps(
            {
                "covered": self.covered,
                "keep": list(self.keep),
                "summary": self.summary,
                "cleared_before": self.cleared_before,
                "summarizer": self.summarizer.value,
                "summary_at": self.summary_at,
                "unarchived": list(self.unarchived),
                "shapes": [[index, shape.to_json()] for index, shape in self.shapes],
                "stale_thinking": [list(span) for span in self.stale_thinking],
                "anchor": self.anchor,
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
            summarizer=Summarizer(data.get("summarizer", "model")),
            summary_at=int(data["summary_at"]) if data.get("summary_at") is not None else None,
            unarchived=tuple(int(i) for i in data.get("unarchived", ())),
            shapes=tuple((int(index), Shape.from_json(shape)) for index, shape in data.get("shapes", ())),
            stale_thinking=tuple((int(start), int(end)) for start, end in data.get("stale_thinking", ())),
            anchor=int(data.get("anchor", 0)),
        )


OPEN_END = 2**31
"""The end of a stale range that covers every later entry too (after a request was fitted)."""
MAX_STALE_RANGES = 8


def unbind(entry: Entry, start: int, end: int) -> Entry:
    """``entry`` whose forwarded prefix changed at client entry ``start`` in a request of ``end``
    entries: every thinking block produced before (``< end``) after that point is stale.

    Anthropic checks each thinking block sent back against everything before it (system,
    tools, earlier messages). Blocks produced after the change were produced under it and stay;
    blocks before ``start`` saw an unchanged prefix and stay. Ranges below ``covered`` are
    summarized away; more than ``MAX_STALE_RANGES`` are merged (removing more is still valid).
    """
    spans = sorted(
        (max(s, entry.covered), e) for s, e in (*entry.stale_thinking, (start, end)) if e > entry.covered
    )
    merged: list[tuple[int, int]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        elif s < e:
            merged.append((s, e))
    while len(merged) > MAX_STALE_RANGES:
        gaps = [merged[k + 1][0] - merged[k][1] for k in range(len(merged) - 1)]
        k = gaps.index(min(gaps))
        merged[k : k + 2] = [(merged[k][0], merged[k + 1][1])]
    return dataclasses.replace(entry, stale_thinking=tuple(merged))


def is_stale(index: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(start <= index < end for start, end in spans)


def entry_is_usable(entry: Entry, length: int) -> bool:
    """An entry read from a shared store is checked before its indices are trusted."""
    if not 0 < entry.span <= length or entry.cleared_before < 0 or entry.anchor < 0:
        return False
    spans = entry.stale_thinking
    if len(spans) > MAX_STALE_RANGES or not all(0 <= s < e <= OPEN_END for s, e in spans):
        return False
    if entry.summary is None:
        return entry.covered == 0 and not entry.keep
    return (
        0 < entry.covered
        and all(0 <= i < entry.covered for i in (*entry.keep, *entry.unarchived))
        and all(index in entry.keep for index, _ in entry.shapes)
        and 0 <= entry.summary_position <= len(entry.keep)
    )

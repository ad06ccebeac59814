"""Codex's remote compaction ("compaction v2") served for every model.

Codex (0.162+) compacts remotely when its provider is the built-in ``openai`` one (``openai_base_url``
pointed at the proxy) or declares ``remote_compaction = "v2"``: it sends a streamed ``/v1/responses``
request whose last input item is ``{"type": "compaction_trigger"}`` and needs exactly one
``{"type": "compaction", "encrypted_content": <opaque string>}`` output item back, then
``response.completed``; anything else ends its session ("expected exactly one compaction output
item"). Later requests carry the real user messages it kept (newest first, up to ~64K tokens),
then the item verbatim, then what came after. Codex never reads ``encrypted_content``: it only
estimates its size (about ``0.75 * len / 4`` tokens), so ours is a short handle.

What we answer: the engine compacts the history before the trigger (forced, one summary call,
single flight across replicas, the originals archived) keeping as little verbatim as it can (the
turn in progress); what it would forward, less the user and system items Codex keeps or re-sends
itself, is the *memento* — our summary and that turn. Small on purpose: Codex compacts again as soon
as what it is billed reaches its own limit, and a memento near that limit would have it compact on
every turn. The memento is kept in the store (shared by replicas, expiring with the conversation's
state) under a key made of the tenant and a random handle: the handle means nothing to another
tenant and carries no text. It counts against the tenant's quota (``store_tenant_record_bytes``:
its own oldest mementos go first, never another tenant's). A request that carries our item gets it
replaced by the memento before anything else reads the request (LiteLLM's own decoders included); a
handle the store no longer holds becomes a short notice, and is reported.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compact_hook.core.items import Role
from compact_hook.core.tenancy import tenant_scoped
from compact_hook.engine.result import CompactResult
from compact_hook.settings.model import CompactConfig, revised
from compact_hook.state.store import MAX_RECORD_CHARS, CompactionStore
from compact_hook.wires.base import WireFormat
from compact_hook.wires.responses.compaction import (
    HANDLE,
    HANDLE_PREFIX,
    LOST_NOTICE,
    REFUSED_NOTICE,
    any_ours,
    is_ours,
    notice,
)

logger = logging.getLogger(__name__)

MAX_EXPANDED = 4
"""Distinct handles of ours looked up per request: Codex carries one (its newest compaction)."""
MAX_EXPANDED_CHARS = 2 * MAX_RECORD_CHARS
"""What one request's mementos may add, in all (each is a record of at most ``MAX_RECORD_CHARS``)."""


@dataclass(frozen=True, slots=True)
class Expansion:
    """What expanding a request's compaction items did: how many were ours and found, how many were
    ours and gone (expired, or another tenant's), how many were refused (a handle not of our exact
    form, a repeat, past ``MAX_EXPANDED`` or ``MAX_EXPANDED_CHARS``: one notice stands for them)."""

    expanded: int = 0
    lost: int = 0
    refused: int = 0

    @property
    def rewrote(self) -> bool:
        """The input was replaced: it held an item of ours."""
        return self.expanded + self.lost + self.refused > 0


NOTHING = Expansion()


@dataclass(frozen=True, slots=True)
class CompactionAnswer:
    """The proxy's answer to Codex's trigger: the handle it gives out, and the usage it reports."""

    handle: str
    usage: Mapping[str, int]


class Mementos:
    """Our compaction items' contents, in the store, per tenant."""

    def __init__(self, store: CompactionStore, ttl: float) -> None:
        self.store, self.ttl = store, ttl

    async def expand(
        self, data: dict[str, Any], tenant: str, among: Sequence[int] | None = None
    ) -> Expansion:
        """Replace each of our compaction items in ``data["input"]`` by what it stands for: at most
        ``MAX_EXPANDED`` distinct handles of our exact form, each looked up and parsed once, within
        ``MAX_EXPANDED_CHARS`` in all; a handle the store does not hold becomes a notice, and every
        other item of ours (a repeat, a malformed handle, one past the bounds) is left out, one notice
        in place of the first. A request of ten thousand items costs at most four lookups.

        ``among``: the only indices that may hold one of ours (None: any). The gate passes those its
        conversation's last request did not send the same (``state.recent``): that request was learned
        after its own items of ours were replaced, so an entry equal to one of its is not ours — and a
        session's hundreds of items are not looked over again on every request."""
        items = data.get("input")
        if not isinstance(items, list):
            return NOTHING
        if not any_ours(items if among is None else [items[index] for index in among]):
            return NOTHING
        found = await self._lookups(_handles(items), tenant)
        out: list[Any] = []
        expanded = lost = refused = 0
        for item in items:
            if not is_ours(item):
                out.append(item)
                continue
            handle = item["encrypted_content"]
            memento = found.pop(handle, REFUSED)  # popped: a repeat of a handle is refused
            if memento is REFUSED:
                refused += 1
                if refused == 1:
                    out.append(notice(REFUSED_NOTICE))
            elif memento is None:
                lost += 1
                out.append(notice(LOST_NOTICE))
            else:
                expanded += 1
                out.extend(memento)
        data["input"] = out
        return Expansion(expanded, lost, refused)

    async def _lookups(self, handles: list[str], tenant: str) -> dict[str, list[Any] | None]:
        """Each handle's memento (None: the store does not hold it), the first ``MAX_EXPANDED``
        distinct ones only, until ``MAX_EXPANDED_CHARS`` of text are read."""
        found: dict[str, list[Any] | None] = {}
        budget = MAX_EXPANDED_CHARS
        for handle in handles[:MAX_EXPANDED]:
            text = await self.store.get_record(_key(tenant, handle))
            if text is not None and len(text) > budget:
                break
            budget -= len(text or "")
            found[handle] = _parsed(text)
        return found

    async def keep(self, memento: list[Any], tenant: str) -> str | None:
        """A new handle for ``memento`` (None: the store could not keep it)."""
        handle = HANDLE_PREFIX + secrets.token_urlsafe(16)
        text = json.dumps(memento, ensure_ascii=False, separators=(",", ":"))
        kept = await self.store.put_record(_key(tenant, handle), text, self.ttl, tenant)
        return handle if kept else None


REFUSED: list[Any] = []
"""Stands for a handle not looked up (``Mementos._lookups``): never a memento (those are the store's)."""


def _handles(items: list[Any]) -> list[str]:
    """Our items' handles of our exact form, each once, in order."""
    handles = (item["encrypted_content"] for item in items if is_ours(item))
    return list(dict.fromkeys(handle for handle in handles if HANDLE.fullmatch(handle)))


def _parsed(text: str | None) -> list[Any] | None:
    """A memento as we wrote it; None for anything else (a record gone, or not ours)."""
    if text is None:
        return None
    try:
        memento = json.loads(text)
    except ValueError:
        return None
    return memento if isinstance(memento, list) and all(isinstance(i, dict) for i in memento) else None


MEMENTO_TAIL = 0.02
"""The share of the room kept verbatim in a memento (the engine always keeps the turn in progress)."""


def memento_settings(config: CompactConfig) -> CompactConfig:
    """The settings a Codex compaction runs under: everything but the turn in progress summarized."""
    return revised(config, tail_retention_ratio=MEMENTO_TAIL, user_message_budget=0)


def memento_of(result: CompactResult, wire: WireFormat) -> list[Any]:
    """What our compaction item stands for: the forwarded entries but the user's and the system's
    (Codex keeps the user's messages itself, before the item, and sends its instructions and
    environment again after it); our summary stays."""
    items = ((entry, wire.item(entry)) for entry in result.messages)
    return [entry for entry, item in items if item.is_summary or item.role not in (Role.USER, Role.SYSTEM)]


def _key(tenant: str, handle: str) -> bytes:
    return tenant_scoped(tenant, handle)

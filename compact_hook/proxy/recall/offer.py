"""Offering the recall tool, and keeping what answering it will need.

With ``recall`` on, every request the hook compacts for that offers the model tools of the client's is
offered ours too, from the conversation's first request on (``wires.<wire>.recall``: every wire, whole and
streamed) — not a request with no tools (a title, a plain chat: found by opencode's title request,
which the stand-in's agent then answered with our tool): its definition is the same bytes on
every turn, after the client's own tools, so the cached prefix never moves for it. Offered only once
something had been taken out, it moved once per conversation, at its first clearing or summary —
where the providers' caches hold the tools and system prompt before the messages, so the prefix
before it was written again: +1.5% and +2.1% on the priced replay under Anthropic's rules, against
+0.1% and +0.3% from the first request (``bench/bench_cost.py``). It is counted like the client's
tools: among what the model reads (``Offer.read``), so the engine fits the request with it and
reports it. A request not offered it names no handles (``proxy.request.gate``).

What the answers need (``Pending``: the client's own entries — the originals are looked up there,
never in another request —, the tenant, the budget) rides on the request itself, on our report in
its metadata (``proxy.observe.report.Report.recall``), as the report does: no map keyed by an id the client
can set (``x-litellm-call-id``), so no tenant's recall can be answered from another's conversation,
and no burst of requests in flight can push out anyone's.

A conversation's recall budget (``RecallBudget``) bounds the bytes its answers may give back while
it lives: each request's answers are bounded by the window (``recall_max_tokens``), and across
requests what they gave back is a note in the store (shared by the replicas; its life the
conversation's), read only when the model calls the tool and added to after the reply. Two
replicas answering the same conversation at once may each spend what was left: the bound holds to
within one request's answers.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compact_hook.core.pairing import pair
from compact_hook.core.recall import Originals, tool_name
from compact_hook.core.tenancy import tenant_scoped
from compact_hook.core.truncate import BYTES_PER_TOKEN, Truncating, truncate_text
from compact_hook.engine.result import CompactResult
from compact_hook.settings.model import CompactConfig
from compact_hook.state.archive import Archive
from compact_hook.state.store import CompactionStore
from compact_hook.state.tokenizers import DEFAULT_TOKENIZER, acounter_for
from compact_hook.wires.base import RecallWire
from compact_hook.wires.conversation import Conversation
from compact_hook.wires.parsing import TOOL_OVERHEAD, compact_json
from compact_hook.wires.registry import WIRES

logger = logging.getLogger(__name__)

MAX_ROUNDS = int(CompactConfig.__dataclass_fields__["recall_max_rounds"].default)  # type: ignore[arg-type]
"""The model calls a request's recall answers may add, unless the operator says (``recall_max_rounds``)."""
ROUND_TIMEOUT = float(CompactConfig.__dataclass_fields__["recall_round_timeout_seconds"].default)  # type: ignore[arg-type]
NOT_FOUND = "No output with id {handle} in this conversation."
SPENT = "Not read back: this conversation's recall budget is spent. Work from what you have."
MAX_CLIENT_TOOLS = 128
"""OpenAI's limit on a request's tools: a client already at it is not given one more (a 400)."""
ANSWER_FLOOR_TOKENS = 256
"""An answer is never cut below this (head and tail), whatever room is left."""


_TOKENS: dict[tuple[str, str, str], int] = {}
"""Our tool's tokens by wire, name and tokenizer (``Offer.tokens``)."""


class Answered(enum.StrEnum):
    """What a recall call got (the archive's audit says it per handle)."""

    FOUND = "found"
    NOT_FOUND = "not found"
    SPENT = "budget spent"


class RoundFailure(enum.StrEnum):
    """What the client got when a recall round failed for good (the report's ``recall_failed``)."""

    RESENT = "resent"
    """The answers made the request too long for the model, or the provider refused the follow-up:
    resent without our tool, the model answers from what it had."""
    ERROR = "error"
    """A timeout or an unavailable provider (429, 5xx) after one more try, or a resend that failed:
    the client gets the round's error (clients retry those)."""


@dataclass
class Pending:
    """What answering one request's recall calls needs: the wire, our tool's name, the client's
    entries (where the originals are), and the room the answers may take (tokens, ours)."""

    wire: RecallWire
    tool: str
    conversation: Conversation
    room: int
    session_id: str
    max_rounds: int = MAX_ROUNDS
    tenant: str = ""
    round_timeout: float = ROUND_TIMEOUT
    """How long one round's model call may take (``recall_round_timeout_seconds``)."""
    archive: Archive | None = None
    """Where the audit of what was recalled goes (``audit``)."""
    budget: Callable[[], RecallBudget] | None = None
    """The conversation's recall budget, made when the model recalls (not on every request)."""
    allowance: int | None = None
    """Bytes the conversation's answers may still give back (``budget``, read when the model recalls)."""
    refused: int = 0
    asked: list[tuple[str, Answered]] = dataclasses.field(default_factory=list)
    """Each handle a recall call asked for, and what it got (the archive's audit)."""
    _originals: Originals | None = None
    found: int = 0
    """Recall calls answered with an original, ``missing`` with "no such output", ``returned``
    the bytes the answers gave back, ``rounds`` the model calls they took (for the report)."""
    missing: int = 0
    returned: int = 0
    rounds: int = 0
    failed: RoundFailure | None = None
    """Set when a round failed for good (``rounds``): what the client got instead."""

    def answer(self, handle: str, share: int) -> str:
        """The original ``handle`` names, word for word — or its head and tail, cut to ``share`` of
        the room left (a note says what was cut) — or that there is none."""
        if self._originals is None:
            items = self.conversation.items()
            self._originals = Originals.of(items, pair(items).tool_of)
        original = self._originals.get(handle)
        if original is None:
            self.missing += 1
            self.asked.append((handle, Answered.NOT_FOUND))
            return NOT_FOUND.format(handle=handle)
        limit = max(ANSWER_FLOOR_TOKENS, self.room // max(1, share))
        if self.allowance is not None:
            if self.allowance < ANSWER_FLOOR_TOKENS * BYTES_PER_TOKEN:
                self.refused += 1
                self.asked.append((handle, Answered.SPENT))
                return SPENT
            limit = min(limit, self.allowance // BYTES_PER_TOKEN)
        self.asked.append((handle, Answered.FOUND))
        cut = truncate_text(original.text, Truncating(limit, "bytes", _no_cut), what="recalled output")
        shown = original.text if cut is None else cut
        size = len(shown.encode("utf-8", "surrogatepass"))
        self.room = max(0, self.room - size // BYTES_PER_TOKEN)
        if self.allowance is not None:
            self.allowance = max(0, self.allowance - size)
        self.found, self.returned = self.found + 1, self.returned + size
        return shown


def _no_cut(text: str, head: int, tail: int) -> tuple[int, int, int]:
    raise AssertionError("a recalled output is cut by bytes")  # pragma: no cover - never called


@dataclass(frozen=True, slots=True)
class Offer:
    """The recall tool for one request, if it may be offered: its name and definition."""

    wire: RecallWire
    name: str
    tool: dict[str, Any]
    tokens: int
    """Its definition's tokens, ours (``TOOL_OVERHEAD`` with its JSON, as the client's tools count)."""

    @classmethod
    async def of(cls, data: Mapping[str, Any], wire: str, config: CompactConfig) -> Offer | None:
        """The tool this request would be offered, or None: recall off, a wire not served, a conversation
        the provider holds, no tools of the client's, or as many as a provider takes."""
        found = WIRES.get(wire)
        if not config.recall or found is None:
            return None
        served = found.recall
        if data.get("previous_response_id"):
            return None  # a conversation the provider holds (not ours to append to)
        theirs = served.tool_names(data)
        if not theirs or len(theirs) >= MAX_CLIENT_TOOLS:
            return None  # not an agent's loop (a title, a plain chat: a tool changes what it asks for); full
        name = tool_name(theirs)
        tool, counted = served.tool(name), (wire, name, config.tokenizer or DEFAULT_TOKENIZER)
        tokens = _TOKENS.get(counted)
        if tokens is None:  # once a process for each: a few names on four wires, the tokenizers set
            counter = await acounter_for(counted[2])
            tokens = _TOKENS.setdefault(counted, counter.count_text(compact_json(tool)) + TOOL_OVERHEAD)
        return cls(served, name, tool, tokens)

    def read(self, conversation: Conversation) -> Conversation:
        """The conversation with the tool among what the model reads: the engine counts it, fits
        the request with it and reports it, as it does the client's tools (the provider's ratio
        with the request's fixed part once) — as tokens the context adds, counted once a process."""
        conversation.overhead += self.tokens  # ours: parsed for this request
        return conversation

    def apply(self, data: dict[str, Any]) -> None:
        tools = data.get("tools")
        data["tools"] = [*(tools if isinstance(tools, list) else []), self.tool]

    def pending(
        self, conversation: Conversation, config: CompactConfig, result: CompactResult, who: tuple[str, str]
    ) -> Pending:
        """What answering this request's recall calls needs; ``who``: its session and tenant."""
        session, tenant = who
        room = max(0, (config.context_window or 0) - result.output_tokens - (conversation.reserve or 0))
        room = min(config.recall_max_tokens, room)
        rounds, timeout = config.recall_max_rounds, config.recall_round_timeout_seconds
        return Pending(self.wire, self.name, conversation, room, session, rounds, tenant, timeout)


PREFIX = b"recall-bytes:"


@dataclass(frozen=True, slots=True)
class RecallBudget:
    """Where a conversation's spent bytes are kept, and how many it may spend."""

    store: CompactionStore
    key: bytes
    limit: int
    ttl: float

    @classmethod
    def of(cls, store: CompactionStore, tenant: str, session: str, limit: int, ttl: float) -> RecallBudget:
        return cls(store, PREFIX + tenant_scoped(tenant, session), limit, ttl)

    async def left(self) -> int:
        """The bytes the conversation's answers may still give back (the whole limit if the store
        cannot say: a store that fails never stops a recall)."""
        try:
            spent = await self.store.get_note(self.key)
            return max(0, self.limit - int(spent or 0))
        except Exception:
            logger.warning("compact_hook: recall budget unreadable; answering within this request's bound")
            return self.limit

    async def spend(self, size: int) -> None:
        """Add ``size`` bytes to what the conversation spent."""
        if size <= 0:
            return
        try:
            spent = int(await self.store.get_note(self.key) or 0)
            await self.store.set_note(self.key, str(spent + size), self.ttl)
        except Exception:
            logger.warning("compact_hook: recall budget not updated (%d bytes)", size)

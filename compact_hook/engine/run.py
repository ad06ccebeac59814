"""One request going through the pipeline: what it brought, measured once.

A ``Run`` is the value every stage reads (``engine.tiers.clearing``, ``engine.summary.compaction``,
``engine.guarantee``, ``engine.memory.archiving``, ``engine.finish``): the request, its fingerprints
and counts, its limits and tiers, and where it stands in its conversation's chain. It is frozen
once measured: what later stages learn (the stored state, the economy, what was archived) travels
in the values they return — ``engine.decision.Decision``, ``engine.finish.Forwarding`` — never
written back here. It holds no store and no locks; those are the compactor's.

Counts are ours; the limits are the provider's, converted at the request's ``CountRatio``
(``core.calibration``): the model group's (or its prior) as the request brings it, or — from half
the total at which anything can change, where a conversation's last billed request is looked up
(``engine.economy.prompt_cache``) — the conversation's own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from compact_hook.core.calibration import CountRatio, RatioSource, conversation_ratio
from compact_hook.core.chain import Entry, prefix_chain, root_position, unbind
from compact_hook.core.counting import (
    Estimated,
    Strings,
    TokenCounter,
    is_estimated,
    item_strings,
    request_total,
)
from compact_hook.core.evidence import Trust, trust_of
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.core.items import PartKind, Role
from compact_hook.core.limits import Limits, output_limit
from compact_hook.core.notes import CacheNote
from compact_hook.core.pinning import Pin, find_pins
from compact_hook.engine.economy.prompt_cache import CacheLedger
from compact_hook.engine.memory.counts import RememberedCounts
from compact_hook.engine.notices import Notices
from compact_hook.engine.result import CompactRequest
from compact_hook.engine.sizes import Sizes
from compact_hook.engine.tiers.truncation import Tier1, TruncationCache
from compact_hook.engine.view import Counted, Tiers, View
from compact_hook.settings.model import CompactConfig
from compact_hook.state.archive import ArchiveFolders, ArchiveLog
from compact_hook.state.tokenizers import DEFAULT_TOKENIZER, acounter_for
from compact_hook.wires.conversation import Conversation
from compact_hook.wires.parsing import context_strings

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """What the compactor keeps across requests besides its store: truncated outputs, archive
    log, one archive per folder (each prunes old entries on its own schedule), the entries whose
    count is a guess."""

    truncations: TruncationCache = field(default_factory=TruncationCache)
    estimated: Estimated = field(default_factory=Estimated)
    archives: ArchiveLog = field(default_factory=ArchiveLog)
    folders: ArchiveFolders = field(default_factory=ArchiveFolders)
    notices: Notices = field(default_factory=Notices)


@dataclass(frozen=True)
class Run:
    """The request, its fingerprints and counts (computed once), its limits and tiers."""

    request: CompactRequest
    counter: TokenCounter
    prints: list[Fingerprint]
    counts: list[int]
    context_tokens: int
    total: int
    limits: Limits | None
    tiers: Tiers
    memory: ProcessMemory
    ratio: CountRatio = CountRatio()
    """The provider's tokens per one of ours for this request (``core.calibration``)."""
    note: CacheNote | None = None
    """The provider's report of the conversation's last request, where it was looked up."""
    estimated: bool = False
    """The request holds an entry whose count is a guess (``core.counting.is_estimated``): its
    usage teaches nothing (``core.evidence``)."""

    @classmethod
    async def measure(
        cls,
        request: CompactRequest,
        memory: ProcessMemory,
        ledger: CacheLedger | None = None,
        remembered: RememberedCounts | None = None,
    ) -> Run:
        """Count everything the model reads (only entries never seen before are tokenized, after what
        the store ``remembered`` of them), then put the limits in our tokens at the request's ratio
        (``_calibrate``)."""
        conversation, config = request.conversation, request.config
        spec = config.tokenizer or DEFAULT_TOKENIZER
        counter = request.counter or await acounter_for(spec)
        conversation.for_tenant(request.tenant)
        prints = conversation.prints()
        recall = None
        if remembered is not None:

            async def recall() -> dict[Fingerprint, int]:
                return await remembered.recall(counts_key(spec, _conversation_key(request, prints)))

        counts = await counter.acount(prints, _strings_noted(conversation, prints, memory.estimated), recall)
        fixed = fixed_tokens(conversation, counter)
        tier1 = Tier1(memory.truncations, output_limit(config, conversation.reserve, fixed))
        tiers = Tiers(conversation, Counted(prints, counts, counter), config, tier1)
        ratio = request.count_ratio
        run = cls(
            request,
            counter,
            prints,
            counts,
            fixed,
            request_total(fixed, counts),
            _limits_of(request, fixed, ratio),
            tiers,
            memory,
            ratio,
            estimated=memory.estimated.any_of(prints),
        )
        if ledger is not None:
            await run._calibrate(ledger)
        if remembered is not None:
            await remembered.keep(
                lambda: counts_key(spec, run.conversation_key), prints, counts, request.tenant
            )
        run._say_unused()
        return run

    async def _calibrate(self, ledger: CacheLedger) -> None:
        """This run put at its conversation's own ratio, where its last billed request teaches one
        (never below ``Trust``'s floor, and not while the conversation's usage is set aside); from half
        the total at which anything can change (below, the group's ratio does: no lookup). Part of
        measuring it: nothing holds the run yet, so its fields are set, not a copy made."""
        if not self.looks_up:
            return
        note = await ledger.note(self.conversation_key, self.prints)
        object.__setattr__(self, "note", note)
        if note is None or not note.describes or self.ratio.source is RatioSource.REFUSAL:
            return
        found = conversation_ratio(note.last, note.first or note.last)
        if found is None:
            return
        taught = self.trust.ratio(found, self.total)
        object.__setattr__(self, "limits", _limits_of(self.request, self.context_tokens, taught))
        object.__setattr__(self, "ratio", taught)

    def _say_unused(self) -> None:
        """Once per model group and what: a learned window or count left the conversation no room, so
        the configured window (at the prior, for a count) stands (``core.limits``)."""
        limits, origin = self.limits, self.request.origin
        if limits is None or limits.unused is None:
            return
        if self.memory.notices.first(("unused", origin.model_group, limits.unused)):
            logger.warning(
                "compact_hook: model group %s: a learned %s (window %s, %.3f tokens per one of ours) "
                "leaves no room for the conversation beside %d tokens of system and tools and the reply's "
                "reserve of %s; not used: the configured window of %s at the prior counts it. Said once "
                "per model group",
                origin.model_group or "?",
                limits.unused.value,
                self.request.learned_window,
                self.request.count_ratio.effective(max(1, self.total)),
                self.context_tokens,
                self.request.conversation.reserve,
                self.config.context_window,
            )

    @property
    def looks_up(self) -> bool:
        """The provider's report of this conversation's last request is read
        (``engine.economy.prompt_cache``): from half the total at which anything can change (below, no
        store lookup: the group's ratio counts it)."""
        return self._past(2)

    @property
    def watched(self) -> bool:
        """The provider's reports of this conversation are kept (``engine.finish.watched``): from a
        quarter of the total at which anything can change, so that by the time they are read, what
        the conversation grew by since its first has cost something at the provider. Below, the
        conversation's key is not even computed: most requests never need it."""
        return self._past(4)

    def _past(self, share: int) -> bool:
        limits = self.limits
        return limits is not None and self.total >= limits.engage // share and bool(self.prints)

    @property
    def config(self) -> CompactConfig:
        return self.request.config

    @property
    def trust(self) -> Trust:
        """How far the provider's usage may move this request's count (``core.evidence``)."""
        return trust_of(self.config)

    @property
    def cost_aware(self) -> bool:
        """Cost-aware timing applies: switched on, and the model priced."""
        return self.config.cost_aware and self.request.prices is not None

    @property
    def window(self) -> Limits:
        assert self.limits is not None
        return self.limits

    @cached_property
    def sizes(self) -> Sizes:
        """The one sizer of this request's views (made when a view other than the client's own
        is first sized: most requests never need one)."""
        return Sizes(self.counter, self.context_tokens)

    @cached_property
    def chain(self) -> list[bytes]:
        """The request's prefix chain: hashed from where the conversation's last request's stops
        holding (``Known.chain``), and kept there for the next."""
        known = self.request.conversation.known
        if known is None:
            return prefix_chain(self.request.scope, self.prints)
        chain = prefix_chain(self.request.scope, self.prints, known.chain)
        known.keep_chain(chain)
        return chain

    @cached_property
    def root_span(self) -> int:
        """How many of the client's entries make the conversation's start (``core.chain.root_position``)."""
        return root_position(self.request.conversation.lazy_items())

    @cached_property
    def root(self) -> bytes:
        """The conversation's key: the chain at its first user turn (hashed alone, not the whole
        chain: a request under the thresholds needs only this)."""
        position = self.root_span
        if "chain" in self.__dict__:
            return self.chain[position]
        return _root(self.request, self.prints, position)

    @cached_property
    def conversation_key(self) -> bytes:
        """The key the provider's reports of this conversation are kept under (``core.notes``): its
        root (tenant and settings included), and the client's session id where it sends one — two
        sessions that begin alike (every Codex session of a repository) never share a note; what
        still does (sub-agents of one prompt) is told apart by what each extends."""
        return _keyed(self.root, self.request.session_id)

    @cached_property
    def pins(self) -> dict[int, Pin]:
        """The client's pinned items (the task, injected instructions, later system messages)."""
        config = self.config
        if self.window.pinned_budget(config) <= 0:
            return {}
        return find_pins(self.tiers.items, self.counts, config.pinned_patterns, self.counter.count_text)

    @property
    def checks_thinking(self) -> bool:
        """The provider checks thinking blocks against their prefix: the format binds them and the
        model runs the check (``thinking_prefix_check``; unset here means yes)."""
        checks = self.config.thinking_prefix_check is not False
        return checks and self.request.conversation.wire.bound_thinking

    @cached_property
    def sends_thinking(self) -> bool:
        """The client's latest model turn carries a thinking block (it sends them back)."""
        conversation = self.request.conversation
        for index in range(len(conversation.entries) - 1, max(-1, len(conversation.entries) - 9), -1):
            item = conversation.item(index)
            if item.role is Role.ASSISTANT:
                return any(part.kind is PartKind.THINKING for part in item.parts)
        return False

    async def tokens(self, view: View) -> int:
        """The view's size (``engine.run``); the client's own items are the measured total."""
        if view.items is self.tiers.items:
            return self.total
        return await self.sizes.tokens(view)

    def origin(self, view: View, position: int) -> int:
        """Index in the client's list of view position ``position`` (the end maps to the end)."""
        if position >= len(view.items):
            return len(self.prints)
        origin = view.origins[position]
        assert origin is not None, "a kept item or the tail never starts at a summary"
        return origin

    # -- thinking bound to its prefix ---------------------------------------------------------------

    def unbound(self, entry: Entry, start: int, end: int | None = None) -> Entry:
        """``entry`` changing the forwarded prefix from client entry ``start`` on, at this request:
        the thinking blocks produced before it (``< end``, default this request's length) are
        stale. Only where the provider checks them (``checks_thinking``)."""
        if not self.checks_thinking:
            return entry
        return unbind(entry, start, len(self.prints) if end is None else end)

    def applied(self, compaction: Entry) -> Entry:
        """A compaction as this request applies it: every thinking block kept after the summary
        was produced before it, so each is stale (earlier ranges are summarized or covered)."""
        return self.unbound(dataclasses.replace(compaction, stale_thinking=()), compaction.covered)


def _limits_of(request: CompactRequest, fixed: int, ratio: CountRatio) -> Limits | None:
    return Limits.of(request.config, request.conversation.reserve, fixed, ratio, request.learned_window)


def _keyed(root: bytes, session_id: str | None) -> bytes:
    """A conversation's key (``Run.conversation_key``) from its root and the client's session id."""
    session = (session_id or "").encode("utf-8", "surrogatepass")
    return hashlib.blake2b(root + session, digest_size=16).digest()


def _root(request: CompactRequest, prints: Sequence[Fingerprint], position: int) -> bytes:
    """The chain at the conversation's first user turn (``position``): ``Run.root``."""
    known = request.conversation.known
    return prefix_chain(request.scope, prints[:position], known.chain if known else ())[position]


def _conversation_key(request: CompactRequest, prints: Sequence[Fingerprint]) -> bytes:
    """``Run.conversation_key`` before the run is made (its counts read from the store first)."""
    position = root_position(request.conversation.lazy_items())
    return _keyed(_root(request, prints, position), request.session_id)


def counts_key(spec: str, conversation: bytes) -> bytes:
    """Where a conversation's counts by one tokenizer are kept (``engine.memory.counts``)."""
    return hashlib.blake2b(
        spec.encode("utf-8", "surrogatepass") + b"\0" + conversation, digest_size=16
    ).digest()


def _strings_noted(
    conversation: Conversation, prints: list[Fingerprint], estimated: Estimated
) -> Callable[[int], Strings]:
    """What the model reads of an entry, for the entries never counted before: each one whose count is
    only an estimate (media, documents) noted once, so its conversation's usage teaches nothing."""

    def strings(index: int) -> Strings:
        item = conversation.item(index)
        if is_estimated(item):
            estimated.note(prints[index])
        return item_strings(item)

    return strings


def fixed_tokens(conversation: Conversation, counter: TokenCounter) -> int:
    """What the model reads besides the entries we may change: the context (system, tools, schemas),
    what the provider adds with it, and the client's last turn (``Conversation.tail``)."""
    context, fixed = conversation.context, 0
    if context:
        counts = counter.count(conversation.context_prints(), lambda i: context_strings(context[i]))
        fixed += sum(counts) + conversation.overhead
    if conversation.tail:
        fixed += sum(counter.count(conversation.tail_prints(), conversation.tail_strings))
    return fixed

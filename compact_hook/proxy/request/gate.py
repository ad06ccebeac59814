"""The pre-call path as steps over one value (``Inbound``) — ``data`` changes only once all succeeded.

A request passes the gate when the router knows its model group, the group compacts and its call
type has a wire format (a conversation on a call type we have none for is reported: no new
surface goes unseen). The format parses it (or rejects it: forwarded untouched and
said so), a trailing ``/compact`` becomes the request's control, the engine compacts, and the
format renders the result back into ``data``. Compacting requests carry a retry to their own
group, should the provider still find them too long (``proxy.feedback.recovery``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compact_hook.core.outcomes import Mode, Reason
from compact_hook.engine.result import CompactResult
from compact_hook.proxy import server
from compact_hook.proxy.answers.codex import (
    NOTHING,
    CompactionAnswer,
    Expansion,
    memento_of,
    memento_settings,
)
from compact_hook.proxy.answers.compact import answer_text, answerable
from compact_hook.proxy.lifecycle.logs import for_model_group
from compact_hook.proxy.marks import INTERNAL_TOKEN, RETRY_KEY
from compact_hook.proxy.observe.report import ANSWERED, Report, record_summary_cost
from compact_hook.proxy.observe.telemetry import Telemetry, log_reshaped
from compact_hook.proxy.recall import Offer
from compact_hook.proxy.request.caller import (
    Caller,
    Engaged,
    Settled,
    engine_request,
    session_id_of,
    tenant_of,
)
from compact_hook.proxy.request.control import Control, control_of, with_command
from compact_hook.proxy.request.settings import settle
from compact_hook.proxy.request.summarizer import Spending
from compact_hook.proxy.services import Services
from compact_hook.settings.model import CompactConfig, revised
from compact_hook.state.recent import SESSION, Comparison
from compact_hook.wires import RESPONSES, Conversation, Rejected, WireFormat
from compact_hook.wires.command import command_in, is_command
from compact_hook.wires.registry import carries_conversation, format_for
from compact_hook.wires.responses.compaction import asks_compaction, usage_of

logger = logging.getLogger(__name__)

RESPONSES_CALL = "aresponses"
"""The call type of ``/v1/responses``, the one wire Codex's compaction items come on."""


@dataclass(slots=True)
class Inbound:
    """A request on the pre-call path: what each step has learned of it, in the order learned."""

    data: dict[str, Any]
    call_type: str
    tenant: str
    expansion: Expansion = NOTHING
    router: Any = None
    model: str = ""
    wire: WireFormat | None = None
    control: Control | None = None
    settled: Settled | None = None
    conversation: Conversation | None = None
    codex: bool = False
    """The request is Codex's compaction trigger: the proxy answers it (``proxy.answers.codex``)."""
    command: str | None = None
    """A ``/compact`` the proxy answers (``proxy.answers.compact``)."""
    offer: Offer | None = None
    comparison: Comparison | None = None
    """The entries set against the conversation's last request (``state.recent``): only the others are
    checked, read and learned."""

    def settings(self) -> CompactConfig:
        assert self.settled is not None
        return self.settled.config


class RequestGate:
    """Compacts what it may of each request before LiteLLM routes it, in steps: admit (the group, its
    wire and settings) → compare (with the conversation's last request) → expand our items → read
    (parse, Codex's trigger, a ``/compact``) → offer recall → settle the settings once → compact →
    respond. ``data`` changes only where our items are expanded and once the engine has compacted:
    a step that finds nothing to do ends the path with the request untouched."""

    def __init__(self, services: Services, telemetry: Telemetry) -> None:
        self.services, self.telemetry = services, telemetry

    async def handle(
        self, user_api_key_dict: Any, data: dict[str, Any], call_type: str
    ) -> str | CompactionAnswer | None:
        """Compact ``data`` in place where it helps; the proxy's own answer to a ``/compact``
        command or to Codex's compaction trigger (then no model is called), else None. Our
        compaction items are expanded before the conversation is read, whatever the group: one that
        reached the provider would fail the request, and every later one of the conversation."""
        inbound = Inbound(data, call_type, tenant_of(user_api_key_dict))
        admitted = await self._admit(inbound, user_api_key_dict)
        if admitted:
            inbound.comparison = self._compare(inbound)
        await self._expand(inbound)
        if not admitted or not self._read(inbound):
            return None
        await self._offer(inbound)
        self._settle(inbound)
        result, report, who = await self._compact(inbound)
        return await self._respond(inbound, result, report, who)

    async def _admit(self, inbound: Inbound, user_api_key_dict: Any) -> bool:
        """The request's group compacts, its call type has a wire, and its settings are resolved
        (once): the key's and team's overrides, the learned window, the prices, the count ratio."""
        router, model = server.proxy_router(), inbound.data.get("model")
        if router is None or not isinstance(model, str):
            return False
        resolved = self.services.models.resolve(router, model)
        if resolved is None:
            return False
        self.services.metrics.known_group(model)
        for_model_group(model)
        wire = format_for(inbound.call_type)
        if wire is None:
            if carries_conversation(inbound.call_type):
                self.telemetry.unhandled(inbound.call_type, model)
            return False
        control = control_of(inbound.data, wire.metadata_key, user_api_key_dict)
        settled = await settle(self.services, router, model, Caller(inbound.tenant, control), resolved)
        inbound.router, inbound.model, inbound.wire = router, model, wire
        inbound.control, inbound.settled = control, settled
        return settled is not None

    def _read(self, inbound: Inbound) -> bool:
        """The conversation parsed (a rejection is forwarded untouched, and said), and what it asks
        of the proxy itself: Codex's compaction, a ``/compact``."""
        wire, config = inbound.wire, inbound.settings()
        assert wire is not None and inbound.control is not None
        parsed = wire.parse(inbound.data, inbound.comparison.unseen if inbound.comparison else None)
        codex = not isinstance(parsed, Rejected) and wire is RESPONSES and asks_compaction(parsed.entries)
        if codex and config.remote_compaction == "theirs":
            parsed = Rejected(Reason.CLIENT_MANAGED, "compaction_trigger, served by the provider")
        if isinstance(parsed, Rejected):
            self.telemetry.rejected(inbound.data, wire, inbound.model, parsed)
            return False
        command = command_in(parsed.entries[-1]) if parsed.entries else None
        if codex:  # Codex's own compaction: forced, answered by the proxy (``proxy.answers.codex``)
            inbound.control, parsed = with_command(inbound.control, ""), parsed.without_last()
        elif command is not None:
            inbound.control = with_command(inbound.control, command)
            if answerable(inbound.call_type):
                parsed = parsed.without_last()
            else:  # compacted now, and the model answers the command (see ``proxy.answers.compact``)
                command = None
        inbound.conversation, inbound.codex, inbound.command = parsed, codex, command
        return True

    def _compare(self, inbound: Inbound) -> Comparison | None:
        """The request's entries set against its conversation's last request, before the wire checks
        them: what is the same was checked when the wire accepted it (None: no list of entries)."""
        wire = inbound.wire
        assert wire is not None
        entries = inbound.data.get(wire.entries_key)
        if not isinstance(entries, list):
            return None
        session = session_id_of(inbound.data, entries)
        return self.services.recent.compare((inbound.tenant, wire.name, inbound.model, session), entries)

    @staticmethod
    def _session(inbound: Inbound, parsed: Conversation) -> str:
        """The conversation's session id: the one its entries were compared under when the wire kept
        them all (no ``/compact`` taken off the end), else worked out from what was kept."""
        comparison = inbound.comparison
        if comparison is not None and comparison.entries is parsed.entries:
            return comparison.key[SESSION]
        return session_id_of(inbound.data, parsed.entries)

    async def _offer(self, inbound: Inbound) -> None:
        """The recall tool, where the model may call it (``proxy.recall``)."""
        assert inbound.control is not None and inbound.wire is not None and inbound.conversation is not None
        mine = inbound.command is not None or inbound.codex or inbound.control.mode is Mode.OFF
        if mine:  # the proxy answers, or compaction is off: no tool the model may call
            return
        inbound.offer = await Offer.of(inbound.data, inbound.wire.name, inbound.settings())
        if inbound.offer is not None:
            inbound.conversation = inbound.offer.read(inbound.conversation)

    def _settle(self, inbound: Inbound) -> None:
        """The settings the engine compacts under, changed once for what the path found: a client
        that compacts its conversation itself (our items expanded) prepares nothing ahead; Codex's
        compaction keeps only the turn in progress; no recall tool, no handle named."""
        config = inbound.settings()
        if inbound.codex:
            config = memento_settings(config)
        if inbound.expansion.expanded:  # preparing ahead is waste
            config = revised(config, prepare=False)
        if inbound.offer is None and config.recall and not inbound.codex:
            config = revised(config, recall=False)
        assert inbound.settled is not None
        inbound.settled = dataclasses.replace(inbound.settled, config=config)

    async def _compact(self, inbound: Inbound) -> tuple[CompactResult, Report, Engaged]:
        """The engine's compaction, and its report (with what its summary calls cost)."""
        data, wire, parsed = inbound.data, inbound.wire, inbound.conversation
        assert wire is not None and parsed is not None and inbound.control is not None
        assert inbound.settled is not None
        who = Engaged(inbound.model, self._session(inbound, parsed), inbound.tenant, inbound.control)
        parsed.for_tenant(inbound.tenant)
        recent, comparison = self.services.recent, inbound.comparison
        if comparison is None:  # a Responses input given as a string: one entry
            comparison = recent.compare(
                (inbound.tenant, wire.name, inbound.model, who.session_id), parsed.entries
            )
        parsed.known = recent.learn(comparison, parsed.fingerprint, is_command)
        spending = Spending(self.telemetry.spender(inbound.model, wire))
        request = engine_request(data, parsed, who, inbound.settled, spending)
        result = await self.services.compactor.compact(request)
        report = self.telemetry.compacted(data, wire, result, who)
        report.first_contact = comparison.first_contact
        record_summary_cost(data, wire.metadata_key, report, spending.total)
        return result, report, who

    async def _respond(
        self, inbound: Inbound, result: CompactResult, report: Report, who: Engaged
    ) -> str | CompactionAnswer | None:
        """The proxy's own answer, or the compacted request: rendered, offered recall, given its
        retry should the provider still find it too long (``proxy.feedback.recovery``)."""
        data, wire, parsed, config = inbound.data, inbound.wire, inbound.conversation, inbound.settings()
        assert wire is not None and parsed is not None and inbound.control is not None
        if inbound.codex:
            return await self._answer_codex(data, wire, result, report, inbound.tenant)
        if inbound.command is not None:
            report[ANSWERED] = True
            return answer_text(result)
        if result.changes(parsed.entries):
            wire.render(data, result.messages)
            log_reshaped(data, wire, inbound.model, result)
        if inbound.offer is not None:  # the model may read back what was taken out (``proxy.recall``)
            self._hand_recall(inbound, result, report, who)
        if config.recover and inbound.control.mode is not Mode.OFF:
            attach_fallbacks(data, inbound.model, inbound.router, inbound.call_type)
        return None

    def _hand_recall(self, inbound: Inbound, result: CompactResult, report: Report, who: Engaged) -> None:
        """The tool added to the request, and what answering it needs on the request's report."""
        offer, config, tenant = inbound.offer, inbound.settings(), inbound.tenant
        assert offer is not None and inbound.conversation is not None
        offer.apply(inbound.data)
        pending = offer.pending(inbound.conversation, config, result, (who.session_id, tenant))
        pending.archive = self.services.compactor.memory.folders.get(config.archive_dir)
        pending.budget = functools.partial(self.services.recall_budget, tenant, who.session_id, config)
        report.recall = pending

    async def _expand(self, inbound: Inbound) -> None:
        """Our compaction items in a Responses request replaced by what they stand for, before anything
        reads the input (``proxy.answers.codex``): of a compacting group's request, only the entries its
        conversation's last request did not send the same are looked over, and the input compared again
        once it was replaced."""
        if inbound.call_type != RESPONSES_CALL:
            return
        data, comparison = inbound.data, inbound.comparison
        among = comparison.unseen if comparison is not None else None
        inbound.expansion = await self.services.mementos.expand(data, inbound.tenant, among)
        self.telemetry.expanded(data, str(data.get("model")), inbound.expansion)
        if comparison is not None and inbound.expansion.rewrote:
            inbound.comparison = self._compare(inbound)

    async def _answer_codex(
        self, data: dict[str, Any], wire: WireFormat, result: CompactResult, report: Report, tenant: str
    ) -> CompactionAnswer | None:
        """Codex's compaction answered with a handle on what we would forward; None (the trigger
        forwarded as sent) when the store could not keep it (``proxy.answers.codex``)."""
        handle = await self.services.mementos.keep(memento_of(result, wire), tenant)
        if handle is None:
            logger.warning(
                "compact_hook: request %s: Codex's compaction could not be kept; forwarded as sent",
                data.get("litellm_call_id"),
            )
            return None
        answer = CompactionAnswer(handle, usage_of(result.input_tokens, 0))
        report[ANSWERED] = True
        report["remote_compaction"] = True
        report.compaction = answer
        return answer


def attach_fallbacks(data: dict[str, Any], group: str, router: Any, call_type: str) -> None:
    """Give the request a retry to its own group, ahead of the fallbacks the operator configured.

    Not when the client chose its own fallbacks or disabled them: that is its call.
    """
    if data.get("disable_fallbacks") or "fallbacks" in data or "context_window_fallbacks" in data:
        return
    retry = {"model": group, RETRY_KEY: INTERNAL_TOKEN}
    if call_type == RESPONSES_CALL:
        configured = _targets(server.router_setting(router, "fallbacks"), group)
        data["fallbacks"] = [retry, *({"model": t} if isinstance(t, str) else t for t in configured)]
    else:
        configured = _targets(server.router_setting(router, "context_window_fallbacks"), group)
        data["context_window_fallbacks"] = [{group: [retry, *configured]}]


def _targets(fallbacks: object, group: str) -> list[Any]:
    """The operator's fallbacks for ``group`` (``[{group: [targets]}]``)."""
    if not isinstance(fallbacks, list):
        return []
    for entry in fallbacks:
        if isinstance(entry, Mapping) and isinstance(entry.get(group), list):
            return list(entry[group])
    return []

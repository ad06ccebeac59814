"""The pre-call path: gate, parse, compact, render — ``data`` changes only once all succeeded.

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
from compact_hook.proxy.answers.compact import ANSWERED, answer_text, answerable
from compact_hook.proxy.feedback.recovery import attach_fallbacks
from compact_hook.proxy.lifecycle.logs import for_model_group
from compact_hook.proxy.observe.report import Report, record_summary_cost
from compact_hook.proxy.observe.telemetry import Telemetry, log_reshaped
from compact_hook.proxy.recall import Offer
from compact_hook.proxy.request.caller import Caller, Engaged, engine_request, session_id_of, tenant_of
from compact_hook.proxy.request.control import control_of, with_command
from compact_hook.proxy.request.settings import settle
from compact_hook.proxy.request.summarizer import RouterSummarizer
from compact_hook.proxy.services import Services
from compact_hook.wires import RESPONSES, Rejected, WireFormat
from compact_hook.wires.command import command_in
from compact_hook.wires.registry import carries_conversation, format_for
from compact_hook.wires.responses.compaction import asks_compaction, usage_of

logger = logging.getLogger(__name__)

RESPONSES_CALL = "aresponses"
"""The call type of ``/v1/responses``, the one wire Codex's compaction items come on."""


class RequestGate:
    """Compacts what it may of each request before LiteLLM routes it."""

    def __init__(self, services: Services, telemetry: Telemetry) -> None:
        self.services, self.telemetry = services, telemetry

    async def handle(
        self, user_api_key_dict: Any, data: dict[str, Any], call_type: str
    ) -> str | CompactionAnswer | None:
        """Compact ``data`` in place where it helps; the proxy's own answer to a ``/compact``
        command or to Codex's compaction trigger (then no model is called), else None. Our
        compaction items are expanded first, whatever the group: one that reached the provider would
        fail the request, and every later one of the conversation."""
        tenant = tenant_of(user_api_key_dict)
        expansion = await self._expand(data, call_type, tenant)
        router = server.proxy_router()
        model = data.get("model")
        if router is None or not isinstance(model, str):
            return None
        if self.services.models.resolve(router, model) is None:
            return None
        self.services.metrics.known_group(model)
        for_model_group(model)
        wire = format_for(call_type)
        if wire is None:
            if carries_conversation(call_type):
                self.telemetry.unhandled(call_type, model)
            return None
        control = control_of(data, wire.metadata_key, user_api_key_dict)
        settled = await settle(self.services, router, model, Caller(tenant, control))
        if settled is None:
            return None
        config = settled.config
        if expansion.expanded:  # the client compacts this conversation itself: preparing ahead is waste
            settled = dataclasses.replace(settled, config=dataclasses.replace(config, prepare=False))
        parsed = wire.parse(data)
        codex = not isinstance(parsed, Rejected) and wire is RESPONSES and asks_compaction(parsed.entries)
        if codex and config.remote_compaction == "theirs":
            parsed = Rejected(Reason.CLIENT_MANAGED, "compaction_trigger, served by the provider")
        if isinstance(parsed, Rejected):
            self.telemetry.rejected(data, wire, model, parsed)
            return None
        command = command_in(parsed.entries[-1]) if parsed.entries else None
        if codex:  # Codex's own compaction: forced, answered by the proxy (``proxy.answers.codex``)
            control, parsed = with_command(control, ""), parsed.without_last()
            settled = dataclasses.replace(settled, config=memento_settings(config))
        elif command is not None:
            control = with_command(control, command)
            if answerable(call_type):
                parsed = parsed.without_last()
            else:  # compacted now, and the model answers the command (see ``proxy.answers.compact``)
                command = None
        mine = command is not None or codex or control.mode is Mode.OFF  # no tool the model may call
        offer = None if mine else await Offer.of(data, wire.name, config)
        if offer is not None:
            parsed = offer.read(parsed)
        elif config.recall and not codex:  # no tool to read handles back with: none named (``proxy.recall``)
            settled = dataclasses.replace(settled, config=dataclasses.replace(config, recall=False))
        who = Engaged(model, session_id_of(data, parsed.entries), tenant, control)
        request = engine_request(data, parsed, who, settled)
        summarizer = request.summarize
        if isinstance(summarizer, RouterSummarizer):
            summarizer.on_spent = self.telemetry.spender(model, wire)
        result = await self.services.compactor.compact(request)
        report = self.telemetry.compacted(data, wire, result, who)
        if isinstance(summarizer, RouterSummarizer):
            record_summary_cost(data, wire.metadata_key, report, summarizer.spent)
        if codex:
            return await self._answer_codex(data, wire, result, report, tenant)
        if command is not None:
            report[ANSWERED] = True
            return answer_text(result)
        if result.changes(parsed.entries):
            wire.render(data, result.messages)
            log_reshaped(data, wire, model, result)
        if offer is not None:  # the model may read back what was taken out (``proxy.recall``)
            offer.apply(data)
            pending = offer.pending(parsed, config, result, (who.session_id, tenant))
            pending.archive = self.services.compactor.memory.folders.get(config.archive_dir)
            pending.budget = functools.partial(self.services.recall_budget, tenant, who.session_id, config)
            report.recall = pending
        if config.recover and control.mode is not Mode.OFF:
            attach_fallbacks(data, model, router, call_type)
        return None

    async def _expand(self, data: dict[str, Any], call_type: str, tenant: str) -> Expansion:
        """Our compaction items in a Responses request replaced by what they stand for, before anything
        reads the input (``proxy.answers.codex``)."""
        if call_type != RESPONSES_CALL:
            return NOTHING
        expansion = await self.services.mementos.expand(data, tenant)
        self.telemetry.expanded(data, str(data.get("model")), expansion)
        return expansion

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

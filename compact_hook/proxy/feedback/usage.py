"""What the provider billed each request, heard from LiteLLM's success logging.

LiteLLM hands every successful call to ``async_log_success_event`` — every surface, streaming
and not (a stream's usage at its end) — with the usage converted to one shape in
``standard_logging_object.metadata.usage_object``: ``prompt_tokens`` (all input),
``prompt_tokens_details.cached_tokens`` (read from the cache), and on Anthropic
``cache_read_input_tokens`` / ``cache_creation_input_tokens``. Our report rides in the same
request's metadata (the very object the pre-call hook put there) with our own count of what was
forwarded. The two teach:

- the conversation (``engine.economy.prompt_cache``): its prompt cache, for cost-aware timing, and what its
  next request is counted at (the billed input over our count);
- the tenant's estimate in its model group (``proxy.feedback.ratios.LearnedRatios``): what a conversation's
  first requests are counted at, and the ``compact_hook_count_ratio`` metrics.

Only a response from the group we counted for teaches (a fallback to another group was not what
we counted), and only usage that describes the prompt (``core.evidence``: judged against our count
of what we forwarded and the conversation's previous response; ``compact_hook_count_samples_total``
says what each was).

LiteLLM's ``prompt_tokens`` is the whole input on every provider: OpenAI's includes
``cached_tokens``; Anthropic's ``input_tokens`` leaves its cache reads and writes out and LiteLLM adds
them; Gemini's ``promptTokenCount`` includes ``cachedContentTokenCount``; DeepSeek's ``prompt_tokens``
is its cache hits and misses; Ollama's ``prompt_eval_count`` becomes it as reported (what the
judging is for).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from compact_hook.core import evidence
from compact_hook.core.evidence import Earlier, Judged, trust_of
from compact_hook.core.notes import CacheNote, Heard, Lineage, Notes
from compact_hook.core.pricing import Usage
from compact_hook.proxy import server
from compact_hook.proxy.feedback.windows import Taught
from compact_hook.proxy.marks import is_internal_call
from compact_hook.proxy.observe.report import ANSWERED, Report, report_in
from compact_hook.proxy.request.caller import group_of
from compact_hook.proxy.services import Services
from compact_hook.settings.model import CompactConfig

logger = logging.getLogger(__name__)


def provider_usage(kwargs: Mapping[str, Any]) -> Usage | None:
    """The call's input split by cache, and its output; None when LiteLLM logged no usage."""
    logged = kwargs.get("standard_logging_object")
    metadata = logged.get("metadata") if isinstance(logged, Mapping) else None
    usage = metadata.get("usage_object") if isinstance(metadata, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    read = _count(usage.get("cache_read_input_tokens")) or _count(details.get("cached_tokens"))
    written = _count(usage.get("cache_creation_input_tokens")) or _count(details.get("cache_creation_tokens"))
    output = _count(usage.get("completion_tokens"))
    return Usage(max(0, prompt - read - written), written, read, output)


def _count(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0


class Bills:
    """Hears what the provider billed each request we reported on, and keeps what it teaches."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def heard(self, kwargs: Mapping[str, Any]) -> None:
        """Never raises: it runs in LiteLLM's logging, after the client has its answer."""
        try:
            params = kwargs.get("litellm_params")
            if not isinstance(params, Mapping) or is_internal_call(params):
                return
            report = report_in(params)
            usage = provider_usage(kwargs)
            if report is None or usage is None or not report.group or group_of(params) != report.group:
                return
            if report.get(ANSWERED):  # the proxy answered (``/compact``, Codex's compaction): what
                return  # the provider billed, if anything, is the ping the answer rode on
            router = server.proxy_router()
            config = self.services.models.resolve(router, report.group) if router is not None else None
            if config is not None:
                await self._judge(report, usage, config)
        except Exception:
            logger.exception("compact_hook: could not keep what a provider billed")

    async def _judge(self, report: Report, usage: Usage, config: CompactConfig) -> None:
        """The response's usage judged against what we forwarded and the conversation's previous
        response (``core.evidence``), kept with the conversation's prompt-cache report, and taught to
        its tenant's estimate; the metrics say what it was. A bill pinned at a server's context teaches
        the tenant that context as its window (``proxy.feedback.windows``)."""
        trust, ledger = trust_of(config), self.services.compactor.ledger
        notes = await ledger.notes(report.conversation) if report.conversation else Notes()
        earlier = earlier_of(notes.of(report.lineage.client), report.lineage)
        judged = evidence.judged(usage.input, report.forwarded, earlier, trust)
        if report.conversation:
            heard = Heard(
                usage.cache_read, usage.cache_write, usage.uncached, report.counted, judged.verdict.usable
            )
            keep = (config.cache_ttl_seconds, report.tenant)
            await ledger.heard(report.conversation, heard, report.lineage, keep, known=notes)
        ttl = config.learned_window_ttl_seconds
        learned = await self.services.ratios.heard(report.group, report.tenant, judged, trust, ttl)
        self.services.metrics.count_sample(report.group, learned)
        if config.recover:
            await self._window(report, judged, config)

    async def _window(self, report: Report, judged: Judged, config: CompactConfig) -> None:
        """A server truncating to a smaller context: its context is the tenant's window; a later bill
        under it that cannot have been truncated refutes it (``proxy.feedback.windows``)."""
        windows, ttl, context = self.services.learned, config.learned_window_ttl_seconds, judged.context
        if context is not None and context < (config.context_window or context + 1):
            await windows.learn(report.group, context, ttl, report.tenant, Taught.CEILING)
        elif judged.verdict.sets_aside:
            await windows.refuted(report.group, report.tenant, judged, ttl)


def earlier_of(note: CacheNote | None, lineage: Lineage) -> Earlier:
    """The conversation's earlier responses as its note keeps them, where what was billed last is a
    prefix of what this request forwarded (else there is nothing to set its bill against)."""
    if note is None or not note.sent.begins(lineage.sent):
        return Earlier()
    return Earlier(note.last, note.first, note.before)

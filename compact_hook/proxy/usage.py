"""What the provider reported of a request's prompt cache, heard from LiteLLM's success logging.

LiteLLM hands every successful call to ``async_log_success_event`` — all three surfaces,
streaming and not — with the usage converted to one shape in
``standard_logging_object.metadata.usage_object``: ``prompt_tokens`` (all input),
``prompt_tokens_details.cached_tokens`` (read from the cache), and on Anthropic
``cache_read_input_tokens`` / ``cache_creation_input_tokens``. Our report rides in the same
request's metadata (the very object the pre-call hook put there), and names the conversation the
numbers belong to; they are kept for its next request (``engine.ledger``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from compact_hook.core.economics import Heard
from compact_hook.core.pricing import Usage
from compact_hook.proxy import server
from compact_hook.proxy.caller import group_of
from compact_hook.proxy.report import report_in
from compact_hook.proxy.router_summarizer import is_internal_call
from compact_hook.proxy.services import Services

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


class CacheReports:
    """Hears each served request's cache usage and keeps it for its conversation's next request."""

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
            if report is None or not report.conversation or usage is None:
                return
            forwarded = _count(report.get("tokens_after"))
            heard = Heard(usage.cache_read, usage.cache_write, usage.uncached, forwarded)
            await self.services.compactor.ledger.heard(report.conversation, heard, self._ttl(params))
        except Exception:
            logger.exception("compact_hook: could not keep a provider's cache report")

    def _ttl(self, params: Mapping[str, Any]) -> float:
        """The cache lifetime of the request's model group (the base setting if it is unknown)."""
        router, group = server.proxy_router(), group_of(params)
        config = self.services.models.resolve(router, group) if router is not None and group else None
        return (config or self.services.base).cache_ttl_seconds

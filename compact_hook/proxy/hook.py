"""The LiteLLM proxy callback: LiteLLM's hooks adapted to our own objects, failing open.

Each hook hands its call to one of them: the pre-call hook to the ``RequestGate``
(``proxy.request.gate``), the deployment hooks to ``Recovery`` (``proxy.feedback.recovery``), the headers and
streaming hooks to ``Telemetry`` (``proxy.observe.telemetry``) and the ``/compact`` answer
(``proxy.answers.compact``), the success log to ``Bills`` (``proxy.feedback.usage``). Any error forwards
the request exactly as the client sent it.

LiteLLM only calls hook methods defined on the leaf class itself (a ``vars(cls)`` check),
so every hook method is defined right here, not inherited.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterable, Mapping
from typing import Any

from litellm.integrations.custom_logger import CustomLogger

from compact_hook.core.outcomes import Reason
from compact_hook.engine.compactor import Compactor
from compact_hook.errors import MalformedError
from compact_hook.proxy.answers.codex import CompactionAnswer
from compact_hook.proxy.answers.compact import answer, answered_stream, delivered
from compact_hook.proxy.feedback.recovery import Recovery
from compact_hook.proxy.feedback.usage import Bills
from compact_hook.proxy.lifecycle.logs import configure_logging
from compact_hook.proxy.lifecycle.loop_gc import run_on_loop
from compact_hook.proxy.lifecycle.shutdown import on_shutdown
from compact_hook.proxy.marks import INTERNAL_MARKER, is_internal_call
from compact_hook.proxy.observe.metrics import Metrics, Outcome, default_metrics, serve
from compact_hook.proxy.observe.report import report_in, scrub
from compact_hook.proxy.observe.telemetry import Telemetry
from compact_hook.proxy.recall import Pending, answered, audit_recalls, recalled_stream
from compact_hook.proxy.request.gate import RequestGate
from compact_hook.proxy.request.models import ModelSettings, validate_loaded_proxy_config
from compact_hook.proxy.services import Services
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from compact_hook.state.tokenizers import preload_tokenizers
from compact_hook.wires.guard import RoundFailed
from compact_hook.wires.responses.compaction import without_ours

logger = logging.getLogger(__name__)


def recall_of(data: Mapping[str, Any]) -> Pending | None:
    """What answering the request's recall calls needs, taken from its own report (once)."""
    report = report_in(data)
    return report.take_recall() if report is not None else None


class CompactHook(CustomLogger):
    """``litellm_settings: callbacks: compact_hook.proxy_handler_instance``."""

    def __init__(
        self,
        base: CompactConfig | None = None,
        process: ProcessConfig | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__()
        self.services = Services(
            base or CompactConfig.from_env(),
            process or ProcessConfig.from_env(),
            metrics or default_metrics(),
        )
        self.services.metrics.engine.source = lambda: self.services.built
        self.services.metrics.recent.source = lambda: self.services.recent
        self.telemetry = Telemetry(self.services.metrics, lambda: self.compactor.memory.notices)
        self.gate = RequestGate(self.services, self.telemetry)
        self.recovery = Recovery(self.services)
        self.bills = Bills(self.services)
        serve(self.services.process.metrics_port, self.services.process.metrics_host)
        self._log_limit = configure_logging(self.services.process.log_level)
        on_shutdown(self._flush_logs)
        run_on_loop(self.services.process.gc)
        tokenizers = validate_loaded_proxy_config(self.services.base, self.services.process.lock_ttl_seconds)
        threading.Thread(
            target=preload_tokenizers, args=(tokenizers,), name="compact_hook-preload", daemon=True
        ).start()

    async def _flush_logs(self) -> None:
        """At shutdown: how many lines the rate limit suppressed that no later line said."""
        self._log_limit.flush()

    @property
    def compactor(self) -> Compactor:
        return self.services.compactor

    @property
    def models(self) -> ModelSettings:
        return self.services.models

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        start = time.perf_counter()
        run_on_loop(self.services.process.gc)  # built before the proxy's loop ran: from its first request
        if is_internal_call(data):  # our own summary call, should a LiteLLM path ever re-enter the hooks
            return data
        reply: str | CompactionAnswer | None = None
        try:
            scrub(data, INTERNAL_MARKER)
            reply = await self.gate.handle(user_api_key_dict, data, str(call_type))
        except MalformedError as exc:
            logger.info("compact_hook: request %s passed through: %s", data.get("litellm_call_id"), exc)
            self.telemetry.failed_open(data, call_type, Reason.MALFORMED)
            without_ours(data)
        except Exception:
            logger.exception(
                "compact_hook: internal error, request %s forwarded unchanged", data.get("litellm_call_id")
            )
            self.telemetry.failed_open(data, call_type, Outcome.FAILED_OPEN)
            without_ours(data)  # as sent, but for our own items: never the provider's to read
        self.telemetry.held(data, call_type, start)
        if reply is not None:  # /compact or Codex's compaction: the proxy answers, no model call
            answering = answer(reply, data, str(call_type))
            if answering is not None:
                raise answering
        return data

    async def async_pre_call_deployment_hook(
        self, kwargs: dict[str, Any], call_type: Any
    ) -> dict[str, Any] | None:
        """The retry after a provider's "too long" (see ``proxy.feedback.recovery``): compact to the limit."""
        return await self.recovery.before_attempt(kwargs, call_type)

    async def async_post_call_failure_deployment_hook(
        self,
        request_data: Mapping[str, Any],
        exception: Exception,
        call_type: Any,
        fallback_depth: int | None = None,
    ) -> None:
        """Learn the group's real limit from a context-length error, so the next requests fit."""
        await self.recovery.after_failure(request_data, exception, call_type)

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        """Streams pass through; our own streamed /v1/messages answer is mended where LiteLLM
        hands it to us whole (see ``proxy.answers.compact``); a stream offered the recall tool has our calls
        answered (``proxy.recall``)."""
        pending = recall_of(request_data)
        chunks: AsyncIterable[Any] = answered_stream(response, request_data)
        if pending is not None:  # the recall tool was offered: our calls answered (``proxy.recall``)
            chunks = recalled_stream(pending, request_data, chunks)
        async for chunk in chunks:
            yield chunk
        if pending is not None:
            try:  # the stream has been sent whole: nothing after it may break it
                self.telemetry.recalled(request_data, pending)
                audit_recalls(pending)
            except Exception:
                logger.exception("compact_hook: could not report a stream's recalls")

    async def async_post_call_success_hook(
        self, data: dict[str, Any], user_api_key_dict: Any, response: Any
    ) -> Any:
        """Our answer to Codex's compaction, whole (see ``proxy.answers.compact``); a reply that calls the
        recall tool, answered (``proxy.recall``) — a round that fails raises its error, which the
        client gets and retries (the reply without our calls often says nothing and ends "done");
        other responses untouched."""
        try:
            ours = delivered(data, response)
        except Exception:
            logger.exception("compact_hook: could not deliver our answer")
            return None
        pending = recall_of(data)
        if ours is not None or pending is None:
            return ours
        try:
            return await answered(pending, data, response)
        except RoundFailed as failed:  # the client gets the round's error, and retries
            logger.warning(
                "compact_hook: request %s: a recall round failed: %s", data.get("litellm_call_id"), failed
            )
            raise failed.error from None
        except Exception:  # ours: the reply as it came rather than a reply that says nothing
            logger.exception(
                "compact_hook: request %s: could not answer its recall calls", data.get("litellm_call_id")
            )
            return None
        finally:
            self.telemetry.recalled(data, pending)
            audit_recalls(pending)

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """What the provider billed a request we reported on (``proxy.feedback.usage``)."""
        await self.bills.heard(kwargs)

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        """A request offered the recall tool that failed leaves nothing behind (``proxy.recall``)."""
        recall_of(request_data)

    async def async_post_call_response_headers_hook(
        self,
        data: dict[str, Any],
        user_api_key_dict: Any,
        response: Any,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, Any] | None = None,
    ) -> dict[str, str] | None:
        return self.telemetry.headers(data)


proxy_handler_instance = CompactHook()

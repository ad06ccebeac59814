"""The LiteLLM proxy callback: orchestration only, and it fails open.

``async_pre_call_hook`` gates the request (a handled call type, an enabled model, not our
own summary call), lets the call type's wire format parse it, hands the conversation to the
engine, and lets the format render the result back into the request. Any error forwards
the request exactly as the client sent it. Stats go into the request's proxy metadata
(``metadata`` on chat, ``litellm_metadata`` on /v1/messages and /v1/responses; never
top-level keys: those reach the provider) and out as ``x-compact-*`` response headers.

LiteLLM only calls hook methods defined on the leaf class itself (a ``vars(cls)`` check),
so every hook method is defined right here, not inherited.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from litellm.integrations.custom_logger import CustomLogger

from compact_hook.config import CompactConfig, ProcessConfig
from compact_hook.core.chain import scope_of
from compact_hook.core.outcomes import Mode, Reason
from compact_hook.engine.background import Background
from compact_hook.engine.compactor import Compactor
from compact_hook.engine.prepare import PrepareSetup
from compact_hook.engine.result import CompactRequest, CompactResult
from compact_hook.engine.run import ProcessMemory
from compact_hook.engine.summarize import PROMPT_VERSION
from compact_hook.errors import MalformedError
from compact_hook.formats import Rejected, WireFormat, format_for
from compact_hook.formats.base import Conversation
from compact_hook.formats.command import command_in, ran_command
from compact_hook.proxy import server
from compact_hook.proxy.answer import ANSWERED, answer, answer_text, anthropic_events, is_whole_message
from compact_hook.proxy.control import Control, control_of, with_command
from compact_hook.proxy.logs import configure_logging
from compact_hook.proxy.metrics import Labels, Metrics, Outcome, default_metrics, serve
from compact_hook.proxy.models import ModelSettings, validate_model_list
from compact_hook.proxy.recovery import (
    RETRY_KEY,
    LearnedWindows,
    Overflow,
    Snapshots,
    attach_fallbacks,
    is_context_error,
    is_retry,
    last_failure,
)
from compact_hook.proxy.report import (
    record,
    record_savings,
    rejected_report,
    report_in,
    report_of,
    response_headers,
    scrub,
)
from compact_hook.proxy.router_summarizer import (
    INTERNAL_MARKER,
    RouterSummarizer,
    is_internal_call,
    summary_metadata,
)
from compact_hook.proxy.shutdown import on_shutdown, shutting_down
from compact_hook.state.archive import ArchiveFolders, Origin, conversation_session_id
from compact_hook.state.store import build_prepared_store, build_store
from compact_hook.state.tokenizers import load_tokenizer

logger = logging.getLogger(__name__)


class CompactHook(CustomLogger):
    """``litellm_settings: callbacks: compact_hook.proxy_handler_instance``."""

    def __init__(
        self,
        base: CompactConfig | None = None,
        process: ProcessConfig | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__()
        self.base = base or CompactConfig.from_env()
        self.process = process or ProcessConfig.from_env()
        self.models = ModelSettings(self.base)
        self.metrics = metrics or default_metrics()
        self.metrics.engine.source = lambda: self._compactor
        serve(self.process.metrics_port, self.process.metrics_host)
        self.snapshots = Snapshots()
        self._compactor: Compactor | None = None
        self._learned: LearnedWindows | None = None
        configure_logging(self.process.log_level)
        tokenizers = validate_loaded_proxy_config(self.base)
        threading.Thread(
            target=preload_tokenizers, args=(tokenizers,), name="compact_hook-preload", daemon=True
        ).start()

    @property
    def compactor(self) -> Compactor:
        """Built on first use: LiteLLM's own Redis settings are only known once its config is loaded."""
        if self._compactor is None:
            litellm_redis = server.proxy_global("redis_usage_cache")
            prepared = build_prepared_store(self.process, litellm_redis)
            background = Background(self.process.prepare_concurrency, self.process.prepare_queue)
            self._compactor = Compactor(
                build_store(self.process, litellm_redis),
                lock_ttl=self.process.lock_ttl_seconds,
                lock_wait=self.process.lock_wait_seconds,
                failure_ttl=self.process.failure_ttl_seconds,
                prepare=PrepareSetup(prepared, background, shutting_down) if prepared is not None else None,
                memory=ProcessMemory(folders=ArchiveFolders(self.process.archive_max_age_days)),
            )
            on_shutdown(self._compactor.close)
        return self._compactor

    @property
    def learned(self) -> LearnedWindows:
        """Windows providers taught us, in the compactor's store (replicas share them)."""
        if self._learned is None:
            self._learned = LearnedWindows(self.compactor.store)
        return self._learned

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        start = time.perf_counter()
        if is_internal_call(data):  # our own summary call, should a LiteLLM path ever re-enter the hooks
            return data
        reply: str | None = None
        try:
            scrub(data, INTERNAL_MARKER)
            reply = await self._compact_request(user_api_key_dict, data, str(call_type))
        except MalformedError as exc:
            logger.info("compact_hook: request %s passed through: %s", data.get("litellm_call_id"), exc)
            self.metrics.outcome(Reason.MALFORMED, self._labels(data, call_type))
        except Exception:
            logger.exception(
                "compact_hook: internal error, request %s forwarded unchanged", data.get("litellm_call_id")
            )
            self.metrics.outcome(Outcome.FAILED_OPEN, self._labels(data, call_type))
        report = report_in(data)
        if report is not None:
            elapsed = time.perf_counter() - start
            report["duration_ms"] = round(elapsed * 1000, 3)
            self.metrics.held(elapsed, self._labels(data, call_type))
        if reply is not None:  # /compact: the proxy answers, no model call
            raise answer(reply, str(data.get("model")), data)
        return data

    def _labels(self, data: Mapping[str, Any], call_type: object) -> Labels:
        wire = format_for(str(call_type))
        return self.metrics.labels(str(data.get("model")), wire.name if wire is not None else "")

    async def async_pre_call_deployment_hook(
        self, kwargs: dict[str, Any], call_type: Any
    ) -> dict[str, Any] | None:
        """The retry after a provider's "too long" (see ``proxy.recovery``): compact to the limit."""
        marked = RETRY_KEY in kwargs
        if not is_retry(kwargs):
            return kwargs if marked else None  # a client's imitation, popped: it must not reach the provider
        failure = last_failure(kwargs)
        if not is_context_error(failure):  # a fallback for another error: that error stands
            snapshot = self.snapshots.pop(kwargs.get("litellm_call_id"))
            raise snapshot if snapshot is not None else RuntimeError(failure or "upstream error")
        try:
            await self._recover(kwargs, _name_of(call_type), Overflow.parse(failure))
        except Exception:
            logger.exception(
                "compact_hook: could not compact request %s to retry it", kwargs.get("litellm_call_id")
            )
        return kwargs

    async def async_post_call_failure_deployment_hook(
        self,
        request_data: Mapping[str, Any],
        exception: Exception,
        call_type: Any,
        fallback_depth: int | None = None,
    ) -> None:
        """Learn the group's real limit from a context-length error, so the next requests fit."""
        try:
            if is_context_error(exception):
                await self._learn(request_data, Overflow.parse(str(exception)))
            elif _name_of(call_type) == "aresponses" and report_in(request_data) is not None:
                # our retry on /v1/responses follows any error: it must be able to re-raise this one
                self.snapshots.add(request_data.get("litellm_call_id"), exception)
        except Exception:
            logger.exception("compact_hook: could not learn from a provider's error")

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        """Streams pass through; our own streamed /v1/messages answer becomes proper SSE events."""
        report = report_in(request_data)
        if report is None or not report.get(ANSWERED):
            async for chunk in response:
                yield chunk
            return
        async for chunk in response:
            if is_whole_message(chunk):
                for event in anthropic_events(chunk):
                    yield event
            else:
                yield chunk

    def _say_rejected(self, group: str, wire: str, rejected: Rejected, call_id: object) -> None:
        """Every such request at INFO; the first per model group and reason at WARNING (a silent
        pass-through on every turn is how Claude Code's went unseen). The group is one the router
        knows, so the notices cannot be grown by invented names."""
        if self.compactor.memory.notices.first(("rejected", group, rejected.reason)):
            logger.warning(
                "compact_hook: model group %s (%s): requests forwarded untouched (%s: %s); this is said "
                "once per model group and reason, each request is logged at INFO",
                group,
                wire,
                rejected.reason.value,
                rejected.detail,
            )
        logger.info(
            "compact_hook: request %s passed through: %s %s", call_id, rejected.reason.value, rejected.detail
        )

    async def async_post_call_response_headers_hook(
        self,
        data: dict[str, Any],
        user_api_key_dict: Any,
        response: Any,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, Any] | None = None,
    ) -> dict[str, str] | None:
        try:
            report = report_in(data)
            return response_headers(report) if report is not None else None
        except Exception:  # a header hook that raises breaks the client's response
            logger.exception("compact_hook: could not build response headers")
            return None

    async def _compact_request(
        self, user_api_key_dict: Any, data: dict[str, Any], call_type: str
    ) -> str | None:
        """Gate, parse, compact, render: ``data`` changes only at the very end, once all succeeded.

        Returns the proxy's own answer when the request is a ``/compact`` command.
        """
        wire = format_for(call_type)
        router = server.proxy_router()
        model = data.get("model")
        if wire is None or router is None or not isinstance(model, str):
            return None
        resolved = self.models.resolve(router, model)
        if resolved is None:
            return None
        self.metrics.known_group(model)
        where = self.metrics.labels(model, wire.name)
        control = control_of(data, wire.metadata_key, user_api_key_dict)
        config = await self._settings(resolved, model, control)
        parsed = wire.parse(data)
        if isinstance(parsed, Rejected):
            self._say_rejected(model, wire.name, parsed, data.get("litellm_call_id"))
            record(data, wire.metadata_key, rejected_report(parsed, wire.name))
            self.metrics.outcome(parsed.reason, where)
            return None
        command = command_in(parsed.entries[-1]) if parsed.entries else None
        if command is not None:
            control = with_command(control, command)
            parsed = parsed.without_last()
        session_id, tenant = session_id_of(data, parsed.entries), tenant_of(user_api_key_dict)
        request = self._engine_request(
            data, wire, parsed, config, Engaged(model, session_id, tenant, control)
        )
        result = await self.compactor.compact(request)
        self.metrics.observe(result, where)
        report = report_of(result, session_id, wire.name)
        report.tenant = tenant
        record(data, wire.metadata_key, report)
        record_savings(data, wire.metadata_key, result)
        if command is not None:
            report[ANSWERED] = True
            return answer_text(result)
        if _changed(result.messages, parsed.entries):
            wire.render(data, result.messages)
            _log_reshaped(data, wire, model, result)
        if config.recover and control.mode is not Mode.OFF:
            attach_fallbacks(data, model, router, call_type)
        return None

    async def _settings(self, config: CompactConfig, model: str, control: Control) -> CompactConfig:
        """The model's settings, the key's and team's overrides, and a window a provider taught us."""
        config = control.settings(config)
        learned = await self.learned.get(model) if config.recover else None
        if learned is not None and (config.context_window is None or learned < config.context_window):
            config = dataclasses.replace(config, context_window=learned)
        return config

    def _engine_request(
        self,
        data: Mapping[str, Any],
        wire: WireFormat,
        parsed: Conversation,
        config: CompactConfig,
        who: Engaged,
    ) -> CompactRequest:
        summary_model = config.summary_model or who.model
        return CompactRequest(
            parsed,
            config,
            RouterSummarizer(
                server.proxy_router(),
                summary_model,
                config.summary_max_tokens,
                config.summary_timeout_seconds,
                summary_metadata(data.get(wire.metadata_key), who.session_id),
            ),
            who.session_id,
            scope=scope_of(config, who.model, who.tenant, wire.name, PROMPT_VERSION),
            tenant=who.tenant,
            mode=who.control.mode,
            focus=who.control.focus,
            recall=ran_command(parsed.entries),
            summary_model=summary_model,
            origin=Origin(who.model, wire.name, str(data.get("litellm_call_id") or "")),
        )

    async def _recover(self, kwargs: dict[str, Any], call_type: str, overflow: Overflow) -> None:
        """Compact the refused request, forced, to the window its error taught us, as the same
        tenant and session the pre-call hook saw (its report says)."""
        wire, router, previous = format_for(call_type), server.proxy_router(), report_in(kwargs)
        group = _group_of(kwargs)
        if wire is None or router is None or group is None or previous is None:
            return
        config = self.models.resolve(router, group)
        parsed = wire.parse(kwargs) if config is not None else None
        window = await self._learn(kwargs, overflow)
        if config is None or parsed is None or isinstance(parsed, Rejected) or window is None:
            return
        session_id = str(previous.get("session_id") or session_id_of(kwargs, parsed.entries))
        who = Engaged(group, session_id, previous.tenant, Control(Mode.FORCE))
        request = self._engine_request(
            kwargs, wire, parsed, dataclasses.replace(config, context_window=window), who
        )
        result = await self.compactor.compact(request)
        previous.update(
            report_of(result, session_id, wire.name), recovered=True
        )  # what the headers hook reads
        record_savings(kwargs, wire.metadata_key, result)
        if _changed(result.messages, parsed.entries):
            wire.render(kwargs, result.messages)
        logger.warning(
            "compact_hook: request %s (%s) was too long for the provider; retried at %d tokens (window %d)",
            kwargs.get("litellm_call_id"),
            group,
            result.output_tokens,
            window,
        )

    async def _learn(self, request: Mapping[str, Any], overflow: Overflow) -> int | None:
        """Remember the window the provider's error implies for the request's model group.

        Our count of what was sent is our report's ``tokens_after`` (retry fallbacks only ride on
        requests we reported on); None when there is nothing to learn from.
        """
        report, group, router = report_in(request), _group_of(request), server.proxy_router()
        config = self.models.resolve(router, group) if router is not None and group is not None else None
        counted = report.get("tokens_after") if report is not None else None
        if group is None or config is None or not config.recover or not isinstance(counted, int):
            return None
        return await self.learned.learn(group, overflow.window(counted), config.learned_window_ttl_seconds)


@dataclass(frozen=True, slots=True)
class Engaged:
    """Whose request it is and what they asked: model group, session, tenant, control."""

    model: str
    session_id: str
    tenant: str
    control: Control


def _name_of(call_type: Any) -> str:
    """A LiteLLM call type (a ``CallTypes`` member in deployment hooks) as its string."""
    return str(getattr(call_type, "value", call_type))


def _group_of(request: Mapping[str, Any]) -> str | None:
    """The model group of a deployment call (its ``model`` is the provider's by then)."""
    for key in ("litellm_metadata", "metadata"):
        metadata = request.get(key)
        group = metadata.get("model_group") if isinstance(metadata, Mapping) else None
        if isinstance(group, str) and group:
            return group
    model = request.get("model")
    return model if isinstance(model, str) else None


def _changed(forwarded: list[Any], sent: list[Any]) -> bool:
    return len(forwarded) != len(sent) or any(a is not b for a, b in zip(forwarded, sent, strict=True))


def _log_reshaped(data: Mapping[str, Any], wire: WireFormat, model: str, result: CompactResult) -> None:
    logger.info(
        "compact_hook: request %s (%s, %s) reshaped, cache %s: %d -> %d tokens, %d messages summarized, "
        "%d outputs truncated, %d results cleared, %d messages dropped, %d summary calls, archive %s",
        data.get("litellm_call_id"),
        model,
        wire.name,
        result.cache.value,
        result.input_tokens,
        result.output_tokens,
        result.stats.compacted_message_count,
        result.truncated,
        result.cleared,
        result.dropped,
        result.summary_calls,
        result.archive_path,
    )


SESSION_KEYS = ("session_id", "litellm_session_id")


def session_id_of(data: Mapping[str, Any], entries: list[Any]) -> str:
    """The client's own session id where it sends one; else a hash of the conversation's start.

    Looked for in the proxy's metadata (``session_id``, ``litellm_session_id``), then
    ``litellm_session_id``, ``user``, Responses' ``prompt_cache_key`` (Codex sends its
    conversation id there) and Anthropic's ``metadata.user_id`` (Claude Code's includes its session).
    """
    candidates: list[object] = []
    for key in ("metadata", "litellm_metadata"):
        metadata = data.get(key)
        if isinstance(metadata, Mapping):
            candidates.extend(metadata.get(name) for name in SESSION_KEYS)
    candidates.extend(data.get(name) for name in ("litellm_session_id", "user", "prompt_cache_key"))
    provider_metadata = data.get("metadata")
    if isinstance(provider_metadata, Mapping):
        candidates.append(provider_metadata.get("user_id"))
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return conversation_session_id(entries)


def preload_tokenizers(specs: Iterable[str]) -> None:
    """Load the tokenizers the configured models use (≈1 s each) while the proxy starts; the
    others are never loaded (o200k alone is ~130 MB)."""
    for spec in specs:
        try:
            load_tokenizer(spec)
        except Exception:
            logger.exception("compact_hook: could not preload the %s tokenizer", spec)


def tenant_of(user_api_key_dict: Any) -> str:
    """Who may reuse a stored compaction: the caller's team, else their key (hashed), else nobody."""
    team = getattr(user_api_key_dict, "team_id", None)
    if isinstance(team, str) and team:
        return f"team:{team}"
    for attribute in ("token", "api_key"):
        key = getattr(user_api_key_dict, attribute, None)
        if isinstance(key, str) and key:
            return f"key:{key}"
    return "anonymous"


def validate_loaded_proxy_config(base: CompactConfig) -> set[str]:
    """Fail proxy start-up on a bad ``compact`` block, naming the model and the key; return the
    tokenizers the compacting models use.

    LiteLLM builds its callbacks while it loads the config file and before it builds the
    router, so we read the same file it is loading.
    """
    path = server.proxy_global("user_config_file_path")
    if not isinstance(path, str) or not Path(path).is_file():
        return set()
    config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    model_list = config.get("model_list") if isinstance(config, Mapping) else None
    if not isinstance(model_list, list):
        return set()
    return validate_model_list(model_list, base)


proxy_handler_instance = CompactHook()

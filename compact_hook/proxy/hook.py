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

import logging
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from litellm.integrations.custom_logger import CustomLogger

from compact_hook.config import CompactConfig, ProcessConfig
from compact_hook.core.chain import scope_of
from compact_hook.engine.compactor import Compactor
from compact_hook.engine.result import CompactRequest, CompactResult
from compact_hook.engine.summarize import PROMPT_VERSION
from compact_hook.errors import MalformedError
from compact_hook.formats import Rejected, WireFormat, format_for
from compact_hook.proxy.logs import configure_logging
from compact_hook.proxy.models import ModelSettings, validate_model_list
from compact_hook.proxy.report import (
    record,
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
from compact_hook.state.archive import conversation_session_id
from compact_hook.state.store import build_store
from compact_hook.state.tokenizers import load_tokenizer

logger = logging.getLogger(__name__)


class CompactHook(CustomLogger):
    """``litellm_settings: callbacks: compact_hook.proxy_handler_instance``."""

    def __init__(self, base: CompactConfig | None = None, process: ProcessConfig | None = None) -> None:
        super().__init__()
        self.base = base or CompactConfig.from_env()
        self.process = process or ProcessConfig.from_env()
        self.models = ModelSettings(self.base)
        self._compactor: Compactor | None = None
        configure_logging(self.process.log_level)
        tokenizers = validate_loaded_proxy_config(self.base)
        threading.Thread(
            target=preload_tokenizers, args=(tokenizers,), name="compact_hook-preload", daemon=True
        ).start()

    @property
    def compactor(self) -> Compactor:
        """Built on first use: LiteLLM's own Redis settings are only known once its config is loaded."""
        if self._compactor is None:
            litellm_redis = getattr(sys.modules.get("litellm.proxy.proxy_server"), "redis_usage_cache", None)
            self._compactor = Compactor(
                build_store(self.process, litellm_redis),
                lock_ttl=self.process.lock_ttl_seconds,
                lock_wait=self.process.lock_wait_seconds,
                failure_ttl=self.process.failure_ttl_seconds,
            )
        return self._compactor

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        start = time.perf_counter()
        if is_internal_call(data):  # our own summary call, should a LiteLLM path ever re-enter the hooks
            return data
        try:
            scrub(data, INTERNAL_MARKER)
            await self._compact_request(user_api_key_dict, data, str(call_type))
        except MalformedError as exc:
            logger.info("compact_hook: request %s passed through: %s", data.get("litellm_call_id"), exc)
        except Exception:
            logger.exception(
                "compact_hook: internal error, request %s forwarded unchanged", data.get("litellm_call_id")
            )
        report = report_in(data)
        if report is not None:
            report["duration_ms"] = round((time.perf_counter() - start) * 1000, 3)
        return data

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

    async def _compact_request(self, user_api_key_dict: Any, data: dict[str, Any], call_type: str) -> None:
        """Gate, parse, compact, render: ``data`` changes only at the very end, once all succeeded."""
        wire = format_for(call_type)
        if wire is None:
            return
        router = _proxy_router()
        model = data.get("model")
        if router is None or not isinstance(model, str):
            return
        config = self.models.resolve(router, model)
        if config is None:
            return
        parsed = wire.parse(data)
        if isinstance(parsed, Rejected):
            logger.info(
                "compact_hook: request %s passed through: %s %s",
                data.get("litellm_call_id"),
                parsed.reason.value,
                parsed.detail,
            )
            record(data, wire.metadata_key, rejected_report(parsed, wire.name))
            return
        session_id = session_id_of(data, parsed.entries)
        tenant = tenant_of(user_api_key_dict)
        request = CompactRequest(
            parsed,
            config,
            RouterSummarizer(
                router,
                config.summary_model or model,
                config.summary_max_tokens,
                config.summary_timeout_seconds,
                summary_metadata(data.get(wire.metadata_key), session_id),
            ),
            session_id,
            scope=scope_of(config, model, tenant, wire.name, PROMPT_VERSION),
            tenant=tenant,
        )
        result = await self.compactor.compact(request)
        record(data, wire.metadata_key, report_of(result, session_id, wire.name))
        if _changed(result.messages, parsed.entries):
            wire.render(data, result.messages)
            _log_reshaped(data, wire, model, result)


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


def _proxy_router() -> Any:
    proxy_server = sys.modules.get("litellm.proxy.proxy_server")
    return getattr(proxy_server, "llm_router", None) if proxy_server is not None else None


def validate_loaded_proxy_config(base: CompactConfig) -> set[str]:
    """Fail proxy start-up on a bad ``compact`` block, naming the model and the key; return the
    tokenizers the compacting models use.

    LiteLLM builds its callbacks while it loads the config file and before it builds the
    router, so we read the same file it is loading.
    """
    proxy_server = sys.modules.get("litellm.proxy.proxy_server")
    path = getattr(proxy_server, "user_config_file_path", None) if proxy_server is not None else None
    if not isinstance(path, str) or not Path(path).is_file():
        return set()
    config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    model_list = config.get("model_list") if isinstance(config, Mapping) else None
    if not isinstance(model_list, list):
        return set()
    return validate_model_list(model_list, base)


proxy_handler_instance = CompactHook()

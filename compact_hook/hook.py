"""The LiteLLM proxy callback: orchestration only, and it fails open.

``async_pre_call_hook`` gates the request (call type, enabled model, well-formed messages,
not our own summary call), hands it to the engine, and swaps in the compacted messages.
Any error forwards the request exactly as the client sent it. Stats go into the request's
``metadata`` (never top-level keys: those reach the provider) and out as ``x-compact-*``
response headers.

LiteLLM only calls hook methods defined on the leaf class itself (a ``vars(cls)`` check),
so every hook method is defined right here, not inherited.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from litellm.integrations.custom_logger import CustomLogger

from compact_hook.archive import conversation_session_id
from compact_hook.chain import scope_of
from compact_hook.config import CompactConfig, ProcessConfig
from compact_hook.engine import DEFAULT_TOKENIZER, Compactor, CompactResult, counter_for_config
from compact_hook.models import ModelSettings, validate_model_list
from compact_hook.router_summarizer import RouterSummarizer, is_internal_call, summary_metadata
from compact_hook.store import build_store
from compact_hook.tokens import load_tokenizer

logger = logging.getLogger(__name__)

METADATA_KEY = "compact_hook"
HANDLED_CALL_TYPES = frozenset({"acompletion", "completion"})
HEADER_PREFIX = "x-compact-"


class CompactHook(CustomLogger):
    """``litellm_settings: callbacks: compact_hook.proxy_handler_instance``."""

    def __init__(self, base: CompactConfig | None = None, process: ProcessConfig | None = None) -> None:
        super().__init__()
        self.base = base or CompactConfig.from_env()
        self.process = process or ProcessConfig.from_env()
        self.models = ModelSettings(self.base)
        self._compactor: Compactor | None = None
        configure_logging(self.process.log_level)
        validate_loaded_proxy_config(self.base)
        threading.Thread(target=preload_tokenizer, name="compact_hook-preload", daemon=True).start()

    @property
    def compactor(self) -> Compactor:
        """Built on first use: LiteLLM's own Redis settings are only known once its config is loaded."""
        if self._compactor is None:
            litellm_redis = getattr(sys.modules.get("litellm.proxy.proxy_server"), "redis_usage_cache", None)
            self._compactor = Compactor(
                build_store(self.process, litellm_redis),
                lock_ttl=self.process.lock_ttl_seconds,
                lock_wait=self.process.lock_wait_seconds,
            )
        return self._compactor

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            await self._compact_request(user_api_key_dict, data, str(call_type))
        except Exception:
            logger.exception(
                "compact_hook: internal error, request %s forwarded unchanged", data.get("litellm_call_id")
            )
        report = _report_in(data)
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
        report = _report_in(data)
        return response_headers(report) if report is not None else None

    async def _compact_request(self, user_api_key_dict: Any, data: dict[str, Any], call_type: str) -> None:
        """Mutates ``data`` only at the very end, once everything has succeeded."""
        if call_type not in HANDLED_CALL_TYPES or is_internal_call(data):
            return
        router = _proxy_router()
        model = data.get("model")
        config = self.models.resolve(router, model) if router is not None and isinstance(model, str) else None
        if config is None:
            return
        messages = data.get("messages")
        if not isinstance(messages, list):  # the engine checks the rest of the shape
            logger.info(
                "compact_hook: request %s passed through: messages is not a list", data.get("litellm_call_id")
            )
            _record(data, {"compacted": False, "reason": "malformed"})
            return
        assert isinstance(model, str)
        session_id = session_id_of(data, messages)
        summarizer = RouterSummarizer(
            router,
            config.summary_model or model,
            config.summary_max_tokens,
            config.summary_timeout_seconds,
            summary_metadata(data.get("metadata"), session_id),
        )
        result = await self.compactor.compact(
            messages,
            config,
            summarizer,
            session_id,
            scope=scope_of(config, model, tenant_of(user_api_key_dict)),
            max_output_tokens=_max_output_tokens(data),
            counter=counter_for_config(config),
        )
        if result.reason.startswith("malformed"):
            logger.info(
                "compact_hook: request %s passed through: %s", data.get("litellm_call_id"), result.reason
            )
        _record(data, report_of(result, session_id))
        if _changed(result.messages, messages):
            data["messages"] = result.messages
            logger.info(
                "compact_hook: request %s (%s) reshaped, cache %s: %d -> %d tokens, %d messages summarized, "
                "%d outputs truncated, %d results cleared, %d messages dropped, %d summary calls, archive %s",
                data.get("litellm_call_id"),
                model,
                result.cache,
                result.input_tokens,
                result.output_tokens,
                result.stats.compacted_message_count,
                result.truncated,
                result.cleared,
                result.dropped,
                result.summary_calls,
                result.archive_path,
            )


def _changed(forwarded: list[Any], sent: list[Any]) -> bool:
    return len(forwarded) != len(sent) or any(a is not b for a, b in zip(forwarded, sent, strict=True))


def report_of(result: CompactResult, session_id: str) -> dict[str, Any]:
    """What we did, for metadata (logging callbacks, spend logs) and response headers."""
    report: dict[str, Any] = {
        "compacted": result.compacted,
        "tokens_before": result.input_tokens,
        "tokens_after": result.output_tokens or result.input_tokens,
        "session_id": session_id,
        "cache": result.cache,
        "summary_calls": result.summary_calls,
        "truncated": result.truncated,
        "cleared": result.cleared,
        "dropped": result.dropped,
        "normalized": result.normalized,
    }
    if result.compacted:
        report["messages_summarized"] = result.stats.compacted_message_count
        report["compaction_ratio"] = result.stats.compaction_ratio
        report["summarizer"] = result.summarizer
        report["archive"] = str(result.archive_path) if result.archive_path else None
    if result.reason:
        report["reason"] = result.reason.partition(":")[0]
    return report


def response_headers(report: Mapping[str, Any]) -> dict[str, str]:
    names = (
        "compacted",
        "tokens_before",
        "tokens_after",
        "messages_summarized",
        "compaction_ratio",
        "cache",
        "summary_calls",
        "summarizer",
        "truncated",
        "cleared",
        "dropped",
        "normalized",
        "duration_ms",
        "reason",
    )
    headers = {}
    for name in names:
        if name in report and report[name] is not None:
            value = report[name]
            text = str(value).lower() if isinstance(value, bool) else str(value)
            headers[HEADER_PREFIX + name.replace("_", "-")] = text
    return headers


def _report_in(data: Mapping[str, Any]) -> dict[str, Any] | None:
    metadata = data.get("metadata") if isinstance(data, Mapping) else None
    report = metadata.get(METADATA_KEY) if isinstance(metadata, Mapping) else None
    return report if isinstance(report, dict) else None


def _record(data: dict[str, Any], report: dict[str, Any]) -> None:
    metadata = data.get("metadata")
    if metadata is None:
        metadata = data["metadata"] = {}
    if isinstance(metadata, dict):
        metadata[METADATA_KEY] = report


def session_id_of(data: Mapping[str, Any], messages: list[Any]) -> str:
    """The client's own session id where it sends one; else a hash of the conversation's start."""
    metadata = data.get("metadata") if isinstance(data.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    for candidate in (
        metadata.get("session_id"),
        metadata.get("litellm_session_id"),
        data.get("litellm_session_id"),
        data.get("user"),
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return conversation_session_id(messages)


def preload_tokenizer() -> None:
    """Load the default tokenizer (≈1 s) while the proxy starts, not on the first request."""
    try:
        load_tokenizer(DEFAULT_TOKENIZER)
    except Exception:
        logger.exception("compact_hook: could not preload the %s tokenizer", DEFAULT_TOKENIZER)


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


def configure_logging(level: str) -> None:
    """Our log lines (one per summary call, one per compaction) must reach the proxy's stderr."""
    package_logger = logging.getLogger("compact_hook")
    package_logger.setLevel(level.upper())
    if not package_logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        package_logger.addHandler(handler)


def _max_output_tokens(data: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _proxy_router() -> Any:
    proxy_server = sys.modules.get("litellm.proxy.proxy_server")
    return getattr(proxy_server, "llm_router", None) if proxy_server is not None else None


def validate_loaded_proxy_config(base: CompactConfig) -> None:
    """Fail proxy start-up on a bad ``compact`` block, naming the model and the key.

    LiteLLM builds its callbacks while it loads the config file and before it builds the
    router, so we read the same file it is loading.
    """
    proxy_server = sys.modules.get("litellm.proxy.proxy_server")
    path = getattr(proxy_server, "user_config_file_path", None) if proxy_server is not None else None
    if not isinstance(path, str) or not Path(path).is_file():
        return
    config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    model_list = config.get("model_list") if isinstance(config, Mapping) else None
    if isinstance(model_list, list):
        validate_model_list(model_list, base)


proxy_handler_instance = CompactHook()

"""Who a request is from and what the engine is asked for it.

The session names the archive folder and is the client's own where it sends one; the tenant
separates every stored compaction, cached count and archive (a team, else a key). Both the
pre-call path and the retry after a provider's "too long" build their engine request here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compact_hook.core.calibration import IDENTITY, CountRatio
from compact_hook.core.chain import Owner, scope_of
from compact_hook.core.pricing import Prices
from compact_hook.engine.result import CompactRequest
from compact_hook.engine.summary.summarize import PROMPT_VERSION
from compact_hook.proxy import server
from compact_hook.proxy.marks import metadata_of, own_call_metadata
from compact_hook.proxy.request.control import Control
from compact_hook.proxy.request.summarizer import RouterSummarizer, Spending
from compact_hook.settings.model import CompactConfig
from compact_hook.state.archive import Origin, conversation_session_id
from compact_hook.wires.command import ran_command
from compact_hook.wires.conversation import Conversation

SESSION_KEYS = ("session_id", "litellm_session_id")


@dataclass(frozen=True, slots=True)
class Pricing:
    """What the model's and the summary model's tokens cost (None: not priced)."""

    model: Prices | None = None
    summary: Prices | None = None


@dataclass(frozen=True, slots=True)
class Caller:
    """Whose request it is, before it is parsed: the tenant, and the key's and team's control (what
    its settings are settled for, ``proxy.request.settings``; ``Engaged`` adds the model and session)."""

    tenant: str
    control: Control


@dataclass(frozen=True, slots=True)
class Engaged:
    """Whose request it is and what they asked: model group, session, tenant, control."""

    model: str
    session_id: str
    tenant: str
    control: Control


@dataclass(frozen=True, slots=True)
class Settled:
    """What a request to a compacting model group is compacted under: its settings (the key's and
    team's overrides applied), its prices, how the group's provider counts against us and the window
    it taught, if any (``proxy.request.settings.settle``)."""

    config: CompactConfig
    pricing: Pricing = Pricing()
    ratio: CountRatio = IDENTITY
    window: int | None = None
    """A window below the configured one that a provider taught (``core.limits`` decides its use)."""


def engine_request(
    data: Mapping[str, Any],
    parsed: Conversation,
    who: Engaged,
    settled: Settled,
    on_spent: Callable[[float], None] | None = None,
) -> CompactRequest:
    """The engine's request: the conversation, its settings, a summarizer through the proxy's
    router (spend on the caller's key, each call's cost told to ``on_spent``), and the scope that
    keeps tenants and settings apart."""
    config, pricing, wire = settled.config, settled.pricing, parsed.wire
    summary_model = config.summary_model or who.model
    metadata = own_call_metadata(data.get(wire.metadata_key), who.session_id)
    summarizer = RouterSummarizer(
        server.proxy_router(), summary_model, config, metadata, on_spent or Spending()
    )
    summarizer.prices = pricing.summary
    return CompactRequest(
        parsed,
        config,
        summarizer,
        who.session_id,
        scope=scope_of(config, Owner(who.model, who.tenant, wire.name), PROMPT_VERSION),
        tenant=who.tenant,
        mode=who.control.mode,
        focus=who.control.focus,
        restore=ran_command(parsed.entries, parsed.known.commands if parsed.known is not None else None),
        summary_model=summary_model,
        origin=Origin(who.model, wire.name, str(data.get("litellm_call_id") or "")),
        prices=pricing.model,
        summary_prices=pricing.summary,
        count_ratio=settled.ratio,
        learned_window=settled.window,
    )


def session_id_of(data: Mapping[str, Any], entries: list[Any]) -> str:
    """The client's own session id where it sends one; else a hash of the conversation's start.

    Looked for in the proxy's metadata (``session_id``, ``litellm_session_id``), then
    ``litellm_session_id``, ``user``, Responses' ``prompt_cache_key`` (Codex sends its
    conversation id there) and Anthropic's ``metadata.user_id`` (Claude Code's includes its session).
    """
    # ``metadata`` first, then ``litellm_metadata``
    candidates: list[object] = [m.get(name) for m in reversed(metadata_of(data)) for name in SESSION_KEYS]
    candidates.extend(data.get(name) for name in ("litellm_session_id", "user", "prompt_cache_key"))
    provider_metadata = data.get("metadata")
    if isinstance(provider_metadata, Mapping):
        candidates.append(provider_metadata.get("user_id"))
    found = next((c.strip() for c in candidates if isinstance(c, str) and c.strip()), "")
    return found or conversation_session_id(entries)


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


def call_type_name(call_type: Any) -> str:
    """A LiteLLM call type (a ``CallTypes`` member in deployment hooks) as its string."""
    return str(getattr(call_type, "value", call_type))


def group_of(request: Mapping[str, Any]) -> str | None:
    """The model group of a deployment call (its ``model`` is the provider's by then)."""
    for metadata in metadata_of(request):
        group = metadata.get("model_group")
        if isinstance(group, str) and group:
            return group
    model = request.get("model")
    return model if isinstance(model, str) else None

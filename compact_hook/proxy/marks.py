"""The marks of the proxy's own calls: a summary, a recall round, the retry a compacting request
carries to its own group. ``INTERNAL_MARKER`` in a call's metadata lets every hook of ours
recognise it as ours, so it is never compacted itself. Its value is a secret drawn when the
process starts, so a client cannot set it (and the hook strips any client value at entry anyway).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

INTERNAL_MARKER = "compact_hook_internal"
INTERNAL_TOKEN = secrets.token_hex(16)
RETRY_KEY = "compact_hook_retry"
"""The mark, with ``INTERNAL_TOKEN``, of the retry a compacting request carries to its own group
(``proxy.feedback.recovery``)."""

PROPAGATED_METADATA_KEYS = (
    "user_api_key",
    "user_api_key_hash",
    "user_api_key_alias",
    "user_api_key_team_id",
    "user_api_key_team_alias",
    "user_api_key_user_id",
    "user_api_key_user_email",
    "user_api_key_org_id",
    "user_api_key_end_user_id",
    "user_api_key_request_route",
    "user_api_key_spend",
    "user_api_key_max_budget",
    "user_api_key_metadata",
    "user_api_key_team_metadata",
    "user_api_key_auth_metadata",
    "headers",
)
METADATA_KEYS = ("litellm_metadata", "metadata")
"""Where LiteLLM keeps its per-request dict: ``litellm_metadata`` on /v1/messages and
/v1/responses (there ``metadata`` is the provider's own field), ``metadata`` on chat."""


def metadata_of(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The request's per-request dicts of LiteLLM's that it has, in the order of ``METADATA_KEYS``."""
    return [metadata for key in METADATA_KEYS if isinstance(metadata := data.get(key), Mapping)]


def is_internal_call(data: Mapping[str, Any]) -> bool:
    return any(metadata.get(INTERNAL_MARKER) == INTERNAL_TOKEN for metadata in metadata_of(data))


def own_call_metadata(request_metadata: object, session_id: str) -> dict[str, Any]:
    """Metadata for a call of ours (a summary, a recall round): the caller's auth (spend
    attribution) plus our mark."""
    source = request_metadata if isinstance(request_metadata, Mapping) else {}
    metadata = {key: source[key] for key in PROPAGATED_METADATA_KEYS if key in source}
    metadata[INTERNAL_MARKER] = INTERNAL_TOKEN
    metadata["compact_hook_session"] = session_id
    return metadata

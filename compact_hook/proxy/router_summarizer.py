"""The summary call through the proxy's own router.

Going through ``llm_router.acompletion`` (not HTTP back into the proxy) means the call uses
the operator's deployments, keys, fallbacks and cost tracking; copying the caller's auth
metadata lands the spend on the caller's key; the ``INTERNAL_MARKER`` lets every hook of
ours recognise the call as our own so it is never compacted itself. Its value is a secret
drawn when the process starts, so a client cannot set it (and the hook strips any client
value at entry anyway).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from compact_hook.engine.summarize import Message
from compact_hook.proxy.server import complete

INTERNAL_MARKER = "compact_hook_internal"
INTERNAL_TOKEN = secrets.token_hex(16)

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


def is_internal_call(data: Mapping[str, Any]) -> bool:
    for key in ("metadata", "litellm_metadata"):
        metadata = data.get(key)
        if isinstance(metadata, Mapping) and metadata.get(INTERNAL_MARKER) == INTERNAL_TOKEN:
            return True
    return False


def summary_metadata(request_metadata: object, session_id: str) -> dict[str, Any]:
    """Metadata for our call: the caller's auth (spend attribution) plus our marker."""
    source = request_metadata if isinstance(request_metadata, Mapping) else {}
    metadata = {key: source[key] for key in PROPAGATED_METADATA_KEYS if key in source}
    metadata[INTERNAL_MARKER] = INTERNAL_TOKEN
    metadata["compact_hook_session"] = session_id
    return metadata


class RouterSummarizer:
    """``summarize`` for the engine: one router call per invocation; retries are the engine's."""

    def __init__(self, router: Any, model: str, max_tokens: int, timeout: float, metadata: dict[str, Any]):
        self.router = router
        self.model = model
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.metadata = metadata

    async def __call__(self, messages: list[Message]) -> str:
        response = await complete(
            self.router,
            model=self.model,
            messages=messages,
            max_tokens=self.max_tokens,
            timeout=self.timeout,
            metadata=dict(self.metadata),
            num_retries=0,
            stream=False,
        )
        content = response.choices[0].message.content
        return content if isinstance(content, str) else ""

"""Custom auth for the proxy under test: the bearer key names the caller's team.

LiteLLM's real keys need a database; this gives tenants without one, through the proxy's own
``general_settings.custom_auth`` mechanism. Some keys carry key or team metadata, as an
operator would set through the key and team APIs (``KEY_METADATA``, ``TEAM_METADATA``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from litellm.proxy._types import UserAPIKeyAuth

KEY_METADATA: dict[str, dict[str, Any]] = {
    "sk-tenant-optout": {"compact": "off"},
    "sk-tenant-focused": {"compact": {"mode": "force", "focus": "the database migration"}},
}
TEAM_METADATA: dict[str, dict[str, Any]] = {
    "eager": {"compact": {"trigger_ratio": 0.2, "tail_retention_ratio": 0.1}},
}


async def user_api_key_auth(request: Any, api_key: str) -> UserAPIKeyAuth:
    key = api_key.removeprefix("Bearer ").strip()
    team = key.removeprefix("sk-tenant-")
    return UserAPIKeyAuth(
        api_key=key,
        token=hashlib.sha256(key.encode()).hexdigest(),
        team_id=team,
        metadata=KEY_METADATA.get(key, {}),
        team_metadata=TEAM_METADATA.get(team, {}),
    )

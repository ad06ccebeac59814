"""Custom auth for the proxy under test: the bearer key names the caller's team.

LiteLLM's real keys need a database; this gives two tenants without one, through the
proxy's own ``general_settings.custom_auth`` mechanism.
"""

from __future__ import annotations

import hashlib
from typing import Any

from litellm.proxy._types import UserAPIKeyAuth


async def user_api_key_auth(request: Any, api_key: str) -> UserAPIKeyAuth:
    key = api_key.removeprefix("Bearer ").strip()
    return UserAPIKeyAuth(
        api_key=key,
        token=hashlib.sha256(key.encode()).hexdigest(),
        team_id=key.removeprefix("sk-tenant-"),
    )

"""Recall across replicas, restarts and tenants, through real proxies (issue 34).

Nothing but the client's request holds the originals, so this does not depend on LiteLLM's version:
it runs on the lowest of our range only (``edge`` tests run on both; five proxy starts here).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from compact_hook.core.recall import handle_of
from tests.integration.harness import ProxyProcess, StandinUpstream, compact_info, standin_deployment
from tests.integration.test_recall_proxy import OUTPUT, SETTINGS, TOOLS, chat_session
from tests.integration.wire_clients import openai_client

pytestmark = [pytest.mark.integration]


OTHER_OUTPUT = "\n".join(f"line {i}: other {i * 31}" for i in range(4000))


def tenants_config(upstream: StandinUpstream, archive: Any) -> dict[str, Any]:
    return {
        "model_list": [
            standin_deployment(
                "chat-agent", upstream.url, "standin-recaller", **compact_info(archive, SETTINGS)
            )
        ],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
        "general_settings": {"custom_auth": "tests.integration.tenant_auth.user_api_key_auth"},
    }


def test_a_handle_is_answered_by_any_replica_after_restarts_and_is_not_found_for_another_tenant(
    tmp_path: Any,
) -> None:
    """Nothing but the request holds the originals: any replica answers a handle another showed, a
    restart loses nothing, and a handle another tenant's conversation holds is "not found"."""
    handle = handle_of(OUTPUT)
    with StandinUpstream() as upstream:
        config = tenants_config(upstream, tmp_path)
        for _restart in range(2):
            with ProxyProcess(config) as one, ProxyProcess(config) as two:
                for proxy in (one, two):
                    upstream.reset()
                    client = openai_client(proxy.base_url, "sk-tenant-alpha")
                    reply = client.chat.completions.create(
                        model="chat-agent", messages=chat_session(), tools=TOOLS
                    )  # type: ignore[arg-type]
                    assert reply.choices[0].message.content == f"RECALLED {handle}: {OUTPUT[:200]}"
        upstream.reset()
        with ProxyProcess(config) as proxy:
            messages = chat_session()
            messages[0] = {"role": "user", "content": f"list the table (as in recall {handle})"}
            messages[2] = {"role": "tool", "tool_call_id": "c0", "content": OTHER_OUTPUT}
            client = openai_client(proxy.base_url, "sk-tenant-beta")
            raw = client.chat.completions.with_raw_response.create(
                model="chat-agent", messages=messages, tools=TOOLS
            )  # type: ignore[arg-type]
    assert raw.headers["x-compact-recalls"] == "1"  # answered: with "not found"
    answered = upstream.chat_requests[-1]["body"]["messages"][-1]
    assert answered["content"] == f"No output with id {handle} in this conversation."
    assert raw.parse().choices[0].message.content == f"RECALLED {handle}: {answered['content']}"
    audits = [json.loads(p.read_text()) for p in tmp_path.rglob("*.json")]
    recalled = sorted(a["summary"] for a in audits if isinstance(a, dict) and a.get("removal") == "recalled")
    assert recalled == [f"recall {handle}: found"] * 4 + [f"recall {handle}: not found"]

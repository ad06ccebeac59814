"""The real Claude Code and Codex CLIs through a real proxy, ~30 tool turns each, as a user runs them.

What each CLI sends is whatever its pinned version sends today (mid-conversation ``system`` entries,
``context_management``, thinking, a dozen tools): nothing here is a shape we wrote. See
``agent_clients`` for how they run and what is checked; ``make clients`` prints the same as a table.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.agent_clients import (
    CLAUDE_CODE,
    CLIENTS,
    CODEX,
    ClientFacts,
    agent_proxy,
    facts_of,
    problems,
    run_client,
)
from tests.integration.relay import Relay

pytestmark = [pytest.mark.integration, pytest.mark.edge]  # edge: also on the newest LiteLLM


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, ClientFacts]]:
    missing = [str(client.executable) for client in CLIENTS if not client.executable.exists()]
    if missing:
        pytest.fail(f"the agent CLIs are not installed ({', '.join(missing)}): run `make clients-install`")
    with agent_proxy() as (upstream, proxy), Relay(proxy.url) as relay:
        facts = {}
        for client in CLIENTS:
            completed = run_client(client, relay.url, proxy.master_key)
            facts[client.name] = facts_of(client, completed, relay.exchanges, upstream)
        yield facts


def _explained(facts: ClientFacts) -> str:
    return f"{problems(facts)}\nstdout: {facts.completed.stdout[-2000:]}\nstderr: {facts.completed.stderr[-2000:]}"


def test_claude_code_runs_30_turns_through_the_proxy_compacted_with_its_thinking_valid(
    runs: dict[str, ClientFacts],
) -> None:
    facts = runs[CLAUDE_CODE.name]
    assert problems(facts) == [], _explained(facts)
    first = facts.sent[0]
    assert any(
        m.get("role") == "system" for m in first["messages"]
    )  # today's wire: a mid-conversation system entry
    assert [e["type"] for e in first["context_management"]["edits"]] == ["clear_thinking_20251015"]
    reasons = {h.get("x-compact-reason") for h in facts.headers}
    assert not reasons & {"client_managed", "malformed"}, reasons
    assert facts.thinking_forwarded > 0 and facts.thinking_removed > 0  # kept when valid, removed when stale
    assert any(m.get("role") == "system" for body in facts.forwarded for m in body["messages"])


def test_codex_runs_30_turns_through_the_proxy_compacted(runs: dict[str, ClientFacts]) -> None:
    facts = runs[CODEX.name]
    assert problems(facts) == [], _explained(facts)
    reasons = {h.get("x-compact-reason") for h in facts.headers}
    assert not reasons & {"client_managed", "malformed"}, reasons

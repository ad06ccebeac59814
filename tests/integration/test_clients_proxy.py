"""The real agent CLIs — Claude Code (npm's, and the newer one the Agent SDK ships), Codex CLI, Gemini CLI,
Qwen Code, opencode, pi — through a real proxy, 30 tool turns each, as a user runs them.

What each CLI sends is whatever its pinned version sends today (mid-conversation ``system`` entries,
``context_management``, thinking, signed Gemini calls, a dozen tools): nothing here is a shape we wrote.
See ``agent_clients`` for how they run and what is checked — exit 0 and the final answer, compaction
upstream, no orphan, every forwarded request within the window, what the client sent as sent, summary
calls no more than summaries applied + 1; ``make clients`` prints the same as a table.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.agent_clients import (
    CLAUDE_CODE,
    CLAUDE_CODE_SDK,
    CLIENTS,
    CODEX,
    CODEX_BUILTIN,
    CODEX_V2,
    GEMINI_CLI,
    OPENCODE,
    PI,
    QWEN_CODE,
    AgentClient,
    ClientFacts,
    on_deployment,
    problems,
    run_each,
)

pytestmark = pytest.mark.integration  # on the newest LiteLLM the formats tests replay what these CLIs sent


CODEX_V2_ON_ANTHROPIC = on_deployment(CODEX_V2, "Anthropic")
RUN = (*CLIENTS, CODEX_V2_ON_ANTHROPIC)
"""Every CLI as ``make clients`` runs it, and Codex with ``remote_compaction = "v2"`` on a deployment
LiteLLM bridges its Responses requests to (Anthropic Messages): Codex's own compaction, answered by us,
on a model that has none (``tools/codex_compaction.py`` runs every provider setup on every deployment)."""


@pytest.fixture(scope="module")
def runs() -> dict[str, ClientFacts]:
    return {facts.client.name: facts for facts in run_each(RUN)}


def _explained(facts: ClientFacts) -> str:
    return f"{problems(facts)}\nstdout: {facts.completed.stdout[-2000:]}\nstderr: {facts.completed.stderr[-2000:]}"


@pytest.mark.parametrize("client", [CLAUDE_CODE, CLAUDE_CODE_SDK], ids=lambda client: client.version)
def test_claude_code_runs_30_turns_through_the_proxy_compacted_with_its_thinking_valid(
    runs: dict[str, ClientFacts], client: AgentClient
) -> None:
    """npm's Claude Code and the newer one the Agent SDK ships, the same checks."""
    facts = runs[client.name]
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


def test_the_agent_sdk_ships_a_claude_that_is_the_claude_code_the_table_names() -> None:
    """Its package's version is the SDK's (0.3.337): what runs is the CLI, at ``cli_version``."""
    done = subprocess.run(
        [str(CLAUDE_CODE_SDK.executable), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == f"{CLAUDE_CODE_SDK.version} (Claude Code)"
    assert CLAUDE_CODE_SDK.version != CLAUDE_CODE.version


def test_codex_runs_30_turns_through_the_proxy_compacted(runs: dict[str, ClientFacts]) -> None:
    facts = runs[CODEX.name]
    assert problems(facts) == [], _explained(facts)
    reasons = {h.get("x-compact-reason") for h in facts.headers}
    assert not reasons & {"client_managed", "malformed"}, reasons


@pytest.mark.parametrize("client", [CODEX_BUILTIN, CODEX_V2_ON_ANTHROPIC], ids=lambda c: c.name)
def test_codex_compacting_remotely_runs_30_turns_with_each_compaction_answered_by_us(
    runs: dict[str, ClientFacts], client: AgentClient
) -> None:
    """Codex on its built-in provider (native Responses deployment), and declaring ``remote_compaction =
    "v2"`` to an Anthropic one: several compactions of its own, each answered with our item (no fatal
    "expected exactly one compaction output item"), the item never reaching the provider unexpanded,
    our summary in its place, one summary call per Codex compaction (and at most one prepared before)."""
    facts = runs[client.name]
    assert problems(facts) == [], _explained(facts)
    assert facts.client_compactions >= 3 and facts.opaque_forwarded == 0
    assert facts.applied >= facts.client_compactions
    assert facts.summary_calls <= facts.client_compactions + 1
    assert "remote compact" not in facts.completed.stderr


def test_gemini_cli_runs_30_turns_on_generate_content_compacted_with_its_signatures_kept(
    runs: dict[str, ClientFacts],
) -> None:
    """The stand-in is a strict Gemini 3: a turn that lost a call's signature, roles that do not
    alternate or a call without its response would have been a 400 (every status is a 200)."""
    facts = runs[GEMINI_CLI.name]
    assert problems(facts) == [], _explained(facts)
    assert all("contents" in body and "model" not in body for body in facts.sent)  # the model is in the path
    assert any(h.get("x-compact-compacted") == "true" for h in facts.headers)  # on its streamed answers
    signed = [
        part
        for body in facts.forwarded
        for content in body["contents"]
        for part in content["parts"]
        if "functionCall" in part and "thoughtSignature" in part
    ]
    assert signed


@pytest.mark.parametrize("client", [QWEN_CODE, OPENCODE, PI], ids=lambda client: client.name)
def test_a_chat_completions_cli_runs_30_turns_compacted_with_its_system_prompt_as_sent(
    runs: dict[str, ClientFacts], client: AgentClient
) -> None:
    facts = runs[client.name]
    assert problems(facts) == [], _explained(facts)
    for sent, got in zip(facts.sent, facts.forwarded, strict=True):
        if sent["messages"][0]["role"] == "system":
            assert got["messages"][0] == sent["messages"][0]
    assert any(h.get("x-compact-compacted") == "true" for h in facts.headers)

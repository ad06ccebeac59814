"""Usage that lies, through a real proxy, with the real CLIs: Claude Code, Codex CLI and Gemini CLI against
stand-ins reporting usage as servers LiteLLM users point a proxy at do (``tools/billing.py``): only the
tokens after the cached prefix (Ollama 0.30), 0 when cached (older Ollama), capped at a context smaller than
the window while the rest is cut silently (a small ``num_ctx``), the messages only (gateways).

Each must end as with truthful usage — the loop finished, compaction upstream, no forwarded request over
the window by our own tokenizer's count — with the usage set aside, said in a warning and counted in
``compact_hook_count_samples_total{outcome}``; against the capped server, at most two requests cut before
its context is learned (``agent_clients._lying_problems``). Before issue 44 the same runs forwarded up to
1.5× the window (and 1.65× against the capped server), with no summary at all against it.
"""

from __future__ import annotations

import pytest

from tests.integration.agent_clients import (
    CLAUDE_CODE,
    CLAUDE_CODE_24K,
    CODEX,
    GEMINI_CLI,
    SET_ASIDE,
    USAGE_MODES,
    AgentClient,
    ClientFacts,
    lying,
    problems,
    run_each,
)

pytestmark = pytest.mark.integration

LYING = tuple(lying(client, mode) for mode in USAGE_MODES for client in (CLAUDE_CODE, CODEX, GEMINI_CLI))
CACHES = (CLAUDE_CODE_24K, *(lying(CLAUDE_CODE_24K, mode) for mode in ("tail", "msgtail")))
"""Claude Code with a 4,000-token reserve in a 24,000-token window, its system and tools ~40% of it,
against usage with each cache shape left out: over everything before the new tail, and over the
messages only (system and tools billed every time)."""


@pytest.fixture(scope="module")
def runs() -> dict[str, ClientFacts]:
    return {facts.client.name: facts for facts in run_each(LYING + CACHES)}


@pytest.mark.parametrize("client", LYING, ids=lambda c: c.name)
def test_a_cli_against_usage_that_lies_runs_to_the_end_within_its_window_the_usage_set_aside(
    runs: dict[str, ClientFacts], client: AgentClient
) -> None:
    facts = runs[client.name]
    assert problems(facts) == [], f"{problems(facts)}\nstderr: {facts.completed.stderr[-2000:]}"
    assert facts.applied > 0 and facts.largest <= client.window
    mode = client.name.rsplit(" ", 1)[-1]
    assert facts.samples.get(SET_ASIDE[mode], 0) > 0 and facts.said


def test_a_cache_left_out_is_never_read_as_a_ceiling_that_stops_or_multiplies_compaction(
    runs: dict[str, ClientFacts],
) -> None:
    """Issue 60: the bills of a server that caches the messages and still bills system and tools ("the
    fixed part plus what was new") stall while the prompt grows. Read as a server's context, the window
    they taught left the conversation no room (every request then forwarded as sent, 3.3× the window)
    or so little that every turn compacted (before this issue, here: 13 summaries in 31 requests, 1
    with truthful usage). Now each shape compacts as truthful usage does."""
    truthful = runs[CLAUDE_CODE_24K.name]
    for client in CACHES[1:]:
        facts = runs[client.name]
        calls = (facts.summary_calls, truthful.summary_calls)
        assert facts.summary_calls <= truthful.summary_calls + 1, calls
        assert problems(facts) == [], f"{problems(facts)}\nstderr: {facts.completed.stderr[-2000:]}"
        assert facts.largest_billed <= client.window and not facts.samples.get("capped")
    assert problems(truthful) == [] and truthful.samples.get("learned") == len(truthful.sent)

"""A real model server behind a real proxy: llama.cpp's own server (``tools/llama_server.py``) with
SmolLM2-135M-Instruct, its usage, its prompt cache, its refusals and its summaries as they are.

- Chat, with the README's settings and nothing else (``compact: {summary_model: local-summary}``, the
  window from ``max_input_tokens``, the same server summarizing): a session replayed turn by turn,
  streamed and not, until a compaction: every turn answered within the window, the real model asked
  for the summary and its answer judged (a 135M model's answers are no summaries: the digest stands
  in, said as ``unusable``), its usage learned and nothing of it set aside, its prompt cache read.
- ``/v1/messages`` (LiteLLM's ``anthropic/`` provider at the server's Anthropic endpoint) and
  Responses, with a proxy told twice the server's window: the server refuses in its own words
  (``exceed_context_size_error``), the retry fits the limit it stated, and the next turn fits before
  it is sent (no second refusal).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.agent_clients import count_samples
from tests.integration.harness import ProxyProcess, anthropic_deployment, free_port, standin_deployment
from tests.integration.llama_server import LlamaServer
from tests.integration.wire_clients import call, openai_client
from tests.support import (
    anthropic_replay_points,
    chat_to_responses,
    load_transcript,
    replay_points,
    responses_replay_points,
)

pytestmark = pytest.mark.integration

SESSION = load_transcript("tau_bench_airline_gpt4o_task2_trial1.json")
"""A short airline-support session: 1,289 tokens of system and task, ~150 more a turn."""
WINDOW = 4_096
MAX_TOKENS = 16
UNHURRIED = {"summary_deadline_seconds": 900, "summary_timeout_seconds": 900, "summary_max_tokens": 200}
"""Beside the README's settings: no deadline a slow machine could meet or miss (a CPU writes ~40
tokens a second here), and answers of 200 tokens (the 135M model writes until it may write no more:
at the 806 derived for 4K, a summary call takes ~25 s here)."""
SET_ASIDE = ("missing", "capped", "cached_left_out", "fixed_left_out", "below_floor")
SERVED = 2_048
"""The refusing server's context: the proxy is told ``2 * SERVED``."""


def proxy_config(*deployments: dict[str, Any]) -> dict[str, Any]:
    return {
        "model_list": list(deployments),
        "router_settings": {"num_retries": 0},
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }


@pytest.fixture(scope="module")
def readme_proxy() -> Iterator[ProxyProcess]:
    with LlamaServer(ctx=WINDOW) as llama:
        readme = {"compact": {"summary_model": "local-summary", **UNHURRIED}, "max_input_tokens": WINDOW}
        config = proxy_config(
            standin_deployment("local", llama.url, "smollm2", **readme),
            standin_deployment("local-summary", llama.url, "smollm2", max_input_tokens=WINDOW),
        )
        with ProxyProcess(config, env={"COMPACT_METRICS_PORT": str(free_port())}) as running:
            yield running


def test_a_4k_model_compacts_with_the_readmes_settings_its_usage_learned_and_its_cache_read(
    readme_proxy: ProxyProcess,
) -> None:
    """Before issue 61, every summary failed before it was sent (``summary_max_tokens`` 4,096 reserved
    twice left the transcript -4,599 tokens); a summary was applied whatever the model wrote."""
    seen = []
    for turn, end in enumerate(replay_points(SESSION)):
        headers, _ = call(
            readme_proxy, "chat", "local", SESSION[:end], stream=turn % 2 == 1, max_tokens=MAX_TOKENS
        )
        seen.append(headers)
        if headers.get("x-compact-compacted") == "true" and int(headers["x-compact-summary-calls"]) > 0:
            break
    assert all(int(h["x-compact-tokens-after"]) <= WINDOW - MAX_TOKENS for h in seen)
    made = seen[-1]
    assert made.get("x-compact-compacted") == "true", [h.get("x-compact-reason") for h in seen]
    judged = (made["x-compact-summarizer"], made.get("x-compact-summary-failure"))
    assert judged in (("model", None), ("digest", "unusable")), judged  # asked, and its answer judged
    samples = count_samples(readme_proxy, "local")
    assert samples.get("learned", 0) > 0 and not any(samples.get(outcome) for outcome in SET_ASIDE), samples
    again = openai_client(readme_proxy.base_url, readme_proxy.master_key).chat.completions.create(
        model="local", messages=SESSION[: replay_points(SESSION)[1]], max_tokens=MAX_TOKENS
    )
    details = again.usage.prompt_tokens_details if again.usage is not None else None
    assert details is not None and (details.cached_tokens or 0) > 0  # the server's prompt cache, read


@pytest.fixture(scope="module")
def told_too_much() -> Iterator[ProxyProcess]:
    """A proxy told twice the server's context (the digest summarizes: the refusals are the point)."""
    with LlamaServer(ctx=SERVED) as llama:
        told = {"compact": {"summary_model": "digest"}, "max_input_tokens": 2 * SERVED}
        config = proxy_config(
            anthropic_deployment("local-claude", llama.root_url, "smollm2", **told),
            standin_deployment("local", llama.url, "smollm2", **told),
        )
        with ProxyProcess(config) as running:
            yield running


def two_turns(wire: str) -> list[list[Any]]:
    """Two consecutive turns of a session over the server's context, the first under the proxy's
    trigger or just over it: Claude Code's sub-agent on ``/v1/messages`` (3,694 and 4,533 of our
    tokens), the airline session on Responses (2,411 and 2,753)."""
    if wire == "anthropic":
        messages = load_transcript("claude_code_subagent_afc096d.json", "anthropic")["messages"]
        return [messages[:end] for end in anthropic_replay_points(messages)[2:4]]
    items = chat_to_responses(SESSION)
    return [items[:end] for end in responses_replay_points(items)[6:8]]


@pytest.mark.parametrize(("wire", "model"), [("anthropic", "local-claude"), ("responses", "local")])
def test_the_servers_refusal_is_recovered_within_its_stated_limit_and_not_repeated_next_turn(
    told_too_much: ProxyProcess, wire: str, model: str
) -> None:
    """Before issue 61, llama.cpp's words were not read: the retry was fitted to 0.8 of what was sent
    (at most the configured window) and the next turns were refused again, each."""
    first, second = two_turns(wire)
    limit = {"max_output_tokens" if wire == "responses" else "max_tokens": MAX_TOKENS}
    before = told_too_much.log_text().count("was too long for the provider")
    refused, _ = call(told_too_much, wire, model, first, **limit)
    assert refused.get("x-compact-recovered") == "true" and int(refused["x-compact-tokens-after"]) <= SERVED
    following, _ = call(told_too_much, wire, model, second, stream=True, **limit)
    assert following.get("x-compact-recovered") != "true"
    assert int(following["x-compact-tokens-after"]) <= SERVED - MAX_TOKENS
    assert told_too_much.log_text().count("was too long for the provider") == before + 1

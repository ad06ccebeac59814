"""Cost-aware timing through a real proxy: the provider's cache usage (the stand-in's, reported
as Anthropic reports it) is heard from LiteLLM's success log and steers the next turns; the money
comes back in headers and beside LiteLLM's savings; the summary carries a breakpoint of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from compact_hook.wires import ANTHROPIC
from tests.integration.harness import SUMMARY_MARKER, ProxyProcess, anthropic_deployment, free_port
from tests.support import (
    anthropic_replay_points,
    is_summary,
    load_transcript,
    metric_samples,
    metric_value,
    with_moving_marker,
)

SONNET = {  # claude-sonnet-4-5 in LiteLLM's cost map, on the stand-in's deployments
    "input_cost_per_token": 3e-6,
    "cache_creation_input_token_cost": 3.75e-6,
    "cache_read_input_token_cost": 3e-7,
    "output_cost_per_token": 1.5e-5,
}
PRICE = {"uncached": 3e-6, "written": 3.75e-6, "read": 3e-7, "output": 1.5e-5}
WINDOW = 24_000
SESSION = load_transcript("claude_code_fa812bfe_pre_compact.json", "anthropic")["messages"]
TURNS = anthropic_replay_points(SESSION)[:70]
METRICS_PORT = free_port()
SYSTEM = [{"type": "text", "text": "You are a coding agent. " * 300, "cache_control": {"type": "ephemeral"}}]


@pytest.fixture(scope="module")
def cost_proxy(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    archive = str(tmp_path_factory.mktemp("archive"))

    def group(name: str, **compact: Any) -> list[dict[str, Any]]:
        settings = {
            "context_window": WINDOW,
            "archive_dir": archive,
            "tokenizer": "claude",
            "summary_model": f"sum-{name}",
            "summary_max_tokens": 800,
            **compact,
        }
        return [
            anthropic_deployment(name, standin.root_url, f"standin-{name}", compact=settings, **SONNET),
            anthropic_deployment(f"sum-{name}", standin.root_url, f"standin-sum-{name}", **SONNET),
        ]

    config = {
        "model_list": [*group("today", cost_aware=False), *group("aware")],  # cost-aware: the default
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    with ProxyProcess(config, env={"COMPACT_METRICS_PORT": str(METRICS_PORT)}) as running:
        yield running


def replay_as_claude_code(proxy: ProxyProcess, model: str) -> list[dict[str, str]]:
    """Every turn as Claude Code sends it (a cached system, a breakpoint on the newest message)."""
    client = anthropic.Anthropic(api_key=proxy.master_key, base_url=proxy.url, max_retries=0)
    headers = []
    for end in TURNS:
        raw = client.messages.with_raw_response.create(
            model=model, max_tokens=256, system=SYSTEM, messages=with_moving_marker(SESSION[:end])
        )
        headers.append({k: v for k, v in raw.headers.items() if k.startswith("x-compact-")})
    return headers


def cost(requests: list[dict[str, Any]]) -> float:
    total = 0.0
    for request in requests:
        cache = request["cache"]
        total += (
            cache["input_tokens"] * PRICE["uncached"]
            + cache["cache_creation_input_tokens"] * PRICE["written"]
        )
        total += cache["cache_read_input_tokens"] * PRICE["read"] + request["output_tokens"] * PRICE["output"]
    return total


def served(standin: Any, model: str) -> list[dict[str, Any]]:
    return [r for r in standin.messages_requests if r["body"]["model"] == model and "cache" in r]


def test_cost_aware_turns_cost_no_more_than_todays_and_say_what_they_saved(
    standin: Any, cost_proxy: ProxyProcess
) -> None:
    replay_as_claude_code(cost_proxy, "today")
    aware = replay_as_claude_code(cost_proxy, "aware")
    spent = {
        name: cost(served(standin, f"standin-{name}")) + cost(served(standin, f"standin-sum-{name}"))
        for name in ("today", "aware")
    }
    # never dearer; on this session no cheaper either since the rules about tokens (no summary
    # prepared that clearing would leave unused) hold for every model, priced or not
    assert spent["aware"] <= spent["today"], spent
    compacted = [h for h in aware if h.get("x-compact-compacted") == "true"]
    assert compacted and all("x-compact-cost-saved-usd" in h for h in compacted)
    # summaries are made ahead (prepared): paid after the request that started them, counted in the metrics
    scraped = metric_samples(httpx.get(f"http://127.0.0.1:{METRICS_PORT}/metrics").text)
    summaries_paid = cost(served(standin, "standin-sum-aware"))
    counted = metric_value(
        scraped, "compact_hook_summary_cost_usd_total", model_group="aware", format="anthropic"
    )
    assert counted == pytest.approx(summaries_paid, rel=0.05) and counted > 0
    # the compacted prefix is cacheable on its own: our summary carries the client's kind of breakpoint
    forwarded = served(standin, "standin-aware")[-1]["body"]["messages"]
    [summary] = [m for m in forwarded if is_summary(m, ANTHROPIC)]
    assert summary["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert (
        sum(1 for r in served(standin, "standin-aware") if r["cache"]["cache_read_input_tokens"] > 0)
        > len(TURNS) // 2
    )
    summaries = [r for r in standin.messages_requests if r["body"]["model"] == "standin-sum-aware"]
    assert all(SUMMARY_MARKER in json.dumps(r["body"]) for r in summaries)

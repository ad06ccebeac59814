"""What an operator sees of a real proxy: Prometheus metrics (LiteLLM's /metrics and our own
port), LiteLLM's spend accounting of what compaction saved, and the archive's audit."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from compact_hook.state.archive import SESSION_SEED_MESSAGES, archive_files, audit_path
from tests.integration.harness import ProxyProcess, free_port, standin_deployment
from tests.support import Samples, load_transcript, metric_samples, metric_value, replay_points

pytestmark = pytest.mark.integration

WINDOW = 12_000
TRANSCRIPT = load_transcript("claude_code_fa812bfe_pre_compact.json")


@pytest.fixture(scope="module")
def operated(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("operators")
    compact = {
        "context_window": WINDOW,
        "archive_dir": str(folder / "archive"),
        "summary_model": "summarizer",
        "retry_backoff_seconds": 0,
        "prepare": False,  # every compaction on the request path: counted per turn below
    }
    config = {
        "model_list": [
            standin_deployment("agent", standin.url, "standin-agent", compact=compact),
            standin_deployment("summarizer", standin.url, "standin-summarizer"),
        ],
        "litellm_settings": {
            "callbacks": [
                "prometheus",
                "compact_hook.proxy_handler_instance",
                "tests.integration.spend_probe.probe",
            ]
        },
    }
    port = free_port()
    env = {"COMPACT_METRICS_PORT": str(port), "SPEND_PROBE_FILE": str(folder / "spend.jsonl")}
    with ProxyProcess(config, env=env) as proxy:
        client = openai.OpenAI(api_key=proxy.master_key, base_url=proxy.base_url, max_retries=0, timeout=120)
        turns = []
        for end in replay_points(TRANSCRIPT)[:60]:
            raw = client.chat.completions.with_raw_response.create(model="agent", messages=TRANSCRIPT[:end])
            turns.append(dict(raw.headers))
        yield {"proxy": proxy, "port": port, "folder": folder, "turns": turns}


def scrape_url(url: str, headers: dict[str, str] | None = None) -> Samples:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return metric_samples(text)


value = metric_value


def test_litellms_metrics_endpoint_and_our_own_port_serve_the_same_counts(operated: dict[str, Any]) -> None:
    proxy, turns = operated["proxy"], operated["turns"]
    compacting = [t for t in turns if t["x-compact-compacted"] == "true"]
    made = [t for t in turns if t["x-compact-cache"] == "miss"]
    assert made and len(compacting) > len(made)  # compacted turns reuse the stored compaction
    for samples in (
        scrape_url(f"{proxy.url}/metrics/", proxy.auth_headers),
        scrape_url(f"http://127.0.0.1:{operated['port']}/metrics"),
    ):
        where = {"model_group": "agent", "format": "chat"}
        # one conversation, new to the proxy twice (issue 63): its first request (one entry), and its
        # second, from which on it is known by its first two entries (SESSION_SEED_MESSAGES)
        assert SESSION_SEED_MESSAGES == 2 and replay_points(TRANSCRIPT)[0] < 2
        assert value(samples, "compact_hook_hook_seconds_count", **where, first_contact="true") == 2
        assert (
            value(samples, "compact_hook_hook_seconds_count", **where, first_contact="false")
            == len(turns) - 2
        )
        assert value(samples, "compact_hook_requests_total", **where, outcome="compacted") == len(compacting)
        assert value(samples, "compact_hook_compactions_total", **where, outcome="miss") == len(made)
        assert value(samples, "compact_hook_summary_calls_total", **where) == sum(
            int(t["x-compact-summary-calls"]) for t in turns
        )
        before = sum(int(t["x-compact-tokens-before"]) for t in turns)
        after = sum(int(t["x-compact-tokens-after"]) for t in turns)
        assert value(samples, "compact_hook_tokens_before_total", **where) == before
        assert value(samples, "compact_hook_tokens_saved_total", **where) == before - after > 0
        assert not [
            key for key in samples if ("model_group", "summarizer") in key[1] and "compact_hook" in key[0]
        ]


def test_litellms_spend_tracking_records_what_compaction_saved_on_the_callers_key(
    operated: dict[str, Any],
) -> None:
    rows = [json.loads(line) for line in (operated["folder"] / "spend.jsonl").read_text().splitlines()]
    agent = [row for row in rows if row["model_group"] == "agent"]
    summaries = [row for row in rows if row["model_group"] == "summarizer"]
    turns = operated["turns"]
    assert len(agent) == len(turns) and summaries
    saved = sum(int(t["x-compact-tokens-before"]) - int(t["x-compact-tokens-after"]) for t in turns)
    assert sum(row["saved"] for row in agent) == saved > 0
    assert {row["compression_savings"]["source"] for row in agent if row["saved"]} == {"compact_hook"}
    assert {row["api_key"] for row in summaries} == {
        agent[0]["api_key"]
    }  # the summary's spend: the caller's key


def test_each_archive_entry_has_an_audit_of_what_replaced_it(operated: dict[str, Any]) -> None:
    files = list(archive_files(operated["folder"] / "archive"))
    made = [t for t in operated["turns"] if t["x-compact-cache"] == "miss"]
    audits = [json.loads(audit_path(path).read_text()) for path in files]
    summarized = [audit for audit in audits if audit["removal"] == "summarized"]
    assert len(summarized) == len(made)
    for audit, path in zip(audits, files, strict=True):
        archived = json.loads(path.read_text())
        assert audit["entry_count"] == len(archived)
        assert audit["origin"]["model_group"] == "agent" and audit["origin"]["wire"] == "chat"
        assert audit["origin"]["request_id"] and audit["tenant"] == path.parent.parent.name
    for audit in summarized:
        assert audit["summary"] and audit["summarizer"] == "model"
        assert audit["tokens_before"] > audit["tokens_after"] > 0

"""In a real proxy on CPython before 3.12, the event loop runs the garbage collector (``COMPACT_GC``).

Streamed answers leave LiteLLM's ``CustomStreamWrapper`` in cycles; its finalizer sets context
variables, which crashes the proxy when the interpreter collects inside another set (CPython
gh-148891). Here the proxy says at start-up that its loop collects, and its collections go on
while it serves streams: the automatic collector is off, so they are the loop's.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.harness import (
    ProxyProcess,
    StandinUpstream,
    compact_info,
    free_port,
    standin_deployment,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        sys.version_info >= (3, 12), reason="from 3.12 the interpreter collects between bytecodes"
    ),
]

SAID = "the garbage collector runs between event-loop callbacks"
STREAMS = 40


def young_collections(proxy: ProxyProcess) -> float:
    """``python_gc_collections_total`` of generation 0, on the proxy's metrics port."""
    port = proxy.extra_env["COMPACT_METRICS_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "python_gc_collections_total" and sample.labels.get("generation") == "0":
                return sample.value
    raise AssertionError("no python_gc_collections_total on the metrics port")


def test_the_proxys_loop_collects_while_it_serves_streams(standin: StandinUpstream, tmp_path: Path) -> None:
    config = {
        "model_list": [standin_deployment("agent", standin.url, **compact_info(tmp_path))],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    with ProxyProcess(config, env={"COMPACT_METRICS_PORT": str(free_port())}) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0)
        client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "warm up"}])
        before = young_collections(proxy)
        for number in range(STREAMS):
            stream = client.chat.completions.create(
                model="agent", messages=[{"role": "user", "content": f"stream {number}"}], stream=True
            )
            assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        after = young_collections(proxy)
        log = proxy.log_text()
    assert SAID in log
    assert after > before

"""What ``make run`` serves, read from its own files: ``litellm_config.yaml``'s ``local`` groups (a real
model without an account) resolve with the settings ``tools/run_proxy.sh`` starts their server for, and a
real proxy on that config answers from llama.cpp's server on every wire a new user tries. Only the port
changes (the test's server listens on a free one, not on 4002).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from compact_hook.cli.inputs import resolve
from tests.integration.harness import REPO_ROOT, ProxyProcess
from tests.integration.llama_server import LlamaServer
from tests.integration.wire_clients import call

pytestmark = pytest.mark.integration

CONFIG = REPO_ROOT / "litellm_config.yaml"
RUN_PROXY = REPO_ROOT / "tools" / "run_proxy.sh"
LOCAL_GROUPS = ("local", "local-summary")


def local_entries(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [entry for entry in config["model_list"] if entry["model_name"] in LOCAL_GROUPS]


def llama_command(script: Path) -> dict[str, int]:
    """The port and context ``run_proxy.sh`` starts ``tools/llama_server.py`` with."""
    [(port, ctx)] = re.findall(r"tools/llama_server\.py --port (\d+) --ctx (\d+)", script.read_text())
    return {"port": int(port), "ctx": int(ctx)}


def test_the_local_groups_reach_the_server_run_proxy_starts_and_resolve_with_its_window() -> None:
    started = llama_command(RUN_PROXY)
    entries = local_entries(yaml.safe_load(CONFIG.read_text()))
    settings = resolve(CONFIG, "local")

    assert [entry["model_name"] for entry in entries] == list(LOCAL_GROUPS)
    for entry in entries:
        base = urlsplit(entry["litellm_params"]["api_base"])
        assert (base.hostname, base.port, base.path) == ("127.0.0.1", started["port"], "/v1")
        assert entry["model_info"]["max_input_tokens"] == started["ctx"]
    assert settings.context_window == started["ctx"] and settings.summary_context_window == started["ctx"]
    assert settings.summary_model == "local-summary"
    assert settings.summary_max_tokens is not None
    assert 256 <= settings.summary_max_tokens <= started["ctx"] // 4


@pytest.fixture(scope="module")
def proxy() -> Iterator[ProxyProcess]:
    """``make run``'s config, its ``local`` groups only, their ``api_base`` moved to the test's server."""
    config = yaml.safe_load(CONFIG.read_text())
    with LlamaServer(ctx=llama_command(RUN_PROXY)["ctx"]) as llama:
        entries = local_entries(config)
        for entry in entries:
            entry["litellm_params"]["api_base"] = llama.url
        served = {"model_list": entries, "litellm_settings": config["litellm_settings"]}
        with ProxyProcess(served) as running:
            yield running


@pytest.mark.parametrize(
    ("wire", "stream", "limit"),
    [
        ("chat", False, {"max_tokens": 24}),
        ("chat", True, {"max_tokens": 24}),
        ("anthropic", False, {"max_tokens": 24}),
        ("responses", False, {"max_output_tokens": 24}),
    ],
)
def test_the_local_model_answers_through_the_proxy_on_every_wire(
    proxy: ProxyProcess, wire: str, stream: bool, limit: dict[str, int]
) -> None:
    question = [{"role": "user", "content": "Name one colour of the rainbow."}]
    headers, reply = call(proxy, wire, "local", question, stream, **limit)

    assert reply.strip() and "stand-in" not in reply
    assert headers["x-compact-reason"] == "below_threshold"

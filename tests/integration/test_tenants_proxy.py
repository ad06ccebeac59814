"""No tenant moves another's count or window, through a real proxy with two keys.

Tenant B replays a real agent session on a shared model group whose provider bills 0.9 of what we
count. Once alone, once beside tenant A, who sends the same group requests whose count we cannot know
(an image our count puts at 765 tokens, billed 4,000, and one billed 50) and requests a throttle refuses
in Bedrock's words ("Too many tokens, please wait before trying again."). Everything B sees — each
turn's count ratio and its source, the tokens we forwarded, the compactions — is exactly as it was alone,
and the throttle taught no window. Before issue 44, A's images set the group's estimate B's first
requests are counted at, and A's throttle cut the group's window to 0.8 of A's request.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.integration.agent_clients import count_samples
from tests.integration.harness import (
    ProxyProcess,
    StandinUpstream,
    compact_info,
    free_port,
    standin_deployment,
)
from tests.integration.wire_clients import call
from tests.support import load_transcript, replay_points

pytestmark = pytest.mark.integration

WINDOW = 24_000
TURNS = 45
"""B's session reaches the trigger and compacts within these turns."""
SESSION = load_transcript("claude_code_fa812bfe_pre_compact.json")
PIXEL = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")).decode()
THROTTLE_MARKER = "THROTTLE-THIS-TENANT"
TIERS_OFF = {"tool_output_policy": "none", "clear_tool_results": False, "user_message_budget": 0}
"""Summaries, not the cheap tiers, keep B's session under the window: compactions to compare."""
SEEN = (
    "x-compact-count-ratio",
    "x-compact-count-source",
    "x-compact-tokens-before",
    "x-compact-tokens-after",
)
SEEN_ALSO = ("x-compact-compacted", "x-compact-cache", "x-compact-summary-calls", "x-compact-reason")
SETTLE_SECONDS = 60.0
"""How long a response's usage may take to be recorded before the test gives up (a wait, not a goal)."""


def config(standin: StandinUpstream, archive: Any, media: int) -> dict[str, Any]:
    settings = {"context_window": WINDOW, "summary_max_tokens": 800, "prepare": False}
    info = compact_info(archive, settings, TIERS_OFF, summary_model="sum")
    return {
        "model_list": [
            standin_deployment("shared", standin.url, f"standin-bill090-media{media}-throttle", **info),
            standin_deployment("sum", standin.url, "standin-sum"),
        ],
        "router_settings": {"num_retries": 0},
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
        "general_settings": {"custom_auth": "tests.integration.tenant_auth.user_api_key_auth"},
    }


def proxy_of(config: dict[str, Any]) -> ProxyProcess:
    return ProxyProcess(config, env={"COMPACT_METRICS_PORT": str(free_port())})


def settled(proxy: ProxyProcess, samples: int) -> None:
    """Wait until the proxy has judged ``samples`` responses of the group in all.

    LiteLLM runs the success hook that learns from a response after the client has it, so without this
    wait whether turn N is counted with turn N-1's usage depends on the machine's speed.
    """
    deadline = time.monotonic() + SETTLE_SECONDS
    while sum(count_samples(proxy, "shared").values()) < samples:
        assert time.monotonic() < deadline, f"the proxy never judged {samples} responses"
        time.sleep(0.02)


def tenant_b(proxy: ProxyProcess, between: Any = None) -> list[dict[str, str]]:
    """B's session turn by turn (every other one streamed): what each turn's headers said.

    Every response's usage is judged before the next request is sent, B's and A's alike (``between``
    returns how many responses it got), so both runs see the same evidence at each turn.
    """
    seen = []
    samples = 0
    for number, end in enumerate(replay_points(SESSION)[:TURNS]):
        if between is not None:
            samples += between(number)
            settled(proxy, samples)
        headers, _ = call(proxy, "chat", "shared", SESSION[:end], stream=number % 2 == 1, key="sk-tenant-b")
        seen.append({name: headers.get(name, "") for name in (*SEEN, *SEEN_ALSO)})
        samples += 1
        settled(proxy, samples)
    return seen


def tenant_a(proxy: ProxyProcess, number: int) -> int:
    """A's odd requests: images early on, then throttled ones; how many were answered."""
    words = "The screenshot shows a failing build; read the error and say what to change. " * 60
    if number < 8:
        image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}
        content = [{"type": "text", "text": f"{number}: {words}"}, image]
        call(proxy, "chat", "shared", [{"role": "user", "content": content}], key="sk-tenant-a")
        return 1
    if number % 5 == 0:
        throttled = [{"role": "user", "content": f"{THROTTLE_MARKER} {number}: {words * 8}"}]
        with pytest.raises(openai.RateLimitError):
            call(proxy, "chat", "shared", throttled, key="sk-tenant-a")
    return 0


@pytest.fixture(scope="module")
def alone(
    standin: StandinUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[dict[str, str]]]:
    with proxy_of(config(standin, tmp_path_factory.mktemp("archive"), 4_000)) as proxy:
        yield tenant_b(proxy)


@pytest.mark.parametrize("media", [4_000, 50], ids=["an image billed 4,000", "an image billed 50"])
def test_a_tenants_images_and_throttles_leave_another_tenants_counts_windows_and_compactions_as_they_were(
    standin: StandinUpstream,
    tmp_path_factory: pytest.TempPathFactory,
    alone: list[dict[str, str]],
    media: int,
) -> None:
    with proxy_of(config(standin, tmp_path_factory.mktemp("archive"), media)) as proxy:
        beside = tenant_b(proxy, between=lambda number: tenant_a(proxy, number))
        log = proxy.log_text()
    assert any(turn["x-compact-cache"] == "miss" for turn in alone)  # B's session does compact
    assert beside == alone
    assert "window now" not in log  # the throttle taught no window

"""What the hook learns from providers, through a real proxy: each conversation judged against itself,
learning that follows a provider counting more at once, a set-aside that ends, and memory a flood of
conversations cannot grow (issue 60). The stand-ins bill as ``tools/billing.py`` says.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

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
from tests.support import metric_samples

pytestmark = pytest.mark.integration

SETTLE_SECONDS = 60.0
"""How long a response's usage may take to be judged before the test gives up (a wait, not a goal)."""
ASIDE = ("missing", "capped", "cached_left_out", "fixed_left_out", "below_floor")
TASK = "Refactor the billing module and keep every public name. " * 20
PROSE = "The reviewer read the change and wrote down what each part of it does and why. "
CODE = "[dense] def total(items): return sum(item.price * item.count for item in items)  # noqa "


def group(standin: StandinUpstream, archive: Any, name: str, model: str, window: int) -> dict[str, Any]:
    info = compact_info(archive, {"context_window": window, "count_ratio": 1.0, "recall": False})
    return standin_deployment(name, standin.url, model, **info)


@pytest.fixture(scope="module")
def proxy(standin: StandinUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    archive = tmp_path_factory.mktemp("archive")
    config = {
        "model_list": [
            group(standin, archive, "dense", "standin-dense130", 16_000),
            group(standin, archive, "moving", "standin-bill110then144after20", 64_000),
            group(standin, archive, "odd", "standin-bill110-limit20000-usage-cap1-marked", 32_000),
            group(standin, archive, "flood", "standin", 64_000),
        ],
        "router_settings": {"num_retries": 0},
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
        "general_settings": {"custom_auth": "tests.integration.tenant_auth.user_api_key_auth"},
    }
    with ProxyProcess(config, env={"COMPACT_METRICS_PORT": str(free_port())}) as running:
        yield running


def judged(proxy: ProxyProcess, model_group: str, samples: int) -> dict[str, float]:
    """Wait until the proxy has judged ``samples`` responses of the group; what it said of them."""
    deadline = time.monotonic() + SETTLE_SECONDS
    found = count_samples(proxy, model_group)
    while sum(found.values()) < samples:
        assert time.monotonic() < deadline, f"the proxy never judged {samples} responses"
        time.sleep(0.02)
        found = count_samples(proxy, model_group)
    return found


def ask(proxy: ProxyProcess, model_group: str, messages: list[dict[str, Any]], key: str) -> dict[str, str]:
    headers, _ = call(proxy, "chat", model_group, messages, key=key)
    return headers


def one_shot(number: int, text: str = PROSE) -> list[dict[str, Any]]:
    """A conversation's first request, of ~3,000 tokens: a new conversation every time."""
    return [{"role": "user", "content": f"Task {number}: " + text * 180}]


def test_two_conversations_that_begin_alike_are_each_judged_against_their_own_bills(
    proxy: ProxyProcess,
) -> None:
    """Issue 60: one tenant, two conversations with the same first message (every Codex session of a
    repository, a task run twice, sub-agents of one prompt), interleaved; a truthful provider counts
    the second's content 1.3× ours (code against prose). Keyed by their root, the two shared one note:
    each bill was set against the other's, a truthful bill judged a cache left out and the tenant's
    usage set aside. Each now has its own, and follows its own count."""
    prose, code = [{"role": "user", "content": TASK}], [{"role": "user", "content": TASK}]
    seen: dict[str, list[dict[str, str]]] = {"prose": [], "code": []}
    samples = 0
    for _ in range(14):
        for name, history, text in (("prose", prose, PROSE), ("code", code, CODE)):
            history += [{"role": "assistant", "content": text * 4}, {"role": "user", "content": text * 40}]
            seen[name].append(ask(proxy, "dense", history, "sk-tenant-alike"))
            samples += 1
            said = judged(proxy, "dense", samples)
    assert not any(said.get(outcome) for outcome in ASIDE), said
    last = {name: turns[-1] for name, turns in seen.items()}
    assert {turn["x-compact-count-source"] for turn in last.values()} == {"conversation"}
    assert float(last["prose"]["x-compact-count-ratio"]) == pytest.approx(1.0, abs=0.03)
    assert float(last["code"]["x-compact-count-ratio"]) > 1.15


def test_a_provider_that_starts_counting_more_is_followed_from_its_next_response(proxy: ProxyProcess) -> None:
    """After 20 bills at 1.10, the group's deployment bills 1.44 (Opus 4.6 → 4.7). Averaged in, the
    tenant's estimate — what its conversations' first requests are counted at — was 1.13 after one such
    bill, and 1.31 after ten: counted low all along. Raising the count is the safe direction."""
    for number in range(21):
        ask(proxy, "moving", one_shot(number), "sk-tenant-moving")
        judged(proxy, "moving", number + 1)
    headers = ask(proxy, "moving", one_shot(99), "sk-tenant-moving")
    assert headers["x-compact-count-source"] == "model_group"
    assert float(headers["x-compact-count-ratio"]) == pytest.approx(1.44, abs=0.01)


def test_a_tenant_set_aside_by_one_odd_bill_is_back_on_a_refusal_that_states_the_providers_count(
    proxy: ProxyProcess,
) -> None:
    """One response reporting next to no usage set the tenant aside until the process restarted: a one-off
    caller never sends the coherent response that would bring it back, and a refusal stating the
    provider's count was not enough. Now such a refusal ends it (and a set-aside expires on its own:
    ``tests/unit/test_evidence.py``)."""
    key = "sk-tenant-odd"
    for number in range(4):
        ask(proxy, "odd", one_shot(number), key)
        judged(proxy, "odd", number + 1)
    ask(proxy, "odd", one_shot(4, PROSE + "[odd-usage] "), key)
    said = judged(proxy, "odd", 5)
    assert sum(said.get(outcome, 0) for outcome in ASIDE) == 1, said  # billed 1 token
    aside = ask(proxy, "odd", one_shot(5), key)
    assert aside["x-compact-count-source"] == "prior"
    judged(proxy, "odd", 6)
    too_long = [{"role": "user", "content": "Task 6: " + PROSE * 10}]  # ~19,500 ours in all: 21,500 billed
    for turn in range(12):
        too_long += [
            {"role": "assistant", "content": f"step {turn}"},
            {"role": "user", "content": PROSE * 120},
        ]
    ask(proxy, "odd", too_long, key)  # refused, then retried compacted to the limit the refusal stated
    back = ask(proxy, "odd", one_shot(7), key)
    assert back["x-compact-count-source"] == "model_group"
    assert float(back["x-compact-count-ratio"]) == pytest.approx(1.10, abs=0.02)


def test_a_flood_of_conversations_from_one_key_stays_within_the_memory_bounds(proxy: ProxyProcess) -> None:
    """Each request a new session (the session is the client's to choose): a tenant keeps at most 1,024
    conversations, each charged what it holds (empty ones too), and the proxy goes on answering."""
    for number in range(1_100):
        entry = {"role": "user", "content": f"hello {number}"}
        call(proxy, "chat", "flood", [entry], key="sk-tenant-flood", user=f"session-{number}")
    recent = gauges(proxy)
    assert recent["compact_hook_recent_conversations"] <= 1_024 + 64  # the flood's, and the other tests'
    assert recent["compact_hook_recent_bytes"] <= 16 * 1024 * 1024 + 8 * 1024 * 1024


def gauges(proxy: ProxyProcess) -> dict[str, float]:
    port = proxy.extra_env["COMPACT_METRICS_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        samples = metric_samples(answer.read().decode())
    return {name: value for (name, _), value in samples.items() if name.startswith("compact_hook_recent_")}

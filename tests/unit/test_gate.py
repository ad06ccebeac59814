"""The request gate (``proxy/request/gate.py``) on its own: a real ``litellm.Router``, the provider faked
with respx, the gate's services and telemetry built as the hook builds them."""

import json
import logging
from typing import Any

import pytest
import respx
from prometheus_client import CollectorRegistry

from compact_hook.proxy.answers.compact import ANSWERED
from compact_hook.proxy.feedback.recovery import RETRY_KEY
from compact_hook.proxy.feedback.windows import Taught
from compact_hook.proxy.observe.metrics import Metrics
from compact_hook.proxy.observe.report import report_in
from compact_hook.proxy.observe.telemetry import Telemetry
from compact_hook.proxy.request.gate import RequestGate
from compact_hook.proxy.services import Services
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from tests.routers import Key, SpyRouter, request
from tests.support import is_summary, pairing_problems


def gate(registry: CollectorRegistry | None = None) -> RequestGate:
    services = Services(CompactConfig(), ProcessConfig(), Metrics(registry or CollectorRegistry()))
    return RequestGate(services, Telemetry(services.metrics, lambda: services.compactor.memory.notices))


def turns(pairs: int, words: int) -> list[dict[str, Any]]:
    """A plain conversation of ``pairs`` user/assistant turns of ``words`` distinct words each."""
    said = []
    for n in range(pairs):
        said.append({"role": "user", "content": " ".join(f"ask{n}x{i}" for i in range(words))})
        said.append({"role": "assistant", "content": " ".join(f"did{n}x{i}" for i in range(words))})
    return [*said, {"role": "user", "content": "and now?"}]


@pytest.mark.parametrize(("model", "call_type"), [("plain", "acompletion"), ("agent", "aembedding")])
async def test_the_gate_leaves_what_it_does_not_handle_exactly_as_sent(
    router: SpyRouter,
    model: str,
    call_type: str,
) -> None:
    data = request(model)
    before = json.dumps(data, sort_keys=True)
    assert await gate().handle(Key(), data, call_type) is None
    assert json.dumps(data, sort_keys=True) == before and router.calls == []


async def test_a_compacted_request_is_rendered_reported_as_its_tenant_and_given_its_retry(
    router: SpyRouter,
    mocked_upstream: respx.Route,
) -> None:
    data = request()
    assert await gate().handle(Key(team_id="t-9"), data, "acompletion") is None
    assert any(is_summary(m) for m in data["messages"]) and pairing_problems(data["messages"]) == []
    report = report_in(data)
    assert report is not None and report["compacted"] is True and report.tenant == "team:t-9"
    assert data["metadata"]["compression_savings"]["tokens_saved"] > 0
    [[retry, *_]] = [entry["agent"] for entry in data["context_window_fallbacks"]]
    assert retry["model"] == "agent" and RETRY_KEY in retry


async def test_a_conversation_on_a_call_type_we_have_no_format_for_is_warned_once_and_counted(
    router: SpyRouter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from prometheus_client import generate_latest

    from tests.support import metric_samples, metric_value

    registry = CollectorRegistry()
    the_gate = gate(registry)
    caplog.set_level(logging.WARNING, logger="compact_hook")
    for call_type in ("atext_completion", "atext_completion", "acreate_interaction", "aembedding"):
        data = request(prompt="hello")
        before = json.dumps(data, sort_keys=True)
        assert await the_gate.handle(Key(), data, call_type) is None
        assert json.dumps(data, sort_keys=True) == before  # forwarded exactly as sent
    warned = [
        r.getMessage() for r in caplog.records if "no format for this LiteLLM call type" in r.getMessage()
    ]
    assert len(warned) == 2 and "atext_completion" in warned[0] and "acreate_interaction" in warned[1]
    found = metric_samples(generate_latest(registry).decode())
    counted = {"model_group": "agent", "outcome": "unhandled_call_type"}
    assert metric_value(found, "compact_hook_requests_total", **counted, format="atext_completion") == 2
    assert metric_value(found, "compact_hook_requests_total", **counted, format="acreate_interaction") == 1
    assert metric_value(found, "compact_hook_requests_total", **counted, format="aembedding") == 0
    plain = request("plain")  # a group that does not compact: not ours to report on
    await the_gate.handle(Key(), plain, "atext_completion")
    assert (
        metric_value(
            metric_samples(generate_latest(registry).decode()),
            "compact_hook_requests_total",
            model_group="plain",
            outcome="unhandled_call_type",
            format="atext_completion",
        )
        == 0
    )


async def test_off_forwards_the_messages_as_sent_and_asks_for_no_retry(router: SpyRouter) -> None:
    data = request(proxy_server_request={"headers": {"x-compact": "off"}})
    messages = data["messages"]
    await gate().handle(Key(), data, "acompletion")
    assert data["messages"] is messages and "context_window_fallbacks" not in data
    assert report_in(data) is not None and router.calls == []


async def test_slash_compact_is_answered_and_the_report_says_so(
    router: SpyRouter,
    mocked_upstream: respx.Route,
) -> None:
    data = request(messages=[*turns(6, 300)[:-1], {"role": "user", "content": "/compact keep the ids"}])
    messages = data["messages"]
    reply = await gate().handle(Key(), data, "acompletion")
    assert reply is not None and reply.startswith("Compacted: ")
    report = report_in(data)
    assert report is not None and report[ANSWERED] is True
    assert data["messages"] is messages  # the proxy answers: nothing is forwarded
    assert "Pay particular attention to: keep the ids" in json.dumps(router.calls[0]["messages"])


async def test_slash_compact_on_gemini_is_answered_whole_and_compacts_then_goes_on_when_streamed(
    router: SpyRouter,
    mocked_upstream: respx.Route,
) -> None:
    from compact_hook.wires import GOOGLE
    from tests.support import chat_to_google

    def gemini() -> dict[str, Any]:
        contents = chat_to_google([*turns(6, 300)[:-1], {"role": "user", "content": "/compact keep the ids"}])
        return request(messages=None, contents=contents)

    whole = gemini()
    reply = await gate().handle(Key(), whole, "agenerate_content")
    assert reply is not None and reply.startswith("Compacted: ")
    streamed = gemini()
    sent = streamed["contents"]
    assert await gate().handle(Key(), streamed, "agenerate_content_stream") is None
    report = report_in(streamed)
    assert report is not None and report["compacted"] is True and ANSWERED not in report
    assert streamed["contents"][-1] is sent[-1]  # the command goes on to the model
    assert pairing_problems(streamed["contents"], GOOGLE) == []


async def test_a_window_a_provider_taught_is_the_window_of_the_next_requests(
    router: SpyRouter,
    mocked_upstream: respx.Route,
) -> None:
    the_gate = gate()
    untaught = request(messages=turns(8, 200))
    await the_gate.handle(Key(), untaught, "acompletion")
    before = report_in(untaught)
    assert before is not None and before["compacted"] is False  # under the 20K window's trigger
    window = before["tokens_before"] * 4 // 5
    await the_gate.services.learned.learn("agent", window, 60, "team:any", Taught.STATED)
    taught = request(messages=turns(8, 200))
    await the_gate.handle(Key(), taught, "acompletion")
    after = report_in(taught)
    assert after is not None and after["compacted"] is True and after["tokens_after"] < window

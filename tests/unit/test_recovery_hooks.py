"""``Recovery`` (``proxy/feedback/recovery.py``), the deployment hooks' side, on its own: a real
``litellm.Router``, the provider faked with respx."""

import copy
from typing import Any

import pytest
import respx
from prometheus_client import CollectorRegistry

from compact_hook.core.calibration import CountRatio, RatioSource
from compact_hook.core.evidence import Forwarded, Trust
from compact_hook.proxy.feedback.recovery import Recovery
from compact_hook.proxy.marks import INTERNAL_TOKEN, RETRY_KEY
from compact_hook.proxy.observe.metrics import Metrics
from compact_hook.proxy.observe.report import Report, record, report_in
from compact_hook.proxy.observe.telemetry import Telemetry
from compact_hook.proxy.request.gate import RequestGate
from compact_hook.proxy.services import Services
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from tests.routers import Key, SpyRouter, request
from tests.support import is_summary, load_transcript, pairing_problems

TOO_LONG = (
    "This model's maximum context length is 9000 tokens. However, your messages resulted in 12000 tokens."
)


MISCOUNTED = (  # the configured 20K window is right, our count is not: the provider counted 1.2× it
    "This model's maximum context length is 20000 tokens. However, your messages resulted in 36000 tokens."
)


COUNTED_LESS = (  # 24,000 for our 30,000
    "This model's maximum context length is 12000 tokens. However, your messages resulted in 24000 tokens."
)


def recovery() -> Recovery:
    return Recovery(Services(CompactConfig(), ProcessConfig(), Metrics(CollectorRegistry())))


def attempt(messages: list[Any], failure: str, tokens_after: int = 10_000, **extra: Any) -> dict[str, Any]:
    """A deployment attempt's kwargs as the router passes them: the group, the breadcrumbs of the
    attempt it follows, and the report the pre-call hook left."""
    kwargs: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": messages,
        "litellm_call_id": "call-7",
        "metadata": {"model_group": "agent", "previous_models": [{"exception_string": failure}]},
        **extra,
    }
    report = Report(tokens_after=tokens_after, session_id="s-1")
    report.tenant, report.group, report.forwarded = "team:t", "agent", Forwarded(tokens_after)
    record(kwargs, "metadata", report)
    return kwargs


async def test_a_first_attempt_is_left_alone_and_a_forged_mark_never_reaches_the_provider() -> None:
    plain = {"model": "m", "messages": []}
    assert await recovery().before_attempt(plain, "acompletion") is None and plain == {
        "model": "m",
        "messages": [],
    }
    forged = {"model": "m", RETRY_KEY: "a guess"}
    assert await recovery().before_attempt(forged, "acompletion") is forged and RETRY_KEY not in forged


async def test_a_context_error_teaches_the_group_its_window_and_how_the_provider_counts(
    router: SpyRouter,
) -> None:
    healer = recovery()
    failed = attempt([], TOO_LONG, tokens_after=10_000)
    await healer.after_failure(failed, RuntimeError(TOO_LONG), "acompletion")
    assert await healer.services.learned.get("agent", "team:other") == 9000  # stated: the group's
    ratio = await healer.services.ratios.ratio("agent", "team:t", Trust())
    assert ratio.source is RatioSource.MODEL_GROUP  # 12,000 for our 10,000:
    assert ratio.value == pytest.approx(1.2)
    assert await healer.services.ratios.ratio("agent", "team:other", Trust()) == CountRatio()  # its own
    assert await healer.services.learned.get("plain", "team:t") is None
    assert (await healer.services.ratios.ratio("plain", "team:t", Trust(1.1))) == CountRatio(1.1)


async def test_the_retry_is_compacted_to_the_learned_window_as_the_same_tenant_and_session(
    router: SpyRouter,
    mocked_upstream: respx.Route,
) -> None:
    healer = recovery()
    messages = load_transcript("claude_code_fa812bfe_pre_compact.json")
    kwargs = attempt(copy.deepcopy(messages), MISCOUNTED, tokens_after=30_000, **{RETRY_KEY: INTERNAL_TOKEN})
    assert await healer.before_attempt(kwargs, "acompletion") is kwargs
    assert RETRY_KEY not in kwargs
    assert any(is_summary(m) for m in kwargs["messages"]) and pairing_problems(kwargs["messages"]) == []
    report = report_in(kwargs)
    assert report is not None and report["recovered"] is True and report["tokens_after"] <= 20_000
    assert report["count_source"] == "refusal" and report["count_ratio"] == 1.2  # 36,000 for our 30,000
    assert report.counted * 1.2 == pytest.approx(report["tokens_after"], abs=1)
    assert await healer.services.learned.get("agent", "team:t") is None  # the window was right
    assert report["session_id"] == "s-1" and report.tenant == "team:t"
    assert router.calls[0]["metadata"]["compact_hook_internal"] == INTERNAL_TOKEN


async def test_a_retry_is_never_sized_below_our_own_count_by_a_provider_that_counts_less(
    router: SpyRouter,
    mocked_upstream: respx.Route,
) -> None:
    """It counted 0.8 of what we did: the retry replaces the middle with a summary, which it may count
    in another proportion than the whole it refused; followed down, the retry can be refused again."""
    healer = recovery()
    messages = load_transcript("claude_code_fa812bfe_pre_compact.json")
    kwargs = attempt(
        copy.deepcopy(messages), COUNTED_LESS, tokens_after=30_000, **{RETRY_KEY: INTERNAL_TOKEN}
    )
    await healer.before_attempt(kwargs, "acompletion")
    report = report_in(kwargs)
    assert report is not None and report["recovered"] is True
    assert report["count_source"] == "prior" and report["tokens_after"] <= 12_000  # in our own count


STATED_LIMITS = {  # each form we know of a "too long" that states a limit of 9,000 tokens
    "openai": "This model's maximum context length is 9000 tokens. However, your messages resulted in "
    "30000 tokens.",
    "anthropic": '{"type":"error","error":{"message":"prompt is too long: 30000 tokens > 9000 maximum"}}',
    "gemini": 'GeminiException - {"error": {"code": 400, "message": "The input token count (30000) exceeds '
    'the maximum number of tokens allowed (9000).", "status": "INVALID_ARGUMENT"}}',
    "llama.cpp": "ContextWindowExceededError: OpenAIException - request (30000 tokens) exceeds the "
    "available context size (9000 tokens), try increasing it",
    "llama.cpp, its JSON": 'AnthropicException - {"error":{"code":400,"message":"request exceeds the '
    'available context size","type":"exceed_context_size_error","n_prompt_tokens":30000,"n_ctx":9000}}',
    "bedrock": "BedrockException - ValidationException: input length and `max_tokens` exceed context "
    "limit: 30000 + 0 > 9000",
    "openai, no count": "This model's maximum context length is 9000 tokens. Please reduce the length.",
}


@pytest.mark.parametrize("form", sorted(STATED_LIMITS))
async def test_a_retry_fits_the_limit_the_refusal_states_in_every_form(
    form: str, router: SpyRouter, mocked_upstream: respx.Route
) -> None:
    """Before issue 61, llama.cpp's words were not read: the retry was fitted to 0.8 of what was sent,
    capped at the configured window (20,000), more than the 9,000 the server had just stated."""
    healer = recovery()
    failure = STATED_LIMITS[form]
    kwargs = attempt(
        copy.deepcopy(load_transcript("claude_code_fa812bfe_pre_compact.json")),
        failure,
        tokens_after=30_000,
        **{RETRY_KEY: INTERNAL_TOKEN},
    )
    kwargs["metadata"]["model_group"] = kwargs["model"] = "tiers-20k"
    report_in(kwargs).group = "tiers-20k"  # type: ignore[union-attr]
    await healer.after_failure(kwargs, RuntimeError(failure), "acompletion")
    await healer.before_attempt(kwargs, "acompletion")
    report = report_in(kwargs)
    assert report is not None and report["recovered"] is True
    assert report["tokens_after"] <= 9000  # in the server's tokens: its count where it said one
    assert await healer.services.learned.get("tiers-20k", "team:other") <= 9000  # stated: the group's
    assert pairing_problems(kwargs["messages"]) == []


async def test_a_limit_stated_below_the_floor_serves_the_refused_tenant_as_stated_and_others_at_the_floor(
    router: SpyRouter, mocked_upstream: respx.Route
) -> None:
    """A proxy told more than twice the server's context (20,000 against 4,000): before, the refused
    tenant's next requests were fitted to the floor (10,000) and refused again, every turn."""
    from compact_hook.proxy.request.caller import Caller
    from compact_hook.proxy.request.control import Control
    from compact_hook.proxy.request.settings import settle

    healer = recovery()
    failure = (
        "This model's maximum context length is 4000 tokens. However, your messages resulted in 30000 tokens."
    )
    kwargs = attempt([], failure, tokens_after=30_000)
    kwargs["metadata"]["model_group"] = kwargs["model"] = "tiers-20k"
    report_in(kwargs).group = "tiers-20k"  # type: ignore[union-attr]
    await healer.after_failure(kwargs, RuntimeError(failure), "acompletion")
    refused = await settle(healer.services, router, "tiers-20k", Caller("team:t", Control()))
    other = await settle(healer.services, router, "tiers-20k", Caller("team:other", Control()))
    assert refused is not None and refused.window == 4000
    assert other is not None and other.window == 10_000  # learned_window_floor (0.5) of 20,000


async def test_a_retry_that_follows_another_error_raises_that_error(router: SpyRouter) -> None:
    healer = recovery()
    kwargs = attempt([{"role": "user", "content": "hi"}], "rate limited", **{RETRY_KEY: INTERNAL_TOKEN})
    original = ValueError("rate limited")
    await healer.after_failure(kwargs, original, "aresponses")  # /v1/responses retries follow any error
    with pytest.raises(ValueError) as raised:
        await healer.before_attempt(kwargs, "aresponses")
    assert raised.value is original
    again = attempt([], "upstream 502", **{RETRY_KEY: INTERNAL_TOKEN})
    with pytest.raises(RuntimeError, match="upstream 502"):  # no snapshot: the breadcrumb's words
        await healer.before_attempt(again, "acompletion")


async def test_the_retry_is_compacted_under_the_settings_of_its_first_attempt(
    router: SpyRouter,
    mocked_upstream: respx.Route,
) -> None:
    """The key's overrides (here: summaries made by ``plain``, at most 1,000 tokens) hold for the retry after a
    provider's "too long" as they did for the first attempt: both resolve settings one way."""
    services = Services(CompactConfig(), ProcessConfig(), Metrics(CollectorRegistry()))
    gate = RequestGate(services, Telemetry(services.metrics, lambda: services.compactor.memory.notices))
    data = request("agent")
    key = Key(team_id="t", metadata={"compact": {"summary_model": "plain", "summary_max_tokens": 1000}})
    assert await gate.handle(key, data, "acompletion") is None
    first = report_in(data)
    assert first is not None and first["compacted"] is True
    first_calls = len(router.calls)
    assert first_calls >= 1 and {call["model"] for call in router.calls} == {"plain"}
    data["metadata"]["previous_models"] = [{"exception_string": TOO_LONG}]
    data[RETRY_KEY] = INTERNAL_TOKEN
    healer = Recovery(services)
    await healer.after_failure(data, RuntimeError(TOO_LONG), "acompletion")
    assert await healer.before_attempt(data, "acompletion") is data
    retried = report_in(data)
    assert retried is not None and retried["recovered"] is True and retried["summary_calls"] >= 1
    assert len(router.calls) > first_calls and {call["model"] for call in router.calls} == {"plain"}
    assert pairing_problems(data["messages"]) == []

"""The one invariant about what the hook learns from outside, as a property: whatever sequence of usage
reports (truthful at any ratio, left-out caches, zeros, ceilings, the messages only, noise), refusals
(with and without a stated limit or count) and throttles reaches it, from any tenants and
conversations (two of them beginning alike), every request it forwards — a first attempt or a retry
after a refusal — is at most what it would forward with nothing learned: the configured window at
the prior. And nothing learned stops it compacting: no request is forwarded as sent for want of room.

Through the real pre-call gate, the real usage and recovery hooks and a real ``litellm.Router`` (its
provider faked with respx, answering every summary call), in process; ``core.limits`` is where the
invariant is kept, this is where it is proven.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import litellm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from compact_hook.core.calibration import CountRatio
from compact_hook.core.outcomes import Reason
from compact_hook.proxy import server
from compact_hook.proxy.feedback.recovery import Recovery
from compact_hook.proxy.feedback.usage import Bills
from compact_hook.proxy.marks import INTERNAL_TOKEN, RETRY_KEY
from compact_hook.proxy.observe.metrics import Metrics
from compact_hook.proxy.observe.report import Report, report_in
from compact_hook.proxy.observe.telemetry import Telemetry
from compact_hook.proxy.request.gate import RequestGate
from compact_hook.proxy.services import Services
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from compact_hook.wires import CHAT
from tests.compaction import idle
from tests.routers import Key, deployment, spy_router
from tests.support import chat_tool_definitions, tokens_of

GROUP, WINDOW, PRIOR, RESERVE = "learns", 6_000, 1.1, 1_000
BOUND = CountRatio(PRIOR).ours(WINDOW - RESERVE)
"""The most we forward with nothing learned (our tokens): the configured window at the prior, less
the reply's reserve."""
TOOLS = chat_tool_definitions(4)
"""~1,300 tokens of tool definitions on every request: with the reserve, a learned window of half the
configured one leaves no room beside them."""
TENANTS = ("team:a", "team:a", "team:a", "team:b")
"""Conversation → tenant: 0 and 1 begin alike (one task), 2 is another of the same tenant, 3 another's."""


@dataclass(frozen=True)
class Turn:
    conversation: int
    grow: int


@dataclass(frozen=True)
class Bill:
    """The usage of a conversation's last request: ``shape`` of our count of it, ``value`` its parameter."""

    conversation: int
    shape: str
    value: float


@dataclass(frozen=True)
class Refusal:
    conversation: int
    limit: int | None
    counted: int | None


@dataclass(frozen=True)
class Throttle:
    conversation: int


CONVERSATION = st.integers(0, 3)
EVENTS = st.lists(
    st.one_of(
        st.builds(Turn, CONVERSATION, st.integers(1, 4)),
        st.builds(
            Bill,
            CONVERSATION,
            st.sampled_from(["truthful", "tail", "zero", "ceiling", "noise"]),
            st.floats(0.1, 6.0),
        ),
        st.builds(
            Refusal,
            CONVERSATION,
            st.none() | st.integers(200, 12_000),
            st.none() | st.integers(100, 60_000),
        ),
        st.builds(Throttle, CONVERSATION),
    ),
    min_size=1,
    max_size=14,
)


@dataclass
class World:
    """One proxy's hook and the conversations its clients hold."""

    gate: RequestGate
    histories: list[list[dict[str, Any]]] = field(default_factory=lambda: [[] for _ in TENANTS])
    last: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def services(self) -> Services:
        return self.gate.services

    async def close(self) -> None:
        """Compactions still prepared in the background finished, then the compactor closed. Not
        cancelled: a summary call cancelled inside LiteLLM's executor hop leaves its coroutine never
        awaited (an unraisable warning that failed the test on a loaded machine, twice on CI); the
        faked provider answers every call, so waiting for them ends."""
        built = self.services.built
        if built is None:
            return
        if built.preparations is not None:
            await idle(built.preparations.setup.background)
        await built.close()

    async def turn(self, event: Turn) -> None:
        history = self.histories[event.conversation]
        if not history:
            task = "task: fix the parser" if event.conversation < 2 else f"task {event.conversation}"
            history.append({"role": "user", "content": task + " " + words(40, "t")})
        for _ in range(event.grow):
            step = len(history)
            history.append({"role": "assistant", "content": words(120, f"a{event.conversation}-{step}")})
            history.append({"role": "user", "content": words(180, f"u{event.conversation}-{step}")})
        data = {"model": GROUP, "messages": copy.deepcopy(history), "litellm_call_id": f"c{len(history)}"}
        data |= {"metadata": {"user_api_key": "hashed"}, "tools": TOOLS, "max_tokens": RESERVE}
        await self.gate.handle(Key(team_id=TENANTS[event.conversation][5:]), data, "acompletion")
        assert_within_bound(data)
        self.last[event.conversation] = data

    async def bill(self, event: Bill) -> None:
        data = self.last.get(event.conversation)
        report = report_in(data) if data is not None else None
        if report is None:
            return
        ours, value = report.counted, event.value
        billed = {
            "truthful": round(ours * value),
            "tail": round(200 * value),
            "zero": 0,
            "ceiling": min(round(ours * PRIOR), round(1_000 * value)),
            "noise": round(3_000 * value),
        }[event.shape]
        params = {"metadata": {"model_group": GROUP, **data["metadata"]}}
        usage = {"prompt_tokens": billed}
        await Bills(self.services).heard(
            {"litellm_params": params, "standard_logging_object": {"metadata": {"usage_object": usage}}}
        )

    async def refuse(self, event: Refusal | Throttle) -> None:
        data = self.last.get(event.conversation)
        if data is None or report_in(data) is None:
            return
        failure = throttled() if isinstance(event, Throttle) else refused(event)
        recovery = Recovery(self.services)
        await recovery.after_failure(data, RuntimeError(failure), "acompletion")
        retry = copy.deepcopy({k: v for k, v in data.items() if k != "metadata"})
        retry["metadata"] = {
            **data["metadata"],
            "model_group": GROUP,
            "previous_models": [{"exception_string": failure}],
        }
        retry[RETRY_KEY] = INTERNAL_TOKEN
        try:
            await recovery.before_attempt(retry, "acompletion")
        except RuntimeError:  # a retry following a throttle re-raises it: nothing was forwarded
            return
        assert_within_bound(retry)


def refused(event: Refusal) -> str:
    if event.limit is not None and event.counted is not None:
        return (
            f"This model's maximum context length is {event.limit} tokens. However, your messages "
            f"resulted in {event.counted} tokens."
        )
    if event.counted is not None:
        return f"prompt is too long: {event.counted} tokens"
    return "Your input exceeds the context window of this model. Please adjust your input and try again."


def throttled() -> str:
    return "Too many tokens, please wait before trying again."


def assert_within_bound(data: dict[str, Any]) -> None:
    """What was forwarded fits the configured window at the prior, and was not forwarded for want of room."""
    report = report_in(data)
    assert isinstance(report, Report)
    assert report.get("reason") != Reason.NO_ROOM.value, report
    forwarded = tokens_of(
        {"messages": data["messages"], "tools": data.get("tools") or []}, CHAT, "o200k_base"
    )
    assert forwarded <= BOUND, (forwarded, BOUND, dict(report))


def words(count: int, tag: str) -> str:
    return " ".join(f"{tag}w{n}" for n in range(count))


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mocked_upstream: Any) -> Iterator[Any]:
    """A fresh hook for each example (the router and the faked provider shared)."""
    compact = {
        "context_window": WINDOW,
        "count_ratio": PRIOR,
        "archive_dir": str(tmp_path / "archive"),
        "retry_backoff_seconds": 0,
        "summary_max_tokens": 300,
        "recall": False,
    }
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)  # respx answers the summaries
    router = spy_router([deployment(GROUP, compact)])
    monkeypatch.setattr(server, "proxy_router", lambda: router)

    def fresh() -> World:
        # each example its own memory: the file store would carry what one taught into the next
        services = Services(CompactConfig(), ProcessConfig(store="memory"), Metrics(CollectorRegistry()))
        return World(
            RequestGate(services, Telemetry(services.metrics, lambda: services.compactor.memory.notices))
        )

    yield fresh


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(events=EVENTS)
async def test_nothing_learned_makes_the_hook_forward_more_nor_stop_compacting(
    world: Any, events: list[Any]
) -> None:
    here = world()
    for event in events:
        if isinstance(event, Turn):
            await here.turn(event)
        elif isinstance(event, Bill):
            await here.bill(event)
        else:
            await here.refuse(event)
    for conversation in range(len(TENANTS)):  # and the next turn of each, after all of it
        await here.turn(Turn(conversation, 1))
    await here.close()

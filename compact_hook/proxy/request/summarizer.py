"""The summary call through the proxy's own router.

Going through ``llm_router.acompletion`` (not HTTP back into the proxy) means the call uses
the operator's deployments, keys, fallbacks and cost tracking; copying the caller's auth
metadata lands the spend on the caller's key, and the call bears our mark (``proxy.marks``), so
no hook of ours compacts it itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compact_hook.core.pricing import Prices, Usage
from compact_hook.engine.summary.summarize import Message
from compact_hook.proxy.server import complete
from compact_hook.settings.model import CompactConfig


def _no_spending(amount: float) -> None:
    return None


@dataclass
class Spending:
    """What one request's summary calls cost: each call's cost told as it is paid (``each``: the
    metrics — a prepared summary is paid after the request that started it has gone), and added up
    for the request's report (``total``)."""

    each: Callable[[float], None] = _no_spending
    total: float = 0.0

    def __call__(self, amount: float) -> None:
        self.total += amount
        self.each(amount)


class RouterSummarizer:
    """``summarize`` for the engine: one router call per invocation; retries are the engine's.

    What each call costs — LiteLLM's own price of the response where it has one, else its usage at
    ``prices`` — goes to ``on_spent`` (a ``Spending``).
    """

    def __init__(
        self,
        router: Any,
        model: str,
        config: CompactConfig,
        metadata: dict[str, Any],
        on_spent: Callable[[float], None] = _no_spending,
    ):
        """Calls ``model`` through ``router`` with the settings' ``summary_max_tokens`` and
        ``summary_timeout_seconds``, carrying ``metadata`` (``marks.own_call_metadata``)."""
        self.router = router
        self.model = model
        self.max_tokens = config.summary_tokens
        self.timeout = config.summary_timeout_seconds
        self.metadata = metadata
        self.prices: Prices | None = None
        self.on_spent = on_spent

    async def __call__(self, messages: list[Message]) -> str:
        response = await complete(
            self.router,
            model=self.model,
            messages=messages,
            max_tokens=self.max_tokens,
            timeout=self.timeout,
            metadata=dict(self.metadata),
            num_retries=0,
            stream=False,
        )
        cost = response_cost(response, self.prices)
        if cost > 0:
            self.on_spent(cost)
        content = response.choices[0].message.content
        return content if isinstance(content, str) else ""


def response_cost(response: Any, prices: Prices | None) -> float:
    """A completion's cost: LiteLLM's (``_hidden_params["response_cost"]``), else its usage priced."""
    hidden = getattr(response, "_hidden_params", None)
    priced = hidden.get("response_cost") if isinstance(hidden, Mapping) else None
    if isinstance(priced, int | float) and not isinstance(priced, bool) and priced > 0:
        return float(priced)
    usage = getattr(response, "usage", None)
    if prices is None or usage is None:
        return 0.0
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    output = int(getattr(usage, "completion_tokens", 0) or 0)
    return Usage(uncached=prompt, output=output).cost(prices)

"""Answering the model's recall calls: the rounds between the model's reply and the client.

When a reply offered the tool calls it, each handle is looked up (``Pending.answer``), the model's
turn and the answers are appended to what was forwarded, and the model is called again through the
router (the operator's deployments, keys and spend tracking; the caller's key pays) — at most
``recall_max_rounds`` times (``MAX_ROUNDS`` unless the operator says); the last round's answers say
there are no more. The client gets the final reply only: no recall call in it, its usage every
round's.

A reply that calls the client's tools *and* ours goes to the client with ours taken out: the
client must run its tools before the model can go on, and a recall answered now would be asked
again with nothing to continue from; the model asks again on the next turn, where the handle is
still shown. Each round is billed as its own request (its own spend record, on the caller's key):
no round goes unbilled, as it would if its usage were folded into one record LiteLLM prices once.

A round that fails (a timeout, ``recall_round_timeout_seconds``; a 429 or 5xx, after one more try;
a "too long", a refusal) fails the request with that error, which the client retries: the reply
before it, our calls taken out, is often empty and ends ``stop`` — an agent reads "task complete".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from compact_hook.core.failures import SummaryFailure, failure_of
from compact_hook.proxy.recall.offer import Pending
from compact_hook.proxy.recall.wires import KEPT_PARAMS, Call
from compact_hook.proxy.router_summarizer import summary_metadata
from compact_hook.proxy.server import proxy_router

logger = logging.getLogger(__name__)

NO_MORE = "\n\n(That was the last recall this reply may make: answer with what you have.)"
ROUND_TRIES = 2
"""Each round's model call: tried once more after a timeout, a 429 or a 5xx."""


class RoundFailed(Exception):
    """A recall round's model call failed for good: ``error`` is what the client is answered with
    (the provider's error as LiteLLM raised it, or LiteLLM's ``Timeout``) — told apart from an error
    of ours, after which a stream goes on as it came (``streams``)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def answered(pending: Pending, data: Mapping[str, Any], response: Any) -> Any | None:
    """The reply the client gets when ``response`` calls the recall tool (None: it does not, the
    reply goes as it is)."""
    wire, tool = pending.wire, pending.tool
    calls, theirs = wire.calls(response, tool)
    if not calls:
        return None
    usage = wire.usage(response)
    router = proxy_router()
    if theirs or router is None:
        return wire.finished(response, tool, usage, response)
    budget = pending.budget() if pending.budget is not None else None
    if budget is not None:
        pending.allowance = await budget.left()
    request, rounds, first = followup_request(pending, data), 0, response
    try:
        while calls and not theirs and rounds < pending.max_rounds:
            rounds += 1
            answers = [(call, _answer(pending, call, len(calls), rounds)) for call in calls]
            wire.followup(request, response, answers)
            followed = await send_round(pending, router, request)
            usage = {key: usage.get(key, 0) + value for key, value in wire.usage(followed).items()}
            response = followed
            calls, theirs = wire.calls(response, tool)
    finally:
        pending.rounds = rounds
        if budget is not None:
            await budget.spend(pending.returned)
    logger.info("compact_hook: request %s: %d recall round(s)", data.get("litellm_call_id"), rounds)
    return wire.finished(response, tool, usage, first)


async def send_round(pending: Pending, router: Any, request: dict[str, Any]) -> Any:
    """One round's model call, within ``recall_round_timeout_seconds``, tried ``ROUND_TRIES`` times
    where the failure may pass (a timeout, a 429, a 5xx). A round that still fails raises its error
    (a timeout as LiteLLM's ``Timeout``, 408): the client gets it and retries the turn — never the
    model's reply with our calls taken out, which often says nothing and ends ``stop``: an agent
    reads "done"."""
    for attempt in range(1, ROUND_TRIES + 1):
        try:
            return await asyncio.wait_for(pending.wire.send(router, request), pending.round_timeout)
        except Exception as exc:
            kind = failure_of(exc)
            passing = kind in (SummaryFailure.TIMEOUT, SummaryFailure.UNAVAILABLE)
            logger.warning(
                "compact_hook: a recall round failed (%s, try %d of %d)", kind.value, attempt, ROUND_TRIES
            )
            if attempt < ROUND_TRIES and passing:
                continue
            if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
                raise RoundFailed(round_timeout(request, pending.round_timeout)) from exc
            raise RoundFailed(exc) from exc
    raise AssertionError("unreachable")  # pragma: no cover


def round_timeout(request: Mapping[str, Any], seconds: float) -> Exception:
    """A round's timeout as LiteLLM's own error (408): what clients retry."""
    from litellm.exceptions import Timeout

    return Timeout(
        message=f"compact_hook: a recall round took longer than {seconds:g} s",
        model=str(request.get("model")),
        llm_provider="compact_hook",
    )


def _answer(pending: Pending, call: Call, calls: int, round_: int) -> str:
    text = pending.answer(call.handle, share=calls) if call.handle else "Call it with an id."
    return text + NO_MORE if round_ == pending.max_rounds else text


def followup_request(pending: Pending, data: Mapping[str, Any]) -> dict[str, Any]:
    """What a follow-up sends: the forwarded conversation and the request's own parameters (never
    LiteLLM's per-request fields), with the caller's auth for spend."""
    wire = pending.wire
    request = {key: data[key] for key in KEPT_PARAMS[wire.name] if key in data}
    request["model"] = data.get("model")
    entries = wire.entries
    sent = data.get(entries) or []
    request[entries] = [{"role": "user", "content": sent}] if isinstance(sent, str) else list(sent)
    request[wire.metadata_key] = summary_metadata(data.get(wire.metadata_key), pending.session_id)
    return request

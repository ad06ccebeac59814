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

A round that fails for good (a timeout, ``recall_round_timeout_seconds``, a 429 or 5xx after one more
try) fails the request with that error, which the client retries; one whose additions failed (the
answers made it too long, a refusal) is resent once without our tool. Never the reply before it, our
calls taken out: often empty and ending ``stop``, an agent reads it as "task complete".

A streamed reply goes to its wire's own stream (``wires.<wire>.stream``) with these rounds
(``recalled_stream``). What the model read back goes into the archive's audit (``audit_recalls``):
one entry per reply that made recall calls (``Removal.RECALLED``), the handles asked for, each found
or not, written off the reply's path — the client never waits on the disk, and a failed write is
logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Mapping
from dataclasses import dataclass
from typing import Any

from compact_hook.core.failures import SummaryFailure, failure_of
from compact_hook.core.outcomes import Removal
from compact_hook.proxy.marks import own_call_metadata
from compact_hook.proxy.recall.offer import Answered, Pending, RoundFailure
from compact_hook.proxy.server import proxy_router
from compact_hook.state.archive import Audit
from compact_hook.wires.base import Call
from compact_hook.wires.guard import RoundFailed
from compact_hook.wires.registry import WIRES

logger = logging.getLogger(__name__)

NO_MORE = "\n\n(That was the last recall this reply may make: answer with what you have.)"
ROUND_TRIES = 2
"""Each round's model call: tried once more after a timeout, a 429 or a 5xx."""
PASSING = frozenset({SummaryFailure.TIMEOUT, SummaryFailure.UNAVAILABLE})
RESENT_AFTER = frozenset({SummaryFailure.TOO_LONG, SummaryFailure.REFUSED})
"""Failures of what the rounds added (the answers made it too long, the provider refused the
follow-up): the client's own request, without our tool, may still be answered."""


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
            try:
                followed = await send_round(pending, router, request)
            except Exception as exc:
                resent = await _after_failure(pending, data, router, exc)
                return wire.finished(resent, tool, _added(usage, wire.usage(resent)), resent)
            usage = _added(usage, wire.usage(followed))
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
    where the failure may pass (a timeout, a 429, a 5xx)."""
    for attempt in range(1, ROUND_TRIES + 1):
        try:
            return await asyncio.wait_for(pending.wire.send(router, request), pending.round_timeout)
        except Exception as exc:
            kind = failure_of(exc)
            logger.warning(
                "compact_hook: a recall round failed (%s, try %d of %d)", kind.value, attempt, ROUND_TRIES
            )
            if attempt >= ROUND_TRIES or kind not in PASSING:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _after_failure(pending: Pending, data: Mapping[str, Any], router: Any, failed: Exception) -> Any:
    """A round that failed for good. Where what the rounds added failed (the answers made the request
    too long for the model, the provider refused the follow-up), the client's request is resent once
    without our tool: the model answers from what it had. Otherwise — and if the resend fails too —
    ``RoundFailed`` with the error the client gets (``mapped``), never the reply so far with our calls
    taken out, which often says nothing and ends ``stop``: an agent reads "done"."""
    kind = failure_of(failed)
    logger.warning(
        "compact_hook: request %s: a recall round failed for good (%s): %s",
        data.get("litellm_call_id"),
        kind.value,
        failed,
    )
    if kind not in RESENT_AFTER:
        pending.failed = RoundFailure.ERROR
        raise RoundFailed(mapped(failed, data, pending.round_timeout)) from failed
    pending.failed = RoundFailure.RESENT
    try:
        return await send_round(pending, router, without_our_tool(pending, followup_request(pending, data)))
    except Exception as exc:
        pending.failed = RoundFailure.ERROR
        raise RoundFailed(mapped(exc, data, pending.round_timeout)) from exc


def without_our_tool(pending: Pending, request: dict[str, Any]) -> dict[str, Any]:
    """``request`` without the recall tool (the client's tools, as sent)."""
    ours = pending.wire.tool(pending.tool)
    tools = request.get("tools")
    if isinstance(tools, list):
        request["tools"] = [tool for tool in tools if tool != ours]
    return request


def mapped(failed: BaseException, data: Mapping[str, Any], seconds: float) -> Exception:
    """The error the client gets for a failed round, with a status clients retry: the router's own
    (LiteLLM's, with its status: 429, 5xx, 400), a timeout as LiteLLM's ``Timeout`` (408), anything
    else as its ``ServiceUnavailableError`` (503)."""
    from litellm.exceptions import ServiceUnavailableError, Timeout

    model = str(data.get("model") or "")
    if isinstance(failed, Exception) and isinstance(getattr(failed, "status_code", None), int):
        return failed
    if isinstance(failed, (asyncio.TimeoutError, TimeoutError)):
        return Timeout(
            message=f"compact_hook: a recall round took longer than {seconds:g} s",
            model=model,
            llm_provider="",
        )
    message = f"compact_hook: a recall round failed ({type(failed).__name__})"
    return ServiceUnavailableError(message=message, model=model, llm_provider="")


def _added(usage: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    return {key: usage.get(key, 0) + value for key, value in more.items()}


def _answer(pending: Pending, call: Call, calls: int, round_: int) -> str:
    text = pending.answer(call.handle, share=calls) if call.handle else "Call it with an id."
    return text + NO_MORE if round_ == pending.max_rounds else text


def followup_request(pending: Pending, data: Mapping[str, Any]) -> dict[str, Any]:
    """What a follow-up sends: the forwarded conversation and the request's own parameters (never
    LiteLLM's per-request fields), with the caller's auth for spend."""
    wire = pending.wire
    request = {key: data[key] for key in wire.kept_params if key in data}
    request["model"] = data.get("model")
    entries = wire.entries
    sent = data.get(entries) or []
    request[entries] = [{"role": "user", "content": sent}] if isinstance(sent, str) else list(sent)
    request[wire.metadata_key] = own_call_metadata(data.get(wire.metadata_key), pending.session_id)
    return request


@dataclass(frozen=True, slots=True)
class Answering:
    """A request offered the recall tool, as its stream sees it (``wires.base.Recalling``)."""

    pending: Pending

    @property
    def tool(self) -> str:
        return self.pending.tool

    async def answered(self, data: Mapping[str, Any], reply: Any) -> Any:
        return await answered(self.pending, data, reply)


def recalled_stream(
    pending: Pending, data: Mapping[str, Any], chunks: AsyncIterable[Any]
) -> AsyncIterable[Any]:
    """The client's stream of a request offered the recall tool (as it came on a wire not served)."""
    wire = WIRES.get(pending.wire.name)
    return chunks if wire is None else wire.stream(Answering(pending), data, chunks)


_writing: set[asyncio.Task[None]] = set()
"""The writes under way (a task nothing refers to may be collected before it runs)."""


def audit_recalls(pending: Pending) -> None:
    """Start writing the audit of ``pending``'s recall calls (nothing when it made none)."""
    if not pending.asked or pending.archive is None:
        return
    task = asyncio.get_running_loop().create_task(_write(pending))
    _writing.add(task)
    task.add_done_callback(_writing.discard)


def audit_text(asked: list[tuple[str, Answered]]) -> str:
    return "\n".join(f"recall {handle}: {answered.value}" for handle, answered in asked)


async def _write(pending: Pending) -> None:
    assert pending.archive is not None
    audit = Audit(Removal.RECALLED, summary=audit_text(pending.asked))
    try:
        await pending.archive.save(pending.session_id, [], pending.tenant, audit)
    except Exception:  # an archive that fails is reported by its own log; the reply went already
        logger.exception("compact_hook: could not audit the recall calls of session %s", pending.session_id)

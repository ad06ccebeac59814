"""Recovering from a provider's "too long": learn its real limit, compact to it, retry once.

LiteLLM 1.106.2 gives us one way to retry a request after the provider refused it: a
fallback. Every request to a compacting model carries a per-request fallback to its own
group marked with our secret (``RETRY_KEY``); the deployment hook of that retry sees the mark,
learns the limit from the error the router recorded, compacts the request to it (forced) and
lets it go. Chat and /v1/messages raise ``ContextWindowExceededError``, which
``context_window_fallbacks`` catch; /v1/responses raises a plain ``BadRequestError``, so there
the mark rides in ``fallbacks`` and a retry of any other error re-raises that error unchanged.

A refusal teaches two things. Where the error says what the provider counted ("prompt is too
long: 52000 tokens > 40000 maximum"), its count over ours is this very request's ratio: the retry is
counted at it, and the model group learns it (``proxy.feedback.ratios.LearnedRatios``). A limit below the
configured window is remembered per model group (``proxy.feedback.windows.LearnedWindows``), and later
requests to the group use it as their window.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compact_hook.core import evidence
from compact_hook.core.calibration import CountRatio, RatioSource
from compact_hook.core.evidence import Earlier, trust_of
from compact_hook.core.failures import Overflow, is_context_error
from compact_hook.core.outcomes import Mode
from compact_hook.proxy import server
from compact_hook.proxy.feedback.windows import Taught
from compact_hook.proxy.lifecycle.logs import for_model_group
from compact_hook.proxy.marks import INTERNAL_TOKEN, RETRY_KEY, metadata_of
from compact_hook.proxy.observe.report import record_savings, report_in, report_of
from compact_hook.proxy.request.caller import (
    Caller,
    Engaged,
    call_type_name,
    engine_request,
    group_of,
    session_id_of,
)
from compact_hook.proxy.request.settings import settle
from compact_hook.proxy.services import Services
from compact_hook.settings.model import CompactConfig
from compact_hook.wires import Rejected
from compact_hook.wires.registry import format_for

logger = logging.getLogger(__name__)

MAX_SNAPSHOTS = 64
"""Each is taken by the retry right after its failure: a few suffice, and exceptions can be large."""


def last_failure(kwargs: Mapping[str, Any]) -> str:
    """The error text of the attempt a fallback follows (the router's breadcrumbs)."""
    for metadata in metadata_of(kwargs):
        previous = metadata.get("previous_models")
        if isinstance(previous, Sequence) and previous and isinstance(previous[-1], Mapping):
            return str(previous[-1].get("exception_string") or "")
    return ""


def is_retry(kwargs: dict[str, Any]) -> bool:
    """Pop our mark (whoever put it there: it must never reach the provider); True if it is ours."""
    return bool(kwargs.pop(RETRY_KEY, None) == INTERNAL_TOKEN)


class Snapshots:
    """The error each failed attempt raised, by call id, so a retry we must not make can re-raise it."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, BaseException] = OrderedDict()

    def add(self, call_id: object, exception: BaseException) -> None:
        if isinstance(call_id, str):
            self._items[call_id] = exception
            while len(self._items) > MAX_SNAPSHOTS:
                self._items.popitem(last=False)

    def pop(self, call_id: object) -> BaseException | None:
        return self._items.pop(call_id, None) if isinstance(call_id, str) else None


class Recovery:
    """The deployment hooks' side: learn from a context-length error, compact the retry to it."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.snapshots = Snapshots()

    async def before_attempt(self, kwargs: dict[str, Any], call_type: Any) -> dict[str, Any] | None:
        """Each deployment attempt: our retry after a provider's "too long" is compacted to the
        limit it taught us; a client's imitation of our mark is popped (it must not reach the
        provider); a retry that follows another error re-raises that error."""
        marked = RETRY_KEY in kwargs
        if not is_retry(kwargs):
            return kwargs if marked else None
        failure = last_failure(kwargs)
        if not is_context_error(failure):  # a fallback for another error: that error stands
            snapshot = self.snapshots.pop(kwargs.get("litellm_call_id"))
            raise snapshot if snapshot is not None else RuntimeError(failure or "upstream error")
        try:
            await self._recover(kwargs, call_type_name(call_type), Overflow.parse(failure))
        except Exception:
            logger.exception(
                "compact_hook: could not compact request %s to retry it", kwargs.get("litellm_call_id")
            )
        return kwargs

    async def after_failure(self, request: Mapping[str, Any], exception: Exception, call_type: Any) -> None:
        """A failed attempt: learn the group's real limit from a context-length error."""
        try:
            if is_context_error(exception):
                refusal = await self._refusal(request, Overflow.parse(str(exception)))
                if refusal is not None and refusal.ratio is not None:
                    await self._teach(request, refusal.ratio)
            elif call_type_name(call_type) == "aresponses" and report_in(request) is not None:
                # our retry on /v1/responses follows any error: it must be able to re-raise this one
                self.snapshots.add(request.get("litellm_call_id"), exception)
        except Exception:
            logger.exception("compact_hook: could not learn from a provider's error")

    async def _recover(self, kwargs: dict[str, Any], call_type: str, overflow: Overflow) -> None:
        """Compact the refused request, forced, to the window its error taught us and at the ratio it
        said, as the same tenant and session the pre-call hook saw (its report says)."""
        wire, router, previous, group = (
            format_for(call_type),
            server.proxy_router(),
            report_in(kwargs),
            group_of(kwargs),
        )
        if wire is None or router is None or group is None or previous is None:
            return
        settled = await settle(self.services, router, group, Caller(previous.tenant, previous.control))
        if settled is None:  # the group does not compact: nor does ``_refusal`` learn anything
            return
        for_model_group(group)
        parsed = wire.parse(kwargs)
        refusal = await self._refusal(kwargs, overflow)
        if isinstance(parsed, Rejected) or refusal is None:
            return
        session_id = str(previous.get("session_id") or session_id_of(kwargs, parsed.entries))
        control = dataclasses.replace(previous.control, mode=Mode.FORCE)
        who = Engaged(group, session_id, previous.tenant, control)
        ratio = refusal.retry_ratio(settled.ratio, previous.counted)
        retried = dataclasses.replace(settled, ratio=ratio, window=refusal.window)
        result = await self.services.compactor.compact(engine_request(kwargs, parsed, who, retried))
        previous.follow(report_of(result, session_id, wire.name))  # what the headers hook reads
        record_savings(kwargs, wire.metadata_key, result)
        if result.changes(parsed.entries):
            wire.render(kwargs, result.messages)
        logger.warning(
            "compact_hook: request %s (%s) was too long for the provider; retried at %d tokens (window %d)",
            kwargs.get("litellm_call_id"),
            group,
            result.output_tokens,
            refusal.window,
        )

    async def _refusal(self, request: Mapping[str, Any], overflow: Overflow) -> Refusal | None:
        """What the provider's refusal of ``request`` teaches: the window its retry must fit, and
        where it is below the configured one, the window later requests use — the group's where the
        error states the limit, the tenant's only where we guessed it from what was sent; None when
        there is nothing to learn from.

        Our count of what was sent is our report's (retry fallbacks only ride on requests we
        reported on).
        """
        report, group, router = report_in(request), group_of(request), server.proxy_router()
        if report is None or group is None or router is None or report.counted <= 0:
            return None
        settled = await settle(self.services, router, group, Caller(report.tenant, report.control))
        if settled is None or not settled.config.recover:
            return None
        config = settled.config
        said = overflow.ratio(report.counted)
        ratio = CountRatio(said, RatioSource.REFUSAL) if said is not None else None
        window = overflow.window((ratio or settled.ratio).billed(report.counted))
        if config.context_window is not None and window >= config.context_window:
            return Refusal(config.context_window, ratio)  # the window was right: the count was not
        stated = overflow.limit is not None
        ttl = config.learned_window_ttl_seconds
        taught = Taught.STATED if stated else Taught.GUESSED
        learned = await self.services.learned.learn(group, window, ttl, report.tenant, taught)
        if self._below_floor(group, learned, config) and stated:  # the refused tenant uses it as stated
            await self.services.learned.learn(group, learned, ttl, report.tenant, Taught.BELOW_FLOOR)
        return Refusal(learned, ratio)

    def _below_floor(self, group: str, learned: int, config: CompactConfig) -> bool:
        """Whether ``learned`` is under ``learned_window_floor`` of the group's configured window (said)."""
        configured = self.services.models.resolve(server.proxy_router(), group)
        window = configured.context_window if configured is not None else None
        below = window is not None and learned < config.learned_window_floor * window
        if below:
            logger.warning(
                "compact_hook: model %r taught a window of %d tokens, below learned_window_floor (%g) of its "
                "context_window (%d): later requests keep %d (but the key or team it refused, where the "
                "limit was stated); set context_window to what the provider accepts",
                group,
                learned,
                config.learned_window_floor,
                window,
                math.ceil(config.learned_window_floor * (window or 0)),
            )
        return below

    async def _teach(self, request: Mapping[str, Any], ratio: CountRatio) -> None:
        """The refused request's count, judged as a response's usage is (``core.evidence``), into its
        tenant's estimate (once per refusal: here, after the failure, not again on the retry). The
        provider stated it of this very request: where it is usable, it ends a set-aside as a
        coherent bill does."""
        report, router = report_in(request), server.proxy_router()
        config = self.services.models.resolve(router, report.group) if report and router is not None else None
        if report is None or config is None:
            return
        trust = trust_of(config)
        judged = evidence.judged(ratio.billed(report.counted), report.forwarded, Earlier(), trust)
        judged = dataclasses.replace(judged, coherent=judged.verdict.usable)  # the provider's own count
        ttl = config.learned_window_ttl_seconds
        learned = await self.services.ratios.heard(report.group, report.tenant, judged, trust, ttl)
        self.services.metrics.count_sample(report.group, learned)


@dataclass(frozen=True, slots=True)
class Refusal:
    """What a provider's "too long" taught: the window the retry must fit (the provider's tokens),
    and the request's ratio where the error said what it counted."""

    window: int
    ratio: CountRatio | None

    def retry_ratio(self, settled: CountRatio, counted: int) -> CountRatio:
        """What the retry is counted at: the refusal's ratio where it counts more than ours did, else
        ours — a provider that counts less than we do is not followed down on a retry, whose
        composition (a summary in place of the middle) it may count unlike the whole it refused."""
        said = self.ratio
        if said is None or said.effective(counted) < settled.effective(counted):
            return settled
        return said

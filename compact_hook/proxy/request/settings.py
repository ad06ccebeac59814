"""A request's settings, prices and count ratio, resolved in one place for every attempt.

The pre-call path and the retry after a provider's "too long" (``proxy.feedback.recovery``) must compact
under the same settings: the model group's, the key's and team's overrides (``Control``), a
window a provider taught us, the model's and summary model's prices, and how the group's provider
counts against us (``proxy.feedback.ratios``). Both resolve them here, so a retry cannot drift from its
first attempt.
"""

from __future__ import annotations

import math
from typing import Any

from compact_hook.core.evidence import trust_of
from compact_hook.proxy.request.caller import Caller, Pricing, Settled
from compact_hook.proxy.services import Services
from compact_hook.settings.model import CompactConfig, revised


async def settle(
    services: Services, router: Any, group: str, who: Caller, resolved: CompactConfig | None = None
) -> Settled | None:
    """The group's settings with the key's and team's overrides, the prices, the count ratio the
    tenant's requests start from and the window a provider taught (apart); None when the group does
    not compact. ``resolved``: the group's settings where the caller has looked them up already."""
    resolved = resolved or services.models.resolve(router, group)
    if resolved is None:
        return None
    config = who.control.settings(resolved)
    learned = await services.learned.get(group, who.tenant) if config.recover else None
    window = learned_window(config, learned) if learned is not None else None
    exact = await services.learned.exact(group, who.tenant) if config.recover else None
    if exact is not None:  # stated below the floor, to this tenant: as stated
        window = min(window, exact) if window is not None else exact
    if window is not None and config.summary_context_window is None:  # the group writes its summaries
        config = revised(config, summary_context_window=window)
    ratio = await services.ratios.ratio(group, who.tenant, trust_of(config))
    return Settled(config, _pricing(services, router, group, config), ratio, window)


def learned_window(config: CompactConfig, learned: int) -> int | None:
    """The window a provider taught, where it is below the configured one (if any), but never below
    ``learned_window_floor`` of it (a refusal that teaches less says the configuration is wrong);
    None where it is not below. Kept apart from the settings: the engine's limits use it only where
    it leaves the conversation room (``core.limits``)."""
    configured = config.context_window
    if configured is None:
        return learned
    if learned >= configured:
        return None
    return max(learned, math.ceil(config.learned_window_floor * configured))


def _pricing(services: Services, router: Any, group: str, config: CompactConfig) -> Pricing:
    """The model's prices and its summary model's (the digest costs nothing)."""
    prices = services.models.prices(router, group, config)
    if config.uses_digest:
        return Pricing(prices, None)
    summary_group = config.summary_model or group
    summary = services.models.prices(router, summary_group, config) if summary_group != group else prices
    return Pricing(prices, summary)

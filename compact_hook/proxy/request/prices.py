"""What a model group's tokens cost, as LiteLLM prices them.

A deployment's ``model_info`` cost keys (``input_cost_per_token`` …: what LiteLLM itself bills
with) over LiteLLM's model cost map entry for its model; a group no deployment of which is priced
falls back to the ``price_*`` settings, else it has no price (then no money is reported for it
and cost-aware timing acts as without). A deployment LiteLLM prices at nothing (it answers 0.0 for a
model it does not know, and a local model may cost nothing) is not priced: there is nothing to weigh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compact_hook.core.pricing import Prices
from compact_hook.proxy import server
from compact_hook.settings.model import CompactConfig

INPUT, WRITE, READ, OUTPUT = (
    "input_cost_per_token",
    "cache_creation_input_token_cost",
    "cache_read_input_token_cost",
    "output_cost_per_token",
)


def group_prices(router: Any, group: str, config: CompactConfig) -> Prices | None:
    """The first priced deployment's prices, else the settings'."""
    for deployment in server.deployments(router, group):
        prices = deployment_prices(deployment)
        if prices is not None:
            return prices
    return config.prices


def deployment_prices(deployment: Mapping[str, Any]) -> Prices | None:
    """LiteLLM's prices of one deployment; a cache write or read it does not price costs as input."""
    known = _numbers(_cost_map_entry(deployment))
    model_info = deployment.get("model_info")
    known.update(_numbers(model_info if isinstance(model_info, Mapping) else {}))
    if INPUT not in known or OUTPUT not in known or known[INPUT] + known[OUTPUT] <= 0:
        return None  # LiteLLM answers 0.0 for a model it does not know: not priced, not free
    base = known[INPUT]
    return Prices(base, known.get(WRITE, base), known.get(READ, base), known[OUTPUT])


def _cost_map_entry(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    params = deployment.get("litellm_params")
    model = params.get("model") if isinstance(params, Mapping) else None
    if not isinstance(model, str):
        return {}
    try:
        import litellm

        info = litellm.get_model_info(model=model)
    except Exception:  # LiteLLM raises for a model its map does not know
        return {}
    return info if isinstance(info, Mapping) else {}


def _numbers(source: Mapping[str, Any]) -> dict[str, float]:
    return {
        key: float(value)
        for key in (INPUT, WRITE, READ, OUTPUT)
        if isinstance(value := source.get(key), int | float) and not isinstance(value, bool) and value >= 0
    }

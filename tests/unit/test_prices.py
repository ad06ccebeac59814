"""How a model group is priced (``proxy/request/prices.py``): LiteLLM's own prices first, then ours."""

import dataclasses

import litellm
import pytest

from compact_hook.core.pricing import Prices
from compact_hook.proxy.request.models import deployment_prices, group_prices
from compact_hook.settings.model import CompactConfig


def priced_deployment(model: str, **model_info: float) -> dict[str, object]:
    return {"model_name": "g", "litellm_params": {"model": model, "api_key": "x"}, "model_info": model_info}


def test_a_model_in_litellms_cost_map_is_priced_as_litellm_prices_it() -> None:
    prices = deployment_prices(priced_deployment("anthropic/claude-sonnet-4-5"))
    assert prices == Prices(3e-6, 3.75e-6, 3e-7, 1.5e-5)
    gpt = deployment_prices(priced_deployment("openai/gpt-5"))
    assert gpt is not None and gpt.cache_write == gpt.input  # no write surcharge: written as input


def test_a_deployments_own_cost_keys_come_first_and_an_unknown_model_at_zero_is_unpriced() -> None:
    assert deployment_prices(priced_deployment("openai/standin-x")) is None  # LiteLLM answers 0.0 for it
    own = deployment_prices(
        priced_deployment("openai/standin-x", input_cost_per_token=1e-6, output_cost_per_token=2e-6)
    )
    assert own == Prices(1e-6, 1e-6, 1e-6, 2e-6)  # reads and writes cost as input when not priced
    assert deployment_prices(priced_deployment("openai/gpt-5", input_cost_per_token=9e-6)) == Prices(
        9e-6, 9e-6, 1.25e-7, 1e-5
    )


def test_a_group_no_deployment_prices_falls_back_to_the_settings() -> None:
    router = litellm.Router(model_list=[priced_deployment("openai/standin-x")])
    assert group_prices(router, "g", CompactConfig()) is None
    priced = CompactConfig(price_input=2.0, price_cache_read=0.2, price_output=8.0)
    found = group_prices(router, "g", priced)
    assert found is not None
    assert dataclasses.astuple(found) == pytest.approx((2e-6, 2e-6, 2e-7, 8e-6))
    with pytest.raises(ValueError, match="price_input"):
        CompactConfig(price_input=2.0)

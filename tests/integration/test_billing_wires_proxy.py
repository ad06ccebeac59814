"""Counts the provider agrees with on chat completions, Responses and ``generateContent``, through a
real proxy: stand-ins billing 1.25× and 0.8× what o200k counts, streamed and not — never refused,
within the window, ``x-compact-tokens-after`` within 3% of the bill from the second request on; at
0.8× the trigger stays where our count at the prior reaches it (nothing learned makes us forward more:
``core.limits``); replicas share what was billed. (Claude Code's sessions as Claude counts: ``test_billing_proxy.py``.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.billing import WIRE_WINDOW, WIRES, assert_agrees, billing_config, replay, wire_session
from tests.integration.harness import ProxyProcess
from tests.integration.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.edge]

WIRE_TURNS = 60
"""Two or more compactions at 32K on every wire, after the real client's system prompt and tools."""


@pytest.mark.parametrize("bill", ["1.25", "0.8"])
@pytest.mark.parametrize("wire", WIRES)
def test_every_wire_counts_what_the_provider_bills(
    standin: Any, billing_proxy: ProxyProcess, wire: str, bill: str
) -> None:
    done = replay(standin, [billing_proxy], wire, f"{wire}-{bill}", wire_session(wire, WIRE_TURNS))
    assert_agrees(done, WIRE_WINDOW)
    assert done.compactions >= 2
    if bill == "0.8":  # the figures follow the bill, the window stays where the prior puts it
        assert max(turn.billed for turn in done.before_first_compaction()) <= 0.8 * WIRE_WINDOW


def test_replicas_share_what_the_provider_bills_through_redis(
    standin: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A conversation alternating between two replicas on one Redis: what one heard billed counts the
    next request on the other, the group's estimate included (its second request, from the first's)."""
    config = billing_config(standin, tmp_path_factory.mktemp("archive"))
    with RedisServer() as redis:
        env = {"COMPACT_REDIS_URL": redis.url}
        with ProxyProcess(config, env=env) as one, ProxyProcess(config, env=env) as two:
            done = replay(standin, [one, two], "chat", "chat-1.25", wire_session("chat", WIRE_TURNS))
    assert_agrees(done, WIRE_WINDOW)
    assert done.turns[1].headers["x-compact-count-source"] == "model_group"  # learned on the other replica
    assert done.compactions >= 2

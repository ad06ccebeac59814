"""Counts the provider agrees with, through a real proxy: stand-ins that bill unlike us.

Real Claude Code sessions at a 40K window, with Claude Code's system prompt and tools, to stand-ins
billing as Claude 3 – Opus 4.6 and as Opus 4.8 and later count (ctok), refusing over the window with
Anthropic's own error: never refused (with the family's prior, not even the first request), the
largest billed request within the window, the hook's ``x-compact-tokens-after`` within 3% of what
was billed from a conversation's second request on. The other wires: ``test_billing_wires_proxy.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.billing import (
    CLAUDE,
    assert_agrees,
    claude_code_sessions,
    replay,
)
from tests.integration.harness import ProxyProcess

pytestmark = [pytest.mark.integration, pytest.mark.edge]


@pytest.mark.parametrize("family", list(CLAUDE))
def test_claude_code_sessions_are_counted_as_claude_counts_them(
    standin: Any, billing_proxy: ProxyProcess, family: str
) -> None:
    main, subagent = (
        replay(standin, [billing_proxy], "anthropic", f"claude-{family}", session)
        for session in claude_code_sessions().values()
    )
    for done in (main, subagent):
        assert_agrees(done, done.limit)
        sources = {turn.headers["x-compact-count-source"] for turn in done.turns[1:]}
        assert sources <= {"conversation", "model_group"}
    assert main.turns[0].headers["x-compact-count-source"] == "prior"  # the family's: nothing billed yet
    assert subagent.turns[0].headers["x-compact-count-source"] == "model_group"  # the group has learned
    assert main.compactions >= 2

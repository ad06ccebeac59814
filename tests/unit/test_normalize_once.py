"""Normalization runs once per view: the fit's check and the finish do not walk the same items twice."""

from __future__ import annotations

import pytest

from compact_hook import CompactConfig, compact_messages
from compact_hook.engine import guarantee
from tests.fakes import FakeSummarizer, WordCounter
from tests.support import calling, pairing_problems, result, system, user


async def test_a_compacted_request_that_fits_is_normalized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[int] = []
    original = guarantee.normalize

    def counting(*args: object, **kwargs: object) -> object:
        walked.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(guarantee, "normalize", counting)
    messages = [system("rules"), user("the task")]
    for i in range(12):
        messages += [calling("bash", call_id=f"c{i}"), result(" ".join(["out"] * 150), f"c{i}_0")]
    config = CompactConfig(
        context_window=2000,
        tool_output_policy="none",
        clear_tool_results=False,
        summary_max_tokens=200,
        retry_backoff_seconds=0,
        on_overflow="fit",
    )
    out = await compact_messages(messages, config, FakeSummarizer(), session_id="s", counter=WordCounter())
    assert out.compacted and pairing_problems(out.messages) == []
    assert len(walked) == 1

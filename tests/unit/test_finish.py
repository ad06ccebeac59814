"""``engine.finish``: the last stage — the forwarded view normalized, counted and described — and
the request forwarded exactly as the client sent it (``untouched``).

WordCounter world (``tests.compaction.config``: a 1,000-token window), chat messages, so every
count can be checked against ``word_total`` of what is forwarded (chat has no fixed context here).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from compact_hook.core.calibration import IDENTITY, CountRatio
from compact_hook.core.chain import Entry
from compact_hook.core.failures import SummaryFailure
from compact_hook.core.outcomes import ArchiveStatus, CacheStatus, Reason, Summarizer
from compact_hook.engine.decision import Decision, Step
from compact_hook.engine.finish import Forwarding, finish, untouched
from compact_hook.engine.result import CompactRequest, CompactStats
from compact_hook.engine.run import ProcessMemory, Run
from compact_hook.wires import Conversation
from tests.compaction import config, tool_session, word_total
from tests.conversations import wire_of
from tests.fakes import FakeSummarizer, WordCounter
from tests.support import Message, pairing_problems, user

COMPACTION = Entry(covered=8, keep=(0, 1), summary="what happened")
"""System and task kept, the summary after them, the client's items from 8 (a call) on."""


async def measured(messages: list[Message], ratio: CountRatio = IDENTITY, **settings: Any) -> Run:
    parsed = wire_of("chat").parse({"messages": messages})
    assert isinstance(parsed, Conversation), parsed
    request = CompactRequest(
        parsed,
        config(**settings),
        FakeSummarizer(),
        "s",
        scope=b"scope",
        counter=WordCounter(),
        count_ratio=ratio,
    )
    return await Run.measure(request, ProcessMemory())


async def test_untouched_forwards_the_clients_own_entries_counted_as_received() -> None:
    """Input and output are the provider's tokens (ours at the ratio); ``forwarded`` stays ours.
    A conversation is watched under its key; one this short is not (its key is not even computed)."""
    ratio = CountRatio(2.0)
    run = await measured(tool_session([60] * 6), ratio)
    sent = untouched(run, Reason.BELOW_THRESHOLD, summary_calls=2)
    assert sent.messages is run.request.conversation.entries and not sent.compacted
    assert (sent.input_tokens, sent.output_tokens, sent.counted) == (2 * run.total, 2 * run.total, run.total)
    assert (sent.reason, sent.summary_calls, sent.count_ratio) == (Reason.BELOW_THRESHOLD, 2, ratio)
    assert sent.stats == CompactStats() and sent.cost_saved is None  # unpriced: no money reported
    assert run.watched and sent.conversation == run.conversation_key
    short = untouched(await measured([user("hi")]), None)
    assert short.conversation == b"" and short.counted == word_total([user("hi")])


def test_the_outcome_a_decision_starts_from_carries_its_state_and_nothing_done_yet() -> None:
    decision = Decision(
        Step.FORWARD, Reason.BELOW_THRESHOLD, COMPACTION, cache=CacheStatus.HIT, prefix_changed=True
    )
    outcome = Forwarding.of(decision)
    assert outcome == Forwarding(COMPACTION, CacheStatus.HIT, Reason.BELOW_THRESHOLD, prefix_changed=True)
    assert (outcome.summary_calls, outcome.archived, outcome.preparation) == (0, None, None)


async def test_a_view_with_a_summary_is_reported_compacted_with_its_counts() -> None:
    run = await measured(tool_session([60] * 6))
    outcome = Forwarding(COMPACTION, CacheStatus.MISS, summary_calls=1, prefix_changed=True)
    done = await finish(run, run.tiers.view(COMPACTION), outcome)
    sent = run.request.conversation.entries
    assert done.compacted and done.messages[:2] == sent[:2] and done.messages[3:] == sent[8:]
    after = word_total(done.messages)
    assert (done.input_tokens, done.output_tokens, done.counted) == (run.total, after, after)
    assert done.stats == CompactStats(
        original_token_count=run.total,
        compacted_token_count=after,
        compaction_ratio=round(after / run.total, 4),
        compacted_message_count=len(sent) - (len(done.messages) - 1),  # the summary is not retained
        retained_message_count=len(done.messages) - 1,
    )
    assert (done.cache, done.summary_calls, done.summarizer) == (CacheStatus.MISS, 1, Summarizer.MODEL)


async def test_the_clients_view_unchanged_is_forwarded_as_its_own_objects_and_not_compacted() -> None:
    run = await measured(tool_session([60] * 6))
    done = await finish(run, run.tiers.view(None), Forwarding(Entry(), CacheStatus.NONE))
    sent = run.request.conversation.entries
    assert all(a is b for a, b in zip(done.messages, sent, strict=True)) and len(done.messages) == len(sent)
    assert not done.compacted and done.stats == CompactStats() and done.summarizer is None
    assert (done.output_tokens, done.normalized, done.cleared) == (run.total, 0, 0)


async def test_a_call_left_without_its_result_is_answered_before_it_is_counted() -> None:
    """A compaction keeping a call whose result it summarized would be refused by the provider:
    normalization answers it, the fix is counted, and the count includes the added result."""
    run = await measured(tool_session([60] * 6))
    orphaning = Entry(covered=4, keep=(0, 1, 2), summary="what happened")  # keeps call 2, not result 3
    view = run.tiers.view(orphaning)
    assert pairing_problems(view.entries()) != []
    done = await finish(run, view, Forwarding(orphaning, CacheStatus.MISS, normalized=1))
    assert pairing_problems(done.messages) == []
    assert done.normalized == 2 and done.output_tokens == word_total(done.messages)


async def test_over_the_window_with_passthrough_the_request_leaves_as_sent_and_keeps_what_failed() -> None:
    """``on_overflow: passthrough``: a view still over the window is not forwarded; the client's
    request is, and the report still says why the summary failed and what the archive did."""
    messages = tool_session([300] * 5)
    failed = Forwarding(
        COMPACTION, CacheStatus.NONE, summary_failure=SummaryFailure.TIMEOUT, archived=ArchiveStatus.FAILED
    )
    fitting = Entry(covered=4, keep=(0, 1), summary="what happened")  # still over the window
    for overflow in ("passthrough", "fit"):
        run = await measured(messages, on_overflow=overflow)
        view = run.tiers.view(fitting)
        assert await run.tokens(view) > run.window.window
        done = await finish(run, view, dataclasses.replace(failed, state=fitting))
        if overflow == "passthrough":
            assert done.messages is run.request.conversation.entries and not done.compacted
            assert done.reason is Reason.OVER_WINDOW and done.output_tokens == run.total
        else:  # the fit stage came before: finish forwards what it is given
            assert done.compacted and done.reason is None
        assert (done.summary_failure, done.archive_status) == (SummaryFailure.TIMEOUT, ArchiveStatus.FAILED)
    run = await measured(messages, on_overflow="passthrough")
    kept_reason = dataclasses.replace(failed, state=fitting, reason=Reason.SUMMARY_FAILED)
    assert (await finish(run, run.tiers.view(fitting), kept_reason)).reason is Reason.SUMMARY_FAILED

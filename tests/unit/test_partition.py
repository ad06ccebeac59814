"""Table-driven partitioning, PEER_SCENARIOS group B, and an orphan sweep over real transcripts."""

from typing import Any

import pytest

from compact_hook.assemble import assemble, summary_message
from compact_hook.messages import Message
from compact_hook.partition import partition
from compact_hook.units import Unit, group_units
from tests.fakes import WordCounter
from tests.support import (
    assistant,
    call,
    load_transcript,
    openai_transcripts,
    pairing_problems,
    result,
    system,
    user,
)


def w(n: int) -> str:
    """A text of ``n`` words (so WordCounter counts it as n, plus 1 for the message)."""
    return " ".join(["w"] * n)


def split(messages: list[Message], budget: int) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
    counts = WordCounter().count_messages(messages)
    part = partition(messages, counts, group_units(messages), budget)
    return part.head_end, part.kept, part.middle, part.tail_start


def test_units_pair_calls_with_all_their_results_by_position() -> None:
    messages = [user("q"), call("a", "b", "c"), result("1"), result("2"), result("3"), assistant("done")]
    assert group_units(messages) == [Unit(0, 1), Unit(1, 5), Unit(5, 6)]


def test_units_ignore_reused_ids_and_pair_by_position() -> None:
    messages = [
        call("a", call_id="same"),
        result("1", "same_0"),
        call("b", call_id="same"),
        result("2", "same_0"),
    ]
    assert group_units(messages) == [Unit(0, 2), Unit(2, 4)]


def test_a_leading_orphan_result_is_its_own_unit() -> None:
    assert group_units([result("x"), user("q")]) == [Unit(0, 1), Unit(1, 2)]


def test_a_trailing_unanswered_call_is_its_own_unit() -> None:
    assert group_units([user("q"), call("finish")]) == [Unit(0, 1), Unit(1, 2)]


def test_legacy_function_call_pairs_with_its_function_message() -> None:
    legacy: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "f", "arguments": "{}"},
    }
    messages = [legacy, {"role": "function", "name": "f", "content": "out"}, user("next")]
    assert group_units(messages) == [Unit(0, 2), Unit(2, 3)]


CASES = [
    # (name, messages, tail budget, (head_end, kept, middle, tail_start))
    (
        "five plain messages, tail of two [LC 22/23]",
        [user(w(9)), assistant(w(9)), user(w(9)), assistant(w(9)), user(w(9))],
        20,
        (0, (), (0, 1, 2), 3),
    ),
    (
        "system head is never in the middle [OH 32]",
        [system(w(9)), user(w(9)), assistant(w(9)), user(w(9)), assistant(w(9))],
        10,
        (1, (3,), (1, 2), 4),
    ),
    (
        "budget reached exactly: the crossing unit is kept whole",
        [user(w(9)), assistant(w(9)), assistant(w(4)), assistant(w(4))],
        10,
        (0, (0,), (1,), 2),
    ),
    (
        "cutoff on a tool result moves back to its call [LC 25/26]",
        [user(w(9)), assistant(w(9)), call("t"), result(w(9)), assistant(w(2))],
        12,
        (0, (0,), (1,), 2),
    ),
    (
        "ten parallel calls stay together [LC 28]",
        [user(w(9)), assistant(w(9)), call(*"abcdefghij")] + [result(w(1), f"call_{i}") for i in range(10)],
        3,
        (0, (0,), (1,), 2),
    ),
    (
        "tail covers everything: nothing to summarize [LC 30]",
        [user(w(2)), assistant(w(2))],
        100,
        (0, (), (), 0),
    ),
    (
        "single message: nothing to summarize [LC 30/31]",
        [user(w(500))],
        10,
        (0, (), (), 0),
    ),
    (
        "latest user message in the tail is not duplicated",
        [user(w(9)), assistant(w(9)), assistant(w(9)), user(w(3))],
        4,
        (0, (), (0, 1, 2), 3),
    ),
    (
        "the only user message (agent task at the start) is kept verbatim",
        [system(w(5)), user(w(5)), call("a"), result(w(9)), call("b"), result(w(9)), call("c"), result(w(9))],
        12,
        (1, (1,), (2, 3, 4, 5), 6),
    ),
    (
        "only a previous summary before the tail: it is summarized, not kept as the user's words",
        [summary_message("old"), assistant(w(9)), assistant(w(9))],
        10,
        (0, (), (0, 1), 2),
    ),
    (
        "empty history",
        [],
        10,
        (0, (), (), 0),
    ),
]


@pytest.mark.parametrize(
    ("messages", "budget", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_partition_table(messages: list[Message], budget: int, expected: tuple[Any, ...]) -> None:
    assert split(messages, budget) == expected


def test_every_message_lands_in_exactly_one_part() -> None:
    messages = load_transcript("tau_bench_airline_gpt4o_task3_trial0.json")
    counts = WordCounter().count_messages(messages)
    part = partition(messages, counts, group_units(messages), 200)
    covered = [*range(part.head_end), *part.kept, *part.middle, *range(part.tail_start, len(messages))]
    assert sorted(covered) == list(range(len(messages)))


@pytest.mark.parametrize("name", openai_transcripts())
def test_no_cut_point_of_a_real_conversation_orphans_a_call_or_result(name: str) -> None:
    """Every prefix of the conversation, cut at every possible tail size."""
    conversation = load_transcript(name)
    counter = WordCounter()
    all_counts = counter.count_messages(conversation)
    for end in range(1, len(conversation) + 1):
        messages = conversation[:end]
        units = group_units(messages)
        counts = all_counts[:end]
        before = set(pairing_problems(messages))
        seen_tails: set[int] = set()
        for budget in _budgets_for_each_tail(units, counts):
            part = partition(messages, counts, units, budget)
            if part.tail_start in seen_tails or not part.middle:
                continue
            seen_tails.add(part.tail_start)
            out = assemble(messages, part, summary_message("s"))
            assert set(pairing_problems(out)) <= before, (name, end, budget)
            assert all(out[i] is messages[j] for i, j in _kept_positions(part, len(messages)))


def _budgets_for_each_tail(units: list[Unit], counts: list[int]) -> list[int]:
    """One budget per possible tail start: the tokens of the last k units, k = 1..len(units)."""
    budgets, total = [], 0
    for unit in reversed(units):
        total += sum(counts[unit.start : unit.end])
        budgets.append(max(total, 1))
    return budgets


def _kept_positions(part: Any, n: int) -> list[tuple[int, int]]:
    pairs = [(i, i) for i in range(part.head_end)]
    pairs += [(part.head_end + k, index) for k, index in enumerate(part.kept)]
    offset = part.head_end + len(part.kept) + 1
    pairs += [(offset + k, index) for k, index in enumerate(range(part.tail_start, n))]
    return pairs

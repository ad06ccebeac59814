"""Table-driven partitioning, PEER_SCENARIOS group B, and an orphan sweep over real transcripts."""

from typing import Any

import pytest

from compact_hook.core.counting import item_strings
from compact_hook.core.items import Item
from compact_hook.core.pairing import Unit, group_units
from compact_hook.core.partition import Cutting, KeepPolicy, Partition, assemble_order, partition
from compact_hook.wires import ANTHROPIC, CHAT
from tests.conversations import w
from tests.support import (
    Message,
    assistant,
    calling,
    items_of,
    load_transcript,
    openai_transcripts,
    pairing_problems,
    result,
    system,
    user,
)


def summary_message(text: str) -> Message:
    return CHAT.summary(text).raw  # type: ignore[no-any-return]


def word_counts(items: list[Item]) -> list[int]:
    """WordCounter's sizes: the words of every string an item holds, plus 1."""
    return [1 + sum(len(text.split()) for text in item_strings(item)[0]) for item in items]


def units_of(messages: list[Message]) -> list[Unit]:
    return group_units(items_of(messages))


def assemble(messages: list[Message], part: Partition, summary: Message) -> list[Message]:
    return [
        summary if index is None else messages[index] for index in assemble_order(items_of(messages), part)
    ]


def split(messages: list[Message], budget: int) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
    items = items_of(messages)
    part = partition(items, word_counts(items), group_units(items), Cutting(budget))
    return part.head_end, part.kept, part.middle, part.tail_start


def test_units_pair_calls_with_all_their_results_by_position() -> None:
    messages = [user("q"), calling("a", "b", "c"), result("1"), result("2"), result("3"), assistant("done")]
    assert units_of(messages) == [Unit(0, 1), Unit(1, 5), Unit(5, 6)]


def test_units_ignore_ids_reused_across_turns() -> None:
    messages = [
        calling("a", call_id="same"),
        result("1", "same_0"),
        calling("b", call_id="same"),
        result("2", "same_0"),
    ]
    assert units_of(messages) == [Unit(0, 2), Unit(2, 4)]


def test_a_leading_orphan_result_is_its_own_unit() -> None:
    assert units_of([result("x"), user("q")]) == [Unit(0, 1), Unit(1, 2)]


def test_a_trailing_unanswered_call_is_its_own_unit() -> None:
    assert units_of([user("q"), calling("finish")]) == [Unit(0, 1), Unit(1, 2)]


def test_legacy_function_call_pairs_with_its_function_message() -> None:
    legacy: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "f", "arguments": "{}"},
    }
    messages = [legacy, {"role": "function", "name": "f", "content": "out"}, user("next")]
    assert units_of(messages) == [Unit(0, 2), Unit(2, 3)]


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
        [user(w(9)), assistant(w(9)), calling("t"), result(w(9)), assistant(w(2))],
        12,
        (0, (0,), (1,), 2),
    ),
    (
        "ten parallel calls stay together [LC 28]",
        [user(w(9)), assistant(w(9)), calling(*"abcdefghij")]
        + [result(w(1), f"call_{i}") for i in range(10)],
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
        [
            system(w(5)),
            user(w(5)),
            calling("a"),
            result(w(9)),
            calling("b"),
            result(w(9)),
            calling("c"),
            result(w(9)),
        ],
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
    items = items_of(messages)
    part = partition(items, word_counts(items), group_units(items), Cutting(200))
    covered = [*range(part.head_end), *part.kept, *part.middle, *range(part.tail_start, len(messages))]
    assert sorted(covered) == list(range(len(messages)))


@pytest.mark.parametrize("name", openai_transcripts())
def test_no_cut_point_of_a_real_conversation_orphans_a_call_or_result(name: str) -> None:
    """Every prefix of the conversation, cut at every possible tail size."""
    conversation = load_transcript(name)
    all_items = items_of(conversation)
    all_counts = word_counts(all_items)
    for end in range(1, len(conversation) + 1):
        messages = conversation[:end]
        items = all_items[:end]
        units = group_units(items)
        counts = all_counts[:end]
        before = set(pairing_problems(messages))
        seen_tails: set[int] = set()
        for budget in _budgets_for_each_tail(units, counts):
            part = partition(items, counts, units, Cutting(budget))
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


def test_a_tool_output_quoting_an_interrupt_marker_does_not_pin_its_unit() -> None:
    """A Claude Code session whose agent read a log containing the marker (issue 7's regression)."""
    quoted = [user(w(5)), calling("read"), result("[Request interrupted by user for tool use] " + w(40))]
    messages = [*quoted, calling("b"), result(w(9)), assistant(w(9)), user(w(2))]
    assert split(messages, 12) == (0, (), (0, 1, 2, 3, 4), 5)  # the quoting unit (1, 2) is summarized
    said = [user(w(5)), calling("read"), result(w(40)), user("[Request interrupted by user] " + w(3))]
    messages = [*said, calling("b"), result(w(9)), assistant(w(9)), user(w(2))]
    assert split(messages, 12) == (0, (3,), (0, 1, 2, 4, 5), 6)  # the user's own marker is kept verbatim


def test_the_summary_comes_right_after_the_head_when_the_first_kept_unit_is_the_models() -> None:
    messages = [
        system(w(3)),
        calling("todo"),
        result(w(9)),
        calling("read"),
        result(w(20)),
        user(w(3)),
        assistant(w(9)),
    ]
    items = items_of(messages)
    keep = KeepPolicy(0, ("todo",))
    part = partition(items, word_counts(items), group_units(items), Cutting(10, keep=keep))
    assert part.kept == (1, 2, 5)
    assert assemble_order(items, part) == [0, None, 1, 2, 5, 6]


def test_the_summary_follows_the_kept_items_when_the_first_is_the_users() -> None:
    messages = [system(w(3)), user(w(5)), calling("read"), result(w(20)), user(w(3)), assistant(w(9))]
    items = items_of(messages)
    part = partition(items, word_counts(items), group_units(items), Cutting(10))
    assert part.kept == (4,)
    assert assemble_order(items, part) == [0, 4, None, 5]


def test_the_latest_user_message_is_the_users_words_not_a_later_carrier_of_tool_results() -> None:
    """Anthropic sends tool results in user messages; only the user's own turn is pinned."""

    def use(call_id: str) -> Message:
        return {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": call_id, "name": "t", "input": {}}],
        }

    def answer(call_id: str, text: str) -> Message:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text}]}

    messages = [user(w(5)), use("a"), answer("a", w(20)), use("b"), answer("b", w(9)), assistant(w(9))]
    items = items_of(messages, ANTHROPIC)
    part = partition(items, word_counts(items), group_units(items), Cutting(10))
    assert (part.head_end, part.kept, part.middle, part.tail_start) == (0, (0,), (1, 2, 3, 4), 5)

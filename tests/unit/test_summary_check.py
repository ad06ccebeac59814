"""What the summary model wrote, judged against what the prompt asks (``core/summary_check.py``)."""

from __future__ import annotations

import pytest

from compact_hook.core.summary_check import Asked, Fault, fault_of
from compact_hook.engine.summary.summarize import asked, summary_prompt

GOOD = """## Goal and user constraints
Fix the failing build of `ponyc` on Linux; the user said: "do not touch the CI config".

## Decisions
- Patch `src/libponyc/expr/match.c` rather than the parser.

## Files and artifacts
- src/libponyc/expr/match.c: the exhaustiveness check now skips `None` arms.

## Tool calls and outcomes
- `make test` → 3 failures in `test/libponyc/match.cc`, then all passing.

## Errors and fixes
- `error: unreachable case` at match.c:212 — fixed by the patch above.

## Current state
The patch is in; tests pass.

## Next steps
none
"""


def test_the_prompts_sections_are_read_from_the_prompt_itself() -> None:
    wanted = asked()
    assert wanted.titles[0] == "Goal and user constraints" and len(wanted.titles) == 7
    assert all(description in summary_prompt() for description in wanted.descriptions)


def test_a_summary_with_the_sections_asked_for_passes_however_its_headings_are_styled() -> None:
    assert fault_of(GOOD, asked()) is None
    bold = GOOD.replace("## ", "**").replace("\n", "**\n", 1)
    assert fault_of(bold, asked()) is None
    numbered = "\n".join(
        f"{k}. {line.removeprefix('## ')}:" if line.startswith("## ") else line
        for k, line in enumerate(GOOD.splitlines())
    )
    assert fault_of(numbered, asked()) is None


def test_one_line_repeated_until_the_tokens_ran_out_is_a_loop() -> None:
    looped = GOOD[:200] + "\n" + "The agent ran the tests and the tests passed.\n" * 40
    assert fault_of(looped, asked()) is Fault.LOOPED


def test_the_prompts_own_descriptions_copied_back_are_an_echo() -> None:
    echo = "\n\n".join(f"## {t}\n{d}" for t, d in zip(asked().titles, asked().descriptions, strict=True))
    assert fault_of(echo, asked()) is Fault.ECHOED


def test_an_answer_without_the_sections_is_not_a_summary() -> None:
    usage = "Usage: ponyc [OPTIONS] <package directory>\n  --debug  Don't optimise the output.\n"
    assert fault_of(usage, asked()) is Fault.SECTIONS_MISSING
    assert fault_of("", asked()) is Fault.SECTIONS_MISSING


def test_the_previous_summarys_goal_and_constraints_must_be_carried() -> None:
    previous = GOOD.replace(
        "Fix the failing build",
        "Keep `ponyc` building with LLVM 15; never push to `main`; fix the failing build",
    )
    assert (
        fault_of(
            GOOD.replace(
                "Fix the failing", "Keep ponyc building with LLVM 15, never push to main; fix the failing"
            ),
            asked(),
            [previous],
        )
        is None
    )
    dropped = GOOD.replace(
        'Fix the failing build of `ponyc` on Linux; the user said: "do not touch the CI config".', "Carry on."
    )
    assert fault_of(dropped, asked(), [previous]) is Fault.CONSTRAINTS_DROPPED
    assert fault_of(dropped, asked(), ["a digest of facts, no sections"]) is None  # nothing to carry


@pytest.mark.parametrize("goal", ["none", "Fix it."])
def test_a_previous_goal_too_short_to_judge_is_not_held_against_the_answer(goal: str) -> None:
    previous = GOOD.replace(GOOD.splitlines()[1], goal)
    assert fault_of(GOOD.replace(GOOD.splitlines()[1], "Something else."), asked(), [previous]) is None


def test_a_prompt_without_sections_asks_for_none() -> None:
    assert Asked.of_prompt("Summarize.") == Asked((), ())
    assert fault_of("anything at all", Asked.of_prompt("Summarize.")) is None


def test_the_stand_ins_summaries_are_summaries_and_its_merges_carry_the_goal() -> None:
    """The stand-in provider answers our summary requests as a model that follows the prompt would:
    every section, and a merge keeps the previous summary's goal word for word (in its place)."""
    from tests.integration.harness import load_tool

    standin = load_tool("standin_upstream")
    first = standin.summary_from_texts(["<transcript>\n### user\nfix the parser in src/parse.c, never push"])
    assert fault_of(first, asked()) is None
    merged = standin.summary_from_texts([f"<transcript>\n### previous summary\n{first}\n### user\nnext"])
    assert fault_of(merged, asked(), [first]) is None
    assert merged.split("## Decisions")[0] == first.split("## Decisions")[0]

"""The operator command line, run as a user runs it (``main(argv)``, and one real subprocess)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from compact_hook.cli.check import dry_run, report
from compact_hook.cli.count import count_parts
from compact_hook.cli.inputs import InputError, load, resolve
from compact_hook.cli.main import main
from compact_hook.cli.replay import turn_ends
from compact_hook.core.outcomes import Removal, Summarizer
from compact_hook.core.recall import handle_of
from compact_hook.state.archive import Audit, FileArchive, Origin, audit_path
from compact_hook.state.tokenizers import counter_for
from tests.support import (
    calling,
    chat_to_google,
    chat_to_responses,
    google_replay_points,
    load_transcript,
    replay_points,
    result,
    user,
)

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPT = ROOT / "tests" / "data" / "transcripts" / "openai" / "claude_code_fa812bfe_pre_compact.json"
GOLDEN = ROOT / "tests" / "data" / "golden" / "check_claude_code_fa812bfe.txt"
CONFIG = ROOT / "litellm_config.yaml"
ANTHROPIC_TRANSCRIPT = TRANSCRIPT.parents[1] / "anthropic" / TRANSCRIPT.name


def write(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value))
    return path


def test_count_splits_a_request_into_its_parts_on_every_format(tmp_path: Path) -> None:
    messages = load_transcript("claude_code_fa812bfe_pre_compact.json")
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    counter = counter_for("o200k_base")
    chat = count_parts(
        load(
            write(
                tmp_path / "c.json",
                {"messages": [{"role": "system", "content": "Be terse."}, *messages], "tools": tools},
            )
        ),
        counter,
    )
    assert chat.head > 0 and chat.tool_definitions > 0 and chat.tool_outputs > chat.messages > 0
    assert chat.total == chat.head + chat.tool_definitions + chat.messages + chat.tool_outputs
    responses = load(write(tmp_path / "r.json", chat_to_responses(messages)))
    assert responses.wire.name == "responses" and count_parts(responses, counter).tool_outputs > 0
    anthropic = load(ANTHROPIC_TRANSCRIPT)
    assert (
        anthropic.wire.name == "anthropic" and count_parts(anthropic, counter_for("claude")).tool_outputs > 0
    )
    gemini = load(write(tmp_path / "g.json", {"contents": chat_to_google(messages)}))
    assert gemini.wire.name == "google" and count_parts(gemini, counter).tool_outputs > 0


def test_jsonl_logs_give_the_longest_request_or_the_line_asked_for(tmp_path: Path) -> None:
    short, long = (
        {"messages": [user("a")]},
        {"messages": [user("a"), {"role": "assistant", "content": "b"}, user("c")]},
    )
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(short) + "\n" + json.dumps(long) + "\n")
    assert len(load(path).entries) == 3 and len(load(path, line=1).entries) == 1
    with pytest.raises(InputError, match="out of range"):
        load(path, line=3)


def test_check_output_is_stable_for_a_shared_transcript() -> None:
    import asyncio

    loaded = load(TRANSCRIPT)
    checked = asyncio.run(dry_run(loaded, resolve(CONFIG, "demo")))
    assert checked.result.compacted and checked.result.output_tokens < 16_000
    with open(os.devnull, "w") as sink:
        console = Console(width=100, record=True, color_system=None, file=sink)
        console.print(report(checked, loaded.wire.name))
    text = console.export_text()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_the_archive_can_be_listed_shown_and_pruned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    audit = Audit(
        Removal.SUMMARIZED,
        Origin("agent", "chat", "call-1"),
        (1, 2),
        2,
        900,
        40,
        "## Goal\nship",
        Summarizer.MODEL,
    )
    path = asyncio.run(
        FileArchive(tmp_path).save("sess-1", [user("a"), user("b")], tenant="team:a", audit=audit)
    )
    assert path is not None
    assert main(["archive", "--dir", str(tmp_path), "ls"]) == 0
    listed = capsys.readouterr().out
    assert "sess-1" in listed and "summarized" in listed and "900 → 40" in listed
    assert main(["archive", "--dir", str(tmp_path), "show", path.name, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["audit"]["summary"] == "## Goal\nship" and shown["messages"] == [user("a"), user("b")]
    assert main(["archive", "--dir", str(tmp_path), "show", path.name]) == 0
    assert "what the model saw instead" in capsys.readouterr().out
    os.utime(path, (0, 0))
    assert main(["archive", "--dir", str(tmp_path), "prune", "--max-age-days", "1"]) == 0
    assert not path.exists() and not audit_path(path).exists()


def test_the_archive_names_each_output_by_its_handle_and_reads_it_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    output = "line one of a long listing\n" + "x" * 500
    messages = [calling("ls", call_id="c0"), result(output, "c0_0"), user("next")]
    audit = Audit(Removal.SUMMARIZED, Origin("agent", "chat", "call-1"), (1, 3), 3, 900, 40, "s")
    assert asyncio.run(FileArchive(tmp_path).save("sess-1", messages, tenant="t", audit=audit))
    assert main(["archive", "--dir", str(tmp_path), "handles"]) == 0
    listed = capsys.readouterr().out
    assert handle_of(output) in listed and "line one of a long listing" in listed and "ls" in listed
    assert main(["archive", "--dir", str(tmp_path), "recall", handle_of(output), "--session", "sess-1"]) == 0
    assert capsys.readouterr().out == output
    assert main(["archive", "--dir", str(tmp_path), "recall", handle_of("never archived")]) == 2
    assert "no tool output with handle" in capsys.readouterr().err


def test_config_validate_runs_the_proxys_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", str(CONFIG)]) == 0
    assert "demo-claude" in capsys.readouterr().out
    bad = yaml.safe_load(CONFIG.read_text())
    bad["model_list"][0]["model_info"]["compact"]["trigger_ratio"] = 7
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert main(["config", "validate", str(path)]) == 2
    assert "model 'demo': model_info.compact.trigger_ratio" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["not json at all", '{"neither": 1}', "[1, 2]"])
def test_bad_input_is_one_line_and_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["count", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compact-hook: error:") and "Traceback" not in err
    assert main(["count", str(tmp_path / "missing.json")]) == 2


def test_turns_end_where_the_client_would_call_the_model(tmp_path: Path) -> None:
    messages = load_transcript("claude_code_fa812bfe_pre_compact.json")
    assert turn_ends(load(TRANSCRIPT)) == replay_points(messages)
    responses = turn_ends(load(write(tmp_path / "r.json", chat_to_responses(messages))))
    assert len(responses) == len(replay_points(messages))
    contents = chat_to_google(messages)
    assert turn_ends(load(write(tmp_path / "g.json", {"contents": contents}))) == google_replay_points(
        contents
    )


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "compact_hook", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "count" in done.stdout and "replay" in done.stdout


def test_count_says_whose_tokens_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """Ours, and for a Claude model the provider's estimated at the generation's measured prior
    (``--ratio`` for another): offline nothing has been billed, and the table says so."""
    assert main(["count", str(ANTHROPIC_TRANSCRIPT), "--model", "anthropic/claude-fable-5"]) == 0
    claude = capsys.readouterr().out
    assert "tokens (ours)" in claude and "provider's (x1.44)" in claude and "measured prior" in claude
    assert main(["count", str(TRANSCRIPT), "--model", "gpt-4o", "--ratio", "1.25"]) == 0
    assert "provider's (x1.25)" in capsys.readouterr().out
    assert main(["count", str(TRANSCRIPT)]) == 0
    plain = capsys.readouterr().out
    assert "provider's" not in plain.split("\n")[1] and "no prior for gpt-4o" in " ".join(plain.split())

import json
import re
import stat
from pathlib import Path

import pytest

from compact_hook.state.archive import FileArchive, conversation_session_id, safe_session_name
from tests.support import assistant, user


async def test_archive_writes_indented_json_with_the_documented_name(tmp_path: Path) -> None:
    messages = [user("a"), assistant("b")]
    path = await FileArchive(tmp_path).save("session-1", messages)
    assert path is not None
    assert path.parent == tmp_path / "session-1"
    assert re.fullmatch(r"compact-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ-1\.json", path.name)
    text = path.read_text()
    assert json.loads(text) == messages
    assert text.startswith("[\n  {")


async def test_sequence_counts_from_one_per_session(tmp_path: Path) -> None:
    archive = FileArchive(tmp_path)
    names = [(await archive.save("s", [user(str(i))])).name for i in range(3)]  # type: ignore[union-attr]
    other = await archive.save("t", [user("x")])
    assert [n.rsplit("-", 1)[1] for n in names] == ["1.json", "2.json", "3.json"]
    assert other is not None and other.name.endswith("-1.json")


async def test_files_and_directories_are_owner_only(tmp_path: Path) -> None:
    path = await FileArchive(tmp_path / "root").save("s", [user("secret")])
    assert path is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("hostile", ["../../etc", "/etc/passwd", "..", ".", "a/../../b", "x\x00y", "", "é/ü"])
async def test_no_session_id_escapes_the_archive_dir(tmp_path: Path, hostile: str) -> None:
    root = tmp_path / "root"
    path = await FileArchive(root).save(hostile, [user("x")])
    assert path is not None
    assert path.resolve().is_relative_to(root.resolve())
    assert path.parent.parent == root


def test_distinct_unsafe_ids_do_not_collide() -> None:
    assert safe_session_name("a/b") != safe_session_name("a_b")
    assert safe_session_name("plain-id_1.x") == "plain-id_1.x"


async def test_a_failed_write_is_logged_and_returns_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert await FileArchive(blocker).save("s", [user("x")]) is None
    assert "archive write failed" in caplog.text


def test_conversation_session_id_is_stable_and_depends_on_the_start() -> None:
    a = [user("task A"), assistant("ok")]
    assert conversation_session_id(a) == conversation_session_id(a + [user("more")])
    assert conversation_session_id(a) != conversation_session_id([user("task B"), assistant("ok")])

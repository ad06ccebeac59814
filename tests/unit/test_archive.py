import json
import os
import re
import stat
import time
from pathlib import Path

import pytest

from compact_hook.core.outcomes import Removal, Summarizer
from compact_hook.state.archive import (
    ArchiveFolders,
    Audit,
    FileArchive,
    Origin,
    archive_files,
    audit_path,
    conversation_session_id,
    prune,
    safe_session_name,
    tenant_folder,
)
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


async def test_an_audit_beside_the_archive_says_what_replaced_the_messages(tmp_path: Path) -> None:
    audit = Audit(
        Removal.SUMMARIZED,
        Origin("gpt-4o", "anthropic", "call-1"),
        (2, 9),
        8,
        5000,
        300,
        "## Goal\nship it",
        Summarizer.MODEL,
    )
    path = await FileArchive(tmp_path).save("s", [user("a")], tenant="team:a", audit=audit)
    assert path is not None
    written = audit_path(path)
    assert written.name == path.name.removesuffix(".json") + ".audit.json"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    record = json.loads(written.read_text())
    assert record["removal"] == "summarized" and record["summary"] == "## Goal\nship it"
    assert record["summarizer"] == "model" and record["entries"] == [2, 9] and record["entry_count"] == 8
    assert (record["tokens_before"], record["tokens_after"]) == (5000, 300)
    assert record["origin"] == {"model_group": "gpt-4o", "wire": "anthropic", "request_id": "call-1"}
    assert record["tenant"] == tenant_folder("team:a") == path.parent.parent.name
    assert "team:a" not in written.read_text()  # the tenant is hashed
    assert list(archive_files(tmp_path)) == [path]  # audits are not archive files


async def test_entries_older_than_the_max_age_are_pruned_with_their_audits(tmp_path: Path) -> None:
    archive = FileArchive(tmp_path)
    old = await archive.save("old-session", [user("a")], audit=Audit(Removal.DROPPED))
    new = await archive.save("new-session", [user("b")], audit=Audit(Removal.DROPPED))
    assert old is not None and new is not None
    ten_days_ago = time.time() - 10 * 86_400
    os.utime(old, (ten_days_ago, ten_days_ago))
    assert prune(tmp_path, max_age_days=7) == 2
    assert not old.exists() and not audit_path(old).exists() and not old.parent.exists()
    assert new.exists() and audit_path(new).exists()
    assert prune(tmp_path, max_age_days=7) == 0


async def test_a_writing_archive_prunes_what_is_past_its_max_age(tmp_path: Path) -> None:
    stale = await FileArchive(tmp_path).save("s", [user("a")])
    assert stale is not None
    os.utime(stale, (0, 0))
    folders = ArchiveFolders(max_age_days=1)
    assert folders.get(str(tmp_path)) is folders.get(str(tmp_path))
    fresh = await folders.get(str(tmp_path)).save("s", [user("b")])
    assert fresh is not None and fresh.exists() and not stale.exists()

"""Each archive write has its own outcome: an earlier failure in the same request does not make a
later write that succeeded look failed (what it archived is then not left to archive again)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compact_hook.core.chain import Entry
from compact_hook.core.outcomes import ArchiveStatus, Removal
from compact_hook.engine import CompactRequest
from compact_hook.engine.library import parse_chat
from compact_hook.engine.memory.archiving import Removed, archive_pending, keep, merged
from compact_hook.engine.run import ProcessMemory, Run
from compact_hook.settings.model import CompactConfig
from compact_hook.state.archive import Audit
from compact_hook.wires import Conversation
from tests.fakes import FakeSummarizer, InMemoryArchive, WordCounter
from tests.support import assistant, user


class FirstWriteFails(InMemoryArchive):
    """A disk that refuses one write, then recovers."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = False

    async def save(
        self, session_id: str, messages: Sequence[Any], tenant: str = "", audit: Audit | None = None
    ) -> Path | None:
        if not self.refused:
            self.refused = True
            return None
        return await super().save(session_id, messages, tenant, audit)


async def test_a_write_after_a_failed_one_counts_as_written_and_the_request_says_failed() -> None:
    messages = [user("the task"), assistant("first"), user("more"), assistant("second"), user("go on")]
    conversation = parse_chat(messages)
    assert isinstance(conversation, Conversation)
    archive = FirstWriteFails()
    request = CompactRequest(
        conversation, CompactConfig(), FakeSummarizer(), "s", archive=archive, counter=WordCounter()
    )
    run = await Run.measure(request, ProcessMemory())
    failed = await keep(run, Removed([messages[1]], (1,), Removal.DROPPED))
    assert failed.failed and failed.status is ArchiveStatus.FAILED
    entry, written = await archive_pending(run, Entry(covered=3, summary="s", unarchived=(2, 3)))
    assert entry.unarchived == () and written.path is not None  # written: not left to archive again
    assert written.status is ArchiveStatus.WRITTEN and not written.failed
    assert archive.saved == [("s", [messages[2], messages[3]])]
    status = merged(merged(None, failed), written)
    assert status is ArchiveStatus.FAILED  # the request still says one of its writes failed
    assert merged(merged(None, written), failed) is ArchiveStatus.FAILED  # in either order

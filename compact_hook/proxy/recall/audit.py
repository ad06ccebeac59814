"""What the model read back goes into the archive's audit, beside what compaction took out.

One entry per reply that made recall calls (``Removal.RECALLED``: nothing removed, no messages):
the handles asked for, each found or not, in the conversation's folder of the tenant's archive —
where ``compact-hook archive`` lists it. Written off the reply's path: the client never waits on
the disk, and a failed write is logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging

from compact_hook.core.outcomes import Removal
from compact_hook.proxy.recall.offer import Answered, Pending
from compact_hook.state.archive import Audit

logger = logging.getLogger(__name__)
_writing: set[asyncio.Task[None]] = set()
"""The writes under way (a task nothing refers to may be collected before it runs)."""


def audit_recalls(pending: Pending) -> None:
    """Start writing the audit of ``pending``'s recall calls (nothing when it made none)."""
    if not pending.asked or pending.archive is None:
        return
    task = asyncio.get_running_loop().create_task(_write(pending))
    _writing.add(task)
    task.add_done_callback(_writing.discard)


def audit_text(asked: list[tuple[str, Answered]]) -> str:
    return "\n".join(f"recall {handle}: {answered.value}" for handle, answered in asked)


async def _write(pending: Pending) -> None:
    assert pending.archive is not None
    audit = Audit(Removal.RECALLED, summary=audit_text(pending.asked))
    try:
        await pending.archive.save(pending.session_id, [], pending.tenant, audit)
    except Exception:  # an archive that fails is reported by its own log; the reply went already
        logger.exception("compact_hook: could not audit the recall calls of session %s", pending.session_id)

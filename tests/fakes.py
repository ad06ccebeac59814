"""Fakes, not mocks, one per seam.

``FakeSummarizer`` records what it was asked and answers from a queue; ``InMemoryArchive``
keeps what it was given; ``WordCounter`` counts whitespace-separated words so partition
tables can be read by eye.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compact_hook.core.chain import Entry
from compact_hook.core.counting import Recall, StringsOf
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.engine.summary.summarize import Message
from compact_hook.state.archive import Audit
from compact_hook.state.store import MemoryStore

SECTIONS = (
    "Goal and user constraints",
    "Decisions",
    "Files and artifacts",
    "Tool calls and outcomes",
    "Errors and fixes",
    "Current state",
    "Next steps",
)


def sectioned(text: str) -> str:
    """``text`` as a summary with the sections the prompt asks for (``core.summary_check``): the text
    under the first, ``none`` under the others — what a model that follows the prompt writes."""
    if not text.strip():
        return text
    return "\n\n".join(f"## {title}\n{text if k == 0 else 'none'}" for k, title in enumerate(SECTIONS))


class FakeSummarizer:
    """Answers summary requests from a queue (str or exception), each string as a summary with the
    prompt's sections (``raw``: as given); records every request."""

    def __init__(
        self, *answers: str | BaseException, default: str = "the summary", raw: bool = False
    ) -> None:
        self.answers = list(answers)
        self.default = default
        self.raw = raw
        self.requests: list[list[Message]] = []

    async def __call__(self, messages: list[Message]) -> str:
        self.requests.append(messages)
        answer = self.answers.pop(0) if self.answers else self.default
        if isinstance(answer, BaseException):
            raise answer
        return answer if self.raw else sectioned(answer)

    @property
    def transcripts(self) -> list[str]:
        return [request[-1]["content"] for request in self.requests]


class InMemoryArchive:
    def __init__(self) -> None:
        self.saved: list[tuple[str, list[Message]]] = []
        self.tenants: list[str] = []
        self.audits: list[Audit | None] = []

    async def save(
        self, session_id: str, messages: Sequence[Message], tenant: str = "", audit: Audit | None = None
    ) -> Path | None:
        self.saved.append((session_id, list(messages)))
        self.tenants.append(tenant)
        self.audits.append(audit)
        return Path(f"/memory/{session_id}/{len(self.saved)}.json")


class WordCounter:
    """Counts words of every string an entry holds, plus 1 per entry; no framing, no media costs.

    ``context_words`` counts strings of the request's context (tools, system) the same way.
    """

    def count_text(self, text: str) -> int:
        return len(text.split())

    def cut(self, text: str, head: int, tail: int) -> tuple[int, int, int]:
        spans = [match.span() for match in re.finditer(r"\S+", text)]
        if len(spans) <= head + tail or head < 1 or tail < 1:
            return len(text), len(text), len(spans)
        return spans[head - 1][1], spans[len(spans) - tail][0], len(spans)

    def count(self, prints: Sequence[Fingerprint], strings: StringsOf) -> list[int]:
        return [1 + sum(len(text.split()) for text in strings(index)[0]) for index in range(len(prints))]

    async def acount(
        self, prints: Sequence[Fingerprint], strings: StringsOf, recall: Recall | None = None
    ) -> list[int]:
        return self.count(prints, strings)


class SlowSummarizer(FakeSummarizer):
    """Takes ``delay`` seconds per call, so concurrent requests overlap."""

    def __init__(self, delay: float, *answers: str | BaseException) -> None:
        super().__init__(*answers)
        self.delay = delay

    async def __call__(self, messages: list[Message]) -> str:
        import asyncio

        await asyncio.sleep(self.delay)
        return await super().__call__(messages)


class LockingMemoryStore(MemoryStore):
    """A MemoryStore with Redis-like expiring locks: stands for Redis shared by two replicas."""

    def __init__(self) -> None:
        super().__init__(max_entries=1000, ttl=3600)
        self.locks: dict[bytes, tuple[str, float]] = {}

    async def try_lock(self, key: bytes, ttl: float) -> str | None:
        import time
        import uuid

        holder = self.locks.get(key)
        if holder is not None and holder[1] > time.monotonic():
            return None
        token = uuid.uuid4().hex
        self.locks[key] = (token, time.monotonic() + ttl)
        return token

    async def unlock(self, key: bytes, token: str) -> None:
        if self.locks.get(key, ("", 0))[0] == token:
            del self.locks[key]

    async def is_locked(self, key: bytes) -> bool:
        import time

        holder = self.locks.get(key)
        return holder is not None and holder[1] > time.monotonic()


class FailingArchive(InMemoryArchive):
    """An archive whose writes fail (full disk, read-only directory); it records the attempts."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts: list[tuple[str, list[Any]]] = []

    async def save(
        self, session_id: str, messages: Sequence[Any], tenant: str = "", audit: Audit | None = None
    ) -> Path | None:
        self.attempts.append((session_id, list(messages)))
        return None


class BrokenStore:
    """A shared store whose every call fails: like a Redis that went away (by default), or with
    ``error``, one whose commands are refused."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.calls = 0
        self.error = error or ConnectionError("redis is gone")

    async def _fail(self) -> None:
        self.calls += 1
        raise self.error

    async def find(self, root: bytes, chain: Sequence[bytes]) -> None:
        await self._fail()

    async def get(self, key: bytes) -> None:
        await self._fail()

    async def put(self, root: bytes, key: bytes, entry: Entry) -> None:
        await self._fail()

    async def try_lock(self, key: bytes, ttl: float) -> None:
        await self._fail()

    async def unlock(self, key: bytes, token: str) -> None:
        await self._fail()

    async def is_locked(self, key: bytes) -> None:
        await self._fail()


class ScriptedRouter:
    """The proxy's router for the recall rounds: answers each follow-up with the next reply (or
    raises it, an exception), on any wire, remembering the requests."""

    def __init__(self, *replies: Any) -> None:
        self.replies: list[Any] = list(replies)
        self.requests: list[dict[str, Any]] = []

    async def _answer(self, **request: Any) -> Any:
        self.requests.append(request)
        answer = self.replies.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    acompletion = aanthropic_messages = aresponses = agenerate_content = _answer

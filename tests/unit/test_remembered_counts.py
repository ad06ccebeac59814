"""A conversation's counts kept in the store (``engine.memory.counts``, issue 63): a process new to the
conversation (a restart, a replica that joins) reads them instead of tokenizing its history — and
takes nothing it should not: another tenant's conversation, a count no text could make."""

from __future__ import annotations

from typing import Any

import pytest

from compact_hook.engine.compactor import Compactor
from compact_hook.engine.memory.counts import PREFIX, RememberedCounts, packed, unpacked
from compact_hook.engine.result import CompactRequest
from compact_hook.engine.run import ProcessMemory, Run, counts_key
from compact_hook.settings.model import CompactConfig
from compact_hook.state.store import MemoryStore
from compact_hook.state.tiered import TieredStore
from compact_hook.state.tokenizers import HFTokenCounter
from compact_hook.wires import CHAT, Conversation
from tests.fakes import FakeSummarizer
from tests.support import load_transcript

SESSION = load_transcript("claude_code_fa812bfe_pre_compact.json")[:120]
"""~40K tokens of a real history: a large batch of new text for a process that never saw it."""


class Spied(HFTokenCounter):
    """A process's own counter (its cache empty), telling how many texts it tokenized."""

    def __init__(self) -> None:
        super().__init__("o200k_base")
        self.tokenized = 0

    def _encode_lengths(self, texts: list[str]) -> list[int]:
        self.tokenized += len(texts)
        return super()._encode_lengths(texts)


async def measured(store: MemoryStore, tenant: str = "team:a") -> tuple[Run, Spied]:
    """The session measured by a process of its own over ``store``."""
    parsed = CHAT.parse({"messages": SESSION})
    assert isinstance(parsed, Conversation)
    counter = Spied()
    request = CompactRequest(
        parsed, CompactConfig(), FakeSummarizer(), "s", scope=tenant.encode(), counter=counter, tenant=tenant
    )
    run = await Run.measure(request, ProcessMemory(), remembered=RememberedCounts(store))
    return run, counter


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(1000, 3600)


async def test_a_process_new_to_the_conversation_reads_its_counts_instead_of_tokenizing(
    store: MemoryStore,
) -> None:
    first, tokenizing = await measured(store)
    assert tokenizing.tokenized > 100  # nothing was known: every text tokenized
    again, reading = await measured(store)  # another process, the same store
    assert reading.tokenized == 0
    assert again.counts == first.counts and again.total == first.total


async def test_another_tenants_conversation_reads_nothing(store: MemoryStore) -> None:
    await measured(store, "team:a")
    _, other = await measured(store, "team:b")
    assert other.tokenized > 100


async def test_a_count_no_text_could_make_is_not_taken(store: MemoryStore) -> None:
    first, _ = await measured(store)
    key = PREFIX + counts_key("o200k_base", first.conversation_key)
    text = await store.get_record(key)
    assert text is not None
    lying = {print_: count * 1000 + 10**6 for print_, count in unpacked(text).items()}
    await store.put_record(key, packed(list(lying), list(lying.values())), 3600)
    again, counter = await measured(store)
    assert counter.tokenized > 100  # tokenized again, the record's counts refused
    assert again.counts == first.counts


@pytest.mark.parametrize("text", ["not base64!", "AAAA", ""])
def test_what_is_not_a_record_reads_as_none(text: str) -> None:
    assert unpacked(text) == {}


async def test_a_record_is_written_once_per_keep_tokens_of_growth(store: MemoryStore) -> None:
    writes: list[Any] = []
    original = store.put_record

    async def counting(*args: Any, **kwargs: Any) -> bool:
        writes.append(args[0])
        return await original(*args, **kwargs)

    store.put_record = counting  # type: ignore[method-assign]
    remembered = RememberedCounts(store)
    prints = [bytes([n]) * 16 for n in range(10)]
    await remembered.keep(lambda: b"k", prints, [100] * 10, "team:a")  # 1,000 tokens: not worth a record
    await remembered.keep(lambda: b"k", prints, [1_000] * 10, "team:a")  # 10,000: written
    await remembered.keep(lambda: b"k", prints, [1_100] * 10, "team:a")  # 1,000 more: not yet
    assert len(writes) == 1


async def test_counts_are_kept_only_where_another_process_can_read_them() -> None:
    """One process alone (``COMPACT_STORE=memory``) keeps no records: its tokenizer's cache has the
    counts already. On a shared store (Redis, the file: behind ``TieredStore``) they are kept."""
    alone = Compactor(MemoryStore(100, 60))
    shared = TieredStore(MemoryStore(100, 60), MemoryStore(100, 60), timeout=0.1)
    together = Compactor(shared)
    try:
        assert alone.counts.store is None
        assert together.counts.store is shared
    finally:
        await alone.close()
        await together.close()

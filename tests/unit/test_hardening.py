"""No request can hurt another: bounded work per request, measured in operations, and heavy work off the loop.

Complexity is asserted by counting operations (entries counted, parts read), never by wall time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from compact_hook.core.counting import StringsOf
from compact_hook.core.fingerprint import Fingerprint, fingerprint
from compact_hook.core.items import Item
from compact_hook.core.pairing import pair
from compact_hook.engine import Compactor, CompactRequest
from compact_hook.engine.library import parse_chat
from compact_hook.settings.model import CompactConfig
from compact_hook.state.tokenizers import HFTokenCounter
from compact_hook.wires import CHAT, Conversation
from tests.fakes import FakeSummarizer, InMemoryArchive, WordCounter
from tests.support import calling, result, user


class CountingCounter(WordCounter):
    """A WordCounter that counts how many entries it was asked about, over all calls."""

    def __init__(self) -> None:
        self.entries = 0

    def count(self, prints: Sequence[Fingerprint], strings: StringsOf) -> list[int]:
        self.entries += len(prints)
        return super().count(prints, strings)


async def compact_counted(messages: list[dict[str, Any]], config: CompactConfig, counter: Any) -> Any:
    conversation = parse_chat(messages)
    assert isinstance(conversation, Conversation)
    request = CompactRequest(
        conversation, config, FakeSummarizer(), "s", archive=InMemoryArchive(), counter=counter
    )
    return await Compactor(None).compact(request)


def interrupted_turns(count: int) -> list[dict[str, Any]]:
    """Every message protected (an interrupt marker): nothing can be summarized, everything must be fitted."""
    return [user(f"[Request interrupted by user] turn {i} " + "w " * 20) for i in range(count)]


@pytest.mark.parametrize("count", [1000, 4000])
async def test_fitting_thousands_of_protected_messages_is_linear(count: int) -> None:
    """Issue 8: 8,000 such messages took 5.2 s (quadratic fit) and stalled every other request."""
    counter = CountingCounter()
    config = CompactConfig(context_window=2000, tool_output_policy="none", clear_tool_results=False)
    result_ = await compact_counted(interrupted_turns(count), config, counter)
    assert result_.dropped > 0 and result_.output_tokens <= 2000
    assert counter.entries <= 8 * count  # each entry counted a bounded number of times


def test_pairing_ten_thousand_parallel_calls_reads_each_part_a_bounded_number_of_times() -> None:
    """A quadratic id match over 10,000 parallel calls would read parts ~10^8 times."""
    calls = 10_000
    messages = [calling(*(["tool"] * calls), call_id="c")] + [result("out", f"c_{i}") for i in range(calls)][
        ::-1
    ]
    items = [CountingItem.of(CHAT.item(message)) for message in messages]
    found = pair(items)
    assert len(found.call_of) == calls and not found.orphans and not found.unanswered
    assert CountingParts.reads <= 10 * 2 * calls


class CountingParts(tuple):  # type: ignore[type-arg]
    reads = 0

    def __getitem__(self, index: Any) -> Any:
        CountingParts.reads += 1
        return super().__getitem__(index)


class CountingItem:
    @staticmethod
    def of(item: Item) -> Item:
        item.parts = CountingParts(item.parts)
        return item


class ThreadRecordingCounter(HFTokenCounter):
    """Records on which threads the tokenizer found cut points (truncation, shrinking)."""

    def __init__(self) -> None:
        super().__init__("o200k_base")
        self.offset_threads: list[int] = []

    def cut(self, text: str, head: int, tail: int) -> tuple[int, int, int]:
        self.offset_threads.append(threading.get_ident())
        return super().cut(text, head, tail)


async def test_a_huge_tool_output_is_truncated_off_the_event_loop() -> None:
    """Issue 8: a 4 MB output's cut was tokenized on the loop, stalling every request for 3.9 s."""
    counter = ThreadRecordingCounter()
    output = "\n".join(f"line {i}: some build output" for i in range(20_000))  # ~0.6 MB
    messages = [user("build it"), calling("bash", call_id="b"), result(output, "b_0"), user("and?")]
    config = CompactConfig(context_window=1_000_000, tool_output_max_tokens=2000)
    truncated = await compact_counted(messages, config, counter)
    assert truncated.truncated == 1 and "tokens truncated" in json.dumps(truncated.messages)
    assert counter.offset_threads and threading.get_ident() not in counter.offset_threads


async def test_an_output_of_megabytes_is_cut_by_bytes_without_tokenizing_it_again() -> None:
    counter = ThreadRecordingCounter()
    output = "\n".join(f"line {i}: some long build output" for i in range(60_000))  # ~2 MB
    messages = [user("build it"), calling("bash", call_id="b"), result(output, "b_0"), user("and?")]
    config = CompactConfig(context_window=1_000_000, tool_output_max_tokens=2000)
    truncated = await compact_counted(messages, config, counter)
    text = json.dumps(truncated.messages)
    assert truncated.truncated == 1 and "bytes truncated; the full output had 60000 lines" in text
    assert counter.offset_threads == []  # counted once (off the loop), never tokenized again to cut


async def test_shrinking_outputs_to_fit_runs_off_the_event_loop() -> None:
    counter = ThreadRecordingCounter()
    output = "some output line\n" * 3000
    messages = [user("run"), calling("a", call_id="a"), result(output, "a_0"), user("next")]
    config = CompactConfig(context_window=1200, tool_output_policy="none", clear_tool_results=False)
    fitted = await compact_counted(messages, config, counter)
    assert fitted.output_tokens <= 1200
    assert counter.offset_threads and threading.get_ident() not in counter.offset_threads


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"type": "x", "inner": [value]}
    return value


def test_fingerprinting_does_not_recurse_whatever_the_depth() -> None:
    deep = nested(5000)  # deeper than orjson (255) and than Python's recursion limit
    assert fingerprint(deep) == fingerprint(nested(5000)) != fingerprint(nested(4999))


async def test_a_request_nested_too_deeply_to_read_is_passed_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from compact_hook.proxy.hook import CompactHook

    data = {
        "model": "m",
        "messages": [{"role": "user", "content": [nested(900)]}],
        "metadata": {},
    }
    hook = CompactHook(CompactConfig())
    before = data["messages"]
    out = await hook.async_pre_call_hook(None, None, data, "acompletion")
    assert out is data and data["messages"] is before
    assert "Traceback" not in caplog.text


class CountingSizing:
    """One token per word; counts how often the fit asks for a size."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, item: Item) -> int:
        self.calls += 1
        return 1 + sum(len(part.text.split()) for part in item.parts)

    def shrink(self, item: Item, limit: int) -> Item | None:
        return None


@pytest.mark.parametrize("count", [2000, 8000])
def test_the_fit_asks_each_items_size_a_bounded_number_of_times(count: int) -> None:
    from compact_hook.core.fit import Spared, drop_order, fit

    items = [CHAT.item(message) for message in interrupted_turns(count)]
    units = pair(items).units
    sizing = CountingSizing()
    fitted = fit(items, drop_order(items, units, Spared()), 500, sizing)
    assert fitted.fits and len(fitted.dropped) > count - 30
    assert sizing.calls <= 3 * count  # re-summing the list per drop would be count² / 2


async def test_the_in_process_store_is_bounded_in_bytes() -> None:
    from compact_hook.core.chain import Entry
    from compact_hook.state.store import MemoryStore

    store = MemoryStore(max_entries=10_000, ttl=3600, max_bytes=100_000)
    for n in range(50):
        await store.put(b"root%d" % n, b"key%d" % n, Entry(1, (), "summary " * 2000))
    assert store.bytes <= 100_000 and len(store._entries) < 10
    assert await store.get(b"key49") is not None and await store.get(b"key0") is None


def test_the_truncation_cache_is_bounded_in_bytes() -> None:
    from compact_hook.engine.tiers.truncation import TruncationCache

    cache = TruncationCache(size=20_000, max_bytes=50_000)
    for n in range(100):
        cache.put((n,), {0: "x" * 5000})
    assert cache.bytes <= 50_000 and cache.get((99,)) is not None and cache.get((0,)) is None


def test_model_names_the_router_does_not_know_are_not_remembered() -> None:
    """Issue 8: every distinct model string a client sent was memoized forever."""
    import litellm

    from compact_hook.proxy.request.models import ModelSettings

    router = litellm.Router(
        model_list=[{"model_name": "known", "litellm_params": {"model": "openai/gpt-4o", "api_key": "x"}}]
    )
    settings = ModelSettings(CompactConfig())
    for n in range(200):
        assert settings.resolve(router, "invented-" + "x" * 10_000 + str(n)) is None
    settings.resolve(router, "known")
    assert list(settings._memo) == ["known"]


def test_a_flood_of_the_same_warning_is_rate_limited() -> None:
    import logging

    from compact_hook.proxy.lifecycle.logs import RateLimit

    now = [0.0]
    limit = RateLimit(burst=5, window=60, clock=lambda: now[0])

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("compact_hook.x", logging.WARNING, __file__, 1, msg, ("arg",), None)

    passed = [limit.filter(record("request %s passed through")) for _ in range(1000)]
    assert sum(passed) == 5
    assert limit.filter(record("another template %s"))  # other lines are not affected
    now[0] = 61.0
    late = record("request %s passed through")
    assert limit.filter(late) and "995 similar lines suppressed" in late.getMessage()


def test_a_line_said_on_every_request_is_not_made_past_its_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``say`` asks the limit before it makes the line (a line walks the stack to be made): past the
    burst nothing is made, and what was dropped is said with the next line after the window."""
    import logging

    from compact_hook.proxy.lifecycle import logs

    now = [0.0]
    monkeypatch.setattr(logs, "LIMIT", [logs.RateLimit(burst=2, window=60, clock=lambda: now[0])])
    target = logging.getLogger("compact_hook.test_say")
    made = []
    monkeypatch.setattr(target, "makeRecord", _counting(target.makeRecord, made))
    caplog.set_level(logging.INFO, logger="compact_hook")
    for number in range(10):
        logs.say(target, logging.INFO, "request %s reshaped", number)
    assert len(made) == 2 and [r.getMessage() for r in caplog.records] == [
        "request 0 reshaped",
        "request 1 reshaped",
    ]
    now[0] = 61.0
    logs.say(target, logging.INFO, "request %s reshaped", 10)
    assert (
        caplog.records[-1].getMessage() == "request 10 reshaped [8 similar lines suppressed in the last 61 s]"
    )
    assert caplog.records[-1].funcName == "test_a_line_said_on_every_request_is_not_made_past_its_limit"


def _counting(make: Any, made: list[object]) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(args)
        return make(*args, **kwargs)

    return counted


def test_one_busy_model_group_cannot_silence_anothers_lines_and_what_was_suppressed_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import contextvars
    import logging

    from compact_hook.proxy.lifecycle.logs import RateLimit, for_model_group

    limit = RateLimit(burst=3, window=60, clock=lambda: 0.0)

    def line(group: str) -> bool:
        def logged() -> bool:
            for_model_group(group)
            made = logging.LogRecord(
                "compact_hook.x", logging.INFO, __file__, 1, "summary call (attempt %d)", (1,), None
            )
            return limit.filter(made)

        return contextvars.copy_context().run(logged)

    assert sum(line("busy") for _ in range(50)) == 3
    assert sum(line("quiet") for _ in range(3)) == 3  # its own burst, whole
    caplog.set_level(logging.INFO, logger="compact_hook")
    limit.flush()
    said = [r.getMessage() for r in caplog.records]
    assert said == ["compact_hook: 47 lines like 'summary call (attempt %d)' (model group busy) suppressed"]
    limit.flush()
    assert len(caplog.records) == 1  # said once


class BatchRecordingCounter(HFTokenCounter):
    def __init__(self) -> None:
        super().__init__("o200k_base")
        self.tokenized: list[int] = []

    def _encode_lengths(self, texts: list[str]) -> list[int]:
        self.tokenized.append(sum(map(len, texts)))
        return super()._encode_lengths(texts)


async def test_one_tenants_cached_counts_never_serve_another_so_timing_reveals_nothing() -> None:
    """Issue 8: tenant B could tell from the hook's duration whether tenant A sent the same text."""
    counter = BatchRecordingCounter()
    secret = [user("the same 60 KB document " + "confidential words " * 3000)]
    config = CompactConfig(context_window=1_000_000)
    compactor = Compactor(None)

    async def send(tenant: str) -> int:
        conversation = parse_chat(secret)
        assert isinstance(conversation, Conversation)
        before = sum(counter.tokenized)
        await compactor.compact(
            CompactRequest(conversation, config, FakeSummarizer(), counter=counter, tenant=tenant)
        )
        return sum(counter.tokenized) - before

    assert await send("team:a") > 50_000  # cold
    assert await send("team:a") == 0  # warm for the same tenant
    assert await send("team:b") > 50_000  # another tenant pays its own cold count: nothing to observe


async def test_tenants_never_share_an_archive_folder(tmp_path: Any) -> None:
    from compact_hook.state.archive import FileArchive

    archive = FileArchive(tmp_path)
    a = await archive.save("same-session", [user("a's words")], tenant="team:a")
    b = await archive.save("same-session", [user("b's words")], tenant="team:b")
    assert a is not None and b is not None
    assert a.parent.name == b.parent.name == "same-session" and a.parent != b.parent
    assert "team" not in str(a) and oct(a.parent.parent.stat().st_mode)[-3:] == "700"


def test_the_digest_reads_tool_arguments_nested_beyond_the_parsers_depth() -> None:
    from compact_hook.core.digest import digest

    deep = "[" * 100_000 + "]" * 100_000
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "edit", "arguments": deep}}],
    }
    text = digest([CHAT.item(message), CHAT.item(result("ok", "c"))], 2000)
    assert "edit(" in text

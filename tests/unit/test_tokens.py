import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from compact_hook import count_tokens
from compact_hook.core.counting import (
    ITEM_OVERHEAD,
    NAME_OVERHEAD,
    REPLY_PRIMING,
    ROLE_TOKENS,
    TOOL_CALL_OVERHEAD,
    item_strings,
)
from compact_hook.errors import TokenizerError
from compact_hook.state.tokenizers import (
    Generations,
    HFTokenCounter,
    load_tokenizer,
    tokenizer_name_for_model,
)
from compact_hook.wires import ANTHROPIC, CHAT, Conversation
from compact_hook.wires.anthropic.format import MEDIA_TOKENS as ANTHROPIC_MEDIA_TOKENS
from compact_hook.wires.openai_parts import MEDIA_TOKENS
from tests.support import load_transcript

MESSAGE_OVERHEAD = ITEM_OVERHEAD + ROLE_TOKENS
"""Every item: framing plus its role (one token for every standard role)."""


def per_message(counter: HFTokenCounter, messages: list[Any]) -> list[int]:
    conversation = Conversation(CHAT, messages)
    return counter.count(conversation.prints(), lambda i: item_strings(conversation.item(i)))


async def per_message_async(counter: HFTokenCounter, messages: list[Any]) -> list[int]:
    conversation = Conversation(CHAT, messages)
    return await counter.acount(conversation.prints(), lambda i: item_strings(conversation.item(i)))


def encoded(text: str, spec: str = "o200k_base") -> int:
    return len(load_tokenizer(spec).encode(text, add_special_tokens=False).ids)


def test_a_plain_message_counts_framing_role_and_content() -> None:
    message = {"role": "user", "content": "Hello there, how are you?"}
    expected = MESSAGE_OVERHEAD + encoded("Hello there, how are you?") + REPLY_PRIMING
    assert encoded("user") == ROLE_TOKENS
    assert count_tokens([message]) == expected


def test_empty_messages_count_zero() -> None:
    assert count_tokens([]) == 0


def test_every_string_counts_tool_calls_results_names_and_parts() -> None:
    calls = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "a",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "x.py"}'},
            },
            {"id": "b", "type": "function", "function": {"name": "grep", "arguments": '{"q": "TODO"}'}},
        ],
    }
    tool = {"role": "tool", "tool_call_id": "a", "name": "read_file", "content": "print('hi')"}
    parts = {
        "role": "user",
        "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
    }
    expected_calls = (
        MESSAGE_OVERHEAD
        + 2 * TOOL_CALL_OVERHEAD
        + sum(encoded(s) for s in ("read_file", '{"path": "x.py"}', "grep", '{"q": "TODO"}'))
    )
    expected_tool = MESSAGE_OVERHEAD + NAME_OVERHEAD + sum(encoded(s) for s in ("read_file", "print('hi')"))
    expected_parts = MESSAGE_OVERHEAD + sum(encoded(s) for s in ("first", "second"))
    assert count_tokens([calls]) == expected_calls + REPLY_PRIMING
    assert count_tokens([tool]) == expected_tool + REPLY_PRIMING
    assert count_tokens([parts]) == expected_parts + REPLY_PRIMING


def test_anthropic_blocks_count_their_text_tool_inputs_and_a_fixed_cost_per_image() -> None:
    counter = HFTokenCounter("claude")
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 50_000}}
    message = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t",
                "content": [{"type": "text", "text": "nested output"}, image],
            },
            {"type": "text", "text": "and a question"},
        ],
    }
    turn = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm let me think", "signature": "sig"},
            {"type": "tool_use", "id": "t", "name": "Read", "input": {"path": "a.py"}},
        ],
    }
    conversation = Conversation(ANTHROPIC, [turn, message])
    counts = counter.count(conversation.prints(), lambda i: item_strings(conversation.item(i)))

    def claude(text: str) -> int:
        return len(load_tokenizer("claude").encode(text, add_special_tokens=False).ids)

    assert counts[0] == MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD + sum(
        claude(s) for s in ("hmm let me think", "Read", '{"path":"a.py"}')
    )
    assert (
        counts[1]
        == MESSAGE_OVERHEAD + claude("nested output") + claude("and a question") + ANTHROPIC_MEDIA_TOKENS
    )


def test_images_cost_a_fixed_documented_estimate() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 50_000}}
    with_image = {"role": "user", "content": [{"type": "text", "text": "look"}, image]}
    without = {"role": "user", "content": [{"type": "text", "text": "look"}]}
    assert count_tokens([with_image]) - count_tokens([without]) == MEDIA_TOKENS


def test_an_unknown_part_type_is_counted_as_its_json_without_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Counting generously keeps the window honest; logging per unknown type would let a client fill the log."""
    unknown = {"type": "hologram_v9", "data": "x" * 1000}
    with caplog.at_level(logging.DEBUG):
        counted = count_tokens([{"role": "user", "content": [unknown]}])
    assert counted > count_tokens([{"role": "user", "content": []}]) + 100
    assert not [record for record in caplog.records if "hologram_v9" in record.getMessage()]


def test_lone_surrogates_do_not_crash_counting() -> None:
    assert count_tokens([{"role": "user", "content": "bad \ud800 surrogate"}]) > 0


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("gpt-4o", "o200k_base"),
        ("openai/gpt-4o-mini", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("anthropic/claude-sonnet-4-5", "claude"),
        ("bedrock/anthropic.claude-3-haiku", "claude"),
        ("mystery-model", "o200k_base"),
    ],
)
def test_tokenizer_is_chosen_by_model_family(model: str, name: str) -> None:
    assert tokenizer_name_for_model(model) == name


def test_models_of_different_families_count_differently() -> None:
    messages = [{"role": "user", "content": "Compaction keeps agents alive. 長い会話を要約します。" * 20}]
    assert count_tokens(messages, model="claude-sonnet-4") != count_tokens(messages, model="gpt-4o")
    assert count_tokens(messages, model="gpt-4") != count_tokens(messages, model="gpt-4o")


def test_a_tokenizer_json_path_can_be_given(tmp_path: Path) -> None:
    path = tmp_path / "tok.json"
    path.write_text(load_tokenizer("cl100k_base").to_str(), encoding="utf-8")
    messages = [{"role": "user", "content": "same text either way"}]
    assert count_tokens(messages, tokenizer=str(path)) == count_tokens(messages, tokenizer="cl100k_base")


def test_an_unknown_tokenizer_raises_a_clear_error() -> None:
    with pytest.raises(TokenizerError, match="no-such-tokenizer"):
        load_tokenizer("no-such-tokenizer")


class SpyCounter(HFTokenCounter):
    """Records how many strings each tokenizer batch held, and on which thread it ran."""

    def __init__(self, spec: str = "o200k_base", cache_size: int = 100_000) -> None:
        super().__init__(spec, cache_size)
        self.batches: list[int] = []
        self.threads: list[int] = []

    def _encode_lengths(self, texts: list[str]) -> list[int]:
        self.batches.append(len(texts))
        self.threads.append(threading.get_ident())
        return super()._encode_lengths(texts)


def test_the_next_turn_tokenizes_only_the_new_messages() -> None:
    history = load_transcript("claude_code_fa812bfe_pre_compact.json")
    counter = SpyCounter()
    first = per_message(counter, history[:-2])
    second = per_message(counter, history)
    assert second[:-2] == first
    new_strings = sum(len(item_strings(CHAT.item(m))[0]) for m in history[-2:])
    assert counter.batches[-1] == new_strings  # the new messages' strings, not the history's


def test_cached_counts_equal_fresh_counts() -> None:
    history = load_transcript("tau_bench_airline_gpt4o_task2_trial1.json")
    warm = HFTokenCounter("o200k_base")
    per_message(warm, history)
    assert per_message(warm, history) == per_message(HFTokenCounter("o200k_base"), history)


def test_the_cache_is_bounded() -> None:
    counter = HFTokenCounter("o200k_base", cache_size=10)
    per_message(counter, [{"role": "user", "content": f"message {i}"} for i in range(50)])
    assert 0 < len(counter._cache) <= 10


def test_counts_read_every_generation_stay_and_the_rest_go() -> None:
    """The counts a session reads on every request outlive any number of other entries; one not read
    while two generations fill is forgotten; never more than the size is held."""
    cache = Generations(100)
    session = [f"s{i}".encode() for i in range(20)]
    cache.add(dict.fromkeys(session, 7))
    cache.add({b"once": 1})
    for turn in range(30):
        assert cache.read(session) == ([7] * 20, [])
        cache.add({f"t{turn}-{i}".encode(): i for i in range(10)})
        assert len(cache) <= 100
    assert cache.read([b"once", b"t29-9", b"t0-0"]) == ([None, 9, None], [0, 2])


def test_a_batch_larger_than_a_generation_keeps_its_newest() -> None:
    cache = Generations(10)
    cache.add({str(i).encode(): i for i in range(50)})
    assert len(cache) == 5 and cache.read([b"49", b"45", b"44", b"0"]) == ([49, 45, None, None], [2, 3])


def test_a_request_larger_than_the_cache_still_counts_every_message() -> None:
    counter = HFTokenCounter("o200k_base", cache_size=3)
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"message number {i}"} for i in range(20)]
    assert per_message(counter, messages) == per_message(HFTokenCounter("o200k_base"), messages)


async def test_a_large_uncached_history_is_tokenized_off_the_event_loop() -> None:
    history = load_transcript("claude_code_fa812bfe_pre_compact.json")
    counter = SpyCounter()
    loop_thread = threading.get_ident()
    counts = await per_message_async(counter, history)
    assert counter.threads[-1] != loop_thread
    assert counts == per_message(HFTokenCounter("o200k_base"), history)
    await per_message_async(counter, history + [{"role": "user", "content": "one more"}])
    assert counter.threads[-1] == loop_thread  # a small batch is cheaper inline


async def test_the_event_loop_keeps_running_while_a_long_history_is_counted() -> None:
    history = load_transcript("claude_code_fa812bfe_pre_compact.json") * 2
    counter = HFTokenCounter("o200k_base")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await per_message_async(counter, history)
    task.cancel()
    assert ticks > 1


def test_shipped_tokenizers_load() -> None:
    for spec in ("o200k_base", "cl100k_base", "claude"):
        assert isinstance(load_tokenizer(spec), Tokenizer)


class EachSpy(HFTokenCounter):
    """Records the strings each tokenizer call was given."""

    def __init__(self) -> None:
        super().__init__("o200k_base")
        self.given: list[list[str]] = []

    def _encode_each(self, texts: list[str]) -> list[int]:
        self.given.append(list(texts))
        return super()._encode_each(texts)


def test_a_string_repeated_in_a_batch_is_tokenized_once_and_counted_each_time() -> None:
    history = load_transcript("claude_code_fa812bfe_pre_compact.json")
    repeated = [*history, *history[1:20]]  # the same strings again, as a long history repeats them
    counter = EachSpy()
    strings = [s for m in repeated for s in item_strings(CHAT.item(m))[0]]
    assert counter._encode_lengths(strings) == [counter.count_text(s) for s in strings]
    [tokenized] = counter.given[:1]
    assert len(tokenized) == len(set(strings)) < len(strings)

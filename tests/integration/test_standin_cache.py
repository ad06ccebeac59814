"""The stand-in caches prompts like the providers do, and says so in ``usage`` on every surface,
streaming and not — read with the official SDKs straight from the stand-in (no proxy)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.integration.harness import StandinUpstream

pytestmark = pytest.mark.integration

LONG = " ".join(f"fact{i}" for i in range(1_500))  # ~2,400 tokens by the stand-in's estimate


@pytest.fixture(scope="module")
def caching_upstream() -> Iterator[StandinUpstream]:
    with StandinUpstream(cache_ttl=300) as up:
        yield up


def anthropic_client(upstream: StandinUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="x", base_url=upstream.root_url, max_retries=0)


def ask_anthropic(upstream: StandinUpstream, model: str, messages: list[Any], stream: bool) -> Any:
    client = anthropic_client(upstream)
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    if not stream:
        return client.messages.create(model=model, max_tokens=50, system=system, messages=messages).usage
    with client.messages.stream(model=model, max_tokens=50, system=system, messages=messages) as events:
        return events.get_final_message().usage


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_breakpoints_write_then_read_and_a_new_turn_writes_only_what_is_new(
    caching_upstream: StandinUpstream, stream: bool
) -> None:
    model = f"standin-quarter-cache-a-{stream}"
    first = [
        {"role": "user", "content": [{"type": "text", "text": "go", "cache_control": {"type": "ephemeral"}}]}
    ]
    written = ask_anthropic(caching_upstream, model, first, stream)
    assert written.cache_read_input_tokens == 0 and written.cache_creation_input_tokens > 1_024
    assert written.input_tokens == 0  # everything is before the last breakpoint
    again = ask_anthropic(caching_upstream, model, first, stream)
    assert again.cache_read_input_tokens == written.cache_creation_input_tokens
    assert again.cache_creation_input_tokens == 0
    longer = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "more " * 40, "cache_control": {"type": "ephemeral"}}],
        },
    ]
    grown = ask_anthropic(caching_upstream, model, longer, stream)
    assert (
        grown.cache_read_input_tokens == written.cache_creation_input_tokens
    )  # the last turn, looked back to
    assert grown.cache_creation_input_tokens > 40


def test_anthropic_without_breakpoints_caches_nothing_and_the_ttl_expires_what_it_did(
    caching_upstream: StandinUpstream,
) -> None:
    client, model = anthropic_client(caching_upstream), "standin-quarter-cache-b"
    plain = client.messages.create(model=model, max_tokens=5, messages=[{"role": "user", "content": LONG}])
    assert plain.usage.cache_creation_input_tokens == 0 and plain.usage.input_tokens > 2_000
    marked = [
        {"role": "user", "content": [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]}
    ]
    assert (
        client.messages.create(model=model, max_tokens=5, messages=marked).usage.cache_creation_input_tokens
        > 0
    )
    caching_upstream.advance(299)
    assert (
        client.messages.create(model=model, max_tokens=5, messages=marked).usage.cache_read_input_tokens > 0
    )
    caching_upstream.advance(299)  # a read refreshed it: still there
    assert (
        client.messages.create(model=model, max_tokens=5, messages=marked).usage.cache_read_input_tokens > 0
    )
    caching_upstream.advance(301)
    cold = client.messages.create(model=model, max_tokens=5, messages=marked).usage
    assert cold.cache_read_input_tokens == 0 and cold.cache_creation_input_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_chat_caches_every_long_prefix_in_128_token_steps(
    caching_upstream: StandinUpstream, stream: bool
) -> None:
    client = openai.OpenAI(api_key="x", base_url=caching_upstream.url, max_retries=0)
    model = f"standin-quarter-cache-c-{stream}"

    def usage(messages: list[Any]) -> Any:
        if not stream:
            return client.chat.completions.create(model=model, messages=messages).usage
        chunks = client.chat.completions.create(
            model=model, messages=messages, stream=True, stream_options={"include_usage": True}
        )
        return [c for c in chunks if c.usage is not None][-1].usage

    history = [{"role": "system", "content": LONG}, {"role": "user", "content": "go"}]
    first = usage(history)
    assert first.prompt_tokens_details.cached_tokens == 0
    second = usage([*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "on"}])
    cached = second.prompt_tokens_details.cached_tokens
    assert cached % 128 == 0 and first.prompt_tokens - 128 < cached <= first.prompt_tokens
    assert second.prompt_tokens > first.prompt_tokens
    recorded = [r for r in caching_upstream.chat_requests if r["body"]["model"] == model][
        -1
    ]  # what a replay prices
    assert recorded["cache"] == {"prompt_tokens": second.prompt_tokens, "cached_tokens": cached}
    assert recorded["output_tokens"] == second.completion_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_responses_report_cached_input_tokens(caching_upstream: StandinUpstream, stream: bool) -> None:
    client = openai.OpenAI(api_key="x", base_url=caching_upstream.url, max_retries=0)
    model = f"standin-quarter-cache-r-{stream}"

    def usage() -> Any:
        if not stream:
            return client.responses.create(model=model, instructions=LONG, input="go").usage
        events = client.responses.create(model=model, instructions=LONG, input="go", stream=True)
        return [e for e in events if e.type == "response.completed"][-1].response.usage

    assert usage().input_tokens_details.cached_tokens == 0
    again = usage()
    assert (
        again.input_tokens_details.cached_tokens >= 1_024
        and again.input_tokens_details.cached_tokens % 128 == 0
    )

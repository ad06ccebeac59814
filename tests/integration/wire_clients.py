"""Send one turn through a proxy with each surface's official SDK, and read back what reached the stand-in.

``send(upstream, proxy, wire, model, entries, ...)`` posts ``entries`` (chat messages, Anthropic messages,
Responses input items or Gemini contents) with the openai, anthropic or google-genai SDK, streaming or
not, and returns the response
headers, the body the stand-in received for the main call, and how many summary calls it saw meanwhile.
Shared by the end-to-end tests and the benchmarks.

``send_chat(standin, proxy, model, messages)`` is the chat-only short form the chat replays use: the
messages the provider got for the main call, read from the stand-in's chat requests.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import anthropic
import openai

from tests.conversations import ENTRIES_KEY
from tests.integration.harness import SUMMARY_MARKER, ProxyProcess, StandinUpstream


@dataclass
class Sent:
    """A turn: what was sent, what reached the provider, the response headers, the summary calls made."""

    wire: str
    entries: list[Any]
    forwarded: dict[str, Any]
    headers: dict[str, str]
    summary_calls: int
    reply: str

    @property
    def forwarded_entries(self) -> list[Any]:
        return self.forwarded[ENTRIES_KEY[self.wire]]  # type: ignore[no-any-return]


def is_summary_call(body: dict[str, Any]) -> bool:
    return SUMMARY_MARKER in json.dumps(body.get("system", "")) + json.dumps(body.get("messages", ""))


@functools.lru_cache(maxsize=64)
def google_client(url: str, key: str) -> Any:
    """google-genai at ``v1beta`` (its default ``v1`` is not a path LiteLLM routes), one per proxy and
    key: each new client loads the CA bundle three times (~0.1 s of CPU), which across the suite's
    Gemini turns came to minutes."""
    from google import genai
    from google.genai import types

    options = types.HttpOptions(base_url=url, api_version="v1beta", timeout=300_000)
    return genai.Client(api_key=key, http_options=options)


def _google(proxy: ProxyProcess, model: str, entries: list[Any], stream: bool, extra: dict[str, Any]) -> Any:
    """``extra`` is the ``GenerateContentConfig`` (``system_instruction``, ``tools``,
    ``max_output_tokens``...)."""
    from google.genai import types

    client = google_client(proxy.url, extra.pop("key", proxy.master_key))
    config = types.GenerateContentConfig(
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True), **extra
    )
    if not stream:
        answer = client.models.generate_content(model=model, contents=entries, config=config)
        return dict(answer.sdk_http_response.headers or {}), answer.text or ""  # type: ignore[union-attr]
    chunks = list(client.models.generate_content_stream(model=model, contents=entries, config=config))
    headers = chunks[0].sdk_http_response.headers if chunks and chunks[0].sdk_http_response else {}
    return dict(headers or {}), "".join(chunk.text or "" for chunk in chunks)


def send(
    upstream: StandinUpstream,
    proxy: ProxyProcess,
    wire: str,
    model: str,
    entries: list[Any],
    stream: bool = False,
    **extra: Any,
) -> Sent:
    """One turn; ``extra`` is passed to the SDK call (system, tools, instructions, max_tokens...)."""
    before = len(upstream.requests)
    headers, reply = call(proxy, wire, model, entries, stream, **extra)
    new = [r for r in upstream.requests[before:] if r["method"] == "POST"]
    summaries = [r for r in new if is_summary_call(r["body"] or {})]
    [main] = [r["body"] for r in new if r not in summaries]
    return Sent(wire, entries, main, headers, len(summaries), reply)


@functools.lru_cache(maxsize=64)
def openai_client(base_url: str, key: str) -> openai.OpenAI:
    """One per proxy and key: a new client loads the CA bundle (~0.05 s of CPU a turn)."""
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=300)


@functools.lru_cache(maxsize=64)
def anthropic_client(base_url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=300)


BULKY = ("system", "tools", "instructions")
"""Parameters that can be long (a CLI's system prompt and tool schemas), sent like the conversation."""


def as_sent(field: str, entries: list[Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` with the conversation (and its system prompt and tools) in the body as they are:
    the SDKs walk a typed parameter's every message to transform it (a tenth of a second of CPU
    for a long conversation, the identity for the plain dicts sent here); ``extra_body`` carries
    the same bytes without the walk."""
    bulky = {key: extra[key] for key in BULKY if key in extra}
    rest = {key: value for key, value in extra.items() if key not in bulky}
    return {**rest, "extra_body": {**extra.get("extra_body", {}), **bulky, field: entries}}


def _chat(proxy: ProxyProcess, model: str, entries: list[Any], stream: bool, extra: dict[str, Any]) -> Any:
    client = openai_client(proxy.base_url, extra.pop("key", proxy.master_key))
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[], stream=stream, **as_sent("messages", entries, extra)
    )
    parsed: Any = raw.parse()
    if stream:
        reply = "".join(chunk.choices[0].delta.content or "" for chunk in parsed if chunk.choices)
    else:
        reply = parsed.choices[0].message.content or ""
    return dict(raw.headers), reply


def _anthropic(
    proxy: ProxyProcess, model: str, entries: list[Any], stream: bool, extra: dict[str, Any]
) -> Any:
    client = anthropic_client(proxy.url, extra.pop("key", proxy.master_key))
    extra = {"max_tokens": 1024, **extra}
    raw = client.messages.with_raw_response.create(
        model=model, messages=[], stream=stream, **as_sent("messages", entries, extra)
    )
    parsed: Any = raw.parse()
    if stream:
        reply = "".join(event.delta.text for event in parsed if event.type == "content_block_delta")
    else:
        reply = parsed.content[0].text
    return dict(raw.headers), reply


def _responses(
    proxy: ProxyProcess, model: str, entries: list[Any], stream: bool, extra: dict[str, Any]
) -> Any:
    client = openai_client(proxy.base_url, extra.pop("key", proxy.master_key))
    raw = client.responses.with_raw_response.create(
        model=model, stream=stream, **as_sent("input", entries, extra)
    )
    parsed: Any = raw.parse()
    if stream:
        reply = "".join(event.delta for event in parsed if event.type == "response.output_text.delta")
    else:
        reply = parsed.output_text
    return dict(raw.headers), reply


_CALLS = {"chat": _chat, "anthropic": _anthropic, "responses": _responses, "google": _google}


def call(
    proxy: ProxyProcess, wire: str, model: str, entries: list[Any], stream: bool = False, **extra: Any
) -> tuple[dict[str, str], str]:
    """One request with the surface's official SDK: the response headers and the reply text."""
    return _CALLS[wire](proxy, model, entries, stream, extra)  # type: ignore[no-any-return]


@dataclass
class ChatTurn:
    """A chat turn through a proxy: how many messages were sent, the response headers, the messages the
    provider got for the main call, the summary calls made meanwhile."""

    end: int
    headers: dict[str, str]
    forwarded: list[dict[str, Any]]
    summary_calls: int


class Counted(Protocol):
    summary_calls: int


TurnT = TypeVar("TurnT", bound=Counted)


@dataclass
class Replay(Generic[TurnT]):
    """A replay's turns, in order, and the summary calls they made in all."""

    turns: list[TurnT] = field(default_factory=list)

    @property
    def summary_calls(self) -> int:
        return sum(turn.summary_calls for turn in self.turns)


def openai_sdk(base_url: str, api_key: str = "none") -> openai.OpenAI:
    """An openai client that surfaces the first error instead of retrying it (retries would hide counts)."""
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)


def chat_client(proxy: ProxyProcess, key: str | None = None) -> openai.OpenAI:
    """The openai SDK on ``proxy`` with ``key`` (the master key by default), no retries."""
    return openai.OpenAI(api_key=key or proxy.master_key, base_url=proxy.base_url, max_retries=0, timeout=120)


def send_chat(
    standin: Any, proxy: ProxyProcess, model: str, messages: list[dict[str, Any]], key: str | None = None
) -> ChatTurn:
    """One chat turn that must answer 200. The main call is the one request to the stand-in that is
    neither a summary call nor addressed to a failing model (a summary model made to fail)."""
    before = len(standin.chat_requests)
    client = openai_client(proxy.base_url, key or proxy.master_key)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[], **as_sent("messages", messages, {})
    )
    assert raw.http_response.status_code == 200
    new = [r["body"] for r in standin.chat_requests[before:]]
    summaries = [b for b in new if SUMMARY_MARKER in json.dumps(b["messages"])]
    [main] = [b for b in new if b not in summaries and "fail" not in b["model"]]
    return ChatTurn(len(messages), dict(raw.headers), main["messages"], len(summaries))

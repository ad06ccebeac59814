"""Stand-in LLM provider (OpenAI chat, Anthropic Messages, OpenAI Responses, Google generateContent) for
end-to-end tests.

Stdlib only, so it runs from any interpreter without installing anything, and deterministic, so tests can
assert on exactly what reached the "provider" and on exactly what it answered.

Two ways to use it:

* script: ``python tools/standin_upstream.py --host 127.0.0.1 --port 4001``
* library: ``with StandinUpstream() as up: ...`` then point a litellm deployment at it and inspect
  ``up.requests`` (or ``up.chat_requests``, ``up.messages_requests``, ``up.responses_requests``,
  ``up.google_requests``) and ``up.agent_turns``.

Endpoints, each answering natively in its own wire format, streaming (``"stream": true``) and not:

* ``POST /v1/chat/completions`` (also ``/chat/completions``): OpenAI chat completions. Streams are
  ``data: <chunk>`` lines ending with a usage chunk when ``stream_options.include_usage`` is set, then
  ``data: [DONE]``. An ``openai/<model>`` deployment with ``api_base = up.url`` (``http://host:port/v1``).
* ``POST /v1/messages`` (also ``/messages``): the Anthropic Messages API. Streams are ``event: <type>`` /
  ``data: <json>`` pairs: ``message_start``, ``content_block_start``, ``ping``, ``content_block_delta``
  (``text_delta``) ..., ``content_block_stop``, ``message_delta`` (``stop_reason: end_turn``, output usage),
  ``message_stop``. An ``anthropic/<model>`` deployment with ``api_base = up.root_url`` (litellm appends
  ``/v1/messages`` itself).
* ``POST /v1/responses`` (also ``/responses``): the OpenAI Responses API (``input`` string or items,
  ``instructions``, ``previous_response_id`` echoed back). Streams are ``event: <type>`` / ``data: <json>``
  pairs with a ``sequence_number``: ``response.created``, ``response.in_progress``,
  ``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta`` ...,
  ``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done``,
  ``response.completed`` (no ``[DONE]``, like OpenAI). An ``openai/<model>`` deployment with ``api_base =
  up.url`` (litellm posts to ``{api_base}/responses``); litellm also sends ``/v1/messages`` calls for an
  ``openai/`` deployment here.
* ``POST /{v1beta,v1alpha,v1}/models/<model>:generateContent`` and ``:streamGenerateContent`` (also without
  the version): Google's Gemini API (``standin_google.py``: what it reads, checks, refuses and answers).
  The model is the one named in the path (a body's ``model`` is ignored) and is put in the recorded
  request as ``"model"``. Streams asked with ``alt=sse`` are ``data: <GenerateContentResponse>`` events
  ending in CRLF CRLF, as Google's (no ``[DONE]``): text in a few pieces, each function call whole, the last
  chunk with ``finishReason`` and ``usageMetadata``; without ``alt=sse`` one JSON array of those chunks.
  A ``gemini/<model>`` deployment with ``api_base = up.root_url``: LiteLLM 1.106 posts to
  ``{api_base}/models/<model>:generateContent`` and ``:streamGenerateContent?alt=sse`` for Gemini 2.x and 3
  names alike (its ``v1beta`` / ``v1alpha`` choice applies only to Google's own host), whether the client
  came in on the proxy's Google route or on chat completions; the google-genai SDK pointed here posts to
  ``/{api_version}/models/…`` (``v1`` unless told). Gemini 3 and later names (``gemini-3…``) have their
  current turn's thought signatures checked, strict or not (``agent_script.google_signature_problem``).
* ``GET /v1/models`` (also ``/models``), and the control endpoints ``GET /health``, ``GET /_recorded`` and
  ``POST /_reset`` (so a test can inspect a script-started instance over HTTP).

Control endpoints are not recorded; every other request is, before it is answered, as ``{"method", "path",
"headers", "body", "raw"}`` (headers with lower-cased names, ``body`` the parsed JSON or ``None``, ``raw`` the
exact request bytes decoded as UTF-8); once read, ``"billed"`` (the input tokens it bills, see below);
once answered, ``"cache"`` (the prompt cache's input counts:
``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens`` on /v1/messages,
``prompt_tokens``, ``cached_tokens`` otherwise) and ``"output_tokens"`` are added to it.

Behaviour is chosen by substrings of the request's ``model`` (litellm strips the ``openai/``, ``anthropic/``
or ``gemini/`` prefix; Google's is the path's), and the modes compose:

* ``strict`` -> validate tool-call pairing like the real provider and answer HTTP 400 in the provider's error
  format when it is broken (see ``check_chat_messages``, ``check_anthropic_messages``,
  ``check_responses_input``, ``standin_google.check_google_contents``: Google's ``{"error": {"code": 400,
  "message", "status": "INVALID_ARGUMENT"}}``); a valid request is then answered as usual;
* ``slow``  -> sleep ``slow_seconds`` (3 s) before answering;
* ``fail``  -> HTTP 500 with the surface's error body (Google's: ``{"error": {"code": 500, "message",
  "status": "INTERNAL"}}``; through a litellm proxy with default settings one
  client request arrives 3 times, ~6 s with back-off; ``router_settings: {num_retries: 0}`` makes it once);
* ``flaky`` -> counted per stand-in: of every ten ``flaky`` requests the fourth fails as ``fail`` and the
  seventh is slow as ``slow`` (a run of four or more meets a failure for sure; a retry is the next count);
* ``empty`` -> HTTP 200 with ``""`` as the reply text;
* ``limit<N>`` (e.g. ``standin-limit9000``) -> a request whose text is over N tokens (the usage estimate
  below) gets the provider's own context-length 400: chat names the limit and the size (``maximum context
  length is N tokens ... resulted in M tokens``), Anthropic ``prompt is too long: M tokens > N maximum``,
  Responses neither (``Your input exceeds the context window of this model``, code
  ``context_length_exceeded``), Google ``The input token count (M) exceeds the maximum number of tokens
  allowed (N).`` (``INVALID_ARGUMENT``, which LiteLLM maps to its ``ContextWindowExceededError``: a proxy
  client receives an HTTP 400, OpenAI-shaped, whose message starts ``litellm.ContextWindowExceededError``
  and quotes Google's body);
* ``quarter``, ``bill<NNN>`` (e.g. ``standin-bill125``) and ``ctok30`` / ``ctok47`` / ``ctok48`` -> the
  input is billed (usage, and the ``limit<N>`` refusal) unlike the default (below): a quarter of the
  characters, ``NNN / 100`` times what compact_hook counts, or as Claude counts (``billing``);
* ``usage-tail``, ``usage-zero``, ``usage-cap<N>``, ``usage-msgs`` -> the usage reports not what is billed
  but what servers that lie report (``billing.reported``: the input after the prefix held from the
  model's previous request, 0 when one is held, at most N, the messages only), with no cache fields; the
  recorded request gets ``"reported"``;
* ``throttle`` -> a request whose text holds ``THROTTLE-THIS-TENANT`` gets a 429 in Bedrock's words ("Too
  many tokens, please wait before trying again.", ``throttled``): one tenant's rate limit;
* ``recaller`` -> offered the recall tool and shown a handle (``recall 048213``), calls the tool with
  the first handle it sees; given the answer, replies ``RECALLED <handle>: <its start>``
  (``recaller``; chat and Messages);
* ``script`` (e.g. ``standin-script``, ``gemini-3-pro-script12``) -> the scripted agent (``agent_script``)
  answers instead of a text, on every surface: shell tool calls for N turns (30 by default, every seventh
  two in parallel), then ``AGENT_FINAL``; turns are counted per session (``up.agent_turns``);
* otherwise HTTP 200. If any text the request carries (messages, tool calls and results, the chat system
  message, the Anthropic ``system`` field, the Responses ``instructions``, Google's ``systemInstruction``)
  contains ``SUMMARY_MARKER`` the reply is a deterministic markdown summary (see ``summary_from_texts``);
  else it is ``stand-in reply to N messages``, N being the length of ``messages`` (chat, Anthropic:
  ``system`` is not a message there), of the Responses ``input`` list (1 for a string ``input``) or of
  Google's ``contents``.

The input is billed what compact_hook counts of the request received (``billing``: a provider that agrees
with us; the model's name may ask otherwise, above), the output ``ceil(reply chars / 4)`` tokens (a
scripted agent's output counts its answer's JSON). With ``quarter``, the input is ``ceil(request text
chars / 4)``, the request text being what ``chat_texts`` / ``anthropic_texts`` / ``responses_texts`` /
``standin_google.google_texts`` extract, tool definitions as their JSON (Google reports them as
``usageMetadata.promptTokenCount`` / ``candidatesTokenCount``). Prompt caching is simulated as the real
providers do it (``prompt_cache``, keyed by the request's ``model``): ``/v1/messages`` caches up to each
``cache_control`` breakpoint (and a top-level ``cache_control``) and reports ``cache_creation_input_tokens``
/ ``cache_read_input_tokens``, with ``input_tokens`` the part after the last breakpoint; chat and Responses
cache every prefix of 1,024 tokens or more and report ``prompt_tokens_details.cached_tokens`` /
``input_tokens_details.cached_tokens`` (in 128-token steps); the cache counts a quarter of the characters,
and its split is scaled to the input billed. Google's implicit cache is not simulated (no
``cachedContentTokenCount``). The cache's clock is the stand-in's: ``advance(seconds)`` (or ``POST /_clock``
with ``{"advance": seconds}``) moves it, so a replay can take an agent's pauses without waiting them out;
``cache_ttl`` (``--cache-ttl``) sets the 5-minute lifetime.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent))  # agent_script, beside this file (no package here)
import agent_script  # noqa: E402
import billing  # noqa: E402
import prompt_cache  # noqa: E402
import recaller  # noqa: E402
import standin_google  # noqa: E402
from prompt_cache import (  # noqa: E402  what the model reads of each surface: one definition, the cache's
    anthropic_content_text,
    approx_tokens,
    chat_message_text,
    responses_item_text,
)

SUMMARY_MARKER = "<compact_hook:summary-request>"
TAGGED_SUMMARY_REQUEST = "wrap your summary in a <summary></summary> block"
"""How LiteLLM's ``compact_20260112`` polyfill asks for its summary (bench/compare_builtins.py)."""
SUMMARY_HEADINGS = (
    "## Goal and user constraints",
    "## Decisions",
    "## Files and artifacts",
    "## Tool calls and outcomes",
    "## Errors and fixes",
    "## Current state",
    "## Next steps",
)
CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
MESSAGES_PATHS = frozenset({"/v1/messages", "/messages"})
RESPONSES_PATHS = frozenset({"/v1/responses", "/responses"})
MODELS_PATHS = frozenset({"/v1/models", "/models"})
ADVERTISED_MODELS = ("standin", "standin-empty", "standin-fail", "standin-slow", "standin-strict")
STREAM_PIECES = 4
CREATED = 1_700_000_000  # fixed timestamp: responses stay deterministic apart from their id
FAIL_MESSAGE = "stand-in failure (model name contains 'fail')"

SSEEvent = tuple[str | None, dict[str, Any]]  # (``event:`` name or None for data-only lines, payload)


class BadRequest(Exception):
    """A client error that becomes an HTTP 400 in the surface's error format (``param``: OpenAI's field)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


# ----------------------------------------------------------------------------------------------------------
# Pure helpers shared by every surface (no I/O, so they are easy to reason about and reuse in tests)
# ----------------------------------------------------------------------------------------------------------


def _one_line(text: str, limit: int = 80) -> str:
    """First ``limit`` characters on one line, so they can sit inside a markdown bullet."""
    return " ".join(text[:limit].split())


def summary_from_texts(texts: list[str]) -> str:
    """Deterministic markdown summary of the given per-message texts, with facts a test can recompute."""
    transcript = "\n\n".join(texts).replace(SUMMARY_MARKER, "").strip()
    total_chars = sum(len(t) for t in texts)
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:12]
    last = texts[-1].replace(SUMMARY_MARKER, "").strip() if texts else ""
    carried = _previous_goal(transcript)
    body = {
        SUMMARY_HEADINGS[0]: carried or f'- Transcript starts: "{_one_line(transcript)}"',
        SUMMARY_HEADINGS[1]: "- None recorded by the stand-in.",
        SUMMARY_HEADINGS[2]: "- None recorded by the stand-in.",
        SUMMARY_HEADINGS[3]: _recall_handles(transcript),
        SUMMARY_HEADINGS[4]: "- None recorded by the stand-in.",
        SUMMARY_HEADINGS[
            5
        ]: f"- Summarized {len(texts)} messages, {total_chars} characters (sha256 {digest}).",
        SUMMARY_HEADINGS[6]: f'- Continue from the last message: "{_one_line(last)}"',
    }
    return "\n\n".join(f"{heading}\n{text}" for heading, text in body.items()) + "\n"


PREVIOUS_GOAL = re.compile(
    re.escape(SUMMARY_HEADINGS[0]) + r"\n(.*?)\n\n" + re.escape(SUMMARY_HEADINGS[1]), re.DOTALL
)


def _previous_goal(transcript: str) -> str:
    """The goal section of the previous summary (or the summary so far) the transcript holds, carried
    word for word as the prompt asks, in place of a new one ("" when there is none): a merged summary
    as long as a first one."""
    found = PREVIOUS_GOAL.search(transcript)
    return found.group(1).strip() if found is not None else ""


KEPT_IDS = re.compile(r"at most (\d+) of them")
FACT = re.compile(r"\b[A-Z][A-Z0-9]+-\w+: \S|error|Error|FAILED|Traceback")
"""What the stand-in takes for an output worth reading back word for word: an identifier's value
(``NEEDLE-3f2a1b: …``) or a failure."""


def _recall_handles(transcript: str) -> str:
    """What the summary keeps of the tool outputs: their handles, as the summary prompt asks when the
    transcript names them (``recall``), never their contents — at most the number it asks for, the
    handles of outputs holding a fact or failure first (as a model keeps the facts it is told to),
    then the newest."""
    spans = list(recaller.MENTIONED.finditer(transcript))
    if not spans:
        return NONE_RECORDED
    cap = KEPT_IDS.search(transcript)
    ends = [m.start() for m in spans[1:]] + [len(transcript)]
    facts = [m.group(1) for m, end in zip(spans, ends, strict=True) if FACT.search(transcript, m.end(), end)]
    newest = [m.group(1) for m in reversed(spans)]
    handles = list(dict.fromkeys(facts + newest))[: int(cap.group(1)) if cap else None]
    return f"- Tool outputs to read back: {', '.join(f'recall {h}' for h in handles)}."


NONE_RECORDED = "- None recorded by the stand-in."


def reply_for(model: str, texts: list[str], count: int) -> str:
    """The reply text of a successful request: ``""``, a summary, or ``stand-in reply to {count} messages``.

    ``texts`` is every text the request carries, one entry per message (system prompt included), which is
    where ``SUMMARY_MARKER`` is looked for and what a summary summarizes.
    """
    if "empty" in model:
        return ""
    if any(SUMMARY_MARKER in t for t in texts):
        return summary_from_texts(texts)
    if any(TAGGED_SUMMARY_REQUEST in t for t in texts):  # LiteLLM's compact_20260112 polyfill asking
        return f"<summary>\n{summary_from_texts(texts)}</summary>"
    return f"stand-in reply to {count} messages"


def _split(text: str, pieces: int) -> list[str]:
    """Split ``text`` into up to ``pieces`` non-empty chunks (none for an empty string)."""
    if not text:
        return []
    size = -(-len(text) // pieces)
    return [text[i : i + size] for i in range(0, len(text), size)]


def json_bytes(payload: Any) -> bytes:
    """UTF-8 JSON; falls back to ASCII escapes when a string holds a lone surrogate (legal in JSON input)."""
    try:
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload).encode("ascii")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object with a string ``model`` (if any), or ``BadRequest``."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if not isinstance(body.get("model", ""), str):
        raise BadRequest("'model' must be a string", param="model")
    return body


def error_body(message: str, err_type: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    """OpenAI-style error JSON, which litellm maps to its own exception types."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


THROTTLE_MARKER = "THROTTLE-THIS-TENANT"
THROTTLE_WORDS = "Too many tokens, please wait before trying again."
"""Bedrock's throttle, which reads like a "too long" and is not one."""


def throttled(surface: str) -> dict[str, Any]:
    """A rate limit's 429 body on ``surface``, in Bedrock's words."""
    if surface == "messages":
        return {"type": "error", "error": {"type": "rate_limit_error", "message": THROTTLE_WORDS}}
    if surface == "google":
        return {"error": {"code": 429, "message": THROTTLE_WORDS, "status": "RESOURCE_EXHAUSTED"}}
    return error_body(THROTTLE_WORDS, "rate_limit_error", "rate_limit_exceeded")


class FlakyLuck:
    """The ``flaky`` mode's fate for each request: ``fail``, ``slow`` or ``ok``, by its count.

    Counted, not drawn: a soak of a given size meets its failures on every run (a hash of the body
    left a test to chance: thirty sessions can share the bodies a summarizer reads).
    """

    FAIL_AT = 3
    SLOW_AT = 6

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen = 0

    def next(self) -> str:
        with self._lock:
            n, self._seen = self._seen % 10, self._seen + 1
        return "fail" if n == self.FAIL_AT else "slow" if n == self.SLOW_AT else "ok"


def is_strict(model: str) -> bool:
    return "strict" in model


# ----------------------------------------------------------------------------------------------------------
# OpenAI chat completions
# ----------------------------------------------------------------------------------------------------------


def message_texts(messages: list[Any]) -> list[str]:
    """Text of each message; tool-call arguments count too, as they are part of what the model reads."""
    return [chat_message_text(m) for m in messages]


chat_texts = message_texts


def summary_reply(messages: list[Any]) -> str:
    """Deterministic markdown summary of chat ``messages`` (see ``summary_from_texts``)."""
    return summary_from_texts(message_texts(messages))


def reply_text(model: str, messages: list[Any]) -> str:
    """The assistant text for a successful chat request."""
    return reply_for(model, message_texts(messages), len(messages))


def usage_for(messages: list[Any], reply: str) -> dict[str, int]:
    """Usage block: token counts derived from character counts so tests can predict them."""
    prompt = approx_tokens(sum(len(t) for t in message_texts(messages)))
    completion = approx_tokens(len(reply))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_body(model: str, messages: list[Any], reply: str) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object."""
    return {
        "id": f"chatcmpl-standin-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": usage_for(messages, reply),
    }


def stream_chunks(
    model: str, messages: list[Any], reply: str, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """``chat.completion.chunk`` objects in the order OpenAI sends them."""
    base = {
        "id": f"chatcmpl-standin-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield chunk({"role": "assistant", "content": ""}, None)
    for piece in _split(reply, STREAM_PIECES):
        yield chunk({"content": piece}, None)
    yield chunk({}, "stop")
    if include_usage:
        yield {**base, "choices": [], "usage": usage_for(messages, reply)}


def parse_chat_request(raw: bytes) -> dict[str, Any]:
    """Validate just enough of a chat request to answer it; anything else is the client's problem (400)."""
    body = parse_json_object(raw)
    if not isinstance(body.get("messages"), list):
        raise BadRequest("'messages' must be a list", param="messages")
    return body


def check_chat_messages(messages: list[Any]) -> None:
    """Strict mode: OpenAI's tool-call pairing rules, raising ``BadRequest`` with OpenAI's wording.

    Every assistant message with ``tool_calls`` must be followed directly by ``tool`` messages answering each
    of its ids, and every ``tool`` message must answer a call of the assistant message that precedes its run
    of tool messages.
    """
    pending: list[str] = []  # ids of the last assistant tool_calls not answered yet
    owner = -1  # index of that assistant message
    open_ids: set[str] = set()  # ids a tool message at this point may answer
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in open_ids:
                raise BadRequest(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            pending = [p for p in pending if p != call_id]
            continue
        if pending:
            break
        calls = (m.get("tool_calls") if role == "assistant" else None) or []
        ids = [str(c.get("id")) for c in calls if isinstance(c, dict)]
        pending, owner, open_ids = list(ids), i, set(ids)
    if pending:
        raise BadRequest(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            "'tool_call_id'. The following tool_call_ids did not have response messages: "
            + ", ".join(pending),
            param=f"messages.[{owner}].role",
        )


# ----------------------------------------------------------------------------------------------------------
# Anthropic Messages
# ----------------------------------------------------------------------------------------------------------


def anthropic_texts(body: dict[str, Any]) -> list[str]:
    """The ``system`` text (when there is a ``system``) followed by the text of each message."""
    texts = [anthropic_content_text(body["system"])] if body.get("system") else []
    for m in body.get("messages") or []:
        texts.append(anthropic_content_text(m.get("content")) if isinstance(m, dict) else "")
    return texts


def anthropic_reply_text(model: str, body: dict[str, Any]) -> str:
    return reply_for(model, anthropic_texts(body), len(body.get("messages") or []))


def anthropic_usage(body: dict[str, Any], reply: str) -> dict[str, int]:
    return {
        "input_tokens": approx_tokens(sum(len(t) for t in anthropic_texts(body))),
        "output_tokens": approx_tokens(len(reply)),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def anthropic_error_body(message: str, err_type: str = "invalid_request_error") -> dict[str, Any]:
    """Anthropic-style error JSON (``api_error`` for 500, ``invalid_request_error`` for 400)."""
    return {"type": "error", "error": {"type": err_type, "message": message}}


def anthropic_message_body(
    model: str, body: dict[str, Any], reply: str, message_id: str | None = None
) -> dict[str, Any]:
    """A non-streaming Messages API ``message``."""
    return {
        "id": message_id or _new_id("msg_standin_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": reply}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": anthropic_usage(body, reply),
    }


def anthropic_stream_events(model: str, body: dict[str, Any], reply: str) -> Iterator[SSEEvent]:
    """The Messages API SSE events, in the order Anthropic sends them, for a one-text-block reply."""
    usage = anthropic_usage(body, reply)
    start = {**anthropic_message_body(model, body, reply), "content": [], "stop_reason": None}
    start["usage"] = {**usage, "output_tokens": 0}
    yield "message_start", {"type": "message_start", "message": start}
    block = {"type": "text", "text": ""}
    yield "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
    yield "ping", {"type": "ping"}
    for piece in _split(reply, STREAM_PIECES):
        delta = {"type": "text_delta", "text": piece}
        yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def parse_messages_request(raw: bytes) -> dict[str, Any]:
    """Validate just enough of a Messages request to answer it (400 otherwise)."""
    body = parse_json_object(raw)
    if not isinstance(body.get("messages"), list):
        raise BadRequest("messages: Field required (a list)")
    return body


def _blocks(content: Any) -> list[Any]:
    """A message ``content`` as a block list (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def check_anthropic_messages(body: dict[str, Any]) -> None:
    """Strict mode: the Messages API's structural rules, raising ``BadRequest`` with Anthropic's wording.

    ``max_tokens`` is required; roles are ``user``/``assistant`` (and ``system``, placed as
    ``check_system_placement`` says; it takes no part in the turns); consecutive same-role messages are merged
    into one turn (as the API does), after which the first turn must be ``user``; every message but a final
    assistant one has non-empty content; each ``tool_use`` id of an assistant turn has a ``tool_result`` in
    the very next (user) turn — but for a request that asks for nothing (``max_tokens: 0``: Claude Code's
    review of the call its last assistant turn makes, ``subagent-review-2026-11-17``); each ``tool_result``
    answers a ``tool_use`` of the turn just before; and in a user turn ``tool_result`` blocks come before
    any other block. ``messages.N`` is the index of the message (before merging) holding the offending block.
    """
    messages = body.get("messages") or []
    if "max_tokens" not in body:
        raise BadRequest("max_tokens: Field required")
    turns: list[tuple[str, list[tuple[int, Any]]]] = []  # (role, [(message index, block)])
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRequest(f"messages.{i}: Input should be a valid dictionary")
        role = m.get("role")
        if role == "system":
            check_system_placement(messages, i)
            continue
        if role not in ("user", "assistant"):
            raise BadRequest(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
        content = m.get("content")
        if not isinstance(content, str | list):
            raise BadRequest(f"messages.{i}.content: Input should be a valid string or list")
        if not content and not (role == "assistant" and i == len(messages) - 1):
            raise BadRequest(
                f"messages.{i}: all messages must have non-empty content except for the optional final "
                "assistant message"
            )
        blocks = [(i, b) for b in _blocks(content)]
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    if turns and turns[0][0] != "user":
        raise BadRequest('messages: first message must use the "user" role')
    for t, (role, blocks) in enumerate(turns):
        if role == "assistant":
            uses = [
                (i, b.get("id")) for i, b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
            ]
            following = turns[t + 1][1] if t + 1 < len(turns) else []
            answered = {b.get("tool_use_id") for _, b in following if _is_tool_result(b)}
            missing = [(i, str(u)) for i, u in uses if u not in answered]
            if t == len(turns) - 1 and body.get("max_tokens") == 0:
                missing = []  # the call under review
            if missing:
                ids = ", ".join(u for _, u in missing)
                raise BadRequest(
                    f"messages.{missing[0][0]}: tool_use ids were found without tool_result blocks "
                    f"immediately after: {ids}. Each tool_use block must have a corresponding tool_result "
                    "block in the next message."
                )
            continue
        previous = turns[t - 1][1] if t > 0 else []
        offered = {b.get("id") for _, b in previous if isinstance(b, dict) and b.get("type") == "tool_use"}
        seen_other = False
        for i, b in blocks:
            if not _is_tool_result(b):
                seen_other = True
                continue
            if seen_other:
                raise BadRequest(
                    f"messages.{i}: tool_result blocks must come first in a user message, before any other "
                    "content block."
                )
            if b.get("tool_use_id") not in offered:
                raise BadRequest(
                    f"messages.{i}: unexpected tool_use_id found in tool_result blocks: "
                    f"{b.get('tool_use_id')}. Each tool_result block must have a corresponding tool_use "
                    "block in the previous message."
                )


def check_system_placement(messages: list[Any], i: int) -> None:
    """A mid-conversation ``system`` message (Claude Opus 4.8 and later): a run of them follows a user
    message and is the end of the conversation or followed by an assistant message; its content is text
    and the ``tool_addition`` / ``tool_removal`` blocks of mid-conversation tool changes."""
    start, end = i, i
    while start > 0 and isinstance(messages[start - 1], dict) and messages[start - 1].get("role") == "system":
        start -= 1
    while (
        end + 1 < len(messages)
        and isinstance(messages[end + 1], dict)
        and messages[end + 1].get("role") == "system"
    ):
        end += 1
    before = messages[start - 1] if start > 0 else None
    after = messages[end + 1] if end + 1 < len(messages) else None
    if not isinstance(before, dict) or before.get("role") != "user":
        raise BadRequest(f"messages.{i}: a system message must follow a user message")
    if after is not None and (not isinstance(after, dict) or after.get("role") != "assistant"):
        raise BadRequest(
            f"messages.{i}: a system message must be the last message or be followed by an assistant message"
        )
    content = messages[i].get("content")
    allowed = ("text", "tool_addition", "tool_removal")
    if not content or not all(isinstance(b, dict) and b.get("type") in allowed for b in _blocks(content)):
        raise BadRequest(
            f"messages.{i}.content: a system message holds text, tool_addition or tool_removal blocks"
        )


def _is_tool_result(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


# ----------------------------------------------------------------------------------------------------------
# OpenAI Responses
# ----------------------------------------------------------------------------------------------------------


def responses_items(body: dict[str, Any]) -> list[Any]:
    """The ``input`` as a list of items (a string ``input`` is one user message)."""
    value = body.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def responses_texts(body: dict[str, Any]) -> list[str]:
    """The ``instructions`` (when given) followed by the text of each input item."""
    instructions = body.get("instructions")
    texts = (
        [prompt_cache.parts_text(instructions) if isinstance(instructions, list) else str(instructions)]
        if instructions
        else []
    )
    return texts + [responses_item_text(item) for item in responses_items(body)]


def responses_reply_text(model: str, body: dict[str, Any]) -> str:
    return reply_for(model, responses_texts(body), len(responses_items(body)))


def responses_usage(body: dict[str, Any], reply: str) -> dict[str, Any]:
    n = approx_tokens(sum(len(t) for t in responses_texts(body)))
    m = approx_tokens(len(reply))
    return {
        "input_tokens": n,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": m,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": n + m,
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _output_message(message_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "id": message_id, "status": status, "role": "assistant", "content": content}


def response_object(
    model: str,
    body: dict[str, Any],
    reply: str | None,
    *,
    response_id: str | None = None,
    message_id: str | None = None,
) -> dict[str, Any]:
    """A Responses API ``response``: completed with one output message, or in progress when ``reply`` is None.

    Request settings are echoed back like OpenAI does (``instructions``, ``tools``, ``metadata``,
    ``previous_response_id``, ``max_output_tokens``, ...), with OpenAI's defaults when absent.
    """
    output, usage = [], None
    if reply is not None:
        output = [_output_message(message_id or _new_id("msg_"), "completed", [_output_text(reply)])]
        usage = responses_usage(body, reply)
    return {
        "id": response_id or _new_id("resp_standin_"),
        "object": "response",
        "created_at": CREATED,
        "status": "in_progress" if reply is None else "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def responses_stream_events(model: str, body: dict[str, Any], reply: str) -> Iterator[SSEEvent]:
    """The Responses API SSE events, in the order OpenAI sends them, for a one-message text reply."""
    response_id, message_id = _new_id("resp_standin_"), _new_id("msg_")
    sequence = iter(range(1_000_000))
    at = {"item_id": message_id, "output_index": 0, "content_index": 0}

    def event(kind: str, **fields: Any) -> SSEEvent:
        return kind, {"type": kind, "sequence_number": next(sequence), **fields}

    pending = response_object(model, body, None, response_id=response_id)
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    yield event(
        "response.output_item.added", output_index=0, item=_output_message(message_id, "in_progress", [])
    )
    yield event("response.content_part.added", **at, part=_output_text(""))
    for piece in _split(reply, STREAM_PIECES):
        yield event("response.output_text.delta", **at, delta=piece, logprobs=[])
    yield event("response.output_text.done", **at, text=reply, logprobs=[])
    yield event("response.content_part.done", **at, part=_output_text(reply))
    item = _output_message(message_id, "completed", [_output_text(reply)])
    yield event("response.output_item.done", output_index=0, item=item)
    done = response_object(model, body, reply, response_id=response_id, message_id=message_id)
    yield event("response.completed", response=done)


def parse_responses_request(raw: bytes) -> dict[str, Any]:
    """Validate just enough of a Responses request to answer it (400 otherwise)."""
    body = parse_json_object(raw)
    if not isinstance(body.get("input"), str | list):
        raise BadRequest("'input' must be a string or a list of items", param="input")
    return body


def check_responses_input(body: dict[str, Any]) -> None:
    """Strict mode: the Responses API's input pairing rules, raising ``BadRequest`` with OpenAI's wording.

    Each ``function_call`` needs a ``function_call_output`` with its ``call_id`` later in the input; each
    ``function_call_output`` needs an earlier ``function_call`` with its ``call_id`` (not checked when
    ``previous_response_id`` is set: the call may be in the stored conversation, which the stand-in does not
    keep); a ``reasoning`` item cannot be the last item.
    """
    items = [i for i in responses_items(body) if isinstance(i, dict)]
    calls: set[Any] = set()
    for pos, item in enumerate(items):
        kind = item.get("type")
        call_id = item.get("call_id")
        if kind == "function_call_output" and call_id not in calls and not body.get("previous_response_id"):
            raise BadRequest(f"No tool call found for function call output with call_id {call_id}.", "input")
        if kind == "function_call":
            calls.add(call_id)
            later = items[pos + 1 :]
            if not any(
                i.get("type") == "function_call_output" and i.get("call_id") == call_id for i in later
            ):
                raise BadRequest(f"No tool output found for function call {call_id}.", "input")
    if items and items[-1].get("type") == "reasoning":
        raise BadRequest(
            f"Item '{items[-1].get('id')}' of type 'reasoning' was provided without its required following "
            "item.",
            "input",
        )


# ----------------------------------------------------------------------------------------------------------
# The three surfaces, described once for the handler
# ----------------------------------------------------------------------------------------------------------


def window_limit(model: str) -> int | None:
    """``limit<N>`` in the model name: requests over N tokens (the stand-in's estimate) get a 400."""
    match = re.search(r"limit(\d+)", model)
    return int(match.group(1)) if match else None


def chat_too_long(tokens: int, limit: int) -> dict[str, Any]:
    """OpenAI chat's context-length error: it names the limit and the request's size."""
    message = (
        f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
        f"{tokens} tokens. Please reduce the length of the messages."
    )
    return error_body(message, "invalid_request_error", "context_length_exceeded", "messages")


def anthropic_too_long(tokens: int, limit: int) -> dict[str, Any]:
    """Anthropic's: ``prompt is too long: M tokens > N maximum``."""
    return anthropic_error_body(f"prompt is too long: {tokens} tokens > {limit} maximum")


def responses_too_long(tokens: int, limit: int) -> dict[str, Any]:
    """The Responses API's: it names neither the limit nor the size."""
    message = "Your input exceeds the context window of this model. Please adjust your input and try again."
    return error_body(message, "invalid_request_error", "context_length_exceeded", "input")


@dataclass(frozen=True)
class Surface:
    """How one wire format is parsed, checked, measured, refused and answered."""

    parse: Callable[[bytes], dict[str, Any]]
    check: Callable[[dict[str, Any]], None]
    texts: Callable[[dict[str, Any]], list[str]]
    count: Callable[[dict[str, Any]], int]
    bad_request: Callable[[str, str | None], dict[str, Any]]
    too_long: Callable[[int, int], dict[str, Any]]
    failure: dict[str, Any]
    body: Callable[[str, dict[str, Any], str], dict[str, Any]]
    stream: Callable[[str, dict[str, Any], str], Iterable[SSEEvent]]
    name: str
    cached: Callable[[prompt_cache.PromptCache, dict[str, Any]], Any]
    """The request looked up and written in the prompt cache: its cached counts."""
    agent: Callable[[agent_script.Plan, dict[str, Any], int], dict[str, Any]]
    """The scripted agent's whole answer to a turn (``plan``, the request, its input tokens)."""
    agent_stream: Callable[[dict[str, Any], dict[str, Any]], Iterable[SSEEvent]]
    """The events of that answer streamed (the whole answer, the request)."""
    output_tokens: Callable[[dict[str, Any]], int]
    """The output tokens an answer reports."""
    session: Callable[[dict[str, Any], dict[str, str]], str]
    """Which scripted session a request belongs to (its turns are counted per session)."""
    done_marker: bool = False
    refusal: Callable[[dict[str, Any]], str | None] = lambda req: None
    """What the model's own rules refuse beyond structure (thinking, thought signatures), checked always."""


def _openai_bad_request(message: str, param: str | None) -> dict[str, Any]:
    return error_body(message, "invalid_request_error", None, param)


def _anthropic_cached(cache: prompt_cache.PromptCache, req: dict[str, Any]) -> Any:
    model = str(req.get("model", ""))
    segments = prompt_cache.anthropic_segments(req)
    return cache.anthropic(model, segments, min_tokens=prompt_cache.anthropic_min_cacheable_tokens(model))


def _openai_cached(segments: Callable[[dict[str, Any]], list[prompt_cache.Segment]]) -> Any:
    def cached(cache: prompt_cache.PromptCache, req: dict[str, Any]) -> Any:
        key = req.get("prompt_cache_key")
        return cache.openai(
            str(req.get("model", "")), segments(req), routing_key=key if isinstance(key, str) else None
        )

    return cached


def _chat_stream(model: str, req: dict[str, Any], reply: str) -> Iterable[SSEEvent]:
    include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
    return ((None, chunk) for chunk in stream_chunks(model, req["messages"], reply, include_usage))


def _anthropic_agent(plan: agent_script.Plan, req: dict[str, Any], tokens: int) -> dict[str, Any]:
    return agent_script.anthropic_message(
        req.get("model", ""), agent_script.anthropic_blocks(plan, req), tokens
    )


def _responses_agent(plan: agent_script.Plan, req: dict[str, Any], tokens: int) -> dict[str, Any]:
    output = agent_script.responses_output(plan, req)
    return {
        **response_object(req.get("model", ""), req, ""),
        "output": output,
        "usage": agent_script.responses_usage(tokens, output),
    }


def _recaller_responses(req: dict[str, Any], tokens: int) -> dict[str, Any] | None:
    output = recaller.responses_output(req)
    if output is None:
        return None
    return {
        **response_object(req.get("model", ""), req, ""),
        "output": output,
        "usage": agent_script.responses_usage(tokens, output),
    }


def _recaller_google(req: dict[str, Any], tokens: int) -> dict[str, Any] | None:
    parts = recaller.google_parts(req)
    if parts is None:
        return None
    whole = standin_google.response(req.get("model", ""), req, parts)
    whole["usageMetadata"]["promptTokenCount"] = tokens
    whole["usageMetadata"]["totalTokenCount"] = tokens + whole["usageMetadata"]["candidatesTokenCount"]
    return whole


def _chat_agent(plan: agent_script.Plan, req: dict[str, Any], tokens: int) -> dict[str, Any]:
    return agent_script.chat_completion(req.get("model", ""), agent_script.chat_message(plan, req), tokens)


def _chat_agent_stream(completion: dict[str, Any], req: dict[str, Any]) -> Iterable[SSEEvent]:
    include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
    return agent_script.chat_chunks(completion, include_usage)


def _google_agent(plan: agent_script.Plan, req: dict[str, Any], tokens: int) -> dict[str, Any]:
    whole = standin_google.response(req.get("model", ""), req, agent_script.google_parts(plan, req))
    whole["usageMetadata"]["promptTokenCount"] = tokens
    return whole


def _google_check(req: dict[str, Any]) -> None:
    try:
        standin_google.check_google_contents(req)
    except standin_google.GoogleBadRequest as exc:
        raise BadRequest(str(exc)) from exc


def _google_output_tokens(payload: dict[str, Any]) -> int:
    return int(payload.get("usageMetadata", {}).get("candidatesTokenCount", 0))


CHAT = Surface(
    parse=parse_chat_request,
    check=lambda req: check_chat_messages(req["messages"]),
    texts=lambda req: message_texts(req["messages"]),
    count=lambda req: len(req["messages"]),
    bad_request=_openai_bad_request,
    too_long=chat_too_long,
    failure=error_body(FAIL_MESSAGE, "server_error", "standin_fail"),
    body=lambda model, req, reply: completion_body(model, req["messages"], reply),
    stream=_chat_stream,
    name="chat",
    cached=_openai_cached(prompt_cache.chat_segments),
    agent=_chat_agent,
    agent_stream=_chat_agent_stream,
    output_tokens=lambda answer: int(answer["usage"]["completion_tokens"]),
    session=agent_script.chat_session,
    done_marker=True,
)
MESSAGES = Surface(
    parse=parse_messages_request,
    check=check_anthropic_messages,
    texts=anthropic_texts,
    count=lambda req: len(req.get("messages") or []),
    bad_request=lambda message, _param: anthropic_error_body(message),
    too_long=anthropic_too_long,
    failure=anthropic_error_body(FAIL_MESSAGE, "api_error"),
    body=anthropic_message_body,
    stream=anthropic_stream_events,
    name="messages",
    cached=_anthropic_cached,
    agent=_anthropic_agent,
    agent_stream=lambda message, req: agent_script.anthropic_events(message),
    output_tokens=lambda answer: int(answer["usage"]["output_tokens"]),
    session=agent_script.anthropic_session,
    refusal=agent_script.thinking_problem,
)
RESPONSES = Surface(
    parse=parse_responses_request,
    check=check_responses_input,
    texts=responses_texts,
    count=lambda req: len(responses_items(req)),
    bad_request=_openai_bad_request,
    too_long=responses_too_long,
    failure=error_body(FAIL_MESSAGE, "server_error", "standin_fail"),
    body=response_object,
    stream=responses_stream_events,
    name="responses",
    cached=_openai_cached(prompt_cache.responses_segments),
    agent=_responses_agent,
    agent_stream=lambda response, req: agent_script.responses_events(response),
    output_tokens=lambda answer: int(answer["usage"]["output_tokens"]),
    session=agent_script.responses_session,
)
GOOGLE = Surface(
    parse=lambda raw: standin_google.parse_google_request(raw, ""),
    check=_google_check,
    texts=standin_google.google_texts,
    count=lambda req: len(standin_google.contents_of(req)),
    bad_request=lambda message, _param: standin_google.error(400, message),
    too_long=standin_google.too_long,
    failure=standin_google.error(500, FAIL_MESSAGE),
    body=standin_google.text_response,
    stream=lambda model, req, reply: standin_google.stream_events(
        standin_google.text_response(model, req, reply)
    ),
    name="google",
    cached=lambda cache, req: None,
    agent=_google_agent,
    agent_stream=lambda whole, req: standin_google.stream_events(whole),
    output_tokens=_google_output_tokens,
    session=agent_script.google_session,
    refusal=agent_script.google_signature_problem,
)


# ----------------------------------------------------------------------------------------------------------
# HTTP plumbing
# ----------------------------------------------------------------------------------------------------------


class _Recorder:
    """Thread-safe request log shared by all handler threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[dict[str, Any]] = []

    def add(self, item: dict[str, Any]) -> None:
        with self._lock:
            self._items.append(item)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class SimClock:
    """Monotonic time plus what ``advance`` added: the prompt cache's clock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = 0.0

    def __call__(self) -> float:
        with self._lock:
            return time.monotonic() + self._offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._offset += max(0.0, seconds)


def cached_usage(surface_name: str, usage: dict[str, Any], result: Any) -> dict[str, Any]:
    """``usage`` with the prompt cache's input counts (its output counts kept; as it is without them)."""
    if result is None:
        return usage
    if surface_name == "messages" and "input_tokens" in usage:
        return {**usage, **prompt_cache.anthropic_usage(result, usage.get("output_tokens", 0))}
    if surface_name == "chat" and "prompt_tokens" in usage:
        return {**usage, **prompt_cache.chat_usage(result, usage.get("completion_tokens", 0))}
    if surface_name == "responses" and "input_tokens" in usage:
        return {**usage, **prompt_cache.responses_usage(result, usage.get("output_tokens", 0))}
    return usage


def billed_input(surface: Surface, req: dict[str, Any]) -> int:
    """The input tokens the stand-in bills a request: a quarter of the characters of its texts and
    tool definitions, or as the model's name asks (``billing``: 1.25× o200k, as Claude counts, …)."""
    texts = surface.texts(req)
    tools = None if surface.name == GOOGLE.name else req.get("tools")  # Google's texts hold its tools
    bill = billing.billing_for(str(req.get("model", "")))
    if bill is None:
        described = json.dumps(tools, sort_keys=True) if tools else ""
        return approx_tokens(sum(len(t) for t in texts) + len(described))
    return bill(surface.name, req, texts, tools)


def cached_total(cached: Any) -> int:
    """The input a prompt cache's result counts (what the usage then reports)."""
    if isinstance(cached, prompt_cache.AnthropicCacheResult):
        return int(cached.total_input_tokens)
    return int(cached.prompt_tokens)


def with_cached_usage(payload: Any, surface_name: str, result: Any) -> Any:
    """``payload`` with each ``usage`` object in it counted by the prompt cache (responses, events)."""
    if isinstance(payload, dict):
        return {
            key: cached_usage(surface_name, value, result)
            if key == "usage" and isinstance(value, dict)
            else with_cached_usage(value, surface_name, result)
            for key, value in payload.items()
        }
    if isinstance(payload, list):
        return [with_cached_usage(value, surface_name, result) for value in payload]
    return payload


class _Server(ThreadingHTTPServer):
    """HTTP server carrying the stand-in's shared state for its handlers."""

    daemon_threads = True  # a hung client must never block stop()
    allow_reuse_address = True
    request_queue_size = 256  # socketserver's 5 refuses connections under load (bench/bench_load.py)

    def __init__(
        self,
        addr: tuple[str, int],
        recorder: _Recorder,
        sessions: agent_script.Sessions,
        slow_seconds: float,
        verbose: bool,
        cache: prompt_cache.PromptCache,
    ) -> None:
        super().__init__(addr, _Handler)
        self.recorder = recorder
        self.sessions = sessions
        self.cache = cache
        self.slow_seconds = slow_seconds
        self.verbose = verbose
        self.flaky = FlakyLuck()


class _Handler(BaseHTTPRequestHandler):
    """One request. HTTP/1.0 (the default) closes each connection, which ends SSE streams without chunking."""

    server: _Server
    server_version = "StandinUpstream/1.0"
    _recorded: dict[str, Any]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature fixed by the base class
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _guarded(self, handler: Callable[[], None]) -> None:
        """Never let an exception escape into the server thread; the client gets a 500 if still there."""
        try:
            handler()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # pragma: no cover - defensive
            self.log_error("stand-in handler error: %r", exc)
            try:
                self._send_json(
                    500, error_body(f"stand-in internal error: {exc!r}", "server_error", "standin_bug")
                )
            except Exception:
                self.close_connection = True

    # -- routing -------------------------------------------------------------------------------------------

    def _route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def _get(self) -> None:
        path = self._route()
        if path == "/_recorded":
            self._send_json(200, self.server.recorder.snapshot())
        elif path == "/health":  # readiness probe for `make run`; unrecorded so polling leaves no trace
            self._send_json(200, {"status": "ok"})
        elif path in MODELS_PATHS:
            self._record(b"")
            data = [
                {"id": m, "object": "model", "created": CREATED, "owned_by": "standin"}
                for m in ADVERTISED_MODELS
            ]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._record(b"")
            self._not_found(path)

    def _post(self) -> None:
        path = self._route()
        raw = self._read_body()
        if path == "/_reset":
            self.server.recorder.clear()
            self.server.sessions.clear()
            self.server.cache.clear()
            billing.SERVER_PREFIX.clear()
            self._send_json(200, {"ok": True})
            return
        if path == "/_clock":
            clock = self.server.cache.clock
            seconds = parse_json_object(raw).get("advance", 0)
            if isinstance(clock, SimClock) and isinstance(seconds, (int, float)):
                clock.advance(float(seconds))
            self._send_json(200, {"ok": True})
            return
        self._record(raw)
        google = standin_google.route(path)
        if google is not None:
            self._google(raw, *google)
        elif path in CHAT_PATHS:
            self._chat(raw)
        elif path in MESSAGES_PATHS:
            self._messages(raw)
        elif path in RESPONSES_PATHS:
            self._responses(raw)
        else:
            self._not_found(path)

    def _not_found(self, path: str) -> None:
        self._send_json(404, error_body(f"unknown path {path}", "invalid_request_error", "not_found"))

    def _delay_or_fail(self, model: str, fail_body: dict[str, Any]) -> bool:
        """Apply the ``slow``, ``fail`` and ``flaky`` modes; True when the answer was a failure."""
        luck = self.server.flaky.next() if "flaky" in model else None
        if "slow" in model or luck == "slow":
            time.sleep(self.server.slow_seconds)
        if "fail" in model or luck == "fail":
            self._send_json(500, fail_body)
            return True
        return False

    # -- surfaces ------------------------------------------------------------------------------------------

    def _chat(self, raw: bytes) -> None:
        self._answer(CHAT, raw)

    def _messages(self, raw: bytes) -> None:
        self._answer(MESSAGES, raw)

    def _responses(self, raw: bytes) -> None:
        self._answer(RESPONSES, raw)

    def _google(self, raw: bytes, model: str, streamed: bool) -> None:
        """The model is the path's; streaming is the method's (``alt=sse``: SSE, else a JSON array)."""
        self._recorded["model"] = model

        def parse(raw: bytes) -> dict[str, Any]:
            try:
                req = standin_google.parse_google_request(raw, model)
            except standin_google.GoogleBadRequest as exc:
                raise BadRequest(str(exc)) from exc
            req["stream"] = streamed
            return req

        self._answer(dataclasses.replace(GOOGLE, parse=parse), raw)

    def _answer(self, surface: Surface, raw: bytes) -> None:
        """Parse, validate (``strict``), enforce the window (``limit<N>``), fail or delay, then answer."""
        try:
            req = surface.parse(raw)
            if is_strict(req.get("model", "")):
                surface.check(req)
            refused = surface.refusal(req)
            if refused is not None:
                raise BadRequest(refused)
        except BadRequest as exc:
            self._send_json(400, surface.bad_request(str(exc), exc.param))
            return
        model = req.get("model", "")
        tokens = self._recorded["billed"] = billed_input(surface, req)
        limit = window_limit(model)
        if limit is not None and tokens > limit:
            self._send_json(400, surface.too_long(tokens, limit))
            return
        if "throttle" in model and any(THROTTLE_MARKER in text for text in surface.texts(req)):
            self._send_json(429, throttled(surface.name))
            return
        if self._delay_or_fail(model, surface.failure):
            return
        try:
            cached = surface.cached(self.server.cache, req)
        except prompt_cache.CacheControlError as exc:
            self._send_json(400, surface.bad_request(str(exc), None))
            return
        except Exception:  # a shape the cache cannot read (fuzzed junk): answered, not cached
            cached = None
        if cached is not None:
            if billing.billing_for(model) is None:  # ``quarter`` bills what its cache counts
                tokens = self._recorded["billed"] = cached_total(cached)
            else:
                cached = billing.scaled_cache(cached, tokens)
            self._recorded["cache"] = cached._asdict()
        if agent_script.is_agent(model):
            self._agent(surface, req, cached, tokens)
            return
        if recaller.is_recaller(model) and self._recalled(surface, req, cached, tokens):
            return
        reply = reply_for(model, surface.texts(req), surface.count(req))
        self._recorded["output_tokens"] = approx_tokens(len(reply))

        def billed(payload: Any) -> Any:
            counted = with_cached_usage(payload, surface.name, cached)
            return self._usage(counted, surface, req, tokens)

        if req.get("stream") is True:
            self._send_stream(
                surface, ((name, billed(payload)) for name, payload in surface.stream(model, req, reply))
            )
        else:
            self._send_json(200, billed(surface.body(model, req, reply)))

    def _agent(self, surface: Surface, req: dict[str, Any], cached: Any, tokens: int) -> None:
        """The scripted agent's turn (see ``agent_script``): tool calls, then a final answer."""
        model, headers = req.get("model", ""), {k.lower(): v for k, v in self.headers.items()}
        session = surface.session(req, headers)
        upcoming = self.server.sessions.snapshot().get(session, 0) + 1
        if (
            "recall2" in model
            and upcoming in recaller.MID_LOOP_TURNS
            and self._recalled(surface, req, cached, tokens)
        ):
            return  # the recall first; the script's turn comes with the answer (``recaller``)
        plan = agent_script.plan_turn(self.server.sessions, session, model)
        answer = with_cached_usage(surface.agent(plan, req, tokens), surface.name, cached)
        whole = self._usage(answer, surface, req, tokens)
        self._recorded["output_tokens"] = surface.output_tokens(whole)
        if req.get("stream") is True:
            self._send_stream(surface, surface.agent_stream(whole, req))
        else:
            self._send_json(200, whole)

    def _usage(self, payload: Any, surface: Surface, req: dict[str, Any], tokens: int) -> Any:
        """``payload``'s usage billed ``tokens``, or reported as the model's name asks (``billing.reported``:
        then recorded as ``"reported"``, once per request)."""
        if not billing.lies(str(req.get("model", "")), surface.texts(req)):
            return billing.billed_usage(payload, surface.name, tokens)
        if "reported" not in self._recorded:
            self._recorded["reported"] = billing.reported(surface.name, req, surface.texts(req), tokens)
        return billing.billed_usage(payload, surface.name, self._recorded["reported"], cached=False)

    def _recalled(self, surface: Surface, req: dict[str, Any], cached: Any, tokens: int) -> bool:
        """The ``recaller``'s answer (``recaller``), whole: True when it answered."""
        reply = {
            CHAT.name: recaller.chat_reply,
            MESSAGES.name: recaller.anthropic_reply,
            RESPONSES.name: _recaller_responses,
            GOOGLE.name: _recaller_google,
        }.get(surface.name)
        answer = reply(req, tokens) if reply is not None else None
        if answer is None:
            return False
        whole = self._usage(with_cached_usage(answer, surface.name, cached), surface, req, tokens)
        self._recorded["output_tokens"] = surface.output_tokens(whole)
        if req.get("stream") is True:
            self._send_stream(surface, surface.agent_stream(whole, req))
        else:
            self._send_json(200, whole)
        return True

    # -- I/O -----------------------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        """Read the body whether it is sized or chunked, since both are legal for clients to send."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._read_chunked()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        return self.rfile.read(length) if length > 0 else b""

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _record(self, raw: bytes) -> None:
        """Record the request before answering, so even a request that later fails is visible to tests;
        the prompt cache's counts are added to it (``"cache"``) once it is answered."""
        try:
            body: Any = json.loads(raw) if raw else None
        except (ValueError, UnicodeDecodeError):
            body = None
        self._recorded = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
            "raw": raw.decode("utf-8", "surrogateescape"),
        }
        self.server.recorder.add(self._recorded)

    def _send_json(self, status: int, payload: Any) -> None:
        data = json_bytes(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, surface: Surface, events: Iterable[SSEEvent]) -> None:
        """A streamed answer: SSE; Google's ends its events with CRLF as the Gemini API does, and a Google
        stream asked without ``alt=sse`` is one JSON array of the chunks."""
        if surface.name == GOOGLE.name and "alt=sse" not in self.path:
            self._send_json(200, [payload for _, payload in events])
        elif surface.name == GOOGLE.name:
            self._send_sse(events, end=b"\r\n\r\n")
        else:
            self._send_sse(events, done_marker=surface.done_marker)

    def _send_sse(self, events: Iterable[SSEEvent], done_marker: bool = False, end: bytes = b"\n\n") -> None:
        """Server-sent events: ``event:`` lines when the event has a name, ``data: [DONE]`` if asked."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for name, payload in events:
            prefix = f"event: {name}\n".encode() if name else b""
            self.wfile.write(prefix + b"data: " + json_bytes(payload) + end)
            self.wfile.flush()
        if done_marker:
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()


# ----------------------------------------------------------------------------------------------------------
# Public class
# ----------------------------------------------------------------------------------------------------------


class StandinUpstream:
    """A stand-in provider on a background thread; ``port=0`` picks a free port (read it from ``.url``)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        slow_seconds: float = 3.0,
        verbose: bool = False,
        cache_ttl: float = prompt_cache.DEFAULT_TTL_SECONDS,
    ) -> None:
        self.host = host
        self._requested_port = port
        self.slow_seconds = slow_seconds
        self.verbose = verbose
        self._recorder = _Recorder()
        self._sessions = agent_script.Sessions()
        self.clock = SimClock()
        self.cache = prompt_cache.PromptCache(clock=self.clock, ttl=cache_ttl)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> StandinUpstream:
        """Bind and serve in a daemon thread; returns self so ``up = StandinUpstream().start()`` works."""
        if self._server is not None:
            return self
        self._server = _Server(
            (self.host, self._requested_port),
            self._recorder,
            self._sessions,
            self.slow_seconds,
            self.verbose,
            self.cache,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # short poll: stop() returns quickly instead of after 0.5 s
            name="standin-upstream",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port; in-flight daemon handler threads are abandoned, not awaited."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def serve_forever(self) -> None:
        """Serve on the calling thread (script mode)."""
        self.start()
        assert self._thread is not None
        self._thread.join()

    def __enter__(self) -> StandinUpstream:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- inspection ----------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("StandinUpstream is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """OpenAI-style base URL, what goes into an ``openai/`` litellm deployment's ``api_base``."""
        return f"{self.root_url}/v1"

    @property
    def root_url(self) -> str:
        """``http://host:port``, what goes into an ``anthropic/`` deployment's ``api_base``."""
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A snapshot copy of the recorded requests (safe to iterate while the server keeps recording)."""
        return self._recorder.snapshot()

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Only the recorded chat-completion calls, the ones most tests care about."""
        return self._requests_to(CHAT_PATHS)

    @property
    def messages_requests(self) -> list[dict[str, Any]]:
        """Only the recorded Anthropic Messages calls."""
        return self._requests_to(MESSAGES_PATHS)

    @property
    def responses_requests(self) -> list[dict[str, Any]]:
        """Only the recorded OpenAI Responses calls."""
        return self._requests_to(RESPONSES_PATHS)

    @property
    def google_requests(self) -> list[dict[str, Any]]:
        """Only the recorded Google generateContent calls (each with the path's ``model``)."""
        return [r for r in self.requests if standin_google.route(r["path"].split("?", 1)[0]) is not None]

    def _requests_to(self, paths: frozenset[str]) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].split("?", 1)[0].rstrip("/") in paths]

    @property
    def agent_turns(self) -> dict[str, int]:
        """Turns the scripted agent answered, per session (see ``agent_script``)."""
        return self._sessions.snapshot()

    def reset(self) -> None:
        """Forget recorded requests, the agent's sessions and the prompt cache (between tests)."""
        self._recorder.clear()
        self._sessions.clear()
        self.cache.clear()

    def advance(self, seconds: float) -> None:
        """Move the prompt cache's clock: an agent's pause, without waiting it out."""
        self.clock.advance(seconds)


def main(argv: list[str] | None = None) -> int:
    """Script entry point: serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4001)
    parser.add_argument("--slow-seconds", type=float, default=3.0)
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.add_argument("--cache-ttl", type=float, default=prompt_cache.DEFAULT_TTL_SECONDS)
    args = parser.parse_args(argv)

    def _terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    upstream = StandinUpstream(
        args.host, args.port, slow_seconds=args.slow_seconds, verbose=args.verbose, cache_ttl=args.cache_ttl
    )
    upstream.start()
    print(f"stand-in upstream listening on {upstream.url}", flush=True)
    try:
        upstream.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        upstream.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A prompt-cache simulator that caches like the real providers do, for the stand-in provider.

Stdlib only (like ``standin_upstream.py``, so it runs from any interpreter), deterministic (an injectable
clock), thread-safe (one lock; the stand-in is a ``ThreadingHTTPServer``) and bounded in memory.

It works on a neutral representation of a request: an ordered list of ``Segment`` (each tool definition, each
system block, each message content block or message, each Responses item), each with a token count, a content
hash and whether it carries a cache breakpoint. ``anthropic_segments``, ``chat_segments`` and
``responses_segments`` build that list from a request body; ``PromptCache.anthropic`` and
``PromptCache.openai`` look it up and write it; ``anthropic_usage``, ``chat_usage`` and ``responses_usage``
turn the result into each surface's ``usage`` object. Wiring, for a stand-in handler::

    CACHE = PromptCache()
    minimum = anthropic_min_cacheable_tokens(model)
    result = CACHE.anthropic(model, anthropic_segments(body), min_tokens=minimum)
    usage = anthropic_usage(result, output_tokens)
    result = CACHE.openai(model, chat_segments(body), routing_key=body.get("prompt_cache_key"))
    usage = chat_usage(result, completion_tokens)        # or responses_usage(result, output_tokens)

``CacheControlError`` is a request the real Anthropic API refuses with a 400 (``str(error)`` is the message).

Rules implemented
=================

Anthropic, from "Prompt caching", https://platform.claude.com/docs/en/build-with-claude/prompt-caching
(clipped 2026-04-16; earlier https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching):

* The prefix is ``tools``, ``system``, ``messages`` in that order, "up to and including the block designated
  with ``cache_control``"; any change to a segment changes the hash of every prefix that contains it (so a
  change in tools invalidates everything, in system the system and messages caches, and so on).
* "Cache writes happen only at your breakpoint": each breakpoint writes one entry, the hash of the prefix
  ending at it, and nothing is written for earlier positions.
* "Cache reads look backward for entries that prior requests wrote": at each breakpoint, from the last one
  back, the prefix hash at the breakpoint and at up to 19 earlier positions ("The lookback window is 20
  blocks ... counting the breakpoint itself as the first"); then the window of the next earlier breakpoint.
  The longest prefix found is the hit. The documented 10/15/35-block example is a test.
* Up to 4 breakpoints ("A maximum of 4 blocks with cache_control may be provided. Found N." otherwise, the
  API's own message, as a ``CacheControlError``).
* "The minimum cacheable prompt length" (default 1024, per call ``min_tokens``;
  ``anthropic_min_cacheable_tokens`` has the documented per-model table): a breakpoint whose prefix is
  shorter writes nothing, silently, and a request that caches nothing reports 0 creation and 0 read.
* TTL: 5 minutes by default, "refreshed for no additional cost each time the cached content is used";
  ``"ttl": "1h"`` for one hour; longer TTLs must come before shorter ones (else ``CacheControlError``).
* Usage: ``cache_read_input_tokens`` = the tokens of the prefix read (position A),
  ``cache_creation_input_tokens`` = the tokens from there to the last breakpoint written (C - A),
  ``input_tokens`` = the tokens after it
  ("tokens after the last cache breakpoint"), so ``input + creation + read`` = the total input. With mixed
  TTLs the 1-hour part is B - A (B: the last 1-hour breakpoint after A), reported in
  ``usage.cache_creation.ephemeral_1h_input_tokens`` and the rest in ``ephemeral_5m_input_tokens``.
* Automatic caching: a top-level ``cache_control`` on the body puts a breakpoint on the last cacheable block,
  walking back over blocks that cannot take one (thinking, redacted thinking, empty text); a no-op when that
  block already has one with the same TTL; a 400 when it has a different TTL or when 4 explicit breakpoints
  already exist (``apply_automatic_breakpoint``).
* "What invalidates the cache": ``tool_choice``, ``thinking`` and the presence of images anywhere change the
  messages cache only (folded into the identity of the first message block).
* Caches are per deployment (the ``deployment`` string: "Caches are isolated between organizations").

OpenAI, from "Prompt caching", https://platform.openai.com/docs/guides/prompt-caching (now
https://developers.openai.com/api/docs/guides/prompt-caching) and the "Prompt Caching 201" cookbook:

* Automatic (no breakpoints; a ``cache_control`` is ignored) for "prompts that are 1024 tokens or longer";
  exact prefix matches only.
* "cache hits occurring in increments of 128 tokens ... 1024, 1152, 1280, 1408": ``cached_tokens`` is the
  matched prefix rounded down to a multiple of 128, or 0 under 1024 (the documented 2006 -> 1920 example is a
  test). ``usage.prompt_tokens_details.cached_tokens`` (chat), ``usage.input_tokens_details.cached_tokens``
  (Responses); no write surcharge, so there is no write count (Responses ``cache_write_tokens`` stays 0).
* "Cached prefixes generally remain active for 5 to 10 minutes of inactivity": a TTL (default 300 s)
  refreshed by every request that uses the prefix.
* ``prompt_cache_key`` "is combined with the prefix hash" to route the request: here the cache is partitioned
  by (deployment, ``routing_key``), one simulated machine each.

Simplifications (all deliberate)
================================

* Tokens are the stand-in's estimate, ``ceil(chars / 4)``, over the same texts the stand-in counts
  (``anthropic_texts``, ``chat_texts``, ``responses_texts``), computed per *prefix*: a segment's tokens are
  ``ceil(prefix chars incl. it / 4) - ceil(prefix chars before it / 4)``, so every prefix has the stand-in's
  count of its own text and, with no tools, the total equals the stand-in's ``input_tokens`` exactly. Tool
  definitions are counted too (their canonical JSON, as real providers bill and cache them), so a request with
  ``tools`` totals more than the stand-in's current estimate; ``count_tools=False`` keeps them at 0 tokens
  (identity only) for exact parity. Images and other non-text blocks count 0 tokens, as in the stand-in.
* OpenAI matching is at segment (tool, message, item) boundaries, not token by token: a prompt that diverges
  inside a message matches up to the start of that message. Tools are taken to come before the messages (or
  ``instructions`` and input). Request overflow to other machines (~15 requests a minute) is not simulated,
  nor the 1-hour off-peak retention, nor ``previous_response_id`` (the stored conversation is not in the
  body). GPT-5.6's explicit breakpoints and write fee are not simulated.
* Anthropic: a hit refreshes the entry read and the request's other live entries before it; an entry is
  written (or refreshed) at each breakpoint after the hit whose prefix reaches the minimum. The lookback
  counts segments, which for messages are content blocks (a string content is one text block). Web search,
  citations and speed toggles, thinking-block stripping and concurrent-request timing ("available after the
  first response begins") are not simulated: under the lock, each request is looked up and written at once.
* Google (``generateContent``): not simulated. ``google_content_text`` / ``google_part_text`` say what the
  stand-in counts of a Gemini request, but its answers report no ``cachedContentTokenCount`` (a Gemini
  deployment's cache reads are always 0, so the hook's economics see every Gemini request uncached).
* Memory: at most ``max_entries`` prefixes across all deployments; expired entries are dropped when met and
  the least recently used entry goes first when full.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any, Literal, NamedTuple

Ttl = Literal["5m", "1h"]

DEFAULT_TTL_SECONDS = 300.0
LONG_TTL_SECONDS = 3600.0
DEFAULT_MIN_TOKENS = 1024
MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
OPENAI_MIN_TOKENS = 1024
OPENAI_INCREMENT = 128
DEFAULT_MAX_ENTRIES = 10_000

# The documented minimum cacheable prompt length per Claude model (platform.claude.com "Prompt caching",
# "Cache limitations", clipped 2026-04-16), matched in order against the model name; anything else: 1024.
ANTHROPIC_MIN_TOKENS: tuple[tuple[str, int], ...] = (
    (r"opus-4-[56]|mythos|haiku-4-5", 4096),
    (r"sonnet-4-6|3-5-haiku|haiku-3|3-haiku", 2048),
)

_UNCACHEABLE_BLOCKS = frozenset({"thinking", "redacted_thinking"})


class CacheControlError(ValueError):
    """A request the real Anthropic API refuses (HTTP 400) for its ``cache_control``; ``str``: the message."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One unit of a prompt, in prompt order.

    ``digest`` identifies the content (a hash of its canonical JSON without ``cache_control``, plus whatever
    context the builder folds in, e.g. the message role); the simulator chains digests, so a segment's
    identity is also that of everything before it. ``breakpoint``: it carries ``cache_control`` (Anthropic;
    OpenAI ignores it), with ``ttl``. ``cacheable``: automatic caching may put its breakpoint here.
    """

    tokens: int
    digest: str
    breakpoint: bool = False
    ttl: Ttl = "5m"
    cacheable: bool = True


class AnthropicCacheResult(NamedTuple):
    """What a Messages ``usage`` reports; ``input + creation + read`` is the request's total input."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cache_creation_1h_input_tokens: int = 0  # the part of the creation written with the 1-hour TTL

    @property
    def total_input_tokens(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @classmethod
    def uncached(cls, total: int) -> AnthropicCacheResult:
        return cls(total, 0, 0, 0)


class OpenAICacheResult(NamedTuple):
    """What a chat or Responses ``usage`` reports: ``cached_tokens`` of the ``prompt_tokens``."""

    prompt_tokens: int
    cached_tokens: int

    @classmethod
    def uncached(cls, total: int) -> OpenAICacheResult:
        return cls(total, 0)


# ----------------------------------------------------------------------------------------------------------
# Identity and token helpers
# ----------------------------------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


def content_digest(value: Any) -> str:
    """A 128-bit hex hash of ``value``'s canonical JSON (lone surrogates allowed, as JSON allows them)."""
    data = canonical_json(value).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def without_cache_control(value: Any) -> Any:
    """``value`` without its own ``cache_control`` key (a copy when it is a dict that has one)."""
    if isinstance(value, dict) and "cache_control" in value:
        return {k: v for k, v in value.items() if k != "cache_control"}
    return value


def approx_tokens(chars: int) -> int:
    """The stand-in's token estimate: a quarter of the characters, rounded up."""
    return (chars + 3) // 4


@dataclass(frozen=True, slots=True)
class Part:
    """A segment before its tokens are known: its identity (hashed), the text it counts, its marker."""

    identity: Any
    text: str = ""
    breakpoint: bool = False
    ttl: Ttl = "5m"
    cacheable: bool = True


def segments_from_parts(parts: Iterable[Part]) -> list[Segment]:
    """Segments whose prefixes each count ``ceil(prefix chars / 4)`` tokens (the stand-in's estimate)."""
    segments: list[Segment] = []
    chars = 0
    for part in parts:
        before = approx_tokens(chars)
        chars += len(part.text)
        segments.append(
            Segment(
                tokens=approx_tokens(chars) - before,
                digest=content_digest(part.identity),
                breakpoint=part.breakpoint,
                ttl=part.ttl,
                cacheable=part.cacheable,
            )
        )
    return segments


def _ttl_of(cache_control: Any) -> Ttl:
    return "1h" if isinstance(cache_control, dict) and cache_control.get("ttl") == "1h" else "5m"


def _marker(value: Any) -> tuple[bool, Ttl]:
    """Whether ``value`` (a dict) carries ``cache_control``, and its TTL."""
    if isinstance(value, dict) and isinstance(value.get("cache_control"), dict):
        return True, _ttl_of(value["cache_control"])
    return False, "5m"


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _tool_parts(tools: Any, count_tools: bool) -> list[Part]:
    parts = []
    for tool in _as_list(tools):
        definition = without_cache_control(tool)
        marked, ttl = _marker(tool)
        text = canonical_json(definition) if count_tools else ""
        parts.append(Part(("tool", definition), text, marked, ttl))
    return parts


# ----------------------------------------------------------------------------------------------------------
# Anthropic Messages: text extraction as the stand-in does it, then segments
# ----------------------------------------------------------------------------------------------------------


def anthropic_block_text(block: Any) -> str:
    """What the stand-in counts of one content block (``standin_upstream.anthropic_block_text``)."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return json.dumps(block.get("input", {}), ensure_ascii=False, sort_keys=True)
    if kind == "tool_result":
        return anthropic_content_text(block.get("content", ""))
    if kind == "thinking":
        return str(block.get("thinking", ""))
    if kind == "document" and isinstance(block.get("source"), dict) and block["source"].get("type") == "text":
        return str(block["source"].get("data", ""))
    return ""


def anthropic_content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(anthropic_block_text(b) for b in content)
    return anthropic_block_text(content)


def _anthropic_blocks(content: Any) -> list[Any]:
    """A content value as its blocks: a string is one text block, a list its items, a dict itself."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [{"type": "text", "text": b} if isinstance(b, str) else b for b in content]
    if isinstance(content, dict):
        return [content]
    return []


def _anthropic_block_marker(block: Any) -> tuple[bool, Ttl]:
    """A block's breakpoint; a ``tool_result`` also takes one set on a block of its content."""
    marked, ttl = _marker(block)
    if not marked and isinstance(block, dict) and block.get("type") == "tool_result":
        for inner in _as_list(block.get("content")):
            marked, ttl = _marker(inner)
            if marked:
                break
    return marked, ttl


def _anthropic_identity(block: Any) -> Any:
    """A block without its ``cache_control`` (nor those of a ``tool_result``'s content blocks)."""
    block = without_cache_control(block)
    if isinstance(block, dict) and block.get("type") == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            block = {**block, "content": [without_cache_control(b) for b in content]}
    return block


def _cacheable(block: Any) -> bool:
    """Whether a block can carry a breakpoint: not thinking, not an empty text block."""
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind in _UNCACHEABLE_BLOCKS:
        return False
    return not (kind == "text" and not block.get("text"))


def _has_image(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("type") == "image" or any(_has_image(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_image(v) for v in value)
    return False


def anthropic_segments(body: Mapping[str, Any], *, count_tools: bool = True) -> list[Segment]:
    """The segments of a Messages request: each tool, each system block, each message content block.

    A top-level ``cache_control`` (automatic caching) is applied (``apply_automatic_breakpoint``), which can
    raise ``CacheControlError``. ``tool_choice``, ``thinking`` and whether any image is present are folded
    into the first message block's identity (they invalidate the messages cache, not tools or system).
    """
    parts = _tool_parts(body.get("tools"), count_tools)
    system = body.get("system")
    if system:
        for block in _anthropic_blocks(system):
            marked, ttl = _anthropic_block_marker(block)
            identity: Any = ("system", _anthropic_identity(block))
            parts.append(Part(identity, anthropic_block_text(block), marked, ttl, _cacheable(block)))
    messages = _as_list(body.get("messages"))
    settings = {
        "tool_choice": body.get("tool_choice"),
        "thinking": body.get("thinking"),
        "images": _has_image(messages) or _has_image(system),
    }
    for index, message in enumerate(messages):
        first = settings if index == 0 else None
        if not isinstance(message, dict):
            parts.append(Part(("invalid message", message, first), cacheable=False))
            continue
        role = message.get("role")
        blocks = _anthropic_blocks(message.get("content"))
        if not blocks:  # keeps the message boundary in the identity of what follows
            parts.append(Part(("empty message", role, first), cacheable=False))
        for position, block in enumerate(blocks):
            marked, ttl = _anthropic_block_marker(block)
            identity = ("block", role, position, first if position == 0 else None, _anthropic_identity(block))
            parts.append(Part(identity, anthropic_block_text(block), marked, ttl, _cacheable(block)))
    segments = segments_from_parts(parts)
    automatic = body.get("cache_control")
    if isinstance(automatic, dict):
        segments = apply_automatic_breakpoint(segments, _ttl_of(automatic))
    return segments


def apply_automatic_breakpoint(
    segments: Sequence[Segment], ttl: Ttl = "5m", *, max_breakpoints: int = MAX_BREAKPOINTS
) -> list[Segment]:
    """Automatic caching: a breakpoint on the last cacheable segment (walking back over the others).

    A no-op when that segment already has a breakpoint with the same TTL, or when no segment is cacheable;
    ``CacheControlError`` when it has one with another TTL, or when ``max_breakpoints`` explicit ones already
    exist (the automatic one takes one of the slots).
    """
    result = list(segments)
    target = next((i for i in range(len(result) - 1, -1, -1) if result[i].cacheable), None)
    if target is None:
        return result
    if result[target].breakpoint:
        if result[target].ttl != ttl:
            raise CacheControlError(
                f"automatic cache_control (ttl {ttl}) conflicts with the last block's explicit cache_control "
                f"(ttl {result[target].ttl})"
            )
        return result
    explicit = sum(1 for s in result if s.breakpoint)
    if explicit >= max_breakpoints:
        raise CacheControlError(
            f"A maximum of {max_breakpoints} blocks with cache_control may be provided. Found {explicit + 1}."
        )
    result[target] = replace(result[target], breakpoint=True, ttl=ttl)
    return result


def anthropic_min_cacheable_tokens(model: str) -> int:
    """The documented minimum cacheable prompt length of a Claude model name (1024 when not listed)."""
    name = model.lower().replace(".", "-")
    for pattern, minimum in ANTHROPIC_MIN_TOKENS:
        if re.search(pattern, name):
            return minimum
    return DEFAULT_MIN_TOKENS


# ----------------------------------------------------------------------------------------------------------
# OpenAI chat completions and Responses
# ----------------------------------------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """A chat ``content``'s text (``standin_upstream.content_text``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def chat_message_text(message: Any) -> str:
    """What the stand-in counts of one chat message: its text and its tool calls' arguments."""
    if not isinstance(message, dict):
        return ""
    text = content_text(message.get("content"))
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict) and isinstance(call.get("function"), dict):
            text += str(call["function"].get("arguments", ""))
    return text


def _openai_identity(value: Any) -> Any:
    """A message or item without ``cache_control``, on itself or on its content parts."""
    value = without_cache_control(value)
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        value = {**value, "content": [without_cache_control(p) for p in value["content"]]}
    return value


def chat_segments(body: Mapping[str, Any], *, count_tools: bool = True) -> list[Segment]:
    """The segments of a chat completions request: each tool definition, then each message."""
    parts = _tool_parts(body.get("tools"), count_tools)
    for message in _as_list(body.get("messages")):
        marked, ttl = _marker(message)
        parts.append(Part(("message", _openai_identity(message)), chat_message_text(message), marked, ttl))
    return segments_from_parts(parts)


def parts_text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(p if isinstance(p, str) else content_text([p]) for p in value)
    return value if isinstance(value, str) else ""


def responses_item_text(item: Any) -> str:
    """What the stand-in counts of one Responses input item (``standin_upstream.responses_item_text``)."""
    if not isinstance(item, dict):
        return ""
    kind = item.get("type", "message")
    if kind == "message":
        content = item.get("content")
        if isinstance(content, list):
            return "".join(str(p.get("text", p.get("refusal", ""))) for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else ""
    if kind == "function_call":
        return str(item.get("arguments", ""))
    if kind in ("function_call_output", "custom_tool_call_output"):
        return parts_text(item.get("output"))
    if kind == "custom_tool_call":
        return str(item.get("input", ""))
    if kind == "reasoning":
        return parts_text(item.get("summary")) + parts_text(item.get("content"))
    return ""


def responses_segments(body: Mapping[str, Any], *, count_tools: bool = True) -> list[Segment]:
    """The segments of a Responses request: each tool, the ``instructions``, then each input item."""
    parts = _tool_parts(body.get("tools"), count_tools)
    instructions = body.get("instructions")
    if instructions:
        text = parts_text(instructions) if isinstance(instructions, list) else str(instructions)
        parts.append(Part(("instructions", instructions), text))
    value = body.get("input")
    items = [{"role": "user", "content": value}] if isinstance(value, str) else _as_list(value)
    for item in items:
        marked, ttl = _marker(item)
        parts.append(Part(("item", _openai_identity(item)), responses_item_text(item), marked, ttl))
    return segments_from_parts(parts)


# ----------------------------------------------------------------------------------------------------------
# Google generateContent: text extraction only (no implicit cache is simulated for it)
# ----------------------------------------------------------------------------------------------------------


def _google_payload(part: Mapping[str, Any], camel: str, snake: str) -> Any:
    """A part's payload under its REST (camelCase) name or the snake_case one the API also accepts."""
    return part[camel] if camel in part else part.get(snake)


def google_part_text(part: Any) -> str:
    """What the stand-in counts of one Gemini part: its text (a thought's too), a function call's or a
    function response's JSON (name included, keys sorted), executable code and its result; media 0."""
    if not isinstance(part, dict):
        return ""
    if isinstance(part.get("text"), str):
        return part["text"]
    for camel, snake in (("functionCall", "function_call"), ("functionResponse", "function_response")):
        payload = _google_payload(part, camel, snake)
        if isinstance(payload, dict):
            return json.dumps(payload, sort_keys=True)
    code = _google_payload(part, "executableCode", "executable_code")
    if isinstance(code, dict):
        return str(code.get("code", ""))
    result = _google_payload(part, "codeExecutionResult", "code_execution_result")
    if isinstance(result, dict):
        return str(result.get("output", ""))
    return ""


def google_content_text(content: Any) -> str:
    """What the stand-in counts of one Gemini ``Content`` (or a ``systemInstruction``): its parts' text."""
    if isinstance(content, str):
        return content
    parts = content.get("parts") if isinstance(content, dict) else None
    return "".join(google_part_text(part) for part in _as_list(parts))


# ----------------------------------------------------------------------------------------------------------
# Usage objects
# ----------------------------------------------------------------------------------------------------------


def anthropic_usage(result: AnthropicCacheResult, output_tokens: int) -> dict[str, Any]:
    """A Messages ``usage``: the three input counts, the creation split by TTL, the output tokens."""
    creation_1h = result.cache_creation_1h_input_tokens
    return {
        "input_tokens": result.input_tokens,
        "cache_creation_input_tokens": result.cache_creation_input_tokens,
        "cache_read_input_tokens": result.cache_read_input_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": result.cache_creation_input_tokens - creation_1h,
            "ephemeral_1h_input_tokens": creation_1h,
        },
        "output_tokens": output_tokens,
    }


def chat_usage(result: OpenAICacheResult, completion_tokens: int) -> dict[str, Any]:
    """A chat completions ``usage`` with ``prompt_tokens_details.cached_tokens``."""
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": result.prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": result.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def responses_usage(result: OpenAICacheResult, output_tokens: int) -> dict[str, Any]:
    """A Responses ``usage`` with ``input_tokens_details.cached_tokens`` (no write fee: writes are 0)."""
    return {
        "input_tokens": result.prompt_tokens,
        "input_tokens_details": {"cached_tokens": result.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": result.prompt_tokens + output_tokens,
    }


# ----------------------------------------------------------------------------------------------------------
# The simulator
# ----------------------------------------------------------------------------------------------------------

_Key = tuple[str, str, str, str]  # (surface, deployment, routing key, prefix hash)


@dataclass(slots=True)
class _Entry:
    expires_at: float
    ttl: float


def prefix_hashes(segments: Sequence[Segment]) -> list[str]:
    """The hash of each prefix: that of the previous prefix chained with the segment's digest."""
    hashes: list[str] = []
    previous = b""
    for segment in segments:
        previous = hashlib.blake2b(
            previous + b"\x00" + segment.digest.encode("utf-8", "surrogatepass"), digest_size=16
        ).digest()
        hashes.append(previous.hex())
    return hashes


class PromptCache:
    """Prompt-cache state for any number of deployments; one instance per stand-in server.

    ``ttl``: the default (``"5m"``) lifetime, ``long_ttl``: that of ``"1h"`` breakpoints, ``openai_ttl``: the
    OpenAI inactivity timeout (default ``ttl``), all in clock seconds and refreshed on use. ``min_tokens``:
    Anthropic's minimum cacheable prefix unless a call passes its own. ``max_entries`` bounds the prefixes
    kept across all deployments (least recently used dropped first).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = DEFAULT_TTL_SECONDS,
        long_ttl: float = LONG_TTL_SECONDS,
        min_tokens: int = DEFAULT_MIN_TOKENS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        lookback: int = LOOKBACK_BLOCKS,
        max_breakpoints: int = MAX_BREAKPOINTS,
        openai_min_tokens: int = OPENAI_MIN_TOKENS,
        openai_increment: int = OPENAI_INCREMENT,
        openai_ttl: float | None = None,
    ) -> None:
        if max_entries < 1 or lookback < 1 or openai_increment < 1:
            raise ValueError("max_entries, lookback and openai_increment must be at least 1")
        self.clock = clock
        self.ttl = ttl
        self.long_ttl = long_ttl
        self.min_tokens = min_tokens
        self.max_entries = max_entries
        self.lookback = lookback
        self.max_breakpoints = max_breakpoints
        self.openai_min_tokens = openai_min_tokens
        self.openai_increment = openai_increment
        self.openai_ttl = ttl if openai_ttl is None else openai_ttl
        self._lock = threading.Lock()
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()

    # -- storage (callers hold the lock) ----------------------------------------------------------------

    def _live(self, key: _Key, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and now >= entry.expires_at:
            del self._entries[key]
            return None
        return entry

    def _touch(self, key: _Key, ttl: float, now: float) -> None:
        """Write ``key`` or refresh it: alive for ``ttl`` from now (never shortened), most recently used."""
        entry = self._live(key, now)
        if entry is None:
            self._entries[key] = _Entry(now + ttl, ttl)
        else:
            entry.ttl = max(entry.ttl, ttl)
            entry.expires_at = max(entry.expires_at, now + entry.ttl)
            self._entries.move_to_end(key)
        while self._entries:
            oldest_key, oldest = next(iter(self._entries.items()))
            if len(self._entries) <= self.max_entries and now < oldest.expires_at:
                break
            del self._entries[oldest_key]

    def _seconds(self, ttl: Ttl) -> float:
        return self.long_ttl if ttl == "1h" else self.ttl

    # -- public ------------------------------------------------------------------------------------------

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        """The number of prefixes cached and not expired."""
        with self._lock:
            now = self.clock()
            return sum(1 for entry in self._entries.values() if now < entry.expires_at)

    def check_breakpoints(self, segments: Sequence[Segment]) -> None:
        """``CacheControlError`` for more than ``max_breakpoints`` breakpoints or a 1h one after a 5m one."""
        marked = [s for s in segments if s.breakpoint]
        if len(marked) > self.max_breakpoints:
            raise CacheControlError(
                f"A maximum of {self.max_breakpoints} blocks with cache_control may be provided. "
                f"Found {len(marked)}."
            )
        for earlier, later in zip(marked, marked[1:], strict=False):
            if earlier.ttl == "5m" and later.ttl == "1h":
                raise CacheControlError(
                    "a cache_control block with ttl 1h cannot come after one with ttl 5m: longer TTLs must "
                    "come first"
                )

    def anthropic(
        self, deployment: str, segments: Sequence[Segment], *, min_tokens: int | None = None
    ) -> AnthropicCacheResult:
        """Look up and write one Messages request's breakpoints; its usage counts."""
        self.check_breakpoints(segments)
        minimum = self.min_tokens if min_tokens is None else min_tokens
        cumulative = list(accumulate(s.tokens for s in segments))
        total = cumulative[-1] if cumulative else 0
        breakpoints = [i for i, s in enumerate(segments) if s.breakpoint]
        if not breakpoints:
            return AnthropicCacheResult.uncached(total)
        hashes = prefix_hashes(segments)

        def key(position: int) -> _Key:
            return ("anthropic", deployment, "", hashes[position])

        # Every position a lookback window checks: up to ``lookback`` positions ending at each breakpoint.
        checked = sorted(
            {p for b in breakpoints for p in range(max(0, b - self.lookback + 1), b + 1)}, reverse=True
        )
        with self._lock:
            now = self.clock()
            hit = next((p for p in checked if self._live(key(p), now) is not None), -1)
            read = cumulative[hit] if hit >= 0 else 0
            if hit >= 0:
                for position in [hit, *(b for b in breakpoints if b < hit)]:
                    entry = self._live(key(position), now)
                    if entry is not None:
                        self._touch(key(position), entry.ttl, now)
            written = [b for b in breakpoints if b > hit and cumulative[b] >= minimum]
            for position in written:
                self._touch(key(position), self._seconds(segments[position].ttl), now)
        end = cumulative[written[-1]] if written else read  # C: the last breakpoint written
        long_written = [b for b in written if segments[b].ttl == "1h"]
        long_end = cumulative[long_written[-1]] if long_written else read  # B
        return AnthropicCacheResult(total - end, end - read, read, long_end - read)

    def openai(
        self, deployment: str, segments: Sequence[Segment], *, routing_key: str | None = None
    ) -> OpenAICacheResult:
        """Look up and write one chat or Responses request's prefix; its ``prompt_tokens`` and cached part."""
        cumulative = list(accumulate(s.tokens for s in segments))
        total = cumulative[-1] if cumulative else 0
        if total < self.openai_min_tokens:
            return OpenAICacheResult.uncached(total)
        hashes = prefix_hashes(segments)
        route = routing_key or ""

        def key(position: int) -> _Key:
            return ("openai", deployment, route, hashes[position])

        eligible = [i for i, tokens in enumerate(cumulative) if tokens >= self.openai_min_tokens]
        with self._lock:
            now = self.clock()
            hit = next((p for p in reversed(eligible) if self._live(key(p), now) is not None), -1)
            for position in eligible:  # the whole prompt is cached after processing; hits are refreshed
                self._touch(key(position), self.openai_ttl, now)
        if hit < 0:
            return OpenAICacheResult(total, 0)
        return OpenAICacheResult(total, cumulative[hit] // self.openai_increment * self.openai_increment)

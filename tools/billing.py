"""How the stand-in bills a request's input.

By default it bills exactly what compact_hook counts of the request it received (its own format
adapter and the tokenizer it picks by the model's name): a provider that agrees with us, for the
tests whose subject is not counting. A model name can ask for one whose count differs, so a test
sees whether the hook's decisions and figures follow what is billed:

* ``quarter``: a quarter of the characters of the request's texts and tool definitions
  (``prompt_cache.approx_tokens``, what its prompt cache counts);
* ``bill125`` / ``bill080`` (any ``bill<NNN>``): ``NNN / 100`` times what compact_hook counts of the
  request it received (its own format adapter and tokenizer for the model's name): a provider whose
  count is ours times a constant, so a test sees every window, threshold and figure converted, and
  nothing else; ``bill<NNN>then<MMM>after<K>``: ``NNN`` for the model's first ``K`` requests, ``MMM``
  after (a group moved to a model that counts otherwise);
* ``media<N>``: as compact_hook counts, but each image or document N tokens (a provider billing media
  by their size, where we count a fixed estimate: ``media50`` is a 1×1 image);
* ``dense<NNN>``: as compact_hook counts, but each entry holding ``DENSE`` ``NNN / 100`` times that
  (a provider whose tokenizer differs from ours more on some content than on other: code against
  prose, one conversation of a tenant against another);
* ``ctok30`` / ``ctok47`` / ``ctok48``: as Claude counts, by ctok (an offline reconstruction of
  Claude's ``count_tokens``, exact on its held-out sets; family 3.0 is Claude 3 to Opus 4.6, 4.7 Opus
  4.7, 4.8 Opus 4.8, Sonnet 5 and Fable 5): each text's tokens, the request's frame once, 3 tokens a
  message, tool definitions as their JSON, and the 346 tokens of Anthropic's tool-use system prompt
  when there are tools. The framing is our model of Anthropic's (it publishes none but the 346); the
  text counts are Claude's.

And a model name can ask for usage that does not describe what was billed, as servers LiteLLM users
point a proxy at report it (``reported``; the refusal of ``limit<N>`` still judges what is billed):

* ``usage-tail``: only the input after the prefix the server holds from the model's previous request
  (Ollama 0.30's llama-server backend: the newly evaluated tokens, its KV cache left out): a cache
  over everything before the new tail, system and tools included;
* ``usage-msgtail``: the system prompt, instructions and tool definitions, and the messages after
  the prefix of them the server holds from the model's previous request (a cache over the messages
  only, reported without its reads: a gateway passing on Anthropic's ``input_tokens`` alone, with
  breakpoints on the messages and none on system and tools);
* ``usage-zero``: 0 when that prefix is there (older Ollama releases);
* ``usage-cap<N>``: at most N (a server that truncates silently to an N-token context and reports
  what it kept: Ollama with a small ``num_ctx``);
* ``usage-msgs``: the messages only, what the system prompt, instructions and tool definitions
  would cost left out (gateways that count the messages).

With each, the usage's cache fields are left out (such servers report none). With ``marked`` in the
name as well, only a request holding ``MARKED`` is reported so (one odd bill among truthful ones).

Each text's count is kept (by the text) so an agent's growing history is counted once per new text.
ctok and compact_hook are imported only when a model asks for them: the stand-in itself needs
nothing installed. ctok declares Python >= 3.12 and is installed beside the project with
``--ignore-requires-python`` (``make install``): it runs on 3.11.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import prompt_cache

CLAUDE_MESSAGE_TOKENS = 3
CLAUDE_TOOLS_PROMPT = 346
"""Anthropic's documented tool-use system prompt (``tool_choice`` auto or none), billed as input."""
CLAUDE_FRAME = {"3.0": 7, "4.7": 7, "4.8": 6}
"""ctok's frame of a one-message request: counted once per request, the rest of each text's count is
its content."""
MEMO_CHARS = 64 * 1024 * 1024

_RATIO = re.compile(r"bill(\d{2,3})(?:then(\d{2,3})after(\d+))?")
MARKED = "[odd-usage]"
"""In a request's text: a ``marked`` model's usage lies for this request only."""
_USAGE = re.compile(r"usage-(tail|msgtail|zero|msgs|cap(\d+))")
_MEDIA = re.compile(r"media(\d+)")
_DENSE = re.compile(r"dense(\d{2,3})")
DENSE = "[dense]"
"""In an entry's text: a ``dense<NNN>`` model bills the entry ``NNN / 100`` times our count of it."""
_CLAUDE = re.compile(r"ctok(30|47|48)")


class TextCounts:
    """A counter of texts, remembering each text's count (bounded by the characters kept)."""

    def __init__(self, count: Callable[[str], int]) -> None:
        self._count = count
        self._memo: OrderedDict[str, int] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> int:
        with self._lock:
            found = self._memo.get(text)
            if found is not None:
                self._memo.move_to_end(text)
                return found
        counted = self._count(text) if text else 0
        with self._lock:
            self._memo[text] = counted
            self._chars += len(text)
            while self._chars > MEMO_CHARS and self._memo:
                gone, _ = self._memo.popitem(last=False)
                self._chars -= len(gone)
        return counted


_counters: dict[str, TextCounts] = {}
_counters_lock = threading.Lock()


def _counter(name: str) -> TextCounts:
    with _counters_lock:
        if name not in _counters:
            _counters[name] = TextCounts(_load(name))
        return _counters[name]


def _load(name: str) -> Callable[[str], int]:
    from ctok import token_count

    family, frame = name, CLAUDE_FRAME[name]
    return lambda text: token_count(text, family) - frame


Bill = Callable[[str, dict[str, Any], list[str], Any], int]
"""How a request is billed: ``(surface, body, texts, tools)``: the surface's name, the request body, the
texts the stand-in reads in it, its tool definitions (None where the texts hold them)."""


def billing_for(model: str) -> Bill | None:
    """How a model named so bills a request; None for ``quarter`` (the stand-in's own estimate)."""
    if "quarter" in model:
        return None
    ratio = _RATIO.search(model)
    if ratio is not None:
        factor = int(ratio.group(1)) / 100
        if ratio.group(2) is None:
            return lambda surface, body, texts, tools: round(factor * _ours(surface, body))
        later, after = int(ratio.group(2)) / 100, int(ratio.group(3))
        return lambda surface, body, texts, tools: round(
            (factor if REQUESTS.next(model) <= after else later) * _ours(surface, body)
        )
    claude = _CLAUDE.search(model)
    if claude is not None:
        family = {"30": "3.0", "47": "4.7", "48": "4.8"}[claude.group(1)]
        return lambda surface, body, texts, tools: _claude(family, texts, tools)
    media = _MEDIA.search(model)
    if media is not None:
        each = int(media.group(1))
        return lambda surface, body, texts, tools: _ours(surface, body, media=each)
    dense = _DENSE.search(model)
    if dense is not None:
        factor = int(dense.group(1)) / 100
        return lambda surface, body, texts, tools: _ours(surface, body, dense=factor)
    return lambda surface, body, texts, tools: _ours(surface, body)


def _ours(
    surface: str,
    body: dict[str, Any],
    messages_only: bool = False,
    media: int | None = None,
    dense: float = 1.0,
) -> int:
    """What compact_hook counts of the request: its own adapter and the tokenizer it picks by name
    (``messages_only``: its messages, system and developer ones and the rest it reads left out;
    ``media``: each image or document billed that many tokens, not our fixed estimate; ``dense``:
    each entry holding ``DENSE`` billed that many times our count)."""
    from compact_hook.core.counting import item_strings, request_total
    from compact_hook.core.items import Role
    from compact_hook.state.tokenizers import counter_for, tokenizer_name_for_model
    from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES, Conversation
    from compact_hook.wires.parsing import context_strings

    wire = {"chat": CHAT, "messages": ANTHROPIC, "responses": RESPONSES, "google": GOOGLE}[surface]
    parsed = wire.parse({key: value for key, value in body.items() if key not in ("model", "stream")})
    if not isinstance(parsed, Conversation):
        return 0
    counter = counter_for(tokenizer_name_for_model(str(body.get("model", ""))))
    counts = counter.count(parsed.prints(), lambda i: item_strings(parsed.item(i)))
    if media is not None:
        counts = [n + _media_difference(parsed.item(i), media) for i, n in enumerate(counts)]
    if dense != 1.0:
        counts = [
            round(n * dense) if DENSE in json.dumps(parsed.entries[i]) else n for i, n in enumerate(counts)
        ]
    if messages_only:
        kept = [n for i, n in enumerate(counts) if parsed.item(i).role is not Role.SYSTEM]
        return request_total(0, kept)
    context = counter.count(parsed.context_prints(), lambda i: context_strings(parsed.context[i]))
    return request_total(sum(context) + (parsed.overhead if parsed.context else 0), counts)


def _media_difference(item: Any, each: int) -> int:
    """What an item's media are billed at ``each`` tokens apiece, against our fixed estimate of them."""
    from compact_hook.core.items import PartKind

    return sum(each - part.fixed_tokens for part in item.parts if part.kind is PartKind.MEDIA)


def _claude(family: str, texts: list[str], tools: Any) -> int:
    count = _counter(family)
    total = CLAUDE_FRAME[family] + sum(count(text) for text in texts) + CLAUDE_MESSAGE_TOKENS * len(texts)
    if tools:
        total += CLAUDE_TOOLS_PROMPT + sum(count(json.dumps(tool, sort_keys=True)) for tool in tools)
    return total


class ServerPrefix:
    """What a server's KV cache holds, per model: the texts of its previous request (one slot, as
    Ollama's default), and how much of the next request is a prefix of them."""

    def __init__(self) -> None:
        self._texts: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def held(self, model: str, texts: list[str]) -> float:
        """The share of ``texts``' characters the server holds from ``model``'s previous request,
        which ``texts`` then replace."""
        with self._lock:
            previous, self._texts[model] = self._texts.get(model, []), list(texts)
        same = 0
        for old, new in zip(previous, texts, strict=False):
            if old != new:
                break
            same += len(new)
        total = sum(map(len, texts))
        return same / total if total else 0.0

    def clear(self) -> None:
        with self._lock:
            self._texts.clear()


SERVER_PREFIX = ServerPrefix()


class Requests:
    """How many requests each model has been billed (for ``bill<NNN>then<MMM>after<K>``)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def next(self, model: str) -> int:
        with self._lock:
            self._counts[model] = self._counts.get(model, 0) + 1
            return self._counts[model]


REQUESTS = Requests()


def lies(model: str, texts: list[str] | None = None) -> bool:
    """The model's name asks for usage that does not describe what is billed (``reported``): for every
    request, or with ``marked``, for those whose ``texts`` hold ``MARKED``."""
    if _USAGE.search(model) is None:
        return False
    return "marked" not in model or any(MARKED in text for text in texts or ())


def reported(surface: str, body: dict[str, Any], texts: list[str], billed: int) -> int:
    """The input a request's usage reports, billed ``billed``: as billed, or as the model's name asks
    (``usage-tail``, ``usage-msgtail``, ``usage-zero``, ``usage-cap<N>``, ``usage-msgs``)."""
    found = _USAGE.search(str(body.get("model", "")))
    if found is None:
        return billed
    mode = found.group(1)
    if mode.startswith("cap"):
        return min(billed, int(found.group(2)))
    if mode == "msgs":
        return _ours(surface, body, messages_only=True)
    if mode == "msgtail":
        held = SERVER_PREFIX.held(f"{body.get('model')}#messages", _message_texts(surface, body))
        messages, whole = _ours(surface, body, messages_only=True), _ours(surface, body)
        return max(1, billed - round(held * messages * billed / max(1, whole)))  # in what is billed
    held = SERVER_PREFIX.held(str(body.get("model", "")), texts)
    if mode == "zero":
        return 0 if held > 0 else billed
    return max(1, round(billed * (1 - held)))


def _message_texts(surface: str, body: dict[str, Any]) -> list[str]:
    """The request's conversation entries as JSON, system and developer ones left out: what a cache
    over the messages only holds."""
    key = {"chat": "messages", "messages": "messages", "responses": "input", "google": "contents"}[surface]
    entries = body.get(key)
    if not isinstance(entries, list):
        return [str(entries or "")]
    kept = (e for e in entries if not (isinstance(e, dict) and e.get("role") in ("system", "developer")))
    return [json.dumps(_unmarked(entry), sort_keys=True) for entry in kept]


def _unmarked(value: Any) -> Any:
    """``value`` without its prompt-cache breakpoints (Claude Code moves one every turn: a cache is
    not broken by where the client marks it)."""
    if isinstance(value, dict):
        return {key: _unmarked(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(item) for item in value]
    return value


def scaled_cache(result: Any, billed: int) -> Any:
    """A prompt cache's counts of a request (``prompt_cache``: a quarter of the characters), its
    split kept, totalling what the request is billed: what its usage then reports."""
    if isinstance(result, prompt_cache.AnthropicCacheResult):
        total = result.total_input_tokens
        scale = billed / total if total else 0.0
        read, written = (
            round(result.cache_read_input_tokens * scale),
            round(result.cache_creation_input_tokens * scale),
        )
        longer = min(written, round(result.cache_creation_1h_input_tokens * scale))
        return result._replace(
            input_tokens=billed - read - written,
            cache_creation_input_tokens=written,
            cache_read_input_tokens=read,
            cache_creation_1h_input_tokens=longer,
        )
    scale = billed / result.prompt_tokens if result.prompt_tokens else 0.0
    return result._replace(
        prompt_tokens=billed, cached_tokens=min(billed, round(result.cached_tokens * scale))
    )


INPUT_FIELDS = {
    "chat": ("prompt_tokens", "prompt_tokens_details", "cached_tokens"),
    "responses": ("input_tokens", "input_tokens_details", "cached_tokens"),
    "google": ("promptTokenCount", None, "cachedContentTokenCount"),
}
"""Per surface: the usage's total input, where its cached share sits (None: beside it), its name."""
TOTALS = (
    ("total_tokens", "completion_tokens"),
    ("total_tokens", "output_tokens"),
    ("totalTokenCount", "candidatesTokenCount"),
)


def billed_usage(payload: Any, surface: str, billed: int, cached: bool = True) -> Any:
    """``payload`` (an answer or a stream event) with each usage's input billed ``billed`` tokens: the
    cache's share of it kept in proportion (``cached`` False: none reported); its output untouched."""
    if isinstance(payload, dict):
        return {
            key: _billed(value, surface, billed, cached)
            if key in ("usage", "usageMetadata") and isinstance(value, dict)
            else billed_usage(value, surface, billed, cached)
            for key, value in payload.items()
        }
    if isinstance(payload, list):
        return [billed_usage(value, surface, billed, cached) for value in payload]
    return payload


def _billed(found: Mapping[str, Any], surface: str, billed: int, cached: bool) -> dict[str, Any]:
    usage = dict(found)
    if not cached:
        usage = _uncached(usage)
    if surface == "messages":
        return _billed_messages(usage, billed)
    total_key, details_key, cached_key = INPUT_FIELDS[surface]
    if total_key not in usage:
        return usage
    scale = billed / int(usage[total_key]) if usage[total_key] else 0.0
    holder = usage if details_key is None else dict(usage.get(details_key) or {})
    if holder.get(cached_key):
        holder[cached_key] = round(int(holder[cached_key]) * scale)
    if details_key is not None and details_key in usage:
        usage[details_key] = holder
    usage[total_key] = billed
    for total, output in TOTALS:
        if total in usage and output in usage:
            usage[total] = billed + int(usage[output] or 0)
    return usage


def _uncached(usage: dict[str, Any]) -> dict[str, Any]:
    """``usage`` with no cache reads or writes (a server that reports none)."""
    for key in ("cache_read_input_tokens", "cache_creation_input_tokens", "cachedContentTokenCount"):
        usage.pop(key, None)
    for key in ("prompt_tokens_details", "input_tokens_details"):
        if isinstance(usage.get(key), dict):
            usage[key] = {**usage[key], "cached_tokens": 0}
    return usage


def _billed_messages(usage: dict[str, Any], billed: int) -> dict[str, Any]:
    """Anthropic splits the input three ways (after the last breakpoint, written, read)."""
    if "input_tokens" not in usage:
        return usage  # message_delta: the output only
    read = int(usage.get("cache_read_input_tokens") or 0)
    written = int(usage.get("cache_creation_input_tokens") or 0)
    total = int(usage["input_tokens"]) + read + written
    scale = billed / total if total else 0.0
    read, written = round(read * scale), round(written * scale)
    usage.update(
        cache_read_input_tokens=read,
        cache_creation_input_tokens=written,
        input_tokens=billed - read - written,
    )
    return usage

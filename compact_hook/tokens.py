"""Token counting with HuggingFace ``tokenizers``, offline, cached per message.

The hook counts every request, and agents re-send their whole history every turn, so a
count must cost time proportional to the *new* messages: each message's count is cached
under its fingerprint, and only unseen messages are tokenized (in one batch, off the event
loop when the batch is large).

Framing (documented in the README; it follows OpenAI's published accounting):
every message costs ``MESSAGE_OVERHEAD`` tokens plus its role; a ``name`` costs one more;
each tool call costs ``TOOL_CALL_OVERHEAD`` plus its name and arguments; a whole request
costs ``REPLY_PRIMING`` once; an image or other media part is a fixed ``MEDIA_TOKENS``.
Ids (``tool_call_id``, call ids) are bookkeeping and are not counted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from tokenizers import Tokenizer

from compact_hook.errors import TokenizerError
from compact_hook.fingerprint import Fingerprint, fingerprint
from compact_hook.messages import Message

logger = logging.getLogger(__name__)

MESSAGE_OVERHEAD = 3
NAME_OVERHEAD = 1
TOOL_CALL_OVERHEAD = 3
REPLY_PRIMING = 3
MEDIA_TOKENS = 765
"""One 512px-tile high-detail image under OpenAI's accounting (85 + 4 x 170); used for all media."""

DEFAULT_CACHE_SIZE = 200_000
OFFLOAD_CHARS = 32_000
"""Uncached text above this many characters is tokenized in a worker thread, not on the loop."""

BUILTIN_TOKENIZERS = ("o200k_base", "cl100k_base", "claude")
TEXT_PART_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
MEDIA_PART_TYPES = frozenset(
    {"image_url", "image", "input_image", "input_audio", "audio", "file", "input_file", "document"}
)
SILENT_PART_TYPES = frozenset({"redacted_thinking"})

_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4", "gpt-oss")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")
_CLAUDE_MARKERS = ("claude", "anthropic")


def tokenizer_name_for_model(model: str) -> str:
    """The built-in tokenizer for a model name; o200k_base when we do not know the family."""
    name = model.lower().rsplit("/", 1)[-1]
    if any(marker in model.lower() for marker in _CLAUDE_MARKERS):
        return "claude"
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"


_tokenizers: dict[str, Tokenizer] = {}
_tokenizers_lock = threading.Lock()


def load_tokenizer(spec: str) -> Tokenizer:
    """A built-in tokenizer by name, or a ``tokenizer.json`` by path; loaded once per process."""
    with _tokenizers_lock:
        if spec not in _tokenizers:
            _tokenizers[spec] = _read_tokenizer(spec)
        return _tokenizers[spec]


def _read_tokenizer(spec: str) -> Tokenizer:
    try:
        if spec in BUILTIN_TOKENIZERS:
            data = resources.files("compact_hook").joinpath("tokenizer_data", f"{spec}.json")
            return Tokenizer.from_str(data.read_text(encoding="utf-8"))
        path = Path(spec).expanduser()
        if not path.is_file():
            raise TokenizerError(
                f"tokenizer {spec!r}: not a built-in ({', '.join(BUILTIN_TOKENIZERS)}) nor a file"
            )
        return Tokenizer.from_file(str(path))
    except TokenizerError:
        raise
    except Exception as exc:
        raise TokenizerError(f"tokenizer {spec!r} could not be loaded: {exc}") from exc


class TokenCounter(Protocol):
    """What the engine needs from a counter; ``HFTokenCounter`` is the real one."""

    def count_text(self, text: str) -> int: ...

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the text's tokens, in order (truncation cuts on them)."""
        ...

    def count_messages(
        self, messages: Sequence[Message], prints: Sequence[Fingerprint] | None = None
    ) -> list[int]: ...

    async def acount_messages(
        self, messages: Sequence[Message], prints: Sequence[Fingerprint] | None = None
    ) -> list[int]: ...

    def total(self, message_counts: Sequence[int]) -> int: ...


class HFTokenCounter:
    """Counts messages with one tokenizer, remembering each message's count by fingerprint."""

    def __init__(self, spec: str, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        self.spec = spec
        self._tokenizer = load_tokenizer(spec)
        self._cache: OrderedDict[Fingerprint, int] = OrderedDict()
        self._cache_size = cache_size

    def count_text(self, text: str) -> int:
        return self._encode_lengths([text])[0] if text else 0

    def offsets(self, text: str) -> list[tuple[int, int]]:
        try:
            encoding = self._tokenizer.encode(text, add_special_tokens=False)
        except Exception:
            encoding = self._tokenizer.encode(
                text.encode("utf-8", "replace").decode("utf-8"), add_special_tokens=False
            )
        return [(int(start), int(end)) for start, end in encoding.offsets]

    def count_messages(
        self, messages: Sequence[Message], prints: Sequence[Fingerprint] | None = None
    ) -> list[int]:
        """Per-message token counts (framing included, reply priming not)."""
        prints = _prints_for(messages, prints)
        missing = self._missing(prints)
        return self._merge(messages, prints, missing, self._count_now(messages, missing))

    async def acount_messages(
        self, messages: Sequence[Message], prints: Sequence[Fingerprint] | None = None
    ) -> list[int]:
        """As ``count_messages``, but a large uncached batch is tokenized off the event loop."""
        prints = _prints_for(messages, prints)
        missing = self._missing(prints)
        texts, owners, counts = _collect(messages, missing)
        if sum(map(len, texts)) > OFFLOAD_CHARS:
            lengths = await asyncio.to_thread(self._encode_lengths, texts)
        else:
            lengths = self._encode_lengths(texts)
        return self._merge(messages, prints, missing, _add_lengths(counts, owners, lengths))

    def total(self, message_counts: Sequence[int]) -> int:
        """The request total for per-message counts: their sum plus reply priming."""
        return sum(message_counts) + REPLY_PRIMING if message_counts else 0

    def _missing(self, prints: Sequence[Fingerprint]) -> list[int]:
        cache = self._cache
        return [index for index, key in enumerate(prints) if key not in cache]

    def _count_now(self, messages: Sequence[Message], indexes: list[int]) -> list[int]:
        texts, owners, counts = _collect(messages, indexes)
        return _add_lengths(counts, owners, self._encode_lengths(texts))

    def _merge(
        self,
        messages: Sequence[Message],
        prints: Sequence[Fingerprint],
        missing: list[int],
        counts: list[int],
    ) -> list[int]:
        """Cached and fresh counts in message order; then remember the fresh ones (LRU)."""
        cache = self._cache
        fresh = {prints[index]: count for index, count in zip(missing, counts, strict=True)}
        evicted = [i for i, key in enumerate(prints) if key not in fresh and key not in cache]
        if evicted:  # another request evicted them while we were tokenizing off the loop
            fresh.update(zip((prints[i] for i in evicted), self._count_now(messages, evicted), strict=True))
        result = []
        for key in prints:
            value = fresh.get(key)
            if value is None:
                value = cache[key]
                cache.move_to_end(key)
            result.append(value)
        cache.update(fresh)
        while len(cache) > self._cache_size:
            cache.popitem(last=False)
        return result

    def _encode_lengths(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        try:
            encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        except Exception:
            # Lone surrogates (valid in JSON strings, invalid UTF-8) make the tokenizer refuse.
            cleaned = [text.encode("utf-8", "replace").decode("utf-8") for text in texts]
            encodings = self._tokenizer.encode_batch_fast(cleaned, add_special_tokens=False)
        return [len(encoding) for encoding in encodings]


def _collect(messages: Sequence[Message], indexes: list[int]) -> tuple[list[str], list[int], list[int]]:
    """The strings of ``messages[i]`` for i in ``indexes``, whose slot each belongs to, fixed costs."""
    texts: list[str] = []
    owners: list[int] = []
    fixed: list[int] = []
    for slot, index in enumerate(indexes):
        strings, cost = message_strings(messages[index])
        texts.extend(strings)
        owners.extend([slot] * len(strings))
        fixed.append(cost)
    return texts, owners, fixed


def _add_lengths(counts: list[int], owners: list[int], lengths: list[int]) -> list[int]:
    for owner, length in zip(owners, lengths, strict=True):
        counts[owner] += length
    return counts


def _prints_for(messages: Sequence[Message], prints: Sequence[Fingerprint] | None) -> Sequence[Fingerprint]:
    if prints is None:
        return [fingerprint(message) for message in messages]
    if len(prints) != len(messages):
        raise ValueError("prints: one fingerprint per message is required")
    return prints


def message_strings(message: Message) -> tuple[list[str], int]:
    """Every string in ``message`` that the model reads, plus its fixed (non-text) token cost."""
    strings: list[str] = []
    fixed = MESSAGE_OVERHEAD
    role = message.get("role")
    if isinstance(role, str):
        strings.append(role)
    name = message.get("name")
    if isinstance(name, str) and name:
        strings.append(name)
        fixed += NAME_OVERHEAD
    fixed += _collect_content(message.get("content"), strings)
    for call in _calls_of(message):
        fixed += TOOL_CALL_OVERHEAD
        _collect_call(call, strings)
    return [text for text in strings if text], fixed


def _calls_of(message: Message) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    found = [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        found.append({"function": legacy})
    return found


def _collect_call(call: dict[str, Any], strings: list[str]) -> None:
    function = call.get("function")
    if not isinstance(function, dict):
        return
    for key in ("name", "arguments"):
        value = function.get(key)
        if isinstance(value, str):
            strings.append(value)
        elif value is not None:
            strings.append(json.dumps(value, ensure_ascii=False))


def _collect_content(content: object, strings: list[str]) -> int:
    """Append the content's strings; return its fixed cost (media)."""
    if isinstance(content, str):
        strings.append(content)
        return 0
    if not isinstance(content, list):
        return 0
    return sum(_collect_part(part, strings) for part in content if isinstance(part, dict))


def _collect_part(part: dict[str, Any], strings: list[str]) -> int:
    kind = part.get("type")
    if kind in TEXT_PART_KEYS:
        value = part.get(TEXT_PART_KEYS[str(kind)])
        if isinstance(value, str):
            strings.append(value)
        return 0
    if kind in MEDIA_PART_TYPES:
        return MEDIA_TOKENS
    if kind == "thinking":
        thinking = part.get("thinking")
        if isinstance(thinking, str):
            strings.append(thinking)
        return 0
    if kind == "tool_use":
        strings.append(str(part.get("name", "")))
        strings.append(json.dumps(part.get("input", {}), ensure_ascii=False))
        return TOOL_CALL_OVERHEAD
    if kind == "tool_result":
        return _collect_content(part.get("content"), strings)
    if kind not in SILENT_PART_TYPES:
        _warn_unknown_part(kind)
    return 0


_warned_part_types: set[str] = set()


def _warn_unknown_part(kind: object) -> None:
    label = repr(kind)
    if label not in _warned_part_types:
        _warned_part_types.add(label)
        logger.warning("compact_hook: content part of unknown type %s is not counted", label)


_counters: dict[str, HFTokenCounter] = {}
_counters_lock = threading.Lock()


def counter_for(spec: str) -> HFTokenCounter:
    """The process-wide counter for a tokenizer, so its cache outlives one request."""
    with _counters_lock:
        if spec not in _counters:
            _counters[spec] = HFTokenCounter(spec)
        return _counters[spec]


def count_tokens(messages: Sequence[Message], model: str = "gpt-4o", tokenizer: str | None = None) -> int:
    """Tokens the messages take as a prompt for ``model`` (framing and reply priming included)."""
    counter = counter_for(tokenizer or tokenizer_name_for_model(model))
    return counter.total(counter.count_messages(messages))

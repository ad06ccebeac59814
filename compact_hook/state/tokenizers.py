"""Tokenizers: the shipped HuggingFace ``tokenizers`` files, and the counter that caches by entry.

The hook counts every request, and agents re-send their whole history every turn, so a
count must cost time proportional to the *new* entries: each entry's count is cached under
its fingerprint, and only unseen entries are tokenized (in one batch, off the event loop
when the batch is large). What an entry's strings are is the format's business
(``core.counting.item_strings``); this module only tokenizes.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import itertools
import logging
import operator
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import cast

from tokenizers import Encoding, Tokenizer

from compact_hook.core.counting import Recall, StringsOf
from compact_hook.core.fingerprint import Fingerprint
from compact_hook.errors import TokenizerError
from compact_hook.offload import off_loop

DEFAULT_TOKENIZER = "o200k_base"
DEFAULT_CACHE_SIZE = 200_000
OFFLOAD_CHARS = 32_000
"""Uncached text above this many characters is tokenized in a worker thread, not on the loop."""

BUILTIN_TOKENIZERS = ("o200k_base", "cl100k_base", "claude")

_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4", "gpt-oss")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")
_CLAUDE_MARKERS = ("claude", "anthropic")

logger = logging.getLogger(__name__)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
"""Each batch encoded on the thread that asks (the operator's setting wins). Left on, ``tokenizers``
spreads a batch over a pool of its own threads, one per core, at the loop's priority: a history new
to the proxy then took every core from the loop while it was counted (``compact_hook.offload`` runs
our counting at a lower priority, which its pool's threads would not share)."""


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
            give_back_freed_memory()
        return _tokenizers[spec]


def give_back_freed_memory() -> None:
    """Return the heap freed by parsing a tokenizer's JSON to the system (glibc keeps it: 123 of
    o200k's 198 MB). Elsewhere a no-op."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, opened once (None: not glibc)."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _read_tokenizer(spec: str) -> Tokenizer:
    try:
        if spec in BUILTIN_TOKENIZERS:
            data = resources.files("compact_hook").joinpath("tokenizer_data", f"{spec}.json")
            with resources.as_file(data) as path:  # read by the library: no copy of the JSON in Python
                return Tokenizer.from_file(str(path))
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


class HFTokenCounter:
    """Counts entries with one tokenizer, remembering each entry's count by fingerprint.

    Thread-safe: the cache is touched under a lock (work that must not block the event loop runs
    in worker threads), and tokenizing never holds it. Entries are a fingerprint and an int, so
    the cache's size in bytes is bounded by its size in entries (~120 bytes each).
    """

    def __init__(self, spec: str, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        self.spec = spec
        self._tokenizer = load_tokenizer(spec)
        self._cache = Generations(cache_size)
        self._lock = threading.Lock()

    def count_text(self, text: str) -> int:
        return self._encode_lengths([text])[0] if text else 0

    def cut(self, text: str, head: int, tail: int) -> tuple[int, int, int]:
        """Through ``encode_batch``, which releases the GIL (``encode`` holds it: seconds for a 4 MB
        output, during which no other thread runs), reading only the two spans needed."""
        encoding = self._encoded(self._tokenizer.encode_batch, [text])[0]
        total = len(encoding)
        if total <= head + tail or head < 1 or tail < 1:
            return len(text), len(text), total
        head_span, tail_span = encoding.token_to_chars(head - 1), encoding.token_to_chars(total - tail)
        if head_span is None or tail_span is None:  # no span to cut on (cannot happen for plain text)
            return len(text), len(text), total
        return int(head_span[1]), int(tail_span[0]), total

    def count(self, prints: Sequence[Fingerprint], strings: StringsOf) -> list[int]:
        """Tokens of each entry (framing included); only entries not seen before are tokenized."""
        found, missing = self._cached(prints)
        if not missing:  # every count remembered: most requests
            return cast(list[int], found)
        return self._fill(prints, found, missing, self._count_now(strings, missing))

    async def acount(
        self, prints: Sequence[Fingerprint], strings: StringsOf, recall: Recall | None = None
    ) -> list[int]:
        """As ``count``, but a large batch of new text is tokenized off the event loop — after what
        ``recall`` knows of it is taken, where coherent (``recalled``)."""
        found, missing = self._cached(prints)
        if not missing:
            return cast(list[int], found)
        texts, owners, counts = _collect(strings, missing)
        if sum(map(len, texts)) > OFFLOAD_CHARS:
            if recall is not None:
                taken = recalled(await recall(), [prints[i] for i in missing], texts, owners, counts)
                if taken:
                    self._fill(prints, found, [missing[slot] for slot in taken], list(taken.values()))
                    return await self.acount(prints, strings)  # the rest, as if nothing was recalled
            lengths = await off_loop(self._encode_trimmed, texts)
        else:
            lengths = self._encode_lengths(texts)
        return self._fill(prints, found, missing, _add_lengths(counts, owners, lengths))

    def _cached(self, prints: Sequence[Fingerprint]) -> tuple[list[int | None], list[int]]:
        """Each entry's remembered count (None: not remembered), and where there is none."""
        with self._lock:
            return self._cache.read(prints)

    def _fill(
        self, prints: Sequence[Fingerprint], found: list[int | None], missing: list[int], counts: list[int]
    ) -> list[int]:
        """``found`` completed with the fresh ``counts`` (the entries ``missing``), remembered."""
        fresh = dict(zip(map(prints.__getitem__, missing), counts, strict=True))
        for index, count in zip(missing, counts, strict=True):
            found[index] = count
        if fresh:
            with self._lock:
                self._cache.add(fresh)
        return cast(list[int], found)  # every None was at an index of ``missing``

    def _count_now(self, strings: StringsOf, indexes: list[int]) -> list[int]:
        texts, owners, counts = _collect(strings, indexes)
        return _add_lengths(counts, owners, self._encode_lengths(texts))

    def _encode_trimmed(self, texts: list[str]) -> list[int]:
        lengths = self._encode_lengths(texts)
        give_back_freed_memory()
        return lengths

    def _encode_lengths(self, texts: list[str]) -> list[int]:
        """Tokens of each text; a text repeated in the batch (a tool's instructions, a file read
        twice: a tenth of a long agent history's characters) is tokenized once."""
        unique = list(dict.fromkeys(texts))
        if len(unique) == len(texts):
            return self._encode_each(texts)
        lengths = dict(zip(unique, self._encode_each(unique), strict=True))
        return [lengths[text] for text in texts]

    def _encode_each(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        return [len(encoding) for encoding in self._encoded(self._tokenizer.encode_batch_fast, texts)]

    @staticmethod
    def _encoded(encode: Callable[..., list[Encoding]], texts: list[str]) -> list[Encoding]:
        """``texts`` through ``encode`` (a batch method of the tokenizer). Lone surrogates (valid in
        JSON strings, invalid UTF-8) make the tokenizer refuse: they are then replaced one for one,
        so character offsets still hold."""
        try:
            return encode(texts, add_special_tokens=False)
        except Exception:
            cleaned = [text.encode("utf-8", "replace").decode("utf-8") for text in texts]
            return encode(cleaned, add_special_tokens=False)


NONES = itertools.repeat(None)


class Generations:
    """A count per fingerprint, for at most ``size`` fingerprints, the least recently read going first
    — approximately: in two generations of at most half each. A read is one lookup per fingerprint
    in the young one (in C: every request reads every entry's count, hundreds for a session); only
    what is not there is looked for in the old one, and moved to the young. When the young one is
    full it becomes the old one, and the old one is forgotten. Not thread-safe: the counter locks."""

    def __init__(self, size: int) -> None:
        self.half = max(1, size // 2)
        self._young: dict[Fingerprint, int] = {}
        self._old: dict[Fingerprint, int] = {}

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def read(self, prints: Sequence[Fingerprint]) -> tuple[list[int | None], list[int]]:
        """Each fingerprint's count (None: none held), and the indices of those with none."""
        found: list[int | None] = list(map(self._young.get, prints))
        if None not in found:
            return found, []
        promoted: dict[Fingerprint, int] = {}
        missing = []
        for index in itertools.compress(range(len(found)), map(operator.is_, found, NONES)):
            count = self._old.pop(prints[index], None)
            if count is None:
                missing.append(index)
            else:
                found[index] = promoted[prints[index]] = count
        self.add(promoted)
        return found, missing

    def add(self, counts: dict[Fingerprint, int]) -> None:
        if len(counts) > self.half:  # more than a generation at once: its newest half
            counts = dict(itertools.islice(counts.items(), len(counts) - self.half, None))
        if len(self._young) + len(counts) > self.half:
            self._old, self._young = self._young, {}
        self._young.update(counts)


def recalled(
    remembered: Mapping[Fingerprint, int],
    prints: Sequence[Fingerprint],
    texts: Sequence[str],
    owners: Sequence[int],
    fixed: Sequence[int],
) -> dict[int, int]:
    """Of a batch's entries (slots: ``prints``, their ``texts`` by ``owners``, their ``fixed`` costs),
    those ``remembered`` counts, where the count is coherent with the entry: at least its fixed
    cost, at most that plus its text's UTF-8 bytes (a byte-level tokenizer makes no more tokens than
    bytes) — a record is read from a store others can write, never taken whole."""
    if not remembered:
        return {}
    most = list(fixed)
    for owner, text in zip(owners, texts, strict=True):
        most[owner] += len(text.encode("utf-8", "surrogatepass"))
    taken = {}
    for slot, print_ in enumerate(prints):
        count = remembered.get(print_)
        if count is not None and fixed[slot] <= count <= most[slot]:
            taken[slot] = count
    return taken


def _collect(strings: StringsOf, indexes: list[int]) -> tuple[list[str], list[int], list[int]]:
    """The strings of entries ``indexes``, which slot each belongs to, and their fixed costs."""
    texts: list[str] = []
    owners: list[int] = []
    fixed: list[int] = []
    for slot, index in enumerate(indexes):
        entry_strings, cost = strings(index)
        texts.extend(entry_strings)
        owners.extend([slot] * len(entry_strings))
        fixed.append(cost)
    return texts, owners, fixed


def _add_lengths(counts: list[int], owners: list[int], lengths: list[int]) -> list[int]:
    for owner, length in zip(owners, lengths, strict=True):
        counts[owner] += length
    return counts


_counters: dict[str, HFTokenCounter] = {}
_counters_lock = threading.Lock()


async def acounter_for(spec: str) -> HFTokenCounter:
    """``counter_for``, loading a tokenizer not loaded yet (≈1 s) in a worker thread."""
    with _counters_lock:
        ready = _counters.get(spec)
    return ready if ready is not None else await asyncio.to_thread(counter_for, spec)


def counter_for(spec: str) -> HFTokenCounter:
    """The process-wide counter for a tokenizer, so its cache outlives one request."""
    with _counters_lock:
        if spec not in _counters:
            _counters[spec] = HFTokenCounter(spec)
        return _counters[spec]


def preload_tokenizers(specs: Iterable[str]) -> None:
    """Load the tokenizers the configured models use (≈1 s each) while the proxy starts; the
    others are never loaded (o200k alone is ~130 MB)."""
    for spec in specs:
        try:
            load_tokenizer(spec)
        except Exception:
            logger.exception("compact_hook: could not preload the %s tokenizer", spec)

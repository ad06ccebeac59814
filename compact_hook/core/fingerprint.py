"""Stable, fast fingerprints of wire objects.

One fingerprint per entry per request feeds the token-count cache, the truncation cache
and the compaction store, so it must be cheap (a long history is ~1 MB of text, re-sent
every turn) and stable across processes and machines (replicas share the store).
``json.dumps(sort_keys=True)`` of a whole message costs ~4 ms per MB because it escapes
every long string; here the canonical form is fed to xxh3 piece by piece: keys sorted at
every level, strings as raw length-prefixed UTF-8 (unambiguous, no escaping), scalars by
their JSON spelling.

``cache_control`` keys are skipped at every level: they are prompt-cache breakpoints the
model never reads, and clients move them every turn (Claude Code marks the newest message),
so an entry must keep its fingerprint whether it carries one or not.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import xxhash

Fingerprint = bytes

IGNORED_KEYS = frozenset({"cache_control"})


def fingerprint(value: Any, seed: int = 0) -> Fingerprint:
    """16-byte digest of ``value``'s canonical form (key order and ``cache_control`` do not matter).

    ``seed`` separates wire formats: the same dict means different things in each.
    """
    hasher = xxhash.xxh3_128(seed=seed)
    _feed(hasher, value)
    return hasher.digest()


def _feed(hasher: Any, value: Any) -> None:
    if type(value) is str:
        hasher.update(b"s%d:" % len(value))
        hasher.update(value.encode("utf-8", "surrogatepass"))
    elif type(value) is dict:
        keys = sorted((key for key in value if key not in IGNORED_KEYS), key=str)
        hasher.update(b"d%d:" % len(keys))
        for key in keys:
            _feed(hasher, str(key))
            _feed(hasher, value[key])
    elif type(value) is list or type(value) is tuple:
        hasher.update(b"l%d:" % len(value))
        for item in value:
            _feed(hasher, item)
    else:
        hasher.update(b"v%s;" % _scalar(value))


def _scalar(value: Any) -> bytes:
    if value is None:
        return b"null"
    if value is True or value is False:
        return b"true" if value else b"false"
    return repr(value).encode("utf-8", "surrogatepass")


def combine(parts: Iterable[bytes]) -> Fingerprint:
    """A digest of several digests or labels, in order (for keys and session ids)."""
    hasher = xxhash.xxh3_128()
    for part in parts:
        hasher.update(len(part).to_bytes(4, "big"))
        hasher.update(part)
    return hasher.digest()

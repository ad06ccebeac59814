"""Stable, fast fingerprints of messages.

One fingerprint per message per request feeds the token-count cache, the truncation cache
and the compaction store, so it must be cheap (a long history is ~1 MB of text, re-sent
every turn) and stable across processes and machines (replicas share the store).
``json.dumps(sort_keys=True)`` of a whole message costs ~4 ms per MB because it escapes
every long string; here the canonical form is fed to xxh3 piece by piece: keys sorted at
every level, strings as raw length-prefixed UTF-8 (unambiguous, no escaping), scalars by
their JSON spelling.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import xxhash

Fingerprint = bytes


def fingerprint(message: Any) -> Fingerprint:
    """16-byte digest of ``message``'s canonical form (key order does not matter)."""
    hasher = xxhash.xxh3_128()
    _feed(hasher, message)
    return hasher.digest()


def _feed(hasher: Any, value: Any) -> None:
    if type(value) is str:
        hasher.update(b"s%d:" % len(value))
        hasher.update(value.encode("utf-8", "surrogatepass"))
    elif type(value) is dict:
        hasher.update(b"d%d:" % len(value))
        for key in sorted(value, key=str):
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


def fingerprints(messages: Iterable[Any]) -> list[Fingerprint]:
    return [fingerprint(message) for message in messages]


def combine(parts: Iterable[bytes]) -> Fingerprint:
    """A digest of several digests or labels, in order (for keys and session ids)."""
    hasher = xxhash.xxh3_128()
    for part in parts:
        hasher.update(len(part).to_bytes(4, "big"))
        hasher.update(part)
    return hasher.digest()

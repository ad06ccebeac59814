"""Stable, fast fingerprints of messages.

One fingerprint per message per request feeds both the token-count cache and the
compaction store, so it must be cheap (a long history is ~1 MB of text, re-sent every
turn) and stable across processes and machines (replicas share the store).
``json.dumps(sort_keys=True)`` of a whole message costs ~4 ms per MB because it escapes
every long string; here a message's keys are sorted, long strings are hashed as raw UTF-8
(length-prefixed, so the form stays unambiguous) and nested values by their ``repr``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import xxhash

Fingerprint = bytes

_encode_json = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), check_circular=False, default=repr
).encode


def fingerprint(message: Any) -> Fingerprint:
    """16-byte digest of ``message``'s canonical form (its own key order does not matter)."""
    hasher = xxhash.xxh3_128()
    if type(message) is not dict:
        hasher.update(b"\x00j" + _encode_json(message).encode())
        return hasher.digest()
    for key in sorted(message, key=str):
        value = message[key]
        if type(value) is str:
            hasher.update(b"\x00s%d:%s:" % (len(value), str(key).encode("utf-8", "surrogatepass")))
            hasher.update(value.encode("utf-8", "surrogatepass"))
        elif value is None:
            hasher.update(b"\x00n%s" % str(key).encode("utf-8", "surrogatepass"))
        else:
            hasher.update(b"\x00r%s:" % str(key).encode("utf-8", "surrogatepass"))
            hasher.update(_nested(value))
    return hasher.digest()


def _nested(value: Any) -> bytes:
    """Nested values (tool calls, content parts) in the client's own key order.

    ``repr`` is C-fast and deterministic for JSON values; ``json.dumps(sort_keys=True)``
    costs ~3 µs per tool-call list, most of the hook's time on a long history. A client that
    reordered nested keys between turns would only miss the caches, never match wrongly.
    """
    if isinstance(value, dict | list | str | int | float | bool):
        return repr(value).encode("utf-8", "surrogatepass")
    return _encode_json(value).encode()


def fingerprints(messages: Iterable[Any]) -> list[Fingerprint]:
    return [fingerprint(message) for message in messages]


def combine(parts: Iterable[bytes]) -> Fingerprint:
    """A digest of several digests or labels, in order (for keys and session ids)."""
    hasher = xxhash.xxh3_128()
    for part in parts:
        hasher.update(len(part).to_bytes(4, "big"))
        hasher.update(part)
    return hasher.digest()

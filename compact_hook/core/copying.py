"""Copies no one else holds of what a request brings: LiteLLM changes the dicts and lists of what it
forwards, in place, and a conversation keeps what its last request sent (``state.recent``, and
``Known.context``).

A copy's containers are new and its strings and numbers are the original's own: no one can change
those. Walked, not serialized and parsed again, which would make every string anew (an agent's tool
outputs: most of its bytes).
"""

from __future__ import annotations

from typing import Any


class Unheld(Exception):
    """A value no JSON request holds (an object, a key that is not a string, a cycle)."""


def copied(entry: Any) -> tuple[Any, int]:
    """A copy no one else holds (see the module), and about its JSON size; (None, 0) for what JSON
    cannot hold."""
    try:
        return _tree(entry)
    except (Unheld, RecursionError):
        return None, 0


def _tree(value: Any) -> tuple[Any, int]:
    """``value``'s containers copied, and its size as compact JSON would have it (ASCII text)."""
    kind = type(value)
    if kind is str:
        return value, len(value) + 2
    if kind is dict:
        copy, size = {}, 2
        for key, item in value.items():
            if type(key) is not str:
                raise Unheld(key)
            copy[key], length = _tree(item)
            size += len(key) + length + 4
        return copy, size
    if kind is list:
        items, size = [], 2
        for item in value:
            held, length = _tree(item)
            items.append(held)
            size += length + 1
        return items, size
    if kind is int or kind is float or kind is bool or value is None:
        return value, 8
    raise Unheld(kind)

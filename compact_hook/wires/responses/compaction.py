"""Codex's compaction on the Responses wire: the trigger it sends, the compaction item we answer
with (our handle in its ``encrypted_content``), the answer whole or as the events Codex reads, and
our items taken out of a request that could not be expanded.

What an item stands for, and how it is kept and expanded, is the proxy's (``proxy.answers.codex``).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any

from compact_hook.wires.sse import text_frame

TRIGGER = "compaction_trigger"
COMPACTION = "compaction"
HANDLE_PREFIX = "compact_hook:"
"""Every handle we give out starts so: an item with another ``encrypted_content`` is the provider's."""
HANDLE = re.compile(r"compact_hook:[A-Za-z0-9_-]{22}")
"""A handle exactly as ``Mementos.keep`` makes them (``secrets.token_urlsafe(16)``): anything else
under our prefix is not looked up."""
REFUSED_NOTICE = "[compact_hook: compaction items beyond what one request may carry were left out]"
LOST_NOTICE = (
    "[compact_hook: the earlier part of this conversation was summarized, but that summary has expired "
    "and is no longer available]"
)


def asks_compaction(entries: Sequence[Any]) -> bool:
    """Whether a Responses request's input ends with Codex's trigger: an item (no role) of its type."""
    last = entries[-1] if entries else None
    return isinstance(last, dict) and last.get("type") == TRIGGER and "role" not in last


def without_ours(data: dict[str, Any]) -> int:
    """Our compaction items left in a request (its expansion failed, or never ran) replaced by one
    notice, looking nothing up: the provider refuses an item it cannot decrypt, and a Codex session
    that sent one would fail on every later turn. How many there were."""
    items = data.get("input")
    if not isinstance(items, list) or not any_ours(items):
        return 0
    ours = [index for index, item in enumerate(items) if is_ours(item)]
    kept = [item for item in items if not is_ours(item)]
    kept.insert(ours[0], notice(LOST_NOTICE))
    data["input"] = kept
    return len(ours)


def any_ours(items: list[Any]) -> bool:
    """Whether one of ``items`` is ours. Every ``/v1/responses`` request asks, and a Codex session
    sends hundreds of items, none of ours most of the time: their types are gathered in C first."""
    try:
        types = set(map(dict.get, items, repeat("type")))
    except TypeError:  # an item that is not an object: the slow way
        return any(map(is_ours, items))
    return COMPACTION in types and any(map(is_ours, items))


def is_ours(item: object) -> bool:
    """A compaction item carrying one of our handles."""
    return (
        isinstance(item, dict)
        and item.get("type") == COMPACTION
        and isinstance(item.get("encrypted_content"), str)
        and item["encrypted_content"].startswith(HANDLE_PREFIX)
    )


def notice(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def compaction_response(handle: str, model: str, usage: Mapping[str, int]) -> dict[str, Any]:
    """The whole response (non-streamed): one compaction item."""
    return {
        "id": f"resp_{secrets.token_hex(12)}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": [{"type": COMPACTION, "id": f"cmp_{secrets.token_hex(12)}", "encrypted_content": handle}],
        "usage": dict(usage),
    }


def compaction_events(handle: str, model: str, usage: Mapping[str, int]) -> Iterator[str]:
    """The response as the Responses events Codex reads: created, the one item done, completed."""
    response = compaction_response(handle, model, usage)
    item = response["output"][0]
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    yield text_frame("response.created", {"sequence_number": 0, "response": started})
    yield text_frame("response.output_item.added", {"sequence_number": 1, "output_index": 0, "item": item})
    yield text_frame("response.output_item.done", {"sequence_number": 2, "output_index": 0, "item": item})
    yield text_frame("response.completed", {"sequence_number": 3, "response": response})


def usage_of(tokens_in: int, tokens_out: int) -> dict[str, int]:
    """Responses usage: what the summary read and wrote (Codex requires the three integers)."""
    return {"input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}

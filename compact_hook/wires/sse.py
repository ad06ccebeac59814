"""Raw server-sent events, as LiteLLM hands ``/v1/messages`` and ``streamGenerateContent`` streams
to the iterator hook: bytes cut wherever the network cut them, several events in one chunk or one
event over several. ``Frames`` gives them back whole, each with its bytes (shown as they came) and
its JSON payload (read by the recall streams).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_PENDING_BYTES = 16 * 1024 * 1024
"""A frame longer than this is not waited for: the bytes go on as they came (never held unbounded)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One event: its bytes as they came (terminator included), its name and its data (None: not JSON)."""

    raw: bytes
    event: str
    data: dict[str, Any] | None


def frame(event: str, data: Mapping[str, Any]) -> bytes:
    """An event of our own, as providers write them."""
    named = f"event: {event}\n" if event else ""
    return f"{named}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def text_frame(event: str, payload: Mapping[str, Any]) -> str:
    """An event of an answer of ours (the proxy's own, no provider behind it), as text: its data's
    ``type`` is the event's name, ``payload`` the rest."""
    return f"event: {event}\ndata: {json.dumps({'type': event, **payload})}\n\n"


class Frames:
    """Whole events from a stream of byte chunks (``feed`` each chunk, ``rest`` at the end)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes | str) -> list[Frame | bytes]:
        """The whole events ``chunk`` completes (bytes: what could not be read as events, as it came)."""
        data = self._pending + (chunk.encode() if isinstance(chunk, str) else chunk)
        found: list[Frame | bytes] = []
        while True:
            end, size = _boundary(data)
            if end < 0:
                break
            found.append(_parsed(data[: end + size]))
            data = data[end + size :]
        if len(data) > MAX_PENDING_BYTES:
            found.append(data)
            data = b""
        self._pending = data
        return found

    def rest(self) -> bytes:
        """What came after the last whole event (a stream cut short)."""
        rest, self._pending = self._pending, b""
        return rest


def _boundary(data: bytes) -> tuple[int, int]:
    """Where the first event ends, and the terminator's length (-1: no whole event yet)."""
    ends = [(data.find(sep), len(sep)) for sep in (b"\n\n", b"\r\n\r\n")]
    found = [(at, size) for at, size in ends if at >= 0]
    return min(found) if found else (-1, 0)


def _parsed(raw: bytes) -> Frame:
    event, lines = "", []
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            lines.append(line[5:].removeprefix(" "))
    try:
        data = json.loads("\n".join(lines)) if lines else None
    except ValueError:
        data = None
    return Frame(raw, event, data if isinstance(data, dict) else None)

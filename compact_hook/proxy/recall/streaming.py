"""Recall inside streamed replies: the wire's own stream (``wires.<wire>.stream``), given the
request's pending recall and the rounds that answer it (``rounds.answered``)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping
from dataclasses import dataclass
from typing import Any

from compact_hook.proxy.recall.offer import Pending
from compact_hook.proxy.recall.rounds import answered
from compact_hook.wires.registry import WIRES


@dataclass(frozen=True, slots=True)
class Answering:
    """A request offered the recall tool, as its stream sees it (``wires.base.Recalling``)."""

    pending: Pending

    @property
    def tool(self) -> str:
        return self.pending.tool

    async def answered(self, data: Mapping[str, Any], reply: Any) -> Any:
        return await answered(self.pending, data, reply)


def recalled_stream(
    pending: Pending, data: Mapping[str, Any], chunks: AsyncIterable[Any]
) -> AsyncIterable[Any]:
    """The client's stream of a request offered the recall tool (as it came on a wire not served)."""
    wire = WIRES.get(pending.wire.name)
    return chunks if wire is None else wire.stream(Answering(pending), data, chunks)


__all__ = ["recalled_stream"]

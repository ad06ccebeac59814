"""What a wire is: the contracts each wire's folder fulfils, and what its adapter hands the engine.

A wire (``chat``, ``anthropic``, ``responses``, ``google``) is one folder holding three parts, each
against a contract here, and one entry in ``wires.registry``:

- ``format.py``, a ``WireFormat``: parses a request body into a ``Conversation`` (the entries, what
  else the model reads, the output reserve: ``wires.conversation``, the value and the state it
  carries; this module holds only the contracts) and renders the engine's result back into the body.
  Between the two the engine sees only core ``Item``s; the adapter also builds the few items we ever
  create (``core.items.Builder``).
- ``recall.py``, a ``RecallWire``: the recall tool's definition on the wire, the model's ``Call``s to
  it in a reply, the follow-up request that carries the answers, the usage of the rounds.
- ``stream.py``: recall inside the wire's streamed reply, given what a ``Recalling`` request offers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from compact_hook.core.items import Builder, Item, Placement
from compact_hook.core.outcomes import Reason

if TYPE_CHECKING:
    from compact_hook.wires.conversation import Conversation


class WireFormat(Builder, Protocol):
    """One wire format: ``chat``, ``anthropic`` or ``responses``."""

    name: str
    seed: int
    """Fingerprint seed: the same dict means different things in different formats."""
    metadata_key: str
    """The request's per-request dict the proxy keeps (never sent upstream)."""
    first_turn_user: bool
    """The conversation must open with a user turn after its head."""
    placement: Placement
    """Where system items may stand (normalization moves ones a compaction reordered)."""
    bound_thinking: bool
    """The provider checks each thinking block against everything before it (Anthropic's
    preserved thinking): one produced before we changed that prefix must not be sent back."""

    entries_key: str
    """The request's key holding its conversation's entries (``messages``, ``input``, ``contents``)."""

    def parse(self, data: dict[str, Any], unseen: Sequence[int] | None = None) -> Conversation | Rejected:
        """The request as the engine sees it, or why it must pass through untouched. ``unseen``: the
        indices of the only entries to check one by one — the others are the same as entries of an
        earlier request of this conversation this wire accepted (``state.recent``); None: all."""
        ...

    def item(self, raw: Any) -> Item:
        """One entry, parsed (only entries parse() accepted are given)."""
        ...

    def render(self, data: dict[str, Any], entries: list[Any]) -> None:
        """Put the entries to forward back into the request body."""
        ...


@dataclass(frozen=True, slots=True)
class Rejected:
    """A request the engine must not touch: malformed, or managing its own context."""

    reason: Reason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Call:
    """One call of the model to the recall tool: its id and the handle it asks for."""

    id: str
    handle: str


class RecallWire(Protocol):
    """The recall tool on one wire (``<wire>/recall.py``)."""

    name: str
    metadata_key: str
    entries: str
    """The request's field holding the conversation."""
    kept_params: tuple[str, ...]
    """What a follow-up keeps of the request besides its conversation (LiteLLM's own fields stay out)."""

    def tool(self, name: str) -> dict[str, Any]: ...

    def tool_names(self, data: Mapping[str, Any]) -> set[str]: ...

    def calls(self, response: Any, tool: str) -> tuple[list[Call], bool]:
        """The recall calls in ``response``, and whether it calls the client's tools too."""
        ...

    def followup(self, request: dict[str, Any], response: Any, answers: list[tuple[Call, str]]) -> None:
        """Append the model's turn and the answers to ``request``'s conversation."""
        ...

    async def send(self, router: Any, request: dict[str, Any]) -> Any: ...

    def usage(self, response: Any) -> dict[str, int]: ...

    def finished(self, response: Any, tool: str, usage: dict[str, int], first: Any) -> Any:
        """``response`` without calls to ``tool``, its usage ``usage`` (every round's); ``first``: the
        reply that called the tool first (the client's turn continues from it)."""
        ...


class Recalling(Protocol):
    """A request offered the recall tool, as its stream sees it (``<wire>/stream.py``): the tool's
    name, and the rounds that answer a reply calling only it (``proxy.recall``)."""

    @property
    def tool(self) -> str: ...

    async def answered(self, data: Mapping[str, Any], reply: Any) -> Any:
        """The final reply after our rounds; raises ``guard.RoundFailed`` when a round failed for good."""
        ...

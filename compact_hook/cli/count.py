"""``count``: what a request costs, by part, with the tokenizer the proxy would use.

Our tokenizer's count, and the provider's estimated from it at the model's measured prior (or
``--ratio``): offline, nothing has been billed yet; the proxy itself learns the provider's ratio
from usage (``core.calibration``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table

from compact_hook.cli.inputs import InputError, Loaded
from compact_hook.core.counting import TokenCounter, item_strings, request_total
from compact_hook.core.items import PartKind, Role
from compact_hook.wires import Conversation, Rejected
from compact_hook.wires.parsing import context_strings

TOOL_KEYS = ("tools", "functions")


@dataclass(frozen=True, slots=True)
class PartCounts:
    """Tokens of each part of a request; ``total`` is what the proxy compares with the window."""

    head: int
    tool_definitions: int
    messages: int
    tool_outputs: int
    total: int
    entries: int


def parse(loaded: Loaded) -> Conversation:
    conversation = loaded.wire.parse(dict(loaded.data))
    if isinstance(conversation, Rejected):
        raise InputError(f"the proxy would pass this request through untouched: {conversation.reason.value}")
    return conversation


def count_parts(loaded: Loaded, counter: TokenCounter) -> PartCounts:
    conversation = parse(loaded)
    tools = [loaded.data.get(key) for key in TOOL_KEYS]
    head = definitions = 0
    for value in conversation.context:
        strings, fixed = context_strings(value)
        tokens = sum(counter.count_text(text) for text in strings) + fixed
        if any(value is tool for tool in tools):
            definitions += tokens
        else:
            head += tokens
    items = conversation.items()
    counts = counter.count(conversation.prints(), lambda i: item_strings(items[i]))
    outputs = sum(
        counter.count_text(part.text) for item in items for part in item.parts if part.kind is PartKind.RESULT
    )
    context = head + definitions + (conversation.overhead if conversation.context else 0)
    total = request_total(context, counts)
    instructions = sum(count for item, count in zip(items, counts, strict=True) if item.role is Role.SYSTEM)
    messages = total - context - outputs - instructions
    return PartCounts(head + instructions, definitions, messages, outputs, total, len(items))


@dataclass(frozen=True, slots=True)
class Shown:
    """How ``count`` shows a request: the tokenizer it counts with, and the ratio to the provider's
    count with where that comes from (a prior, or the operator's ``--ratio``)."""

    wire: str
    tokenizer: str
    ratio: float = 1.0
    why: str = ""


def count_table(counts: PartCounts, shown: Shown) -> Table:
    table = Table(title=f"{counts.entries} entries, {shown.wire} format, tokenizer {shown.tokenizer}")
    table.add_column("part")
    table.add_column("tokens (ours)", justify="right")
    estimated = shown.ratio != 1.0
    if estimated:
        table.add_column(f"provider's (x{shown.ratio:g})", justify="right")
    table.add_column("share", justify="right")
    rows = [
        ("system / instructions", counts.head),
        ("tool definitions", counts.tool_definitions),
        ("messages (framing included)", counts.messages),
        ("tool outputs", counts.tool_outputs),
        ("total", counts.total),
    ]
    for name, tokens in rows:
        provider = [f"{round(tokens * shown.ratio):,}"] if estimated else []
        style = "bold" if name == "total" else None
        table.add_row(name, f"{tokens:,}", *provider, f"{tokens / max(1, counts.total):.1%}", style=style)
    table.caption = (
        f"the provider's count estimated at x{shown.ratio:g} ({shown.why}); the proxy learns it from usage"
        if estimated
        else f"our tokenizer's count ({shown.why}); the proxy learns the provider's from usage"
    )
    return table

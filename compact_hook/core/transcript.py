"""The middle as a readable transcript for the summary model.

A role-prefixed transcript costs fewer tokens than raw JSON and reads naturally
(LangChain's ``get_buffer_string``); tool results are labelled with the tool that produced
them (from the one pairing), previous summaries are labelled as such so the model merges
them instead of summarizing a summary as if it were dialogue, and image locations survive
so the summary can mention them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from compact_hook.core.items import Item, Part, PartKind, Role, summary_text
from compact_hook.core.pairing import pair
from compact_hook.core.recall import mention, named_by_us
from compact_hook.core.truncate import BYTES_PER_TOKEN, Truncating, truncate_results


def transcript_entries(items: Sequence[Item], recall: bool = False, output_tokens: int = 0) -> list[str]:
    """One text block per item, in order. ``recall``: each tool output is labelled with its handle
    (``core.recall``), unless its text names one already (a placeholder or a truncated output names
    the client's original), and, with ``output_tokens``, keeps its beginning and end, about that
    many tokens (cut by bytes: no tokenizer), its marker naming the handle — the model can read the
    whole back, so a summary need not pay to read it; nothing else is cut short."""
    tool_of = pair(items).tool_of
    if recall and output_tokens > 0:
        items = [_read_shorter(item, output_tokens) for item in items]
    entries: list[str] = []
    for index, item in enumerate(items):
        if item.is_summary:
            entries.append(f"### previous summary\n{summary_text(item)}")
            continue
        if item.role is Role.TOOL and len(item.parts) == 1:  # one result: labelled by its tool alone
            result = item.parts[0]
            entries.append(
                f"### {_result_label(result, tool_of.get((index, 0), 'tool'), recall)}\n{result.text}"
            )
            continue
        lines = [f"### {item.role.value}"]
        for position, part in enumerate(item.parts):
            text = render_part(part, tool_of.get((index, position), "tool"), recall)
            if text:
                lines.append(text)
        entries.append("\n".join(lines))
    return entries


def _read_shorter(item: Item, output_tokens: int) -> Item:
    """The item with each tool output over ``output_tokens`` cut to its beginning and end."""
    how = Truncating(output_tokens, "bytes", _no_token_cut, recall=True)
    cuts = truncate_results(item, how)
    if not cuts:
        return item
    parts = tuple(
        dataclasses.replace(part, text=cuts[index]) if index in cuts else part
        for index, part in enumerate(item.parts)
    )
    return dataclasses.replace(item, parts=parts)


def read_tokens(item: Item, tokens: int, output_tokens: int) -> int:
    """About how many of an item's ``tokens`` a summary reads when its tool outputs keep
    ``output_tokens`` each (``transcript_entries``): what a bytes cut leaves out, at its four bytes
    a token, is not read (an estimate for the cost of a summary, not a count)."""
    if output_tokens <= 0 or not item.has_results:
        return tokens
    over = sum(
        max(0, len(part.text) // BYTES_PER_TOKEN - output_tokens)
        for part in item.parts
        if part.kind is PartKind.RESULT
    )
    return max(0, tokens - over)


def _no_token_cut(text: str, head: int, tail: int) -> tuple[int, int, int]:
    raise AssertionError("a bytes cut places no token boundary")


def _result_label(part: Part, tool: str, recall: bool) -> str:
    label = "tool result, error" if part.error else "tool result"
    back = f"; {mention(part.text)}" if recall and part.text and named_by_us(part.text) is None else ""
    return f"{label} ({tool}{back})"


def render_part(part: Part, tool: str = "tool", recall: bool = False) -> str:
    kind = part.kind
    if kind is PartKind.TEXT:
        return part.text
    if kind is PartKind.CALL:
        return f"-> call {part.name or 'tool'}({part.text})"
    if kind is PartKind.RESULT:
        return f"[{_result_label(part, tool, recall)}]\n{part.text}"
    if kind is PartKind.THINKING:
        return f"[thinking] {part.text}" if part.text else ""
    if kind is PartKind.MEDIA:
        return f"[{part.name or 'media'}: {part.text or 'inline'}]"
    return f"[{part.name or 'unknown'} part] {part.text}"

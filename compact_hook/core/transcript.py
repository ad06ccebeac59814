"""The middle as a readable transcript for the summary model.

A role-prefixed transcript costs fewer tokens than raw JSON and reads naturally
(LangChain's ``get_buffer_string``); tool results are labelled with the tool that produced
them (from the one pairing), previous summaries are labelled as such so the model merges
them instead of summarizing a summary as if it were dialogue, and image locations survive
so the summary can mention them.
"""

from __future__ import annotations

from collections.abc import Sequence

from compact_hook.core.items import Item, Part, PartKind, Role, summary_text
from compact_hook.core.pairing import pair
from compact_hook.core.recall import mention, mentioned


def transcript_entries(items: Sequence[Item], recall: bool = False) -> list[str]:
    """One text block per item, in order; nothing is cut short. ``recall``: each tool output is
    labelled with its handle (``core.recall``), unless its text names one already (a placeholder
    or a truncated output names the client's original)."""
    tool_of = pair(items).tool_of
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


def _result_label(part: Part, tool: str, recall: bool) -> str:
    label = "tool result, error" if part.error else "tool result"
    back = f"; {mention(part.text)}" if recall and part.text and not mentioned(part.text) else ""
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

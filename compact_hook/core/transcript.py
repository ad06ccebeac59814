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


def transcript_entries(items: Sequence[Item]) -> list[str]:
    """One text block per item, in order; nothing is cut short."""
    tool_of = pair(items).tool_of
    entries: list[str] = []
    for index, item in enumerate(items):
        if item.is_summary:
            entries.append(f"### previous summary\n{summary_text(item)}")
            continue
        if item.role is Role.TOOL and len(item.parts) == 1:  # one result: labelled by its tool alone
            result = item.parts[0]
            label = "tool result, error" if result.error else "tool result"
            entries.append(f"### {label} ({tool_of.get((index, 0), 'tool')})\n{result.text}")
            continue
        lines = [f"### {item.role.value}"]
        for position, part in enumerate(item.parts):
            text = render_part(part, tool_of.get((index, position), "tool"))
            if text:
                lines.append(text)
        entries.append("\n".join(lines))
    return entries


def render_part(part: Part, tool: str = "tool") -> str:
    kind = part.kind
    if kind is PartKind.TEXT:
        return part.text
    if kind is PartKind.CALL:
        return f"-> call {part.name or 'tool'}({part.text})"
    if kind is PartKind.RESULT:
        label = "tool result, error" if part.error else "tool result"
        return f"[{label} ({tool})]\n{part.text}"
    if kind is PartKind.THINKING:
        return f"[thinking] {part.text}" if part.text else ""
    if kind is PartKind.MEDIA:
        return f"[{part.name or 'media'}: {part.text or 'inline'}]"
    return f"[{part.name or 'unknown'} part] {part.text}"

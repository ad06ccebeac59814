"""Pure assembly of the compacted history: ``[*head, *kept, summary, *tail]``."""

from __future__ import annotations

from collections.abc import Sequence

from compact_hook.messages import SUMMARY_PREFIX, Message, text_of
from compact_hook.partition import Partition


def summary_message(summary: str) -> Message:
    """The one message that stands for the middle; its fixed prefix marks it as ours."""
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n\n{summary.strip()}"}


def summary_text(message: Message) -> str:
    """The summary body of a message made by ``summary_message``."""
    return text_of(message.get("content")).removeprefix(SUMMARY_PREFIX).strip()


def assemble(messages: Sequence[Message], part: Partition, summary: Message) -> list[Message]:
    """A new list holding the very same message objects that are kept (never copies)."""
    return [
        *messages[: part.head_end],
        *(messages[index] for index in part.kept),
        summary,
        *messages[part.tail_start :],
    ]

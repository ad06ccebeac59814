"""A summary without a model: the middle's facts, verbatim, in the summary's sections.

It stands in when the summary model fails and the request would not fit otherwise, and it
is the summarizer itself for ``summary_model: digest`` (zero LLM cost). It never invents:
the user's requests, earlier summaries, files touched, each tool call with whether it
failed, and error lines are copied from the transcript; only the selection is ours.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from compact_hook.core.items import Item, PartKind, summary_text
from compact_hook.core.pairing import pair
from compact_hook.core.recall import MENTION, mention, named_by_us

HEADER = "(Digest made without a model: facts copied from the compacted messages.)"
PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "notebook_path", "target_file", "paths")
PATH_PATTERN = re.compile(r"(?:~|\.{1,2})?(?:/?[\w.@-]+/)+[\w.@-]+\.[A-Za-z0-9]{1,8}\b")
MAX_USER_CHARS = 1500
MAX_ARGUMENT_CHARS = 160
EARLIER = "Earlier summary"
USER_REQUESTS = "User requests"
CALLS = "Tool calls and outcomes"
CALLS_WEIGHT = 2
ERROR_PATTERN = re.compile(r"\b(error|exception|traceback|failed|failure|fatal|panic)\b", re.IGNORECASE)
MAX_LINE_CHARS = 300
OMITTED = re.compile(r"^\(\d+ earlier entries omitted\)$")


def digest(middle: Sequence[Item], max_chars: int, recall: bool = False) -> str:
    """Sections of facts from ``middle``; older lines give way first when over ``max_chars``.

    An earlier digest in ``middle`` is merged section by section (its lines first), never
    nested: re-compacting keeps every fact it held, the users' words last to give way.
    ``recall``: each call's outcome names the handle its output is read back by (``core.recall``),
    as the summary model is asked to.
    """
    sections = {
        EARLIER: [],
        USER_REQUESTS: [
            clip(item.user_text(), MAX_USER_CHARS) for item in middle if item.user_text().strip()
        ],
        "Files touched": _files(middle),
        CALLS: _calls(middle, recall),
        "Errors": _errors(middle),
    }
    for item in middle:
        if item.is_summary:
            _merge(sections, summary_text(item))
    return _render(_fit(sections, max_chars))


def _merge(sections: dict[str, list[str]], earlier: str) -> None:
    """Put an earlier summary's lines before this middle's: by section when it is one of our
    digests, else whole under "Earlier summary" (a model's summary is not ours to take apart)."""
    if not earlier.startswith(HEADER):
        sections[EARLIER].append(earlier)
        return
    for block in earlier.removeprefix(HEADER).split("\n\n## ")[1:]:
        name, _, body = block.partition("\n")
        if name not in sections or body == "none":
            continue
        lines = [line for line in body.split(_separator(name)) if line.strip() and not OMITTED.match(line)]
        fresh = [line for line in lines if line not in sections[name]]
        sections[name][:0] = fresh


def _files(middle: Sequence[Item]) -> list[str]:
    found: dict[str, None] = {}
    for text in _texts(middle, PartKind.CALL):
        found.update(dict.fromkeys([*_path_values(_arguments(text)), *PATH_PATTERN.findall(text)]))
    return list(found)


def _texts(middle: Sequence[Item], kind: PartKind) -> list[str]:
    return [part.text for item in middle for part in item.parts if part.kind is kind]


def _path_values(arguments: object) -> list[str]:
    if not isinstance(arguments, dict):
        return []
    values: list[str] = []
    for key in PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            values.append(value)
        elif isinstance(value, list):
            values.extend(v for v in value if isinstance(v, str) and v)
    return values


def _arguments(raw: str) -> object:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested beyond what the parser recurses into
        return raw


def _calls(middle: Sequence[Item], recall: bool) -> list[str]:
    """Each call with its outcome (and its output's handle), paired by the one pairing."""
    outcome: dict[tuple[int, int], str] = {}
    for result, call in pair(middle).call_of.items():
        part = middle[result[0]].parts[result[1]]
        outcome[call] = _outcome(part.text, part.error) + (_handle(part.text) if recall else "")
    return [
        f"- {_describe_call(part.name, part.text)} -> {outcome.get((index, position), 'no result')}"
        for index, item in enumerate(middle)
        for position, part in enumerate(item.parts)
        if part.kind is PartKind.CALL
    ]


def _handle(output: str) -> str:
    """`` (recall 048213)``: the handle an output already names (a placeholder, a truncation marker), else
    its own; nothing for an empty output."""
    if not output:
        return ""
    named = named_by_us(output)
    return f" ({MENTION.format(handle=named)})" if named else f" ({mention(output)})"


def _describe_call(name: str, arguments: str) -> str:
    return f"{name or 'tool'}({clip(' '.join(arguments.split()), MAX_ARGUMENT_CHARS)})"


def _outcome(result: str, error: bool) -> str:
    """``ok``, or ``failed:`` with the last error line (an output ends with how it failed)."""
    failure = next((line for line in reversed(result.splitlines()) if ERROR_PATTERN.search(line)), None)
    if failure:
        return f"failed: {clip(failure, MAX_LINE_CHARS)}"
    return f"failed: {clip(result, MAX_LINE_CHARS)}" if error else "ok"


def _errors(middle: Sequence[Item]) -> list[str]:
    found = (line for text in _texts(middle, PartKind.RESULT) for line in error_lines(text))
    return [f"- {line}" for line in dict.fromkeys(found)]


def _fit(sections: dict[str, list[str]], max_chars: int) -> dict[str, list[str]]:
    """Drop the oldest lines of the longest section until the digest fits — the tool calls' list
    counting ``CALLS_WEIGHT`` times its size (its facts are also in the files and errors
    sections), the newest line of each section last, the users' requests only when nothing else
    is left. Linear in the lines."""
    chars = {name: sum(map(len, lines)) for name, lines in sections.items()}
    dropped = dict.fromkeys(sections, 0)
    size = _size(sections)
    while size > max_chars and any(dropped[name] < len(lines) for name, lines in sections.items()):
        left = [key for key, lines in sections.items() if dropped[key] < len(lines)]
        rest = [key for key in left if key != USER_REQUESTS]
        several = [key for key in rest if len(sections[key]) - dropped[key] > 1]
        name = max(
            several or rest or left, key=lambda key: chars[key] * (CALLS_WEIGHT if key == CALLS else 1)
        )
        line = sections[name][dropped[name]]
        dropped[name] += 1
        chars[name] -= len(line)
        size -= len(line) + 1
    fitted = {}
    for name, lines in sections.items():
        kept = lines[dropped[name] :]
        fitted[name] = [f"({dropped[name]} earlier entries omitted)", *kept] if dropped[name] else kept
    return fitted


def _size(sections: dict[str, list[str]]) -> int:
    return sum(len(line) + 1 for lines in sections.values() for line in lines) + 200


def _separator(section: str) -> str:
    """Lines of a section are one per line; users' requests (which may span lines) a blank line apart."""
    return "\n\n" if section == USER_REQUESTS else "\n"


def _render(sections: dict[str, list[str]]) -> str:
    parts = [HEADER]
    for name, lines in sections.items():
        parts.append(f"## {name}\n" + (_separator(name).join(lines) if lines else "none"))
    return "\n\n".join(parts)


def clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def error_lines(text: str) -> list[str]:
    """The lines of ``text`` that report an error, each clipped, in order, without repeats: facts an
    agent needs word for word, kept by the digest and by clearing's placeholder alike, so a tool
    result's error survives whichever of them takes the result out of view."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        if ERROR_PATTERN.search(line):
            seen.setdefault(clip(line, MAX_LINE_CHARS), None)
    return list(seen)

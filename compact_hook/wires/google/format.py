"""Google GenAI ``generateContent`` (``/v1beta/models/{model}:generateContent`` and
``:streamGenerateContent``; LiteLLM call types ``agenerate_content`` and
``agenerate_content_stream``), whatever provider the deployment is: LiteLLM translates after us.

Entries are ``contents``: ``{role: "user" | "model", parts: [...]}``. A model turn is a model
content; its ``functionCall`` parts are answered by ``functionResponse`` parts in the next user
content (paired by ``id`` where both carry one, else in order and by name: ``core.pairing``).
``systemInstruction`` (or ``system_instruction``), ``tools`` and a response schema are read but
never changed; ``generationConfig.maxOutputTokens`` is the output reserve. Parts we do not know
(``executableCode``, ``codeExecutionResult``, ``videoMetadata``…) are kept whole, in place.

The Gemini API wants user and model contents to alternate, and the first to be the user's
(``first_turn_user``). What we build stands next to the client's contents — the summary after
the pinned user messages, a user turn moved before it — so ``render`` joins adjacent contents of
one role into one, their parts in order and each part exactly as the client sent it.

**Thought signatures** (Gemini 3 and later). A ``functionCall`` of the *current turn* (every
content after the last user content that is not only function responses) must come back with
the ``thoughtSignature`` the model attached to it — for parallel calls only the first part
carries one — or the API answers 400. Kept parts are the client's objects, signatures included,
and the summary we insert is a user text content, so it *ends* a turn: whatever we forward after
it is the client's tail, whose calls carry what the client sent. We never invent a signature.
Google's documented stand-in value (``skip_thought_signature_validator``) is for history a client
rebuilt without them; a client that sends its current turn without signatures gets the API's
answer, as it would without us.

``cachedContent`` means the provider holds part of the conversation: the request passes through
untouched (``client_managed``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from compact_hook.core.items import Item, Part, PartKind, Placement, Role, summary_body
from compact_hook.core.normalize import ABORTED_RESULT
from compact_hook.core.outcomes import Reason
from compact_hook.wires.base import Rejected
from compact_hook.wires.conversation import Conversation
from compact_hook.wires.parsing import (
    EntryShape,
    answers_after,
    compact_json,
    positive_int,
    shape_rejected,
    string,
)

ROLES = {"user": Role.USER, "model": Role.ASSISTANT, "function": Role.TOOL}
"""``function``: the role Vertex once gave a content of function responses; still accepted."""
CONTENT_SHAPE = EntryShape(ROLES, "parts")
MEDIA_TOKENS = 1120
"""Gemini 3's image cost at its default (high) media resolution; used for every inline or file
part: an estimate, as audio and video cost by their length."""
MEDIA_KEYS = ("inlineData", "inline_data", "fileData", "file_data")
CALL_KEYS = ("functionCall", "function_call")
RESPONSE_KEYS = ("functionResponse", "function_response")
SYSTEM_KEYS = ("systemInstruction", "system_instruction")
CONFIG_KEYS = ("generationConfig", "generation_config", "config")
RESERVE_KEYS = ("maxOutputTokens", "max_output_tokens")
SCHEMA_KEYS = ("responseSchema", "response_schema", "responseJsonSchema", "response_json_schema")
MANAGED_KEYS = ("cachedContent", "cached_content")
SIGNATURE_KEYS = frozenset({"thoughtSignature", "thought_signature", "thought"})
RESULT_TEXT_KEYS = ("output", "result", "content", "error")
"""A ``response`` holding one string under one of these keys reads as that string."""


class GoogleFormat:
    name, seed, metadata_key, entries_key = "google", 6, "metadata", "contents"  # see base.WireFormat
    first_turn_user, placement, bound_thinking = True, Placement.ANYWHERE, False

    def parse(self, data: dict[str, Any], unseen: Sequence[int] | None = None) -> Conversation | Rejected:
        if any(data.get(key) for key in MANAGED_KEYS):
            return Rejected(Reason.CLIENT_MANAGED, "cachedContent")
        rejected = shape_rejected(data, "contents", CONTENT_SHAPE.problem, unseen)
        if rejected is not None:
            return rejected
        contents, config = data["contents"], _config(data)
        return Conversation(self, contents, _context(data, config), positive_int(config, *RESERVE_KEYS))

    def item(self, raw: Any) -> Item:
        return Item(ROLES[raw["role"]], tuple(_part(part) for part in raw["parts"]), raw)

    def render(self, data: dict[str, Any], entries: list[Any]) -> None:
        data["contents"] = joined(entries)

    # -- the items we build ------------------------------------------------------------------------

    def summary(self, text: str, mark: Mapping[str, Any] | None = None) -> Item:
        return self.item({"role": "user", "parts": [{"text": summary_body(text)}]})

    def replace_outputs(self, item: Item, outputs: Mapping[int, str], keep_media: bool) -> Item:
        parts = [
            _with_output(part, outputs[index], keep_media) if index in outputs else part
            for index, part in enumerate(item.raw["parts"])
        ]
        return self.item({**item.raw, "parts": parts})

    def replace_text(self, item: Item, texts: Mapping[int, str]) -> Item:
        parts = [
            {**part, "text": texts[index]} if index in texts and isinstance(part.get("text"), str) else part
            for index, part in enumerate(item.raw["parts"])
        ]
        return self.item({**item.raw, "parts": parts})

    def without_parts(self, item: Item, indices: Sequence[int]) -> Item | None:
        gone = set(indices)
        parts = [part for index, part in enumerate(item.raw["parts"]) if index not in gone]
        return self.item({**item.raw, "parts": parts}) if parts else None

    def answer(self, unit: Sequence[Item], calls: Sequence[tuple[int, int]]) -> list[Item]:
        """A ``functionResponse`` per unanswered call in the user content right after the model's
        (among its responses, in the order of the calls), or in a new user content."""
        missing: dict[int, list[int]] = {}
        for offset, position in calls:
            missing.setdefault(offset, []).append(position)
        return answers_after(unit, missing, self._carry)

    def _carry(self, model: Item, following: Item | None, positions: list[int]) -> Item:
        raw: dict[str, Any] = following.raw if following is not None else {"role": "user", "parts": []}
        return self.item({**raw, "parts": _answered_parts(model, positions, raw["parts"])})


def joined(entries: Sequence[Any]) -> list[Any]:
    """Adjacent contents of one role as one content: the Gemini API wants the roles to alternate.
    A content that needs no joining is the client's own object."""
    out: list[Any] = []
    for entry in entries:
        if out and out[-1]["role"] == entry["role"]:
            out[-1] = {**out[-1], "parts": [*out[-1]["parts"], *entry["parts"]]}
        else:
            out.append(entry)
    return out


def _config(data: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in CONFIG_KEYS:
        value = data.get(key)
        if isinstance(value, dict):
            return value
    return {}


def _context(data: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the model reads beside the contents: the system instruction's text, the tool
    declarations, a response schema."""
    system = next((data[key] for key in SYSTEM_KEYS if data.get(key)), None)
    schema = next((config[key] for key in SCHEMA_KEYS if config.get(key)), None)
    values = (_system_text(system), data.get("tools"), schema)
    return tuple(value for value in values if value)


def _system_text(system: Any) -> Any:
    """A system instruction as text where it is text (a string, or a content of text parts)."""
    if isinstance(system, dict) and isinstance(system.get("parts"), list):
        parts = [part for part in system["parts"] if isinstance(part, dict)]
        if parts and all(isinstance(part.get("text"), str) for part in parts):
            return "\n".join(part["text"] for part in parts)
    return system


def _part(part: dict[str, Any]) -> Part:
    for key, parse in _PART_PARSERS:
        value = part.get(key)
        if value is not None:
            return parse(part, value)
    if set(part) <= SIGNATURE_KEYS:  # a signature alone (the end of a model turn): nothing to read
        return Part(PartKind.THINKING)
    return Part(PartKind.OPAQUE, compact_json(part), name=next(iter(part), "part"))


def _text_part(part: dict[str, Any], text: Any) -> Part:
    kind = PartKind.THINKING if part.get("thought") is True else PartKind.TEXT
    return Part(kind, text if isinstance(text, str) else "")


def _call_part(part: dict[str, Any], call: Any) -> Part:
    call = call if isinstance(call, dict) else {}
    args = call.get("args")
    return Part(
        PartKind.CALL,
        compact_json(args) if args is not None else "",
        string(call.get("name")) or "tool",
        string(call.get("id")),
    )


def _response_part(part: dict[str, Any], response: Any) -> Part:
    response = response if isinstance(response, dict) else {}
    body = response.get("response")
    media = sum(1 for inner in response.get("parts") or () if isinstance(inner, dict))
    return Part(
        PartKind.RESULT,
        _result_text(body),
        string(response.get("name")),
        string(response.get("id")),
        media * MEDIA_TOKENS,
        isinstance(body, dict) and "error" in body and "output" not in body,
    )


def _media_part(part: dict[str, Any], media: Any) -> Part:
    media = media if isinstance(media, dict) else {}
    uri = media.get("fileUri") or media.get("file_uri")
    data = media.get("data")
    where = uri if isinstance(uri, str) else ""
    if not where and isinstance(data, str):
        where = f"inline data, {len(data)} characters"
    mime = media.get("mimeType") or media.get("mime_type")
    return Part(PartKind.MEDIA, where, string(mime) or "media", fixed_tokens=MEDIA_TOKENS)


_PART_PARSERS: tuple[tuple[str, Callable[[dict[str, Any], Any], Part]], ...] = (
    *((key, _call_part) for key in CALL_KEYS),
    *((key, _response_part) for key in RESPONSE_KEYS),
    ("text", _text_part),
    *((key, _media_part) for key in MEDIA_KEYS),
)


def _result_text(body: Any) -> str:
    """What the model reads of a function's response: its one text field, else its JSON."""
    if isinstance(body, dict) and len(body) == 1:
        key, value = next(iter(body.items()))
        if key in RESULT_TEXT_KEYS and isinstance(value, str):
            return value
    return "" if body is None else compact_json(body)


def _with_output(part: dict[str, Any], text: str, keep_media: bool) -> dict[str, Any]:
    key = next(key for key in RESPONSE_KEYS if key in part)
    response = {k: v for k, v in part[key].items() if k != "parts" or keep_media}
    return {**part, key: {**response, "response": {"output": text}}}


def _answered_parts(model: Item, positions: list[int], parts: list[Any]) -> list[Any]:
    """``parts`` (the user content after the model's) with a synthetic response for each call at
    ``positions``, each where its call stands among the model's calls; other parts after them."""
    calls = [k for k, part in enumerate(model.parts) if part.kind is PartKind.CALL]
    responses = [part for part in parts if any(key in part for key in RESPONSE_KEYS)]
    others = [part for part in parts if not any(key in part for key in RESPONSE_KEYS)]
    for position in sorted(positions):
        call = model.parts[position]
        answer: dict[str, Any] = {"name": call.name, "response": {"error": ABORTED_RESULT}}
        if call.call_id:
            answer["id"] = call.call_id
        responses.insert(min(calls.index(position), len(responses)), {"functionResponse": answer})
    return [*responses, *others]

"""The stand-in's Google GenAI surface (``generateContent``): what it reads, checks, refuses and answers.

Stdlib only, like the stand-in (``standin_upstream.py`` routes ``/{v1beta,v1alpha,v1}/models/<model>:
generateContent`` and ``:streamGenerateContent`` here, and the same paths without the version). What the
Gemini API does, as far as a test can fail on it:

* a request is ``contents`` (``{role: "user" | "model", parts: [...]}``), ``systemInstruction`` (or
  ``system_instruction``), ``tools`` (``functionDeclarations``) and ``generationConfig``; the model is named
  in the path (LiteLLM also puts it in the body);
* ``strict`` (``check_google_contents``): roles alternate, beginning and ending with the user's; a model
  content's ``functionCall`` parts are answered, one ``functionResponse`` each (by ``id`` where both carry
  one, else by name), by the user content right after it; no response without its call;
* Gemini 3 and later (``agent_script.google_signature_problem``, strict or not): a function call of the
  current turn must come back with its thought signature;
* errors are Google's ``{"error": {"code", "message", "status"}}``; a request over ``limit<N>`` gets the
  sentence LiteLLM maps to its context-window error;
* a whole answer is a ``GenerateContentResponse``; a streamed one (``alt=sse``) is ``data:`` lines of
  partial responses, the last with ``finishReason`` and ``usageMetadata`` (without ``alt=sse``: one JSON
  array of them).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

from prompt_cache import approx_tokens

STREAM_PIECES = 4
PATH = re.compile(
    r"^(?:/v1beta|/v1alpha|/v1)?/models/(?P<model>[^:/]+):(?P<method>generateContent|streamGenerateContent)$"
)
ALTERNATE = "Please ensure that multiturn requests alternate between user and model."
ENDS_WITH_USER = "Please ensure that multiturn requests ends with a user role or a function response."
STARTS_WITH_USER = "Please ensure that the first content in a multiturn request is from the user role."

SSEEvent = tuple[str | None, dict[str, Any]]


class GoogleBadRequest(Exception):
    """A 400 in Google's format."""


def route(path: str) -> tuple[str, bool] | None:
    """``(model, streamed)`` for a generateContent path, else None."""
    match = PATH.match(path)
    if match is None:
        return None
    return match.group("model"), match.group("method") == "streamGenerateContent"


def error(code: int, message: str) -> dict[str, Any]:
    status = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}.get(code, "INTERNAL")
    return {"error": {"code": code, "message": message, "status": status}}


def too_long(tokens: int, limit: int) -> dict[str, Any]:
    """Gemini's context-length error (LiteLLM maps this sentence to ContextWindowExceededError)."""
    return error(
        400, f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({limit})."
    )


# -- reading ------------------------------------------------------------------------------------------------


def contents_of(body: dict[str, Any]) -> list[Any]:
    value = body.get("contents")
    return value if isinstance(value, list) else []


def parts_of(content: Any) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts or [] if isinstance(part, dict)]


def part_text(part: dict[str, Any]) -> str:
    """What the model reads of a part: its text, a call's arguments, a response's JSON."""
    if isinstance(part.get("text"), str):
        return part["text"]
    for key in ("functionCall", "function_call", "functionResponse", "function_response"):
        if isinstance(part.get(key), dict):
            return json.dumps(part[key], sort_keys=True)
    return ""


def content_text(content: Any) -> str:
    return "".join(part_text(part) for part in parts_of(content))


def system_text(body: dict[str, Any]) -> str:
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, str):
        return system
    return content_text(system) if isinstance(system, dict) else ""


def google_texts(body: dict[str, Any]) -> list[str]:
    """The system instruction (when given) followed by the text of each content; tools as JSON."""
    texts = [system_text(body)] if system_text(body) else []
    if body.get("tools"):
        texts.append(json.dumps(body["tools"], sort_keys=True))
    return texts + [content_text(content) for content in contents_of(body)]


def parse_google_request(raw: bytes, model: str) -> dict[str, Any]:
    """The body, with the path's model where the body names none (400 when it is not a request)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise GoogleBadRequest(f"Invalid JSON payload received. {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("contents"), list):
        raise GoogleBadRequest("* GenerateContentRequest.contents: contents is not specified")
    if not isinstance(body.get("model"), str):
        body["model"] = model
    return body


# -- strict checks ------------------------------------------------------------------------------------------


def _calls(content: Any) -> list[dict[str, Any]]:
    return [p["functionCall"] for p in parts_of(content) if isinstance(p.get("functionCall"), dict)]


def _responses(content: Any) -> list[dict[str, Any]]:
    return [p["functionResponse"] for p in parts_of(content) if isinstance(p.get("functionResponse"), dict)]


def check_google_contents(body: dict[str, Any]) -> None:
    """Strict mode: Gemini's structural rules, raising ``GoogleBadRequest`` with its wording."""
    contents = contents_of(body)
    for index, content in enumerate(contents):
        if not isinstance(content, dict) or content.get("role") not in ("user", "model"):
            raise GoogleBadRequest(f"* GenerateContentRequest.contents[{index}].role: must be user or model")
        if not parts_of(content):
            raise GoogleBadRequest(
                f"* GenerateContentRequest.contents[{index}].parts: contents.parts must not be empty."
            )
    roles = [content["role"] for content in contents]
    if roles and roles[0] != "user":
        raise GoogleBadRequest(STARTS_WITH_USER)
    if any(a == b for a, b in zip(roles, roles[1:], strict=False)):
        raise GoogleBadRequest(ALTERNATE)
    if roles and roles[-1] != "user":
        raise GoogleBadRequest(ENDS_WITH_USER)
    for index, content in enumerate(contents):
        calls = _calls(content)
        answers = _responses(contents[index + 1]) if calls and index + 1 < len(contents) else []
        if calls and not _answered(calls, answers):
            raise GoogleBadRequest(
                "Please ensure that the number of function response parts is equal to the number of function "
                f"call parts of the function call turn (contents[{index}])."
            )
        asked = _calls(contents[index - 1]) if index > 0 else []
        if _responses(content) and not asked:
            raise GoogleBadRequest(
                f"* contents[{index}]: a function response must answer a function call of the previous turn."
            )


def _answered(calls: list[dict[str, Any]], answers: list[dict[str, Any]]) -> bool:
    if len(calls) != len(answers):
        return False
    ids = [call.get("id") for call in calls]
    if all(ids) and all(answer.get("id") for answer in answers):
        return sorted(map(str, ids)) == sorted(str(answer.get("id")) for answer in answers)
    return sorted(str(c.get("name")) for c in calls) == sorted(str(a.get("name")) for a in answers)


# -- answering ----------------------------------------------------------------------------------------------


def usage(body: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, int]:
    prompt = approx_tokens(sum(len(text) for text in google_texts(body)))
    produced = approx_tokens(len(json.dumps(parts)))
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": produced,
        "totalTokenCount": prompt + produced,
    }


def response(model: str, body: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A whole ``GenerateContentResponse`` with these parts."""
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage(body, parts),
        "modelVersion": model,
        "responseId": uuid.uuid4().hex[:22],
    }


def text_response(model: str, body: dict[str, Any], reply: str) -> dict[str, Any]:
    return response(model, body, [{"text": reply}])


def stream_chunks(whole: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The partial responses of a streamed answer: text in pieces, other parts whole, usage at the end."""
    candidate = whole["candidates"][0]
    base = {key: whole[key] for key in ("modelVersion", "responseId")}
    pieces: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        text = part.get("text")
        if isinstance(text, str) and text and set(part) <= {"text", "thought"}:
            size = -(-len(text) // STREAM_PIECES)
            pieces.extend({**part, "text": text[i : i + size]} for i in range(0, len(text), size))
        else:
            pieces.append(part)
    for index, part in enumerate(pieces):
        chunk: dict[str, Any] = {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}],
            **base,
        }
        if index == len(pieces) - 1:
            chunk["candidates"][0]["finishReason"] = candidate["finishReason"]
            chunk["usageMetadata"] = whole["usageMetadata"]
        yield chunk


def stream_events(whole: dict[str, Any]) -> Iterator[SSEEvent]:
    return ((None, chunk) for chunk in stream_chunks(whole))

"""The stand-in's Google GenAI surface (``generateContent``): what it reads, checks, refuses and answers.

Stdlib only, like the stand-in (``standin_upstream.py`` routes ``POST /{v1beta,v1alpha,v1}/models/<model>:
generateContent`` and ``:streamGenerateContent`` here, and the same paths without the version, which is
what LiteLLM posts to for a ``gemini/`` deployment with an ``api_base``). What the Gemini API does, as far
as a test can fail on it:

* a request is ``contents`` (``{role: "user" | "model", parts: [...]}``; parts ``text`` (``thought``),
  ``functionCall``, ``functionResponse``, ``inlineData``, ``fileData``, ``executableCode``,
  ``codeExecutionResult``, any with a ``thoughtSignature``), ``systemInstruction`` (or
  ``system_instruction``), ``tools`` (``functionDeclarations``) and ``generationConfig``, camelCase or the
  snake_case the API also accepts; the model is the one named in the path (``parse_google_request``);
* what the model reads (the usage, ``SUMMARY_MARKER``): ``google_texts`` — the system instruction, the
  tools' JSON, then each content's text, thoughts, calls' and responses' JSON, code and its output
  (``prompt_cache.google_content_text``);
* ``strict`` (``check_google_contents``): a non-empty ``contents`` of user and model contents with
  non-empty parts; roles alternate, beginning and ending with the user's; a model content's function calls
  are answered by the user content right after it, one ``functionResponse`` each (by ``id`` where every
  call and response carries one, else in order), each named as its call; no response without its call;
* Gemini 3 and later (``agent_script.google_signature_problem``, strict or not): the first function call
  of each model content of the current turn must come back with its thought signature;
* errors are Google's ``{"error": {"code", "message", "status"}}`` (``error``): 400 ``INVALID_ARGUMENT``,
  500 ``INTERNAL``; a request over ``limit<N>`` gets Gemini's sentence ``The input token count (M) exceeds
  the maximum number of tokens allowed (N).`` (``too_long``), which LiteLLM maps to its
  ``ContextWindowExceededError``;
* a whole answer is a ``GenerateContentResponse`` (``response``: ``candidates[0].content.parts``,
  ``finishReason: STOP``, ``usageMetadata``, ``modelVersion``, ``responseId``); a streamed one
  (``stream_chunks``) is partial responses — text in a few pieces, every other part (a function call)
  whole in one — the last with ``finishReason`` and ``usageMetadata``: ``data: <json>\\r\\n\\r\\n`` lines
  with ``alt=sse`` (no ``[DONE]``), else one JSON array of them.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

from prompt_cache import approx_tokens, google_content_text, google_part_text

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
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


part_text = google_part_text
content_text = google_content_text


def system_text(body: dict[str, Any]) -> str:
    system = body.get("systemInstruction", body.get("system_instruction"))
    return google_content_text(system) if isinstance(system, str | dict) else ""


def google_texts(body: dict[str, Any]) -> list[str]:
    """The system instruction (when given), the tools as JSON (when given), then the text of each
    content: what the usage counts and where ``SUMMARY_MARKER`` is looked for."""
    texts = [system_text(body)] if system_text(body) else []
    if body.get("tools"):
        texts.append(json.dumps(body["tools"], sort_keys=True))
    return texts + [content_text(content) for content in contents_of(body)]


def parse_google_request(raw: bytes, model: str) -> dict[str, Any]:
    """The body, its ``model`` the path's (a body names none; LiteLLM's may, the API ignores it), or a 400
    when it is not a request."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise GoogleBadRequest(f"Invalid JSON payload received. {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("contents"), list):
        raise GoogleBadRequest("* GenerateContentRequest.contents: contents is not specified")
    if model or not isinstance(body.get("model"), str):
        body["model"] = model
    return body


# -- strict checks ------------------------------------------------------------------------------------------


def function_calls(content: Any) -> list[tuple[int, dict[str, Any]]]:
    """``(part index, functionCall)`` of each call in a content (``function_call`` accepted too)."""
    return _payloads(content, "functionCall", "function_call")


def function_responses(content: Any) -> list[tuple[int, dict[str, Any]]]:
    """``(part index, functionResponse)`` of each response in a content (``function_response`` too)."""
    return _payloads(content, "functionResponse", "function_response")


def _payloads(content: Any, camel: str, snake: str) -> list[tuple[int, dict[str, Any]]]:
    found = []
    for index, part in enumerate(parts_of(content)):
        payload = part[camel] if camel in part else part.get(snake)
        if isinstance(payload, dict):
            found.append((index, payload))
    return found


def check_google_contents(body: dict[str, Any]) -> None:
    """Strict mode: Gemini's structural rules, raising ``GoogleBadRequest`` with its wording.

    ``contents`` is a non-empty list of ``user`` / ``model`` contents with non-empty ``parts``; the first
    is the user's, roles alternate and the last is the user's; a model content's function calls are
    answered by the user content right after it, one ``functionResponse`` each, paired by ``id`` where
    every call and response has one, else in order, each response named as its call; a response answers
    a call of the model content right before it.
    """
    contents = contents_of(body)
    if not contents:
        raise GoogleBadRequest("* GenerateContentRequest.contents: contents is not specified")
    for index, content in enumerate(contents):
        if not isinstance(content, dict) or content.get("role") not in ("user", "model"):
            raise GoogleBadRequest(f"* GenerateContentRequest.contents[{index}].role: must be user or model")
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts or not all(isinstance(part, dict) for part in parts):
            raise GoogleBadRequest(
                f"* GenerateContentRequest.contents[{index}].parts: contents.parts must not be empty."
            )
    roles = [content["role"] for content in contents]
    if roles[0] != "user":
        raise GoogleBadRequest(STARTS_WITH_USER)
    if any(a == b for a, b in zip(roles, roles[1:], strict=False)):
        raise GoogleBadRequest(ALTERNATE)
    if roles[-1] != "user":
        raise GoogleBadRequest(ENDS_WITH_USER)
    for index, content in enumerate(contents):
        calls = function_calls(content)
        if calls:
            following = contents[index + 1] if index + 1 < len(contents) else None
            problem = _pairing_problem(calls, function_responses(following), index)
            if problem is not None:
                raise GoogleBadRequest(problem)
        if function_responses(content) and (index == 0 or not function_calls(contents[index - 1])):
            raise GoogleBadRequest(
                f"* contents[{index}]: a function response must answer a function call of the previous turn."
            )


def _pairing_problem(
    calls: list[tuple[int, dict[str, Any]]], answers: list[tuple[int, dict[str, Any]]], index: int
) -> str | None:
    """Why the responses in ``contents[index + 1]`` do not answer the calls of ``contents[index]``."""
    if len(calls) != len(answers):
        return (
            "Please ensure that the number of function response parts is equal to the number of function "
            f"call parts of the function call turn (contents[{index}])."
        )
    by_id = {call.get("id"): (position, call) for position, call in calls}
    paired_by_id = all(call.get("id") for _, call in calls) and all(answer.get("id") for _, answer in answers)
    for order, (position, answer) in enumerate(answers):
        if paired_by_id:
            if answer.get("id") not in by_id:
                return (
                    f"* contents[{index + 1}].parts[{position}].function_response.id: {answer.get('id')} "
                    f"answers no function call of contents[{index}]."
                )
            _, call = by_id[answer.get("id")]
        else:
            call = calls[order][1]
        if answer.get("name") != call.get("name"):
            return (
                f"* contents[{index + 1}].parts[{position}].function_response.name: {answer.get('name')} "
                f"does not match the function call it answers ({call.get('name')}, contents[{index}])."
            )
    return None


# -- answering ----------------------------------------------------------------------------------------------


def usage(
    body: dict[str, Any], parts: list[dict[str, Any]], output_tokens: int | None = None
) -> dict[str, int]:
    """``usageMetadata``: the request's text (``google_texts``) and the answer's (``output_tokens``, else
    its parts' JSON) in the stand-in's estimate."""
    prompt = approx_tokens(sum(len(text) for text in google_texts(body)))
    produced = approx_tokens(len(json.dumps(parts))) if output_tokens is None else output_tokens
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": produced,
        "totalTokenCount": prompt + produced,
    }


def response(
    model: str, body: dict[str, Any], parts: list[dict[str, Any]], output_tokens: int | None = None
) -> dict[str, Any]:
    """A whole ``GenerateContentResponse`` with these parts."""
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage(body, parts, output_tokens),
        "modelVersion": model,
        "responseId": uuid.uuid4().hex[:22],
    }


def text_response(model: str, body: dict[str, Any], reply: str) -> dict[str, Any]:
    """A plain reply: one text part, its output tokens ``ceil(len(reply) / 4)`` as on every surface."""
    return response(model, body, [{"text": reply}], approx_tokens(len(reply)))


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

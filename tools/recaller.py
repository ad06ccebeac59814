"""The stand-in's ``recaller`` model: a model that reads back what compaction took out.

Offered the recall tool (``compact_recall``, or the name it gave way under) and shown a handle
(``recall: r…`` in a placeholder, a truncation marker or a summary), it calls the tool with the
first handle it sees; given the tool's answer, it replies ``RECALLED <handle>: <the answer's first
200 characters>``. Otherwise it replies as the plain stand-in does. Chat, Anthropic Messages,
Responses and Gemini's ``generateContent`` (whose calls may carry no id: the answer's handle is read
from the call before it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import agent_script

MENTIONED = re.compile(r"recall: (r[a-z2-7]{10})\b")
TOOL_PREFIX = "compact_recall"
CALL_PREFIX = "recall_"
SHOWN = 200


def is_recaller(model: str) -> bool:
    return "recaller" in model


def recall_tool(tools: Any) -> str | None:
    """The recall tool's name among the request's tools (chat, Anthropic or Responses shape)."""
    for tool in tools if isinstance(tools, list) else []:
        name = (tool.get("function") or {}).get("name") if "function" in tool else tool.get("name")
        if isinstance(name, str) and name.startswith(TOOL_PREFIX):
            return name
    return None


def chat_reply(req: Mapping[str, Any], tokens: int) -> dict[str, Any] | None:
    """The recaller's chat completion, or None (the plain reply)."""
    messages, tool = req.get("messages") or [], recall_tool(req.get("tools"))
    last = messages[-1] if messages else {}
    model = str(req.get("model", ""))
    if last.get("role") == "tool" and str(last.get("tool_call_id", "")).startswith(CALL_PREFIX):
        handle = str(last["tool_call_id"]).removeprefix(CALL_PREFIX)
        text = f"RECALLED {handle}: {str(last.get('content', ''))[:SHOWN]}"
        return agent_script.chat_completion(model, {"role": "assistant", "content": text}, tokens)
    handle = _first_handle(messages)
    if tool is None or handle is None:
        return None
    call = {
        "id": CALL_PREFIX + handle,
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps({"id": handle})},
    }
    return agent_script.chat_completion(
        model, {"role": "assistant", "content": None, "tool_calls": [call]}, tokens
    )


def anthropic_reply(req: Mapping[str, Any], tokens: int) -> dict[str, Any] | None:
    """The recaller's Messages answer, or None (the plain reply)."""
    messages, tool = req.get("messages") or [], recall_tool(req.get("tools"))
    model = str(req.get("model", ""))
    answered = _anthropic_answer(messages[-1] if messages else {})
    if answered is not None:
        handle, content = answered
        text = f"RECALLED {handle}: {content[:SHOWN]}"
        return agent_script.anthropic_message(model, [{"type": "text", "text": text}], tokens)
    handle = _first_handle(messages)
    if tool is None or handle is None:
        return None
    block = {"type": "tool_use", "id": "toolu_" + CALL_PREFIX + handle, "name": tool, "input": {"id": handle}}
    return agent_script.anthropic_message(model, [block], tokens)


def _anthropic_answer(message: Mapping[str, Any]) -> tuple[str, str] | None:
    content = message.get("content") if message.get("role") == "user" else None
    for block in content if isinstance(content, list) else []:
        call = str(block.get("tool_use_id", "")) if isinstance(block, dict) else ""
        if block.get("type") == "tool_result" and call.startswith("toolu_" + CALL_PREFIX):
            inner = block.get("content")
            text = inner if isinstance(inner, str) else "".join(b.get("text", "") for b in inner or [])
            return call.removeprefix("toolu_" + CALL_PREFIX), text
    return None


def _first_handle(messages: Any) -> str | None:
    found = MENTIONED.search(json.dumps(messages, ensure_ascii=False))
    return found.group(1) if found else None


def responses_output(req: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The recaller's Responses output items, or None (the plain reply)."""
    entries = req.get("input")
    entries = entries if isinstance(entries, list) else []
    tool, last = recall_tool(req.get("tools")), entries[-1] if entries else {}
    if last.get("type") == "function_call_output" and str(last.get("call_id", "")).startswith(CALL_PREFIX):
        handle = str(last["call_id"]).removeprefix(CALL_PREFIX)
        text = f"RECALLED {handle}: {str(last.get('output', ''))[:SHOWN]}"
        content = [{"type": "output_text", "text": text, "annotations": []}]
        return [
            {
                "type": "message",
                "id": "msg_recalled",
                "status": "completed",
                "role": "assistant",
                "content": content,
            }
        ]
    handle = _first_handle(entries)
    if tool is None or handle is None:
        return None
    call = {
        "type": "function_call",
        "id": "fc_" + handle,
        "call_id": CALL_PREFIX + handle,
        "name": tool,
        "arguments": json.dumps({"id": handle}),
        "status": "completed",
    }
    return [call]


def google_parts(req: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The recaller's Gemini parts, or None (the plain reply)."""
    contents = [c for c in req.get("contents") or [] if isinstance(c, dict)]
    declared = [
        declaration
        for tool in req.get("tools") or []
        if isinstance(tool, dict)
        for declaration in tool.get("functionDeclarations") or tool.get("function_declarations") or []
    ]
    tool = recall_tool(declared)
    answered = _google_answer(contents)
    if answered is not None:
        handle, content = answered
        return [{"text": f"RECALLED {handle}: {content[:SHOWN]}"}]
    handle = _first_handle(contents)
    if tool is None or handle is None:
        return None
    return [{"functionCall": {"name": tool, "args": {"id": handle}}, "thoughtSignature": SIGNATURE}]


SIGNATURE = "cmVjYWxsZXI="
"""The recaller's thought signature on its call: it must come back with the call (Gemini 3's rule)."""


def _google_answer(contents: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The handle our last call asked for and the answer to it, when the last content answers it."""
    if len(contents) < 2 or contents[-1].get("role") != "user":
        return None
    responses = [p.get("functionResponse") for p in contents[-1].get("parts") or [] if isinstance(p, dict)]
    calls = [p for p in contents[-2].get("parts") or [] if isinstance(p, dict) and "functionCall" in p]
    answer = next(
        (r for r in responses if isinstance(r, dict) and str(r.get("name", "")).startswith(TOOL_PREFIX)), None
    )
    if answer is None or not calls:
        return None
    if calls[0].get("thoughtSignature") != SIGNATURE:
        return "(signature lost)", ""
    handle = str((calls[0]["functionCall"].get("args") or {}).get("id", ""))
    output = (answer.get("response") or {}).get("output", "")
    return handle, output if isinstance(output, str) else json.dumps(output)

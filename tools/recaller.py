"""The stand-in's ``recaller`` models: models that read back what compaction took out.

Offered the recall tool (``compact_recall``, or the name it gave way under) and shown handles
(``recall 048213`` in a placeholder, a truncation marker or a summary):

* ``recaller`` calls the tool with the first handle it sees; given the answer, it replies
  ``RECALLED <handle>: <the answer's first 200 characters>``;
* ``needle`` (the needle benchmark) is asked for a value (``What is NEEDLE-<key>?``): it answers
  from what it is shown when the value is there; otherwise it calls the tool once for every handle it
  sees (at most ``NEEDLE_CALLS``, in one turn) and answers from the answers — ``NEEDLE-<key> =
  <value>``, or ``NEEDLE-<key> not found``; not offered the tool, ``NEEDLE-<key> not visible``.

* ``recall2`` in a scripted agent's name (``agent_script``): on the turns ``MID_LOOP_TURNS`` of its loop,
  before running its next command, it calls the tool with the first handle it sees; given the
  answer, it goes on with its script (``mid_loop``).

Otherwise they reply as the plain stand-in does. Chat, Anthropic Messages, Responses and Gemini's
``generateContent`` (whose calls may carry no id: a call's handle is read from its arguments).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import agent_script

MENTIONED = re.compile(r"\brecall (\d{6})\b")
TOOL_PREFIX = "compact_recall"
CALL_PREFIX = "recall_"
SHOWN = 200
NEEDLE_ASKED = re.compile(r"What is (NEEDLE-\w+)\?")
NEEDLE_CALLS = 16
SIGNATURE = "cmVjYWxsZXI="
"""The recaller's thought signature on its Gemini calls: it must come back with the call (Gemini 3's rule)."""


MID_LOOP_TURNS = frozenset({10, 20})


def is_recaller(model: str) -> bool:
    return "recaller" in model or "needle" in model


@dataclass(frozen=True, slots=True)
class Turn:
    """What the model does: say ``text``, or call the tool for each of ``handles``."""

    text: str | None = None
    handles: tuple[str, ...] = ()


def decide(model: str, visible: str, answers: list[tuple[str, str]], offered: bool) -> Turn | None:
    """The model's turn, from what it is shown (``visible``: the request as JSON) and the answers to
    its calls the request ends with; None: not a turn of ours (the plain reply)."""
    if "needle" in model:
        return _needle(visible, answers, offered)
    if "recall2" in model and answers:
        return None  # answered: the agent goes on with its script
    if answers:
        handle, content = answers[0]
        return Turn(text=f"RECALLED {handle}: {content[:SHOWN]}")
    handles = MENTIONED.findall(visible)
    return Turn(handles=(handles[0],)) if offered and handles else None


def _needle(visible: str, answers: list[tuple[str, str]], offered: bool) -> Turn | None:
    asked = NEEDLE_ASKED.findall(visible)
    if not asked:
        return None
    key = asked[-1]
    value = re.compile(re.escape(key) + r": (\S+)")
    if answers:
        found = [m.group(1) for _, text in answers if (m := value.search(text))]
        return Turn(text=f"{key} = {found[0]}" if found else f"{key} not found")
    shown = value.search(visible)
    if shown:
        return Turn(text=f"{key} = {shown.group(1)} (shown)")
    handles = tuple(dict.fromkeys(MENTIONED.findall(visible)))[:NEEDLE_CALLS]
    if not offered or not handles:
        return Turn(text=f"{key} not visible")
    return Turn(handles=handles)


def recall_tool(tools: Any) -> str | None:
    """The recall tool's name among the request's tools (chat, Anthropic, Responses or Gemini shape)."""
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        declared = tool.get("functionDeclarations") or tool.get("function_declarations")
        names = [d.get("name") for d in declared] if isinstance(declared, list) else []
        names.append((tool.get("function") or {}).get("name") if "function" in tool else tool.get("name"))
        for name in names:
            if isinstance(name, str) and name.startswith(TOOL_PREFIX):
                return name
    return None


def _visible(entries: Any) -> str:
    return json.dumps(entries, ensure_ascii=False)


def chat_reply(req: Mapping[str, Any], tokens: int) -> dict[str, Any] | None:
    """The recaller's chat completion, or None (the plain reply)."""
    messages, tool = req.get("messages") or [], recall_tool(req.get("tools"))
    answers = []
    for message in reversed(messages):
        call = str(message.get("tool_call_id", "")) if message.get("role") == "tool" else ""
        if not call.startswith(CALL_PREFIX):
            break
        answers.insert(0, (call.removeprefix(CALL_PREFIX), str(message.get("content", ""))))
    turn = decide(str(req.get("model", "")), _visible(messages), answers, tool is not None)
    if turn is None:
        return None
    model = str(req.get("model", ""))
    if turn.text is not None:
        return agent_script.chat_completion(model, {"role": "assistant", "content": turn.text}, tokens)
    calls = [
        {
            "id": CALL_PREFIX + handle,
            "type": "function",
            "function": {"name": tool, "arguments": json.dumps({"id": handle})},
        }
        for handle in turn.handles
    ]
    return agent_script.chat_completion(
        model, {"role": "assistant", "content": None, "tool_calls": calls}, tokens
    )


def anthropic_reply(req: Mapping[str, Any], tokens: int) -> dict[str, Any] | None:
    """The recaller's Messages answer, or None (the plain reply)."""
    messages, tool = req.get("messages") or [], recall_tool(req.get("tools"))
    model = str(req.get("model", ""))
    turn = decide(
        model, _visible(messages), _anthropic_answers(messages[-1] if messages else {}), tool is not None
    )
    if turn is None:
        return None
    if turn.text is not None:
        return agent_script.anthropic_message(model, [{"type": "text", "text": turn.text}], tokens)
    blocks = [
        {"type": "tool_use", "id": "toolu_" + CALL_PREFIX + handle, "name": tool, "input": {"id": handle}}
        for handle in turn.handles
    ]
    thinking = (req.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    if thinking:  # a thinking model's turn starts with its (bound) thinking
        bound = agent_script.binding(req, len(messages))
        blocks.insert(0, {"type": "thinking", "thinking": "Recall first.", "signature": bound})
    return agent_script.anthropic_message(model, blocks, tokens)


def _anthropic_answers(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    content = message.get("content") if message.get("role") == "user" else None
    found = []
    for block in content if isinstance(content, list) else []:
        call = str(block.get("tool_use_id", "")) if isinstance(block, dict) else ""
        if block.get("type") == "tool_result" and call.startswith("toolu_" + CALL_PREFIX):
            inner = block.get("content")
            text = inner if isinstance(inner, str) else "".join(b.get("text", "") for b in inner or [])
            found.append((call.removeprefix("toolu_" + CALL_PREFIX), text))
    return found


def responses_output(req: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The recaller's Responses output items, or None (the plain reply)."""
    entries = req.get("input")
    entries = entries if isinstance(entries, list) else []
    tool = recall_tool(req.get("tools"))
    answers = []
    for entry in reversed(entries):
        call = str(entry.get("call_id", "")) if entry.get("type") == "function_call_output" else ""
        if not call.startswith(CALL_PREFIX):
            break
        answers.insert(0, (call.removeprefix(CALL_PREFIX), str(entry.get("output", ""))))
    turn = decide(str(req.get("model", "")), _visible(entries), answers, tool is not None)
    if turn is None:
        return None
    if turn.text is not None:
        content = [{"type": "output_text", "text": turn.text, "annotations": []}]
        return [
            {
                "type": "message",
                "id": "msg_recalled",
                "status": "completed",
                "role": "assistant",
                "content": content,
            }
        ]
    return [
        {
            "type": "function_call",
            "id": "fc_" + handle,
            "call_id": CALL_PREFIX + handle,
            "name": tool,
            "arguments": json.dumps({"id": handle}),
            "status": "completed",
        }
        for handle in turn.handles
    ]


def google_parts(req: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The recaller's Gemini parts, or None (the plain reply)."""
    contents = [c for c in req.get("contents") or [] if isinstance(c, dict)]
    tool = recall_tool(req.get("tools"))
    turn = decide(str(req.get("model", "")), _visible(contents), _google_answers(contents), tool is not None)
    if turn is None:
        return None
    if turn.text is not None:
        return [{"text": turn.text}]
    return [
        {"functionCall": {"name": tool, "args": {"id": handle}}, "thoughtSignature": SIGNATURE}
        for handle in turn.handles
    ]


def _google_answers(contents: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The answers the last content gives to our calls in the one before it (by position: Gemini's
    calls may carry no id); a call whose signature did not come back is answered ``(signature lost)``."""
    if len(contents) < 2 or contents[-1].get("role") != "user":
        return []
    answers = [
        r
        for p in contents[-1].get("parts") or []
        if isinstance(p, dict)
        if isinstance(r := p.get("functionResponse"), dict) and str(r.get("name", "")).startswith(TOOL_PREFIX)
    ]
    calls = [p for p in contents[-2].get("parts") or [] if isinstance(p, dict) and "functionCall" in p]
    found = []
    for call, answer in zip(calls, answers, strict=False):  # a call left unanswered: none
        if call.get("thoughtSignature") != SIGNATURE:
            found.append(("(signature lost)", ""))
            continue
        output = (answer.get("response") or {}).get("output", "")
        found.append(
            (
                str((call["functionCall"].get("args") or {}).get("id", "")),
                output if isinstance(output, str) else json.dumps(output),
            )
        )
    return found

"""Checks used by several test modules: pairing validity, building histories."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compact_hook.core.items import SUMMARY_PREFIX, Item  # noqa: F401  (re-exported for tests)
from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES, WireFormat

Message = dict[str, Any]

TRANSCRIPTS = Path(__file__).parent / "data" / "transcripts"


def load_transcript(name: str, fmt: str = "openai") -> Any:
    return json.loads((TRANSCRIPTS / fmt / name).read_text(encoding="utf-8"))


def openai_transcripts() -> list[str]:
    return sorted(path.name for path in (TRANSCRIPTS / "openai").glob("*.json"))


def items_of(entries: Sequence[Any], wire: WireFormat = CHAT) -> list[Item]:
    """Entries of a wire format as the core's items."""
    return [wire.item(entry) for entry in entries]


def pairing_problems(messages: Sequence[Any], wire: WireFormat = CHAT) -> list[tuple[str, int]]:
    """Tool calls without their results, and results without a call, by the provider's rules.

    Written independently of the code under test. Each problem names the entry (by ``id()``),
    so a test can compare the problems of an output with those its input already had: we
    must never add one.
    """
    if wire is ANTHROPIC:
        return _anthropic_problems(messages)
    if wire is RESPONSES:
        return _responses_problems(messages)
    if wire is GOOGLE:
        return _google_problems(messages)
    return _chat_problems(messages)


def _chat_problems(messages: Sequence[Message]) -> list[tuple[str, int]]:
    """Chat: an assistant's tool calls are answered by the tool messages right after it."""
    problems: list[tuple[str, int]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        calls = message.get("tool_calls") or (
            [message["function_call"]] if message.get("function_call") else []
        )
        if message.get("role") == "assistant" and calls:
            end = index + 1
            while end < len(messages) and messages[end].get("role") in ("tool", "function"):
                end += 1
            results = messages[index + 1 : end]
            if len(results) < len(calls):
                problems.append(("unanswered call", id(message)))
            problems.extend(("orphan result", id(extra)) for extra in results[len(calls) :])
            index = end
            continue
        if message.get("role") in ("tool", "function"):
            problems.append(("orphan result", id(message)))
        index += 1
    return problems


def content_blocks(message: Message) -> list[Any]:
    """A message's content blocks (none when its content is a string or missing)."""
    content = message.get("content")
    return content if isinstance(content, list) else []


def _blocks_of_type(message: Message, kind: str) -> list[dict[str, Any]]:
    return [b for b in content_blocks(message) if isinstance(b, dict) and b.get("type") == kind]


def _anthropic_problems(messages: Sequence[Message]) -> list[tuple[str, int]]:
    """Anthropic: tool_use ids answered by tool_result blocks in the next message (a user one)."""
    problems: list[tuple[str, int]] = []
    for index, message in enumerate(messages):
        following = messages[index + 1] if index + 1 < len(messages) else None
        if message.get("role") == "assistant":
            asked = {b.get("id") for b in _blocks_of_type(message, "tool_use")}
            answered = (
                {b.get("tool_use_id") for b in _blocks_of_type(following, "tool_result")}
                if following is not None and following.get("role") == "user"
                else set()
            )
            if asked - answered:
                problems.append(("unanswered call", id(message)))
        elif message.get("role") == "user":
            previous = messages[index - 1] if index > 0 else None
            asked = (
                {b.get("id") for b in _blocks_of_type(previous, "tool_use")}
                if previous is not None and previous.get("role") == "assistant"
                else set()
            )
            problems.extend(
                ("orphan result", id(message))
                for b in _blocks_of_type(message, "tool_result")
                if b.get("tool_use_id") not in asked
            )
    return problems


def _responses_problems(items: Sequence[Any]) -> list[tuple[str, int]]:
    """Responses: every call has a later output with its call_id; every output an earlier call."""
    problems: list[tuple[str, int]] = []
    if isinstance(items, str):
        return problems
    for index, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind in ("function_call", "custom_tool_call"):
            later = {
                i.get("call_id")
                for i in items[index + 1 :]
                if isinstance(i, dict) and i.get("type") == f"{kind}_output"
            }
            if item.get("call_id") not in later:
                problems.append(("unanswered call", id(item)))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call = kind.removesuffix("_output")
            earlier = {
                i.get("call_id") for i in items[:index] if isinstance(i, dict) and i.get("type") == call
            }
            if item.get("call_id") not in earlier:
                problems.append(("orphan result", id(item)))
    return problems


def _google_parts(content: Any, key: str) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p[key] for p in parts or [] if isinstance(p, dict) and isinstance(p.get(key), dict)]


def _google_problems(contents: Sequence[Any]) -> list[tuple[str, int]]:
    """Gemini: a model content's function calls are answered, one response each, by the user content
    right after it (by id where both have one, else by name)."""
    problems: list[tuple[str, int]] = []
    for index, content in enumerate(contents):
        following = contents[index + 1] if index + 1 < len(contents) else None
        previous = contents[index - 1] if index > 0 else None
        if content.get("role") == "model":
            calls = _google_parts(content, "functionCall")
            answers = _google_parts(following, "functionResponse") if following is not None else []
            names = sorted(str(c.get("name")) for c in calls)
            if calls and (
                following is None
                or following.get("role") == "model"
                or names != sorted(str(a.get("name")) for a in answers)
            ):
                problems.append(("unanswered call", id(content)))
        else:
            answers = _google_parts(content, "functionResponse")
            asked = (
                _google_parts(previous, "functionCall")
                if previous is not None and previous.get("role") == "model"
                else []
            )
            problems.extend(("orphan result", id(content)) for _ in answers[len(asked) :])
    return problems


def google_turn_problems(contents: list[dict[str, Any]]) -> list[int]:
    """Model contents of the current turn (after the last user content that is not only function
    responses) whose first call carries no signature: what Gemini 3 answers 400 to."""
    start = 0
    for index, content in enumerate(contents):
        parts = content["parts"]
        if content["role"] == "user" and not all("functionResponse" in part for part in parts):
            start = index + 1
    problems = []
    for index in range(start, len(contents)):
        calls = [part for part in contents[index]["parts"] if "functionCall" in part]
        if contents[index]["role"] == "model" and calls and "thoughtSignature" not in calls[0]:
            problems.append(index)
    return problems


def unsigned_before_the_current_turn(data: dict[str, Any]) -> dict[str, Any]:
    """What clients do: signatures kept only where the API checks them (the current turn)."""
    contents = copy.deepcopy(data["contents"])
    last_user = max(
        k
        for k, c in enumerate(contents)
        if c["role"] == "user" and not all("functionResponse" in p for p in c["parts"])
    )
    for content in contents[:last_user]:
        for part in content["parts"]:
            part.pop("thoughtSignature", None)
    return {**data, "contents": contents}


def is_summary(entry: Any, wire: WireFormat = CHAT) -> bool:
    return wire.item(entry).is_summary


def summaries_in(entries: Sequence[Any], wire: WireFormat = CHAT) -> list[str]:
    """The summaries a forwarded list carries, as JSON text: an entry that is one, or (Google, whose
    adjacent user contents are joined) a text part that is one."""
    if wire is GOOGLE:
        return [
            json.dumps(part, sort_keys=True)
            for content in entries
            for part in content.get("parts") or []
            if isinstance(part, dict) and str(part.get("text", "")).startswith(SUMMARY_PREFIX)
        ]
    return [json.dumps(entry, sort_keys=True) for entry in entries if is_summary(entry, wire)]


def summary_entries(entries: Sequence[Any], wire: WireFormat = CHAT) -> list[Any]:
    return [entry for entry in entries if is_summary(entry, wire)]


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}


def system(text: str) -> Message:
    return {"role": "system", "content": text}


def calling(*names: str, call_id: str = "call", text: Any = None) -> Message:
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": f"{call_id}_{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}
            for i, name in enumerate(names)
        ],
    }


def result(text: str, call_id: str = "call_0") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def replay_points(messages: Sequence[Message]) -> list[int]:  # chat
    """Prefix lengths at which the client calls the model: after user input or tool results."""
    return [
        end
        for end in range(1, len(messages) + 1)
        if messages[end - 1].get("role") in ("user", "tool")
        and (end == len(messages) or messages[end].get("role") == "assistant")
    ]


def google_replay_points(contents: Sequence[dict[str, Any]]) -> list[int]:
    """Where a Gemini client would send the conversation: after each user content the model answers."""
    return [
        end
        for end in range(1, len(contents) + 1)
        if contents[end - 1]["role"] == "user" and (end == len(contents) or contents[end]["role"] == "model")
    ]


def is_prefix(shorter: Sequence[Any], longer: Sequence[Any]) -> bool:
    return len(shorter) <= len(longer) and list(longer[: len(shorter)]) == list(shorter)


def sorted_json(entry: Any) -> str:
    """``entry`` as JSON text with its keys sorted: equal entries give equal texts, whatever their key
    order."""
    return json.dumps(entry, sort_keys=True, ensure_ascii=False)


def forwarded_json(message: Message) -> str:
    """A message as the provider sees it through LiteLLM, as JSON text: the keys whose value is ``null``
    dropped (LiteLLM drops them when it re-serializes), key order irrelevant."""
    return sorted_json({k: v for k, v in message.items() if v is not None})


def chat_to_google(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A chat transcript as Gemini contents (what the Google GenAI SDK would send): calls without ids,
    each model turn's first call signed, tool results answering by name, roles alternating (adjacent
    messages of one role are one content, as Gemini wants); system messages as user text (Gemini has no
    mid-conversation system entry)."""
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for message in messages:
        role, content = message["role"], message.get("content")
        text = content if isinstance(content, str) else json.dumps(content) if content else ""
        if role == "tool":
            name = names.get(message.get("tool_call_id", ""), "tool")
            add("user", [{"functionResponse": {"name": name, "response": {"output": text}}}])
        elif role == "assistant":
            parts: list[dict[str, Any]] = [{"text": text}] if text else []
            for n, call in enumerate(message.get("tool_calls") or []):
                function = call["function"]
                names[call["id"]] = function["name"]
                try:
                    args = json.loads(function["arguments"] or "{}")
                except ValueError:
                    args = {"raw": function["arguments"]}
                part: dict[str, Any] = {"functionCall": {"name": function["name"], "args": args}}
                if n == 0:
                    part["thoughtSignature"] = base64.b64encode(f"sig_{len(contents)}".encode()).decode()
                parts.append(part)
            add("model", parts or [{"text": "..."}])
        else:
            add("user", [{"text": text or "..."}])
    return contents


def chat_to_responses(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A chat transcript as Responses input items (what the OpenAI Agents SDK or Codex would send)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role, content = message["role"], message.get("content")
        if role == "tool":
            output = content if isinstance(content, str) else json.dumps(content)
            items.append(
                {"type": "function_call_output", "call_id": message["tool_call_id"], "output": output}
            )
        elif role == "assistant":
            if isinstance(content, str) and content:
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": content}],
                    }
                )
            for call in message.get("tool_calls") or []:
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
        else:
            items.append({"role": role, "content": content})
    return items


def responses_replay_points(items: Sequence[dict[str, Any]]) -> list[int]:
    """Prefix lengths at which a Responses client calls the model: after user input or tool outputs."""

    def is_model(item: dict[str, Any]) -> bool:
        return item.get("type") in ("function_call", "reasoning") or item.get("role") == "assistant"

    return [
        end
        for end in range(1, len(items) + 1)
        if not is_model(items[end - 1]) and (end == len(items) or is_model(items[end]))
    ]


def anthropic_replay_points(messages: Sequence[Message]) -> list[int]:
    """Prefix lengths at which a Messages client calls the model: after each user message."""
    return [end for end in range(1, len(messages) + 1) if messages[end - 1]["role"] == "user"]


MARKER = {"type": "ephemeral"}


def with_moving_marker(messages: Sequence[Message]) -> list[Message]:
    """What Claude Code sends: a cache breakpoint on the last block of the last message (new dicts)."""
    *earlier, last = messages
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks[-1] = {**blocks[-1], "cache_control": MARKER}
    return [*earlier, {**last, "content": blocks}]


def without_markers(value: Any) -> Any:
    """``value`` with every ``cache_control`` key removed (markers aside, for prefix comparisons)."""
    if isinstance(value, dict):
        return {k: without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_markers(v) for v in value]
    return value


def tokens_of(body: dict[str, Any], wire: WireFormat, tokenizer: str) -> int:
    """Everything the model reads in a request body (items, system, tools) with a shipped tokenizer."""
    from compact_hook.core.counting import item_strings, request_total
    from compact_hook.state.tokenizers import counter_for
    from compact_hook.wires.conversation import Conversation
    from compact_hook.wires.parsing import context_strings

    counter = counter_for(tokenizer)
    parsed = wire.parse(dict(body))
    assert isinstance(parsed, Conversation), parsed
    counts = counter.count(parsed.prints(), lambda i: item_strings(parsed.item(i)))
    context = counter.count(parsed.context_prints(), lambda i: context_strings(parsed.context[i]))
    return request_total(sum(context) + (parsed.overhead if parsed.context else 0), counts)


def chat_tool_definitions(count: int) -> list[dict[str, Any]]:
    """``count`` chat tool definitions of ~320 tokens each (real agents send 10-25K tokens of them)."""
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{n}",
                "description": "A tool with a long description. " * 40,
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
        for n in range(count)
    ]


def claude_code_sessions() -> dict[str, tuple[list[Any], list[int]]]:
    """The Claude Code session (fa812bfe, pre-compact) as each surface's client sends it: the
    entries (chat messages, Anthropic messages, Responses items) and the points of each turn."""
    chat = load_transcript("claude_code_fa812bfe_pre_compact.json")
    claude = load_transcript("claude_code_fa812bfe_pre_compact.json", "anthropic")["messages"]
    codex = chat_to_responses(chat)
    return {
        "chat": (chat, replay_points(chat)),
        "anthropic": (claude, anthropic_replay_points(claude)),
        "responses": (codex, responses_replay_points(codex)),
    }


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metric_samples(text: str) -> Samples:
    """A Prometheus exposition, parsed by ``prometheus_client``'s own parser, by (name, labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric_value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)

"""A scripted agent model for the stand-in provider: tool calls that make a real CLI run a real shell.

The stand-in (``tools/standin_upstream.py``) answers a request whose ``model`` contains ``script`` (e.g.
``standin-script``, ``standin-script12`` for 12 tool turns) with this script instead of a canned text, on
every surface, streaming or not: ``/v1/messages`` (Claude Code), ``/v1/responses`` (Codex CLI),
``/v1/chat/completions`` (Qwen Code, opencode, pi) and ``generateContent`` (Gemini CLI).

* turns 1..N: a tool call that makes the client run a shell command printing a few KB
  (``seq -f '...' 1 40``); every seventh turn two calls at once (parallel tool use);
* turn N+1: a final text, ``AGENT_FINAL`` plus the turn count, and the client exits.

Turns are counted per *session*, never from the history (the history the stand-in sees is compacted):

* Anthropic (``anthropic_session``): Claude Code's ``metadata.user_id`` session, else its
  ``x-claude-code-session-id`` header, else a hash of the first message;
* Responses (``responses_session``): Codex's ``prompt_cache_key``, else its ``session-id`` header, else a
  hash of the first input item;
* chat (``chat_session``): ``prompt_cache_key``, else ``user``, else an ``x-session-id`` / ``session_id``
  header, else a hash of the client's head — its first system message and its first user message, which
  a compaction keeps verbatim;
* Google (``google_session``): an ``x-session-id`` / ``x-gemini-session-id`` header (no Gemini client puts a
  session in the body), else a hash of the system instruction and the first part of the first content.

The shell tool is the client's own (``shell_tool``, for every wire's tool shape: the first of a preferred
list it offers, else its first tool) and its arguments follow that tool's schema (``shell_arguments``:
``command``, or ``cmd`` when the schema has ``cmd`` and no ``command``; a ``description`` when the schema
has one): ``Bash``/``bash`` on Anthropic (``exec_command``/``shell`` for Codex bridged there),
``exec_command``/``shell`` on Responses, and ``SHELL_TOOLS`` (``run_shell_command``, ``bash``, ``Bash``,
``shell``, ``exec_command``) on chat and Google.

What each wire answers:

* Anthropic (``anthropic_blocks``): a ``thinking`` block whose signature binds it to the conversation that
  produced it (``system``, ``tools`` and every earlier message, ``cache_control`` markers aside), a text,
  then ``tool_use`` blocks (``stop_reason: tool_use``). For a model named like one that runs the prefix
  check (``claude-fable-5…``, ``claude-opus-5-5``…) the stand-in checks each such block sent back
  (``stale_thinking``) and answers 400 "The block is bound to a different conversation" when what comes
  before it changed; for older names with ``thinking`` enabled it answers 400 when the tool turn in
  progress does not open with thinking (``missing_turn_thinking``). Both: ``thinking_problem``.
* Responses (``responses_output``): a ``reasoning`` item carrying ``encrypted_content``, as Codex asks,
  then ``function_call`` items.
* chat (``chat_message``, ``chat_chunks``): ``message.tool_calls`` (``content: null``, ``finish_reason:
  tool_calls``); streamed, each call opens with a chunk carrying its ``id``, ``type`` and
  ``function.name`` with empty ``arguments``, then chunks of argument pieces, then the ``finish_reason``
  chunk, a usage chunk when ``stream_options.include_usage``, and ``data: [DONE]``. The final turn is a
  plain assistant text.
* Google (``google_parts``): a thought part (``{"text": "Turn N: …", "thought": true}``) only when
  ``generationConfig.thinkingConfig.includeThoughts`` is set, then ``functionCall`` parts without ``id``
  (the Gemini API returns none), only the first signed (``thoughtSignature``: ``signature_of`` its name and
  arguments, base64 of ``standin-sig:`` and a sha256 prefix) as Gemini 3 signs only the first of parallel
  calls; the final text is signed too. For a Gemini 3 or later name (``gemini-3…``, strict or not) the
  stand-in refuses, as Google does, a current turn (every content after the last user content that is not
  only function responses) where a model content's first call lost its signature (Google's "Function call
  is missing a thought_signature …, position <n>") or where a signature of ours sits on a part it was not
  made for ("Corrupted thought signature."): ``google_signature_problem``. Google's documented dummy
  values (``DUMMY_SIGNATURES``) and signatures not of our making pass; earlier turns are not checked.

Stdlib only, like the stand-in.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

AGENT_FINAL = "stand-in agent finished"
DEFAULT_TURNS = 30
PARALLEL_EVERY = 7
LINES_PER_TURN = 40
BOUND_PREFIX = "standin-bound:"
STALE_THINKING = "The block is bound to a different conversation"
LINE_TEXT = "the quick brown fox jumps over the lazy dog, a line of agent tool output"

SSEEvent = tuple[str | None, dict[str, Any]]


def is_agent(model: str) -> bool:
    """``script`` in the model name: a word no other stand-in model uses (many are ``…-agent``)."""
    return "script" in model


def turns_of(model: str) -> int:
    """``script<N>`` in the model name: N tool turns before the final answer (default 30)."""
    match = re.search(r"script(\d+)", model)
    return int(match.group(1)) if match else DEFAULT_TURNS


@dataclass(frozen=True)
class Command:
    """One tool call: its id and the shell command it asks the client to run."""

    call_id: str
    command: str


@dataclass(frozen=True)
class Plan:
    """What the script answers on one turn: commands to run, or (none) the final text."""

    session: str
    turn: int
    commands: tuple[Command, ...]
    final: str = ""


class Sessions:
    """Turn counters per session, shared by the stand-in's handler threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[str, int] = {}

    def next_turn(self, session: str) -> int:
        with self._lock:
            turn = self._turns.get(session, 0) + 1
            self._turns[session] = turn
            return turn

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._turns)

    def clear(self) -> None:
        with self._lock:
            self._turns.clear()


def plan_turn(sessions: Sessions, session: str, model: str) -> Plan:
    turn = sessions.next_turn(session)
    total = turns_of(model)
    if turn > total:
        return Plan(session, turn, (), f"{AGENT_FINAL} after {total} tool turns (session {session[:16]}).")
    count = 2 if turn % PARALLEL_EVERY == 0 else 1
    lines = LINES_PER_TURN // count
    commands = tuple(
        Command(f"agent_{turn:03d}_{k}_{uuid.uuid4().hex[:8]}", shell_command(turn, k, lines))
        for k in range(count)
    )
    return Plan(session, turn, commands)


def shell_command(turn: int, part: int, lines: int) -> str:
    """A real command printing ``lines`` numbered lines (~80 characters each)."""
    return f"seq -f 'turn {turn:02d}.{part} line %03g: {LINE_TEXT}' 1 {lines}"


# -- sessions --------------------------------------------------------------------------------------


def anthropic_session(body: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """Claude Code's session: its ``metadata.user_id`` (which names the session), else its header, else
    its system prompt (else its first message)."""
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user_id, str) and user_id:
        try:
            parsed = json.loads(user_id)
        except ValueError:
            parsed = None
        session = parsed.get("session_id") if isinstance(parsed, dict) else None
        return str(session) if session else user_id
    named = headers.get("x-claude-code-session-id")
    if named:
        return named
    # a client bridged here (Codex through LiteLLM): its instructions stay, its first message does not
    # (Codex's own compaction puts the user's messages first)
    return _first_hash([body.get("system")]) if body.get("system") else _first_hash(body.get("messages"))


def responses_session(body: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """Codex's session: its ``prompt_cache_key`` (the conversation id), else its header."""
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return key
    return headers.get("session-id") or _first_hash(body.get("input"))


def _first_hash(entries: Any) -> str:
    first = entries[0] if isinstance(entries, list) and entries else entries
    return hashlib.sha256(json.dumps(first, sort_keys=True).encode()).hexdigest()[:16]


# -- thinking bound to its conversation ------------------------------------------------------------


def binding(body: Mapping[str, Any], upto: int) -> str:
    """The signature of a thinking block produced after ``messages[:upto]`` of this request.

    What the model read, not how it was spelled: a string content is the same as one text block
    (Claude Code sends its mid-conversation system entry as blocks, then as a string), and
    ``cache_control`` markers do not count (clients move their breakpoints every turn).
    """
    messages = [
        {**message, "content": _as_blocks(message.get("content"))} if isinstance(message, dict) else message
        for message in (body.get("messages") or [])[:upto]
    ]
    prefix = [_as_blocks(body.get("system")), body.get("tools") or [], messages]
    canonical = json.dumps(_without_markers(prefix), sort_keys=True, ensure_ascii=False)
    return BOUND_PREFIX + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _as_blocks(content: Any) -> Any:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return content if content is not None else []


def _without_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_markers(v) for v in value]
    return value


PREFIX_CHECKING = re.compile(r"claude-(?:fable|mythos)-5|claude-[a-z]+-5-5")
"""The models that run the prefix check (Anthropic, *Preserved thinking*: Fable and Mythos 5.x, the 5.5s)."""
MISSING_TURN_THINKING = (
    "Expected `thinking` or `redacted_thinking`, but found `{found}`. When `thinking` is enabled, a final "
    "`assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and "
    "`tool_result` blocks)"
)


def thinking_problem(body: Mapping[str, Any]) -> str | None:
    """What the model's thinking rules refuse in this request, else None.

    A model that runs the prefix check refuses a stale block (``stale_thinking``) and accepts a turn
    without thinking (it thinks adaptively). An older one ignores earlier turns' blocks but, with
    ``thinking`` enabled, refuses a tool turn in progress whose first message does not start with
    thinking (``missing_turn_thinking``).
    """
    if PREFIX_CHECKING.search(str(body.get("model", ""))):
        return stale_thinking(body)
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        return missing_turn_thinking(body)
    return None


def missing_turn_thinking(body: Mapping[str, Any]) -> str | None:
    """The turn in progress (assistant messages since the last user message without tool results,
    the request ending on tool results) must open with a thinking block."""
    messages = _merged([m for m in body.get("messages") or [] if isinstance(m, dict)])
    if not messages or messages[-1].get("role") != "user" or not _has_results(messages[-1]):
        return None
    start = None
    for index in range(len(messages) - 1, -1, -1):
        role = messages[index].get("role")
        if role == "user" and not _has_results(messages[index]):
            break
        if role == "assistant":
            start = index
    if start is None:
        return None
    blocks = _as_blocks(messages[start].get("content"))
    found = blocks[0].get("type") if blocks and isinstance(blocks[0], dict) else "nothing"
    if found in ("thinking", "redacted_thinking"):
        return None
    return f"messages.{start}.content.0.type: " + MISSING_TURN_THINKING.format(found=found)


def _merged(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive user (or assistant) messages as one: the Messages API combines them into one turn."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if out and role in ("user", "assistant") and out[-1].get("role") == role:
            content = _as_blocks(out[-1].get("content")) + _as_blocks(message.get("content"))
            out[-1] = {**out[-1], "content": content}
        else:
            out.append(message)
    return out


def _has_results(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def stale_thinking(body: Mapping[str, Any]) -> str | None:
    """Where the first thinking block this stand-in signed no longer matches what precedes it, else None.

    Only our own signatures are checked (recorded transcripts carry real ones we cannot verify).
    """
    messages = body.get("messages") or []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        for position, block in enumerate(blocks):
            signature = _signature(block)
            if signature is None:
                continue
            if signature != binding(body, index):
                return (
                    f"messages.{index}.content.{position}: {STALE_THINKING}: the system prompt, the tools "
                    "or an earlier message changed since this block was produced"
                )
    return None


def _signature(block: Any) -> str | None:
    if not isinstance(block, dict):
        return None
    if block.get("type") == "thinking":
        value = block.get("signature")
    elif block.get("type") == "redacted_thinking":
        value = block.get("data")
    else:
        return None
    return value if isinstance(value, str) and value.startswith(BOUND_PREFIX) else None


# -- Anthropic Messages ----------------------------------------------------------------------------


def anthropic_blocks(plan: Plan, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The answer's content: a bound thinking block, then the final text or the tool calls."""
    thinking = {
        "type": "thinking",
        "thinking": f"Turn {plan.turn}: " + ("done, answer." if plan.final else "run the next command."),
        "signature": binding(body, len(body.get("messages") or [])),
    }
    if plan.final:
        return [thinking, {"type": "text", "text": plan.final}]
    tool, properties = shell_tool(body.get("tools"), ("Bash", "bash", "exec_command", "shell"))
    uses = [
        {
            "type": "tool_use",
            "id": "toolu_" + command.call_id,
            "name": tool,
            # Claude Code's Bash (no schema here: command and description); a bridged client's by its schema
            "input": shell_arguments(command, plan, properties or {"command": {}, "description": {}}),
        }
        for command in plan.commands
    ]
    return [thinking, {"type": "text", "text": f"Running turn {plan.turn}."}, *uses]


def anthropic_message(model: str, blocks: list[dict[str, Any]], input_tokens: int) -> dict[str, Any]:
    calls = any(block["type"] == "tool_use" for block in blocks)
    return {
        "id": "msg_agent_" + uuid.uuid4().hex[:20],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": _approx(json.dumps(blocks)),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def anthropic_events(message: dict[str, Any]) -> Iterator[SSEEvent]:
    """The Messages API's SSE events for ``message``: thinking, text and tool_use blocks, streamed."""
    start = {**message, "content": [], "stop_reason": None}
    start["usage"] = {**message["usage"], "output_tokens": 1}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        yield from _block_events(index, block)
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _block_events(index: int, block: dict[str, Any]) -> Iterator[SSEEvent]:
    kind = block["type"]
    if kind == "thinking":
        empty: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    elif kind == "text":
        empty, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]
    else:
        empty = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": empty}
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


# -- OpenAI Responses ------------------------------------------------------------------------------


def responses_output(plan: Plan, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The answer's output items: a reasoning item, then the final message or the function calls."""
    note = f"Turn {plan.turn}: " + ("done, answer." if plan.final else "run the next command.")
    reasoning = {
        "type": "reasoning",
        "id": "rs_agent_" + uuid.uuid4().hex[:20],
        "summary": [{"type": "summary_text", "text": note}],
        "encrypted_content": base64.b64encode(note.encode() * 8).decode(),
    }
    if plan.final:
        message = {
            "type": "message",
            "id": "msg_agent_" + uuid.uuid4().hex[:20],
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": plan.final, "annotations": [], "logprobs": []}],
        }
        return [reasoning, message]
    tool, _ = shell_tool(body.get("tools"), ("exec_command", "shell", "local_shell"))
    calls = []
    for command in plan.commands:
        arguments = {"cmd": command.command} if tool == "exec_command" else {"command": command.command}
        calls.append(
            {
                "type": "function_call",
                "id": "fc_" + command.call_id,
                "call_id": "call_" + command.call_id,
                "name": tool,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
        )
    return [reasoning, *calls]


def responses_events(response: dict[str, Any]) -> Iterator[SSEEvent]:
    """The Responses API's SSE events for ``response``: each output item added, streamed, done."""
    sequence = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> SSEEvent:
        return kind, {"type": kind, "sequence_number": next(sequence), **fields}

    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(response["output"]):
        yield event("response.output_item.added", output_index=index, item=_in_progress(item))
        if item["type"] == "function_call":
            at = {"item_id": item["id"], "output_index": index}
            yield event("response.function_call_arguments.delta", **at, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **at, arguments=item["arguments"])
        elif item["type"] == "message":
            text = item["content"][0]["text"]
            at = {"item_id": item["id"], "output_index": index, "content_index": 0}
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield event("response.content_part.added", **at, part=empty)
            yield event("response.output_text.delta", **at, delta=text, logprobs=[])
            yield event("response.output_text.done", **at, text=text, logprobs=[])
            yield event("response.content_part.done", **at, part=item["content"][0])
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=response)


def _in_progress(item: dict[str, Any]) -> dict[str, Any]:
    if item["type"] == "function_call":
        return {**item, "arguments": "", "status": "in_progress"}
    if item["type"] == "message":
        return {**item, "content": [], "status": "in_progress"}
    return {**item, "summary": []}


def responses_usage(input_tokens: int, output: list[dict[str, Any]]) -> dict[str, Any]:
    produced = _approx(json.dumps(output))
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": produced,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + produced,
    }


# -- OpenAI chat completions -----------------------------------------------------------------------


SHELL_TOOLS = ("run_shell_command", "bash", "Bash", "shell", "exec_command")
"""The shell tool of Gemini CLI / Qwen Code, opencode / pi, Claude Code, Codex (by the names they use)."""


def chat_session(body: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """A chat client's session: ``prompt_cache_key`` or ``user`` where it sends one, a session header,
    else its head (system prompt and first user words: never changed by a compaction)."""
    for key in ("prompt_cache_key", "user"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    named = headers.get("x-session-id") or headers.get("session_id")
    if named:
        return named
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = [
        json.dumps(m.get("content"), sort_keys=True)
        for m in messages
        if m.get("role") in ("system", "developer")
    ][:1]
    first = next((m for m in messages if m.get("role") == "user"), {})
    return _head_hash(system, json.dumps(first.get("content"), sort_keys=True))


def chat_message(plan: Plan, body: Mapping[str, Any]) -> dict[str, Any]:
    """The assistant message: the final text, or the tool calls (no text beside them)."""
    if plan.final:
        return {"role": "assistant", "content": plan.final}
    name, properties = shell_tool(body.get("tools"), SHELL_TOOLS)
    calls = [
        {
            "id": "call_" + command.call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(shell_arguments(command, plan, properties))},
        }
        for command in plan.commands
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def chat_completion(model: str, message: dict[str, Any], prompt_tokens: int) -> dict[str, Any]:
    produced = _approx(json.dumps(message))
    return {
        "id": "chatcmpl-agent-" + uuid.uuid4().hex[:12],
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": produced,
            "total_tokens": prompt_tokens + produced,
        },
    }


def chat_chunks(completion: dict[str, Any], include_usage: bool) -> Iterator[SSEEvent]:
    """``chat.completion.chunk`` s for ``completion``: each call's id and name first, then its arguments."""
    base = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> SSEEvent:
        return None, {
            **base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    yield chunk({"role": "assistant", "content": "" if message.get("content") is not None else None})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        opening = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": function["name"], "arguments": ""},
        }
        yield chunk({"tool_calls": [opening]})
        arguments = function["arguments"]
        half = len(arguments) // 2
        for piece in (arguments[:half], arguments[half:]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield None, {**base, "choices": [], "usage": completion["usage"]}


# -- Google generateContent --------------------------------------------------------------------------


SIGNED_PREFIX = "standin-sig:"
DUMMY_SIGNATURES = frozenset({"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"})
"""Google's documented stand-ins for a signature the client does not have: accepted as valid."""
SIGNING_MODELS = re.compile(r"gemini-(?:[3-9]|[1-9]\d)(?!\d)")
MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required for tools to work "
    "correctly, and missing thought_signature may lead to degraded model performance. Additional data, "
    "function call `default_api:{name}` , position {position}. Please refer to "
    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)
CORRUPTED_SIGNATURE = "Corrupted thought signature."


def google_session(body: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """A Gemini client's session: a session header where it sends one (no Gemini client puts one in the
    body), else its head: the system instruction and the first words of the first part of its first
    content — what a compaction keeps, even when it joins a summary into that content (roles alternate)."""
    named = headers.get("x-session-id") or headers.get("x-gemini-session-id")
    if named:
        return named
    system = body.get("systemInstruction", body.get("system_instruction"))
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    parts = contents[0].get("parts") if contents else None
    first = parts[0] if isinstance(parts, list) and parts else None
    return _head_hash([json.dumps(system, sort_keys=True)], json.dumps(first, sort_keys=True)[:300])


def signature_of(payload: Any) -> str:
    """The stand-in's thought signature for a part's payload (a call's name and arguments — clients add
    their own ``id`` — or a text)."""
    if isinstance(payload, dict):
        payload = {"name": payload.get("name"), "args": payload.get("args")}
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()
    return base64.b64encode((SIGNED_PREFIX + digest[:32]).encode()).decode()


def google_parts(plan: Plan, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The answer's parts: a thought (when asked for), then the calls — the first one signed, as Gemini 3
    signs only the first of parallel calls — or the final text, signed."""
    config = body.get("generationConfig") or body.get("generation_config") or {}
    thinking = config.get("thinkingConfig") or config.get("thinking_config") or {}
    parts: list[dict[str, Any]] = []
    if isinstance(thinking, dict) and (thinking.get("includeThoughts") or thinking.get("include_thoughts")):
        parts.append(
            {
                "text": f"Turn {plan.turn}: " + ("done, answer." if plan.final else "run the next command."),
                "thought": True,
            }
        )
    if plan.final:
        return [*parts, {"text": plan.final, "thoughtSignature": signature_of(plan.final)}]
    declarations = [
        declaration
        for tool in body.get("tools") or []
        if isinstance(tool, dict)
        for declaration in tool.get("functionDeclarations") or tool.get("function_declarations") or []
    ]
    name, properties = shell_tool(declarations, SHELL_TOOLS)
    for index, command in enumerate(plan.commands):
        call = {"name": name, "args": shell_arguments(command, plan, properties)}
        part: dict[str, Any] = {"functionCall": call}
        if index == 0:
            part["thoughtSignature"] = signature_of(call)
        parts.append(part)
    return parts


def google_signature_problem(body: Mapping[str, Any]) -> str | None:
    """What Gemini 3 refuses of the current turn's signatures (every content after the last user content
    that is not only function responses): a model content whose first call carries none, or one of ours
    that is not its part's."""
    if not SIGNING_MODELS.search(str(body.get("model", ""))):
        return None
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    start = 0
    for index, content in enumerate(contents):
        parts = _parts(content)
        if content.get("role") == "user" and not all(
            isinstance(_part_of(p, "functionResponse"), dict) for p in parts
        ):
            start = index + 1
    for index in range(start, len(contents)):
        parts = _parts(contents[index])
        calls = [p for p in parts if isinstance(_part_of(p, "functionCall"), dict)]
        if contents[index].get("role") == "model" and calls and not _part_of(calls[0], "thoughtSignature"):
            name = _part_of(calls[0], "functionCall").get("name")
            return MISSING_SIGNATURE.format(name=name, position=index + 1)
        for part in parts:
            if _forged(part):
                return CORRUPTED_SIGNATURE
    return None


def _parts(content: Mapping[str, Any]) -> list[dict[str, Any]]:
    parts = content.get("parts")
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _part_of(part: Mapping[str, Any], camel: str) -> Any:
    """A part's field under its REST (camelCase) name or the snake_case one the API also accepts."""
    if camel in part:
        return part[camel]
    return part.get(re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower())


def _forged(part: Mapping[str, Any]) -> bool:
    """A signature of ours on a part it was not made for (a signature we did not make is the API's)."""
    signature = _part_of(part, "thoughtSignature")
    if not isinstance(signature, str) or signature in DUMMY_SIGNATURES:
        return False
    try:
        decoded = base64.b64decode(signature, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return False
    if not decoded.startswith(SIGNED_PREFIX):
        return False
    call = _part_of(part, "functionCall")
    return signature != signature_of(call if isinstance(call, dict) else part.get("text"))


# -- helpers ---------------------------------------------------------------------------------------


SCHEMA_KEYS = ("parameters", "parametersJsonSchema", "parameters_json_schema", "input_schema")
"""Where a tool keeps its parameters' JSON schema: chat, Responses and Google; Google's JSON-schema form;
its snake_case spelling; Anthropic."""


def shell_tool(tools: Any, preferred: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """The client's shell tool — the first of ``preferred`` it offers, else its first named tool, else
    ``preferred[0]`` — and the properties of its parameter schema (``{}`` without one), whatever the wire's
    shape: chat's ``{"type": "function", "function": {...}}``, a Responses or Anthropic tool, a Google
    function declaration."""
    offered: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = spec.get("name")
        schema = next((spec[key] for key in SCHEMA_KEYS if isinstance(spec.get(key), dict)), {})
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(name, str) and name not in offered:
            offered[name] = properties if isinstance(properties, dict) else {}
    name = next((n for n in preferred if n in offered), next(iter(offered), preferred[0]))
    return name, offered.get(name, {})


def shell_arguments(command: Command, plan: Plan, properties: Mapping[str, Any]) -> dict[str, Any]:
    """The shell tool's arguments by its schema: ``command`` (or ``cmd``), a description where it has one."""
    key = "cmd" if "cmd" in properties and "command" not in properties else "command"
    arguments: dict[str, Any] = {key: command.command}
    if "description" in properties:
        arguments["description"] = f"Print turn {plan.turn} output"
    return arguments


def _head_hash(system: list[str], first: str) -> str:
    return hashlib.sha256(json.dumps([system, first]).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _approx(text: str) -> int:
    return (len(text) + 3) // 4

"""Anthropic Messages, OpenAI Responses and Google generateContent through a real proxy with compact_hook,
as agents send them.

A Claude Code session is replayed turn by turn with the official ``anthropic`` SDK (a Claude-Code-like
``system`` with a cache breakpoint, tool definitions, and the breakpoint Claude Code moves to the newest
message every turn); a chat transcript converted to Responses input items is replayed with the ``openai``
SDK's ``responses.create``, and as Gemini contents (calls signed, as Gemini 3 wants) with the ``google-genai``
SDK to a Gemini 3 model whose stand-in refuses a current turn that lost its signatures. Turns alternate
between streaming and not. The stand-in provider validates
every request like the real APIs do (``strict`` models: no orphaned tool call or result), records every
body, and answers summary calls itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from google.genai import errors as genai_errors

from compact_hook.core.recall import TOOL_NAME
from tests.integration.harness import (
    ProxyProcess,
    anthropic_deployment,
    compact_info,
    gemini_deployment,
    standin_deployment,
)
from tests.integration.wire_clients import Replay, Sent, is_summary_call, send
from tests.support import (
    ANTHROPIC,
    CHAT,
    GOOGLE,
    RESPONSES,
    anthropic_replay_points,
    chat_to_google,
    chat_to_responses,
    chat_tool_definitions,
    content_blocks,
    google_replay_points,
    is_prefix,
    is_summary,
    load_transcript,
    pairing_problems,
    responses_replay_points,
    sorted_json,
    summaries_in,
    tokens_of,
    with_moving_marker,
    without_markers,
)

pytestmark = pytest.mark.edge  # also run on the newest LiteLLM (make test-newest)

WINDOW = 20_000
MAX_TOKENS = 1024
CLAUDE_MESSAGES = load_transcript("claude_code_fa812bfe_pre_compact.json", "anthropic")["messages"]
CLAUDE_POINTS = anthropic_replay_points(CLAUDE_MESSAGES)
RESPONSES_ITEMS = chat_to_responses(load_transcript("claude_code_fa812bfe_pre_compact.json"))
RESPONSES_POINTS = responses_replay_points(RESPONSES_ITEMS)
GEMINI_CONTENTS = chat_to_google(load_transcript("claude_code_fa812bfe_pre_compact.json"))
GEMINI_POINTS = google_replay_points(GEMINI_CONTENTS)
STRIDE = 2
"""The replays send every other turn: the session still grows through several compaction events
at half the requests (the suite's time is CPU-bound)."""

SYSTEM: Any = [
    {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
    {
        "type": "text",
        "text": "You are an interactive CLI tool that helps users with software engineering tasks. "
        "Use the tools available to you to read, search and edit files and to run commands. " * 8,
        "cache_control": {"type": "ephemeral"},
    },
]


def _tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {key: {"type": "string", "description": text} for key, text in properties.items()},
            "required": list(properties),
        },
    }


def recall_tool(tools: list[Any]) -> Any:
    """Ours, after the client's (recall is on by default): the last, by its name on every wire."""
    last = tools[-1]
    named = (
        last.get("function", last) if "functionDeclarations" not in last else last["functionDeclarations"][0]
    )
    assert named["name"] == TOOL_NAME
    return last


TOOLS: Any = [
    _tool(
        "Bash", "Executes a bash command in a persistent shell session. " * 6, command="The command to run"
    ),
    _tool("Read", "Reads a file from the local filesystem. " * 6, file_path="The absolute path to the file"),
    _tool(
        "Edit",
        "Performs exact string replacements in files. " * 6,
        file_path="The file to modify",
        old_string="The text to replace",
        new_string="The replacement text",
    ),
    _tool("Grep", "A powerful search tool built on ripgrep. " * 6, pattern="The regular expression"),
    _tool("Glob", "Fast file pattern matching tool. " * 6, pattern="The glob pattern"),
]
RESPONSES_TOOLS: Any = [
    {"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
    for t in TOOLS
]
INSTRUCTIONS = "You are a coding agent working in the user's repository. " * 10
GEMINI_TOOLS: Any = [
    {
        "functionDeclarations": [
            {"name": t["name"], "description": t["description"], "parametersJsonSchema": t["input_schema"]}
            for t in TOOLS
        ]
    }
]
TIERS_OFF = {"tool_output_policy": "none", "clear_tool_results": False}


SUMMARIZED = {
    "context_window": WINDOW,
    "summary_context_window": 400_000,  # one call per compaction event: the middle fits one request
    "summary_max_tokens": 1000,
    "prepare": False,  # summary calls are counted per turn here; test_prepare_proxy.py prepares
}


@pytest.fixture(scope="module")
def formats_proxy(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    archive = tmp_path_factory.mktemp("archive")
    root = standin.root_url
    config = {
        "model_list": [
            anthropic_deployment(
                "claude-agent",
                root,
                "standin-strict-claude-agent",
                **compact_info(archive, SUMMARIZED, TIERS_OFF, summary_model="claude-summarizer"),
            ),
            anthropic_deployment(
                "claude-tiers",
                root,
                "standin-strict-claude-tiers",
                **compact_info(archive, SUMMARIZED, summary_model="claude-summarizer"),
            ),
            anthropic_deployment("claude-summarizer", root, "standin-claude-summarizer"),
            standin_deployment(
                "codex-agent",
                standin.url,
                "standin-strict-codex-agent",
                **compact_info(archive, SUMMARIZED, TIERS_OFF, summary_model="gpt-summarizer"),
            ),
            standin_deployment("gpt-summarizer", standin.url, "standin-gpt-summarizer"),
            gemini_deployment(
                "gemini-agent",
                root,
                "gemini-3-pro-standin-strict-gemini-agent",
                **compact_info(archive, SUMMARIZED, TIERS_OFF, summary_model="gpt-summarizer"),
            ),
            standin_deployment(
                "chat-agent",
                standin.url,
                "standin-strict-chat-agent",
                **compact_info(archive, SUMMARIZED, TIERS_OFF, summary_model="gpt-summarizer"),
            ),
        ],
        "router_settings": {"num_retries": 0},
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    with ProxyProcess(config) as process:
        yield process


class SentReplay(Replay[Sent]):
    def summaries(self, wire: Any) -> list[str | None]:
        """The summary each forwarded request carries (None: none), turn by turn."""
        found = []
        for turn in self.turns:
            texts = summaries_in(turn.forwarded_entries, wire)
            assert len(texts) <= 1, "summaries are never stacked"
            found.append(texts[0] if texts else None)
        return found

    def events(self, wire: Any) -> int:
        """Compaction events: turns whose forwarded summary differs from the previous turn's."""
        summaries = self.summaries(wire)
        return sum(1 for before, now in zip([None, *summaries], summaries, strict=False) if now != before)


def send_claude(standin: Any, proxy: ProxyProcess, model: str, sent: list[Any], stream: bool) -> Sent:
    return send(
        standin, proxy, "anthropic", model, sent, stream, max_tokens=MAX_TOKENS, system=SYSTEM, tools=TOOLS
    )


def send_codex(standin: Any, proxy: ProxyProcess, sent: list[Any], stream: bool) -> Sent:
    return send(
        standin,
        proxy,
        "responses",
        "codex-agent",
        sent,
        stream,
        instructions=INSTRUCTIONS,
        tools=RESPONSES_TOOLS,
    )


@pytest.fixture(scope="module")
def claude_replay(standin: Any, formats_proxy: ProxyProcess) -> SentReplay:
    standin.reset()
    replay = SentReplay()
    for number, end in enumerate(CLAUDE_POINTS[::STRIDE]):
        sent = with_moving_marker(CLAUDE_MESSAGES[:end])
        replay.turns.append(send_claude(standin, formats_proxy, "claude-agent", sent, stream=number % 2 == 1))
    return replay


@pytest.fixture(scope="module")
def responses_replay(standin: Any, formats_proxy: ProxyProcess) -> SentReplay:
    standin.reset()
    replay = SentReplay()
    for number, end in enumerate(RESPONSES_POINTS[::STRIDE]):
        replay.turns.append(send_codex(standin, formats_proxy, RESPONSES_ITEMS[:end], stream=number % 2 == 1))
    return replay


def send_gemini(standin: Any, proxy: ProxyProcess, sent: list[Any], stream: bool) -> Sent:
    return send(
        standin,
        proxy,
        "google",
        "gemini-agent",
        sent,
        stream,
        system_instruction=INSTRUCTIONS,
        tools=GEMINI_TOOLS,
        max_output_tokens=MAX_TOKENS,
    )


@pytest.fixture(scope="module")
def gemini_replay(standin: Any, formats_proxy: ProxyProcess) -> SentReplay:
    standin.reset()
    replay = SentReplay()
    for number, end in enumerate(GEMINI_POINTS[::STRIDE]):
        replay.turns.append(
            send_gemini(standin, formats_proxy, GEMINI_CONTENTS[:end], stream=number % 2 == 1)
        )
    return replay


# -- Anthropic Messages ----------------------------------------------------------------------------------


def test_a_claude_code_session_compacts_with_one_summary_call_per_compaction_event(
    claude_replay: SentReplay,
) -> None:
    events = claude_replay.events(ANTHROPIC)
    assert events >= 4
    assert claude_replay.summary_calls == events
    assert sum(int(t.headers["x-compact-summary-calls"]) for t in claude_replay.turns) == events
    assert all(t.reply.startswith("stand-in reply") for t in claude_replay.turns)  # streaming and not


def test_every_forwarded_claude_request_is_valid_fits_and_keeps_system_and_tools(
    claude_replay: SentReplay,
) -> None:
    for turn in claude_replay.turns:
        body = turn.forwarded
        assert pairing_problems(body["messages"], ANTHROPIC) == []
        assert body["messages"][0]["role"] == "user"
        assert body["system"] == SYSTEM and body["tools"] == [*TOOLS, recall_tool(body["tools"])]
        tokens = tokens_of(body, ANTHROPIC, "claude")
        assert tokens <= WINDOW - MAX_TOKENS
        assert int(turn.headers["x-compact-tokens-after"]) == tokens  # the report counts what was forwarded
        assert turn.headers["x-compact-compacted"] in ("true", "false")


def test_with_the_tiers_off_every_forwarded_message_but_the_summary_is_the_clients_own(
    claude_replay: SentReplay,
) -> None:
    for turn in claude_replay.turns:
        sent = {sorted_json(message) for message in turn.entries}
        for message in turn.forwarded_entries:
            assert is_summary(message, ANTHROPIC) or sorted_json(message) in sent
        assert turn.forwarded_entries[-1] == turn.entries[-1]  # with its moved cache breakpoint


def test_the_forwarded_claude_prefix_is_stable_between_compaction_events(claude_replay: SentReplay) -> None:
    summaries = claude_replay.summaries(ANTHROPIC)
    turns = claude_replay.turns
    stable = 0
    for k in range(1, len(turns)):
        if summaries[k] == summaries[k - 1]:
            earlier = without_markers(turns[k - 1].forwarded_entries)
            assert is_prefix(earlier, without_markers(turns[k].forwarded_entries))
            stable += 1
    assert stable > len(turns) // 2


def test_a_claude_session_with_the_cheap_tiers_stays_valid_and_within_the_window(
    standin: Any, formats_proxy: ProxyProcess
) -> None:
    standin.reset()
    replay = SentReplay()
    for number, end in enumerate(CLAUDE_POINTS[::3]):
        sent = with_moving_marker(CLAUDE_MESSAGES[:end])
        replay.turns.append(send_claude(standin, formats_proxy, "claude-tiers", sent, stream=number % 2 == 0))
    truncated = cleared = 0
    for turn in replay.turns:
        assert pairing_problems(turn.forwarded_entries, ANTHROPIC) == []
        assert tokens_of(turn.forwarded, ANTHROPIC, "claude") <= WINDOW - MAX_TOKENS
        truncated += int(turn.headers["x-compact-truncated"])
        cleared += int(turn.headers["x-compact-cleared"])
    assert truncated > 0 and cleared > 0  # the tiers reach tool_result blocks inside user messages
    assert replay.summary_calls == replay.events(ANTHROPIC)


# -- OpenAI Responses ------------------------------------------------------------------------------------


def test_a_responses_session_compacts_with_one_summary_call_per_compaction_event(
    responses_replay: SentReplay,
) -> None:
    events = responses_replay.events(RESPONSES)
    assert events >= 4
    assert responses_replay.summary_calls == events
    assert all(t.reply.startswith("stand-in reply") for t in responses_replay.turns)


def test_every_forwarded_responses_request_is_valid_fits_and_keeps_the_clients_items(
    responses_replay: SentReplay,
) -> None:
    summaries = responses_replay.summaries(RESPONSES)
    for k, turn in enumerate(responses_replay.turns):
        body = turn.forwarded
        assert pairing_problems(body["input"], RESPONSES) == []
        assert body["instructions"] == INSTRUCTIONS
        assert body["tools"] == [*RESPONSES_TOOLS, recall_tool(body["tools"])]
        tokens = tokens_of(body, RESPONSES, "o200k_base")
        assert tokens <= WINDOW and int(turn.headers["x-compact-tokens-after"]) == tokens
        sent = {sorted_json(item) for item in turn.entries}
        assert all(is_summary(item, RESPONSES) or sorted_json(item) in sent for item in body["input"])
        if k and summaries[k] == summaries[k - 1]:
            assert is_prefix(responses_replay.turns[k - 1].forwarded["input"], body["input"])


# -- Google generateContent ------------------------------------------------------------------------------


def test_a_gemini_session_compacts_with_one_summary_call_per_compaction_event(
    gemini_replay: SentReplay,
) -> None:
    events = gemini_replay.events(GOOGLE)
    assert events >= 4
    assert gemini_replay.summary_calls == events
    assert sum(int(t.headers["x-compact-summary-calls"]) for t in gemini_replay.turns) == events
    assert all(t.reply.startswith("stand-in reply") for t in gemini_replay.turns)  # streaming and not


def test_every_forwarded_gemini_request_is_accepted_fits_and_keeps_the_clients_parts(
    gemini_replay: SentReplay,
) -> None:
    """Accepted: the stand-in is strict and a Gemini 3 (alternating roles, calls answered, the current
    turn's signatures); every reply above is a 200."""
    summaries = gemini_replay.summaries(GOOGLE)
    for k, turn in enumerate(gemini_replay.turns):
        body = turn.forwarded
        assert pairing_problems(body["contents"], GOOGLE) == []
        declared = [(d["name"], d["description"]) for d in body["tools"][0]["functionDeclarations"]]
        assert declared == [
            (t["name"], t["description"]) for t in TOOLS
        ]  # LiteLLM spells the schema key its way
        assert body["tools"] == gemini_replay.turns[0].forwarded["tools"]
        assert INSTRUCTIONS in json.dumps(body["systemInstruction"])
        tokens, reported = tokens_of(body, GOOGLE, "o200k_base"), int(turn.headers["x-compact-tokens-after"])
        assert tokens <= WINDOW - MAX_TOKENS
        # counted before LiteLLM joined adjacent user contents (4 tokens a join), then at the ratio the
        # provider's bills teach (it billed the joined body)
        assert abs(reported - tokens) <= 4 * len(body["contents"])
        sent = {sorted_json(part) for content in turn.entries for part in content["parts"]}
        for content in body["contents"]:
            for part in content["parts"]:
                assert sorted_json(part) in sent or part.get("text", "").startswith("[compact_hook summary]")
        if k and summaries[k] == summaries[k - 1]:
            assert is_prefix(gemini_replay.turns[k - 1].forwarded["contents"], body["contents"])


def test_a_responses_request_with_previous_response_id_is_forwarded_as_sent(
    standin: Any, formats_proxy: ProxyProcess
) -> None:
    client = openai.OpenAI(
        base_url=formats_proxy.base_url, api_key=formats_proxy.master_key, max_retries=0, timeout=120
    )
    sent = RESPONSES_ITEMS[: RESPONSES_POINTS[-1]]
    raw = client.responses.with_raw_response.create(
        model="codex-agent",
        input=sent,
        previous_response_id="resp_standin_earlier",
        instructions=INSTRUCTIONS,
    )
    assert raw.headers["x-compact-reason"] == "client_managed"
    [forwarded] = standin.responses_requests
    assert (
        forwarded["body"]["input"] == sent
        and forwarded["body"]["previous_response_id"] == "resp_standin_earlier"
    )


def test_anthropic_messages_to_an_openai_deployment_are_compacted_before_litellm_translates_them(
    standin: Any, formats_proxy: ProxyProcess
) -> None:
    """What `make run` does for the Anthropic SDK: /v1/messages to an ``openai/`` deployment."""
    client = anthropic.Anthropic(
        base_url=formats_proxy.url, api_key=formats_proxy.master_key, max_retries=0, timeout=120
    )
    sent = [m for m in CLAUDE_MESSAGES if not any(b.get("type") == "thinking" for b in content_blocks(m))]
    sent = sent[: anthropic_replay_points(sent)[-1]]
    raw = client.messages.with_raw_response.create(model="codex-agent", max_tokens=MAX_TOKENS, messages=sent)
    assert raw.http_response.status_code == 200 and raw.headers["x-compact-compacted"] == "true"
    [forwarded] = standin.responses_requests  # LiteLLM sent it on as Responses input (valid: strict model)
    assert [item for item in forwarded["body"]["input"] if "compact_hook summary" in json.dumps(item)]


def test_a_chat_request_pushed_over_the_window_by_its_tool_definitions_is_forwarded_within_it(
    standin: Any, formats_proxy: ProxyProcess
) -> None:
    """Messages alone are under the trigger; with 30 tool definitions they exceed the window."""
    messages = load_transcript("claude_code_fa812bfe_pre_compact.json")[:17]  # a replay point: 12.5K tokens
    tools = chat_tool_definitions(30)  # ~9.6K tokens
    alone = send(standin, formats_proxy, "chat", "chat-agent", messages)
    assert alone.headers["x-compact-reason"] == "below_threshold"
    turn = send(standin, formats_proxy, "chat", "chat-agent", messages, tools=tools)
    assert (
        int(alone.headers["x-compact-tokens-before"]) < WINDOW < int(turn.headers["x-compact-tokens-before"])
    )
    assert int(turn.headers["x-compact-tokens-after"]) <= WINDOW
    assert tokens_of(turn.forwarded, CHAT, "o200k_base") <= WINDOW
    assert turn.forwarded["tools"] == [*tools, recall_tool(turn.forwarded["tools"])]
    assert pairing_problems(turn.forwarded_entries) == []


# -- the last turn is the client's -----------------------------------------------------------------------

REVIEW_BETAS = "dangerous-tool-use-2026-09-03,auto-mode-classifier-2026-07-16,subagent-review-2026-11-17"
SAFEGUARDS = [{"type": "dangerous_tool_use", "classifier_context": {"transcript": "the subagent's task"}}]


def review_call(history: list[Any]) -> list[Any]:
    """Claude Code 2.1.332's review of a subagent's hand-back, as its bundle builds it
    (``subagent_server_review``): the history, then an assistant turn making the call under review —
    ``SubagentHandback`` with a fresh ``toolu_`` id — and no result; ``max_tokens: 0``, the three betas and
    a ``safeguards`` body field (``type: dangerous_tool_use``). The request is only made against
    Anthropic's own API with a server review available, so it cannot be captured through a stand-in."""
    call = {
        "type": "tool_use",
        "id": "toolu_0d6f1c2b9a8e4f7a8b1c2d3e4f5a6b7c",
        "name": "SubagentHandback",
        "input": {"message": "Done: the parser accepts nested lists; tests pass.", "kind": "report"},
    }
    return [*history, {"role": "assistant", "content": [call]}]


def test_claude_codes_review_call_is_forwarded_with_the_call_under_review_as_sent(
    standin: Any, formats_proxy: ProxyProcess
) -> None:
    client = anthropic.Anthropic(
        base_url=formats_proxy.url, api_key=formats_proxy.master_key, max_retries=0, timeout=120
    )
    sent = review_call(CLAUDE_MESSAGES[: CLAUDE_POINTS[-1]])
    standin.reset()
    raw = client.messages.with_raw_response.create(
        model="claude-agent",
        max_tokens=0,
        messages=sent,
        system=SYSTEM,
        tools=TOOLS,
        extra_headers={"anthropic-beta": REVIEW_BETAS},
        extra_body={"safeguards": SAFEGUARDS},
    )
    assert raw.http_response.status_code == 200 and raw.headers["x-compact-compacted"] == "true"
    [forwarded] = [
        r["body"] for r in standin.requests if r["method"] == "POST" and not is_summary_call(r["body"])
    ]
    assert sorted_json(forwarded["messages"][-1]) == sorted_json(sent[-1])  # no result added, nothing cut
    assert len(forwarded["messages"]) < len(sent) and summaries_in(forwarded["messages"], ANTHROPIC)
    assert pairing_problems(forwarded["messages"][:-1], ANTHROPIC) == []
    assert forwarded["max_tokens"] == 0 and forwarded["safeguards"] == SAFEGUARDS


PREFILLS = {
    "chat": ("chat-agent", {"role": "assistant", "content": "The fix is"}),
    "anthropic": ("claude-agent", {"role": "assistant", "content": "The fix is"}),
    "responses": (
        "codex-agent",
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The fix is"}]},
    ),
    "google": ("gemini-agent", {"role": "model", "parts": [{"text": "The fix is"}]}),
}
HISTORIES = {
    "chat": lambda: load_transcript("claude_code_fa812bfe_pre_compact.json")[:60],
    "anthropic": lambda: CLAUDE_MESSAGES[: CLAUDE_POINTS[-1]],
    "responses": lambda: RESPONSES_ITEMS[: RESPONSES_POINTS[-1]],
    "google": lambda: GEMINI_CONTENTS[: GEMINI_POINTS[-1]],
}
EXTRAS: dict[str, dict[str, Any]] = {
    "chat": {},
    "anthropic": {"system": SYSTEM, "tools": TOOLS, "max_tokens": MAX_TOKENS},
    "responses": {"instructions": INSTRUCTIONS, "tools": RESPONSES_TOOLS},
    "google": {"system_instruction": INSTRUCTIONS, "tools": GEMINI_TOOLS, "max_output_tokens": MAX_TOKENS},
}


@pytest.mark.parametrize("wire", ["anthropic", "chat", "responses"])
def test_a_prefill_is_forwarded_as_sent_after_the_compacted_history(
    standin: Any, formats_proxy: ProxyProcess, wire: str
) -> None:
    model, prefill = PREFILLS[wire]
    sent = [*HISTORIES[wire](), prefill]
    standin.reset()
    turn = send(standin, formats_proxy, wire, model, sent, **EXTRAS[wire])
    formats = {"chat": CHAT, "anthropic": ANTHROPIC, "responses": RESPONSES, "google": GOOGLE}
    assert turn.headers["x-compact-compacted"] == "true"
    assert sorted_json(turn.forwarded_entries[-1]) == sorted_json(prefill)
    assert summaries_in(turn.forwarded_entries, formats[wire])
    assert len(turn.forwarded_entries) < len(sent)


def test_a_gemini_request_ending_with_the_models_turn_meets_geminis_own_refusal(
    standin: Any, formats_proxy: ProxyProcess
) -> None:
    """Gemini refuses a conversation that ends with a ``model`` turn; the request reaches it as the client
    sent its last turn (the history compacted), and the client reads Gemini's own error."""
    model, prefill = PREFILLS["google"]
    sent = [*HISTORIES["google"](), prefill]
    standin.reset()
    with pytest.raises(genai_errors.ClientError, match="ends with a user role or a function response"):
        send(standin, formats_proxy, "google", model, sent, **EXTRAS["google"])
    [forwarded] = [
        r["body"] for r in standin.requests if r["method"] == "POST" and not is_summary_call(r["body"])
    ]
    assert sorted_json(forwarded["contents"][-1]) == sorted_json(prefill)
    assert summaries_in(forwarded["contents"], GOOGLE) and len(forwarded["contents"]) < len(sent)

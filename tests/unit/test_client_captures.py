"""Requests the real CLIs sent, captured before the proxy (``tools/clients.py --capture``), as the
adapters and the engine see them: what a client sends today is the spec.

``tests/data/clients/<binary>-<version>-{first,last}.json``: each CLI's first request and its request
after 30 scripted tool turns (Claude Code, Codex CLI, Gemini CLI, Qwen Code, opencode, pi). Recapture when ``clients/package.json``
moves: ``.venv/bin/python tools/clients.py --capture tests/data/clients``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compact_hook.core.items import PartKind, Role
from compact_hook.proxy.answers.codex import Mementos
from compact_hook.state.store import MemoryStore
from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES, Conversation, Rejected, WireFormat
from compact_hook.wires.responses.compaction import HANDLE_PREFIX
from tests.compaction import config, run
from tests.integration.harness import standin_upstream
from tests.support import pairing_problems

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "clients"
WIRES = {
    "claude": ANTHROPIC,
    "codex": RESPONSES,
    "gemini": GOOGLE,
    "qwen": CHAT,
    "opencode": CHAT,
    "pi": CHAT,
}
ENTRIES = {"anthropic": "messages", "responses": "input", "chat": "messages", "google": "contents"}


def _captures() -> list[Path]:
    return sorted(CAPTURES.glob("*.json"))


def _capture(path: Path) -> tuple[WireFormat, dict[str, Any]]:
    return WIRES[path.name.split("-")[0]], json.loads(path.read_text())


def test_every_client_has_a_first_and_a_last_capture() -> None:
    names = {path.name.rsplit("-", 1)[0] for path in _captures()}
    assert {name.split("-")[0] for name in names} == set(WIRES)
    assert all((CAPTURES / f"{name}-{label}.json").exists() for name in names for label in ("first", "last"))


CODEX_COMPACTING = "codex-0.171.0-codex-builtin"
"""Codex on its built-in provider, compacting remotely: its later requests carry our compaction item."""


@pytest.mark.parametrize(
    "path",
    [p for p in _captures() if not p.name.startswith(CODEX_COMPACTING + "-last")],
    ids=lambda p: p.name,
)
def test_a_captured_request_is_ours_to_compact_and_valid_as_sent(path: Path) -> None:
    wire, body = _capture(path)
    parsed = wire.parse(body)
    assert isinstance(parsed, Conversation), parsed
    assert pairing_problems(body[ENTRIES[wire.name]], wire) == []


@pytest.mark.parametrize("version", ["2.1.332", "2.1.337"])  # npm's, and the Agent SDK's newer build
def test_claude_code_sends_its_environment_as_a_mid_conversation_system_entry_and_32k_of_reserve(
    version: str,
) -> None:
    wire, body = _capture(CAPTURES / f"claude-{version}-first.json")
    parsed = wire.parse(body)
    assert isinstance(parsed, Conversation) and parsed.reserve == 32_000
    roles = [item.role for item in parsed.items()]
    assert roles == [Role.USER, Role.SYSTEM] and parsed.items()[1].text().startswith("# Environment")
    assert body["thinking"]["type"] in ("adaptive", "enabled")
    assert [edit["type"] for edit in body["context_management"]["edits"]] == ["clear_thinking_20251015"]


def _last_captures() -> list[str]:
    return sorted(
        path.name for path in CAPTURES.glob("*-last.json") if not path.name.startswith(CODEX_COMPACTING)
    )


@pytest.mark.parametrize("name", _last_captures())
async def test_a_captured_session_compacts_into_a_request_the_provider_accepts(name: str) -> None:
    wire, body = _capture(CAPTURES / name)
    key = ENTRIES[wire.name]
    words = sum(len(json.dumps(entry).split()) for entry in body[key])
    reserve = body.get("max_tokens") or body.get("max_completion_tokens") or 0
    settings = config(context_window=words * 2 // 3 + reserve, summary_max_tokens=200)
    result = await run(wire.name, body, settings)
    assert result.compacted and pairing_problems(result.messages, wire) == []
    forwarded = dict(body)
    wire.render(forwarded, result.messages)
    if wire is ANTHROPIC:
        standin_upstream.check_anthropic_messages(forwarded)  # roles, system placement
        parsed = ANTHROPIC.parse(forwarded)
        assert isinstance(parsed, Conversation)
        assert not any(part.kind is PartKind.THINKING for item in parsed.items() for part in item.parts)
        assert result.thinking_removed > 0  # every kept turn's block was produced before this change
    elif wire is RESPONSES:
        standin_upstream.check_responses_input(forwarded)
    elif wire is GOOGLE:  # as a Gemini 3 judges it: alternation, pairing, the current turn's signatures
        standin_upstream.standin_google.check_google_contents(forwarded)
        assert (
            standin_upstream.agent_script.google_signature_problem({**forwarded, "model": "gemini-3-pro"})
            is None
        )
    else:
        standin_upstream.check_chat_messages(forwarded["messages"])


def test_gemini_cli_sends_its_calls_signed_and_answers_them_by_ids_of_its_own() -> None:
    """What Gemini CLI 0.61.0 sends back: the model's signature on each turn's first call, and an
    ``id`` of its own making on each call and its response (LiteLLM drops the response's on the way)."""
    _, body = _capture(CAPTURES / "gemini-0.61.0-last.json")
    contents = body["contents"]
    calls = [p for c in contents if c["role"] == "model" for p in c["parts"] if "functionCall" in p]
    responses = [p for c in contents if c["role"] == "user" for p in c["parts"] if "functionResponse" in p]
    assert calls and all(p["functionCall"].get("id") for p in calls)
    assert [p["functionCall"]["id"] for p in calls] == [p["functionResponse"]["id"] for p in responses]
    firsts = [
        next(p for p in c["parts"] if "functionCall" in p)
        for c in contents
        if c["role"] == "model" and any("functionCall" in p for p in c["parts"])
    ]
    assert all("thoughtSignature" in p for p in firsts)
    assert "maxOutputTokens" not in body.get("generationConfig", {})  # no reserve asked: the config's applies


async def test_codex_sends_our_compaction_item_back_after_its_context_and_expanded_it_is_ours() -> None:
    """Codex 0.171.0 after its own (remote) compaction, as it sent it: its developer messages and the
    user's messages, then our item verbatim (its own ``cmp_`` id), then the turn going on. Expanded, the
    request is an ordinary conversation for us; unexpanded, it is not ours to touch."""
    wire, body = _capture(CAPTURES / f"{CODEX_COMPACTING}-last.json")
    items = body["input"]
    [at] = [k for k, item in enumerate(items) if item.get("type") == "compaction"]
    assert items[at]["encrypted_content"].startswith(HANDLE_PREFIX) and items[at]["id"].startswith("cmp_")
    assert all(item.get("role") in ("developer", "user") for item in items[:at])
    assert isinstance(wire.parse(body), Rejected)  # never forwarded like this: expanded first
    mementos = Mementos(MemoryStore(10, 60), 60)
    summary = RESPONSES.summary("what the agent did").raw
    handle = await mementos.keep([summary], "key:k")
    assert handle is not None
    data = {**body, "input": [*items[:at], {**items[at], "encrypted_content": handle}, *items[at + 1 :]]}
    assert (await mementos.expand(data, "key:k")).expanded == 1
    parsed = wire.parse(data)
    assert isinstance(parsed, Conversation) and pairing_problems(data["input"], wire) == []
    assert data["input"][at] == summary

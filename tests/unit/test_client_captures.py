"""Requests the real CLIs sent, captured before the proxy (``tools/clients.py --capture``), as the
adapters and the engine see them: what a client sends today is the spec.

``tests/data/clients/<binary>-<version>-{first,last}.json``: Claude Code's and Codex CLI's first
request and their request after 30 scripted tool turns. Recapture when ``clients/package.json``
moves: ``.venv/bin/python tools/clients.py --capture tests/data/clients``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compact_hook.core.items import PartKind, Role
from compact_hook.formats import ANTHROPIC, RESPONSES, Conversation, WireFormat
from tests.compaction import config, run
from tests.integration.harness import standin_upstream
from tests.support import pairing_problems

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "clients"
WIRES = {"claude": ANTHROPIC, "codex": RESPONSES}


def _captures() -> list[Path]:
    return sorted(CAPTURES.glob("*.json"))


def _load(path: Path) -> tuple[WireFormat, dict[str, Any]]:
    return WIRES[path.name.split("-")[0]], json.loads(path.read_text())


def test_every_client_has_a_first_and_a_last_capture() -> None:
    names = {path.name.rsplit("-", 1)[0] for path in _captures()}
    assert {name.split("-")[0] for name in names} == set(WIRES)
    assert all((CAPTURES / f"{name}-{label}.json").exists() for name in names for label in ("first", "last"))


@pytest.mark.parametrize("path", _captures(), ids=lambda path: path.name)
def test_a_captured_request_is_ours_to_compact_and_valid_as_sent(path: Path) -> None:
    wire, body = _load(path)
    parsed = wire.parse(body)
    assert isinstance(parsed, Conversation), parsed
    key = "messages" if wire is ANTHROPIC else "input"
    assert pairing_problems(body[key], wire) == []


def test_claude_code_sends_its_environment_as_a_mid_conversation_system_entry_and_32k_of_reserve() -> None:
    wire, body = _load(CAPTURES / "claude-2.1.330-first.json")
    parsed = wire.parse(body)
    assert isinstance(parsed, Conversation) and parsed.reserve == 32_000
    roles = [item.role for item in parsed.items()]
    assert roles == [Role.USER, Role.SYSTEM] and parsed.items()[1].text().startswith("# Environment")
    assert body["thinking"]["type"] in ("adaptive", "enabled")
    assert [edit["type"] for edit in body["context_management"]["edits"]] == ["clear_thinking_20251015"]


@pytest.mark.parametrize("name", ["claude-2.1.330-last.json", "codex-0.169.0-last.json"])
async def test_a_captured_session_compacts_into_a_request_the_provider_accepts(name: str) -> None:
    wire, body = _load(CAPTURES / name)
    key = "messages" if wire is ANTHROPIC else "input"
    words = sum(len(json.dumps(entry).split()) for entry in body[key])
    settings = config(context_window=words * 2 // 3 + body.get("max_tokens", 0), summary_max_tokens=200)
    result = await run(wire.name, body, settings)
    assert result.compacted and pairing_problems(result.messages, wire) == []
    if wire is ANTHROPIC:
        standin_upstream.check_anthropic_messages(
            {**body, "messages": result.messages}
        )  # roles, system placement
        parsed = ANTHROPIC.parse({**body, "messages": result.messages})
        assert isinstance(parsed, Conversation)
        assert not any(part.kind is PartKind.THINKING for item in parsed.items() for part in item.parts)
        assert result.thinking_removed > 0  # every kept turn's block was produced before this change
    else:
        standin_upstream.check_responses_input({**body, "input": result.messages})

"""The real agent CLIs — Claude Code and Codex CLI, from npm — through a real proxy with compact_hook.

Each CLI runs as a user runs it (``claude -p``, ``codex exec``) in a scratch folder, pointed at a
``Relay`` in front of the proxy, against the stand-in's scripted agent (``tools/agent_script.py``):
~30 turns of tool calls that make the CLI run a real shell command, then a final answer. The relay
records what the CLI sent and our response headers; the stand-in records what reached the
provider. ``facts_of`` reads both; ``problems`` says what is wrong with them. The test suite
(``test_clients_proxy.py``) asserts there is nothing; ``make clients`` prints the table.

The CLIs are installed by ``npm ci --prefix clients`` at the exact versions of
``clients/package.json`` (``make clients-install``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compact_hook.formats import ANTHROPIC, RESPONSES, WireFormat
from compact_hook.formats.base import positive_int
from tests.integration.harness import (
    REPO_ROOT,
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    standin_deployment,
    standin_upstream,
)
from tests.integration.relay import Exchange
from tests.support import is_summary, pairing_problems, tokens_of

agent_script = standin_upstream.agent_script

CLIENTS_DIR = REPO_ROOT / "clients"
TOOL_TURNS = 30
CLIENT_TIMEOUT = 600.0
PROMPT = "Run each command you are given with your shell tool, one turn at a time, until you are told you are done."
SUMMARY_WINDOW = 200_000
AMBIENT = ("ANTHROPIC_", "OPENAI_", "CLAUDE_", "CODEX_", "LITELLM_")


@dataclass(frozen=True)
class AgentClient:
    """One CLI: how it is installed and run, the model group it talks to and how it is checked.

    ``upstream_model`` picks the stand-in's behaviour (``strict``: the provider's validation,
    ``script30``: the script). ``as_sent``: top-level keys the provider must get exactly as the
    CLI sent them.
    """

    name: str
    package: str
    binary: str
    wire: WireFormat
    group: str
    path: str
    upstream_model: str
    summary_model: str
    window: int
    tokenizer: str
    as_sent: tuple[str, ...]

    @property
    def version(self) -> str:
        manifest = json.loads((CLIENTS_DIR / "package.json").read_text())
        return str(manifest["dependencies"][self.package])

    @property
    def executable(self) -> Path:
        return CLIENTS_DIR / "node_modules" / ".bin" / self.binary

    def model_list(self, upstream: StandinUpstream) -> list[dict[str, Any]]:
        compact = {
            "context_window": self.window,
            "summary_model": f"{self.group}-summarizer",
            "summary_max_tokens": 1000,
        }
        if self.wire is ANTHROPIC:
            agent = anthropic_deployment(self.group, upstream.root_url, self.upstream_model, compact=compact)
        else:
            agent = standin_deployment(self.group, upstream.url, self.upstream_model, compact=compact)
        summarizer = standin_deployment(
            f"{self.group}-summarizer", upstream.url, self.summary_model, max_input_tokens=SUMMARY_WINDOW
        )
        return [agent, summarizer]

    def session_of(self, body: dict[str, Any]) -> str:
        if self.wire is ANTHROPIC:
            return str(agent_script.anthropic_session(body, {}))
        return str(agent_script.responses_session(body, {}))

    def reserve_of(self, body: dict[str, Any]) -> int:
        return positive_int(body, "max_tokens" if self.wire is ANTHROPIC else "max_output_tokens") or 0


CLAUDE_CODE = AgentClient(
    name="Claude Code",
    package="@anthropic-ai/claude-code",
    binary="claude",
    wire=ANTHROPIC,
    group="cc-agent",
    path="/v1/messages",
    upstream_model=f"claude-fable-5-1-standin-strict-script{TOOL_TURNS}",  # a Claude 5.1 name: LiteLLM keeps `thinking`, the prefix check runs
    summary_model="standin-summarizer-cc",
    window=48_000,
    tokenizer="claude",
    as_sent=("system", "tools", "thinking", "context_management", "output_config", "max_tokens"),
)
CODEX = AgentClient(
    name="Codex CLI",
    package="@openai/codex",
    binary="codex",
    wire=RESPONSES,
    group="codex-agent",
    path="/v1/responses",
    upstream_model=f"standin-strict-script{TOOL_TURNS}",
    summary_model="standin-summarizer-codex",
    window=16_000,
    tokenizer="o200k_base",
    as_sent=("instructions", "tools", "reasoning", "include", "tool_choice", "parallel_tool_calls"),
)
CLIENTS = (CLAUDE_CODE, CODEX)


def proxy_config(upstream: StandinUpstream, clients: tuple[AgentClient, ...] = CLIENTS) -> dict[str, Any]:
    model_list = [entry for client in clients for entry in client.model_list(upstream)]
    return {
        "model_list": model_list,
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
        "router_settings": {"num_retries": 0},
    }


@contextmanager
def agent_proxy(clients: tuple[AgentClient, ...] = CLIENTS) -> Iterator[tuple[StandinUpstream, ProxyProcess]]:
    """The stand-in and a proxy serving every client's model group, archive in a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="agent-clients-") as scratch:
        env = {"COMPACT_ARCHIVE_DIR": str(Path(scratch) / "archive")}
        with StandinUpstream() as upstream, ProxyProcess(proxy_config(upstream, clients), env=env) as proxy:
            yield upstream, proxy


# -- running a CLI --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Completed:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float


def run_client(client: AgentClient, base_url: str, key: str) -> Completed:
    """Run the CLI once, as a user would, in a scratch home and work folder of its own."""
    with tempfile.TemporaryDirectory(prefix=f"{client.binary}-") as scratch:
        home, work = Path(scratch) / "home", Path(scratch) / "work"
        home.mkdir()
        work.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(AMBIENT)}
        env.update({"HOME": str(home), "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
        command = (
            _claude_code(client, env, base_url, key)
            if client.binary == CLAUDE_CODE.binary
            else _codex(env, base_url, key, home)
        )
        started = time.monotonic()
        done = subprocess.run(
            command,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=CLIENT_TIMEOUT,
            check=False,
        )
        return Completed(
            done.returncode,
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"),
            time.monotonic() - started,
        )


def _claude_code(client: AgentClient, env: dict[str, str], base_url: str, key: str) -> list[str]:
    env.update(
        {
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
    )
    return [str(CLAUDE_CODE.executable), "-p", PROMPT, "--model", client.group, "--allowedTools", "Bash"]


def _codex(env: dict[str, str], base_url: str, key: str, home: Path) -> list[str]:
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        f'model = "{CODEX.group}"\n'
        'model_provider = "litellm"\n\n'
        "[model_providers.litellm]\n"
        'name = "LiteLLM proxy"\n'
        f'base_url = "{base_url}/v1"\n'
        'env_key = "COMPACT_CLIENT_KEY"\n'
        'wire_api = "responses"\n'
    )
    env.update({"CODEX_HOME": str(codex_home), "COMPACT_CLIENT_KEY": key})
    return [str(CODEX.executable), "exec", "--skip-git-repo-check", PROMPT]


# -- what happened --------------------------------------------------------------------------------


@dataclass
class ClientFacts:
    """What one CLI run did, read from the relay (client side) and the stand-in (provider side)."""

    client: AgentClient
    completed: Completed
    sent: list[dict[str, Any]]
    statuses: list[int]
    headers: list[dict[str, str]]
    forwarded: list[dict[str, Any]]
    summary_calls: int
    turns: int
    compactions: int = 0
    largest: int = 0
    orphans: int = 0
    not_as_sent: list[str] = field(default_factory=list)
    thinking_forwarded: int = 0
    thinking_removed: int = 0

    @property
    def final(self) -> bool:
        return agent_script.AGENT_FINAL in self.completed.stdout


def facts_of(
    client: AgentClient, completed: Completed, relay: list[Exchange], upstream: StandinUpstream
) -> ClientFacts:
    mine = [e for e in relay if e.method == "POST" and e.path == client.path]
    recorded = upstream.requests
    forwarded = [
        r["body"]
        for r in recorded
        if isinstance(r["body"], dict) and r["body"].get("model") == client.upstream_model
    ]
    summaries = [
        r for r in recorded if isinstance(r["body"], dict) and r["body"].get("model") == client.summary_model
    ]
    sessions = upstream.agent_turns
    turns = max((sessions.get(client.session_of(body), 0) for body in forwarded), default=0)
    facts = ClientFacts(
        client,
        completed,
        [e.body for e in mine],
        [e.status for e in mine],
        [e.compact_headers() for e in mine],
        forwarded,
        len(summaries),
        turns,
    )
    seen_summaries: set[str] = set()
    key = "messages" if client.wire is ANTHROPIC else "input"
    for body in forwarded:
        entries = body.get(key) or []
        seen_summaries.update(json.dumps(e, sort_keys=True) for e in entries if is_summary(e, client.wire))
        facts.orphans += len(pairing_problems(entries, client.wire))
        facts.largest = max(
            facts.largest, tokens_of(body, client.wire, client.tokenizer) + client.reserve_of(body)
        )
        facts.thinking_forwarded += any(_has_thinking(e) for e in entries)
    facts.compactions = len(seen_summaries)
    facts.thinking_removed = sum(int(h.get("x-compact-thinking-removed", 0)) for h in facts.headers)
    for index, (sent, got) in enumerate(zip(facts.sent, forwarded, strict=False)):
        facts.not_as_sent.extend(
            f"request {index}: {name}"
            for name in client.as_sent
            if name in sent and got.get(name) != sent[name]
        )
    return facts


def _has_thinking(entry: Any) -> bool:
    content = entry.get("content") if isinstance(entry, dict) else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")
        for block in content
    )


def problems(facts: ClientFacts) -> list[str]:
    """Everything that is wrong with a run; empty when the CLI got through as it should."""
    client, found = facts.client, []
    if facts.completed.exit_code != 0 or not facts.final:
        found.append(f"exit {facts.completed.exit_code}, final answer {'seen' if facts.final else 'missing'}")
    if facts.turns != TOOL_TURNS + 1:
        found.append(f"the stand-in answered {facts.turns} turns of the session, not {TOOL_TURNS + 1}")
    if any(status != 200 for status in facts.statuses):
        found.append(f"answers other than 200: {sorted(set(facts.statuses))}")
    if len(facts.forwarded) != len(facts.sent):
        found.append(f"{len(facts.sent)} requests sent, {len(facts.forwarded)} reached the provider")
    if facts.compactions == 0:
        found.append("no summary reached the provider")
    if facts.orphans:
        found.append(f"{facts.orphans} orphaned tool calls or results reached the provider")
    if facts.largest > client.window:
        found.append(
            f"a forwarded request needs {facts.largest} tokens, over the {client.window}-token window"
        )
    if facts.not_as_sent:
        found.append("not forwarded as sent: " + ", ".join(facts.not_as_sent[:5]))
    if facts.summary_calls > facts.compactions + 1:
        found.append(f"{facts.summary_calls} summary calls for {facts.compactions} compactions")
    return found

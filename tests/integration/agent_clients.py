"""The real agent CLIs — Claude Code, Codex CLI, Gemini CLI, Qwen Code, opencode and pi, from npm — through
a real proxy with compact_hook.

Each CLI runs as a user runs it (``claude -p``, ``codex exec``, ``gemini -p``, ``qwen -p``, ``opencode
run``, ``pi -p``) in a scratch home and work folder, pointed at a ``Relay`` in front of the proxy, against
the stand-in's scripted agent (``tools/agent_script.py``): 30 turns of tool calls that make the CLI run a
real shell command, then a final answer. The relay records what the CLI sent and our response headers;
the stand-in records what reached the provider. ``facts_of`` reads both; ``problems`` says what is wrong
with them. The test suite (``test_clients_proxy.py``) asserts there is nothing; ``make clients`` prints
the table.

The CLIs are installed by ``npm install --prefix clients`` at the exact versions of ``clients/package.json``
(``make clients-install``); Claude Code twice: npm's ``@anthropic-ai/claude-code`` and the newer build the
Agent SDK's Linux package ships as its ``claude`` binary.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from compact_hook.core.evidence import Verdict
from compact_hook.core.items import SUMMARY_PREFIX
from compact_hook.settings.model import CompactConfig
from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES, WireFormat
from compact_hook.wires.parsing import positive_int
from compact_hook.wires.responses.compaction import HANDLE_PREFIX, asks_compaction
from tests.integration.harness import (
    REPO_ROOT,
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    free_port,
    gemini_deployment,
    standin_deployment,
    standin_upstream,
)
from tests.integration.relay import Exchange, Relay
from tests.support import pairing_problems, summaries_in, tokens_of

agent_script = standin_upstream.agent_script
recaller = standin_upstream.recaller
RECALLS_MID_LOOP = "recall2"
"""In a stand-in agent's name: it calls the proxy's recall tool mid-loop (``recaller.MID_LOOP_TURNS``)."""

CLIENTS_DIR = REPO_ROOT / "clients"
TOOL_TURNS = 30
CLIENT_TIMEOUT = 600.0
PROMPT = "Run each command you are given with your shell tool, one turn at a time, until you are told you are done."
SUMMARY_WINDOW = 200_000
AMBIENT = (
    "ANTHROPIC_",
    "OPENAI_",
    "CLAUDE_",
    "CODEX_",
    "LITELLM_",
    "GEMINI_",
    "GOOGLE_",
    "QWEN_",
    "OPENCODE_",
    "PI_",
)
KEY_VARIABLE = "COMPACT_CLIENT_KEY"


@dataclass(frozen=True)
class Wire:
    """What differs between the wires, once: where a request's entries and reserve are, which
    session the stand-in counts its turns in, how a deployment reaches the stand-in, and which of
    the client's paths carry conversations."""

    format: WireFormat
    entries: str
    reserve: Callable[[dict[str, Any]], int]
    session: Callable[[dict[str, Any], dict[str, str]], str]
    deployment: Callable[[str, StandinUpstream, str, dict[str, Any]], dict[str, Any]]
    carries: Callable[[str, Any, str], bool]
    """``(relay path, body, model group)``: a conversation request of the client's."""


def _names(body: Any, group: str) -> bool:
    """The request names this model group (the wires that carry the model in the body)."""
    return isinstance(body, dict) and body.get("model") == group


def _google_reserve(body: dict[str, Any]) -> int:
    config = body.get("generationConfig") or body.get("generation_config") or {}
    return positive_int(config, "maxOutputTokens", "max_output_tokens") or 0


WIRES = {
    ANTHROPIC.name: Wire(
        ANTHROPIC,
        "messages",
        lambda body: positive_int(body, "max_tokens") or 0,
        agent_script.anthropic_session,
        lambda group, up, model, compact: anthropic_deployment(group, up.root_url, model, compact=compact),
        lambda path, body, group: path == "/v1/messages" and _names(body, group),
    ),
    RESPONSES.name: Wire(
        RESPONSES,
        "input",
        lambda body: positive_int(body, "max_output_tokens") or 0,
        agent_script.responses_session,
        lambda group, up, model, compact: standin_deployment(group, up.url, model, compact=compact),
        lambda path, body, group: path == "/v1/responses" and _names(body, group),
    ),
    CHAT.name: Wire(
        CHAT,
        "messages",
        lambda body: positive_int(body, "max_completion_tokens", "max_tokens") or 0,
        agent_script.chat_session,
        lambda group, up, model, compact: standin_deployment(group, up.url, model, compact=compact),
        lambda path, body, group: path == "/v1/chat/completions" and _names(body, group),
    ),
    GOOGLE.name: Wire(
        GOOGLE,
        "contents",
        _google_reserve,
        agent_script.google_session,
        lambda group, up, model, compact: gemini_deployment(group, up.root_url, model, compact=compact),
        lambda path, body, group: path.endswith(
            (f"/models/{group}:streamGenerateContent", f"/models/{group}:generateContent")
        ),
    ),
}


@dataclass(frozen=True)
class Launch:
    """How one CLI is run: its command line, given the scratch home, its environment (to add to),
    the relay's URL and the proxy key."""

    command: Callable[[AgentClient, Path, dict[str, str], str, str], list[str]]


@dataclass(frozen=True)
class AgentClient:
    """One CLI: how it is installed and run, the model group it talks to and how it is checked.

    ``upstream_model`` picks the stand-in's behaviour (``strict``: the provider's validation,
    ``script30``: the script, ``gemini-3``: thought signatures enforced). ``as_sent``: top-level
    keys the provider must get exactly as the CLI sent them.
    """

    name: str
    package: str
    binary: str
    wire: Wire
    group: str
    upstream_model: str
    summary_model: str
    window: int
    tokenizer: str
    as_sent: tuple[str, ...]
    launch: Launch
    reserve: int = 0
    """The reply room each request asks for (``max_tokens`` as captured): the window less it is what its
    input may use."""
    bridged: Wire | None = None
    """The wire the provider gets, when LiteLLM bridges the client's to another (a chat-only or an
    Anthropic deployment serving a Responses client)."""
    env: tuple[tuple[str, str], ...] = ()
    """What its users set in its environment besides pointing it at the proxy."""
    prior: bool = False
    """The stand-in bills as the model's provider counts (``ctok48``): the family's measured prior
    counts its requests, not ``count_ratio: 1``."""
    folder: str = ".bin"
    """Where ``binary`` is under ``clients/node_modules``: npm links the binaries a package declares into
    ``.bin``; a package that declares none has it in its own folder."""
    cli_version: str | None = None
    """The CLI's own version (``--version``), when it is not its package's."""

    @property
    def upstream_wire(self) -> Wire:
        return self.bridged or self.wire

    @property
    def version(self) -> str:
        if self.cli_version is not None:
            return self.cli_version
        manifest = json.loads((CLIENTS_DIR / "package.json").read_text())
        return str(manifest["dependencies"][self.package])

    @property
    def executable(self) -> Path:
        return CLIENTS_DIR / "node_modules" / self.folder / self.binary

    @property
    def path(self) -> str:
        """The endpoint it sends conversations to (for the table)."""
        return {
            "anthropic": "/v1/messages",
            "responses": "/v1/responses",
            "chat": "/v1/chat/completions",
            "google": ":streamGenerateContent",
        }[self.wire.format.name]

    def model_list(self, upstream: StandinUpstream) -> list[dict[str, Any]]:
        compact = {
            "context_window": self.window,
            "summary_model": f"{self.group}-summarizer",
            "summary_max_tokens": 1000,
            # the stand-in bills what we count (tools/billing.py), whatever its model's name says; a
            # Claude name's measured prior is for Claude's own count: the operator's setting says so
            **({} if self.prior else {"count_ratio": 1.0}),
            "tokenizer": self.tokenizer,  # what the checks count with, whichever provider serves the group
            "recall": True,
        }
        agent = self.wire.deployment(self.group, upstream, self.upstream_model, compact)
        summarizer = standin_deployment(
            f"{self.group}-summarizer", upstream.url, self.summary_model, max_input_tokens=SUMMARY_WINDOW
        )
        return [agent, summarizer]


# -- how each CLI is run ---------------------------------------------------------------------------------


def _claude_code(client: AgentClient, home: Path, env: dict[str, str], base_url: str, key: str) -> list[str]:
    env.update(
        {
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
    )
    return [str(client.executable), "-p", PROMPT, "--model", client.group, "--allowedTools", "Bash"]


def _codex(client: AgentClient, home: Path, env: dict[str, str], base_url: str, key: str) -> list[str]:
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        f'model = "{client.group}"\n'
        'model_provider = "litellm"\n\n'
        "[model_providers.litellm]\n"
        'name = "LiteLLM proxy"\n'
        f'base_url = "{base_url}/v1"\n'
        f'env_key = "{KEY_VARIABLE}"\n'
        'wire_api = "responses"\n'
    )
    env.update({"CODEX_HOME": str(codex_home), KEY_VARIABLE: key})
    return [str(client.executable), "exec", "--skip-git-repo-check", PROMPT]


CODEX_COMPACT_LIMIT = 12_000
"""Codex's own ``model_auto_compact_token_limit`` in the runs where it compacts itself: well under its
window, so that it compacts several times in 30 turns."""


def _codex_config(client: AgentClient, home: Path, env: dict[str, str], lines: list[str]) -> Path:
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text("\n".join([f'model = "{client.group}"', *lines]) + "\n")
    env["CODEX_HOME"] = str(codex_home)
    return codex_home


def _codex_builtin(
    client: AgentClient, home: Path, env: dict[str, str], base_url: str, key: str
) -> list[str]:
    """The built-in ``openai`` provider pointed at the proxy, as many users reach LiteLLM: Codex then
    compacts remotely ("compaction v2") at ``model_auto_compact_token_limit``."""
    _codex_config(
        client,
        home,
        env,
        [f'openai_base_url = "{base_url}/v1"', f"model_auto_compact_token_limit = {CODEX_COMPACT_LIMIT}"],
    )
    env["CODEX_API_KEY"] = key  # what `codex exec` authenticates the built-in provider with
    return [str(client.executable), "exec", "--skip-git-repo-check", PROMPT]


def _codex_v2(client: AgentClient, home: Path, env: dict[str, str], base_url: str, key: str) -> list[str]:
    """A custom provider that declares ``remote_compaction = "v2"`` (Codex 0.162+)."""
    _codex_config(
        client,
        home,
        env,
        [
            'model_provider = "litellm"',
            f"model_auto_compact_token_limit = {CODEX_COMPACT_LIMIT}",
            "",
            "[model_providers.litellm]",
            'name = "LiteLLM proxy"',
            f'base_url = "{base_url}/v1"',
            f'env_key = "{KEY_VARIABLE}"',
            'wire_api = "responses"',
            "",
            "[model_providers.litellm.capabilities]",
            'remote_compaction = "v2"',
        ],
    )
    env[KEY_VARIABLE] = key
    return [str(client.executable), "exec", "--skip-git-repo-check", PROMPT]


def _gemini_cli(client: AgentClient, home: Path, env: dict[str, str], base_url: str, key: str) -> list[str]:
    """LiteLLM's tutorial (``GOOGLE_GEMINI_BASE_URL``), plus what 0.61.0 needs to run headless: the auth
    type in its settings (else "Invalid auth method selected", exit 41) and a trusted folder (exit 55).

    No update check, usage statistics, telemetry or IDE. Loop detection off: after 30 turns it asks
    ``gemini-3-flash-preview`` (its ``loop-detection`` alias), a model the proxy does not serve (a 400
    and a stack trace on stderr, the run goes on)."""
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "model": {"disableLoopDetection": True},
        "ide": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env.update(
        {"GOOGLE_GEMINI_BASE_URL": base_url, "GEMINI_API_KEY": key, "GEMINI_CLI_TRUST_WORKSPACE": "true"}
    )
    return [str(client.executable), "-p", PROMPT, "-m", client.group, "--yolo"]


def _qwen_code(client: AgentClient, home: Path, env: dict[str, str], base_url: str, key: str) -> list[str]:
    """Its OpenAI variables; no usage statistics (else it resolves Alibaba's RUM host), no headless-yolo
    warning on stderr."""
    env.update({"OPENAI_BASE_URL": f"{base_url}/v1", "OPENAI_API_KEY": key, "OPENAI_MODEL": client.group})
    env.update({"QWEN_USAGE_STATISTICS_ENABLED": "false", "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"})
    return [str(client.executable), "-p", PROMPT, "--yolo"]


def _opencode(client: AgentClient, home: Path, env: dict[str, str], base_url: str, key: str) -> list[str]:
    """The AI SDK's openai-compatible provider (bundled in the binary) pointed at the proxy, bash allowed
    without asking.

    Offline: no models.dev refresh (``OPENCODE_DISABLE_MODELS_FETCH``: its bundled snapshot and our
    provider's model are enough), and its config folder already looks installed. At start it
    ``npm install``s ``@opencode-ai/plugin`` (for plugins and custom tools, which we have none of) into
    ``~/.config/opencode`` from the npm registry unless that folder has a ``node_modules`` and a
    ``package-lock.json`` whose root lists it."""
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "litellm": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "LiteLLM proxy",
                "options": {"baseURL": f"{base_url}/v1", "apiKey": "{env:" + KEY_VARIABLE + "}"},
                "models": {client.group: {"name": client.group}},
            }
        },
        "model": f"litellm/{client.group}",
        "permission": {"bash": "allow", "edit": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }
    folder = home / ".config" / "opencode"
    (folder / "node_modules").mkdir(parents=True)
    (folder / "opencode.json").write_text(json.dumps(config))
    plugin = {"@opencode-ai/plugin": client.version}
    lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": plugin}}}
    (folder / "package.json").write_text(json.dumps({"dependencies": plugin}))
    (folder / "package-lock.json").write_text(json.dumps(lock))
    env.update({KEY_VARIABLE: key, "OPENCODE_DISABLE_MODELS_FETCH": "1"})
    return [str(client.executable), "run", PROMPT]


PI_MODEL_WINDOW = 200_000
"""The window pi is told the model has: it compacts on its own near it, so it must be the model's, not
the proxy's smaller one (else pi sends its own summary request, one user message we cannot cut)."""


def _pi(client: AgentClient, home: Path, env: dict[str, str], base_url: str, key: str) -> list[str]:
    """A custom provider in ``~/.pi/agent/models.json`` (its ``apiKey`` names the variable holding it)."""
    provider = {
        "baseUrl": f"{base_url}/v1",
        "api": "openai-completions",
        "apiKey": KEY_VARIABLE,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": client.group, "contextWindow": PI_MODEL_WINDOW, "maxTokens": 4096}],
    }
    folder = home / ".pi" / "agent"
    folder.mkdir(parents=True)
    (folder / "models.json").write_text(json.dumps({"providers": {"litellm": provider}}))
    env.update({KEY_VARIABLE: key, "PI_OFFLINE": "1"})
    return [
        str(client.executable),
        "-p",
        "--no-session",
        "--provider",
        "litellm",
        "--model",
        client.group,
        PROMPT,
    ]


CLAUDE_CODE = AgentClient(
    name="Claude Code",
    package="@anthropic-ai/claude-code",
    binary="claude",
    wire=WIRES["anthropic"],
    group="cc-agent",
    upstream_model=f"claude-fable-5-1-standin-strict-script{TOOL_TURNS}-{RECALLS_MID_LOOP}",  # a Claude 5.1 name: LiteLLM keeps `thinking`, the prefix check runs
    summary_model="standin-summarizer-cc",
    window=46_000,
    tokenizer="claude",
    as_sent=("system", "tools", "thinking", "context_management", "output_config", "max_tokens"),
    reserve=32_000,
    launch=Launch(_claude_code),
)
CLAUDE_CODE_24K = dataclasses.replace(
    CLAUDE_CODE,
    name="Claude Code, 24K",
    group="cc-24k",
    upstream_model=f"claude-sonnet-4-5-standin-strict-script{TOOL_TURNS}-24k",
    summary_model="standin-summarizer-cc-24k",
    window=24_000,
    reserve=4_000,
    env=(("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "4000"),),
    prior=True,
    as_sent=("system", "tools", "context_management", "max_tokens"),  # LiteLLM rewrites
    # ``thinking`` and ``output_config`` for a Claude 4.5 name (its adaptive mode), with or without us
)
"""Claude Code asking for a 4,000-token reply in a 24,000-token window of a Claude 4.5 name (its
prior, 1.10, counts it: the stand-in bills what we count): its ~9,400 tokens of system and tools are
then a large share of what the window holds (issue 60's run)."""
CLAUDE_AGENT_SDK = "@anthropic-ai/claude-agent-sdk-linux-x64"
CLAUDE_CODE_SDK = dataclasses.replace(
    CLAUDE_CODE,
    name="Claude Code, Agent SDK",
    package=CLAUDE_AGENT_SDK,
    folder=CLAUDE_AGENT_SDK,
    cli_version="2.1.337",
    group="cc-sdk-agent",
    upstream_model=f"{CLAUDE_CODE.upstream_model}-sdk",
    summary_model="standin-summarizer-cc-sdk",
)
"""Claude Code as the Agent SDK ships it, newer than npm's ``@anthropic-ai/claude-code``: the SDK's
Linux package 0.3.337 holds Claude Code 2.1.337 as its ``claude`` binary (no ``bin`` declared), which
runs as the CLI. Run as ``CLAUDE_CODE`` is, on a model group and stand-in models of its own."""
CODEX = AgentClient(
    name="Codex CLI",
    package="@openai/codex",
    binary="codex",
    wire=WIRES["responses"],
    group="codex-agent",
    upstream_model=f"standin-strict-script{TOOL_TURNS}-{RECALLS_MID_LOOP}",
    summary_model="standin-summarizer-codex",
    window=15_000,
    tokenizer="o200k_base",
    as_sent=("instructions", "tools", "reasoning", "include", "tool_choice", "parallel_tool_calls"),
    launch=Launch(_codex),
)


def _codex_compacting(setup: str, tag: str, command: Callable[..., list[str]]) -> AgentClient:
    """Codex with its remote compaction on (``setup`` says how), a model group and stand-in models of
    its own (``tag``)."""
    return dataclasses.replace(
        CODEX,
        name=f"Codex CLI, {setup}",
        group=f"codex-{tag}",
        upstream_model=f"standin-strict-script{TOOL_TURNS}-codex-{tag}",
        summary_model=f"standin-summarizer-codex-{tag}",
        launch=Launch(command),
    )


CODEX_BUILTIN = _codex_compacting("openai_base_url", "builtin", _codex_builtin)
CODEX_V2 = _codex_compacting("remote_compaction v2", "v2", _codex_v2)
GEMINI_CLI = AgentClient(
    name="Gemini CLI",
    package="@google/gemini-cli",
    binary="gemini",
    wire=WIRES["google"],
    group="gemini-agent",
    upstream_model=f"gemini-3-pro-standin-strict-script{TOOL_TURNS}",  # Gemini 3: thought signatures enforced
    summary_model="standin-summarizer-gemini",
    window=16_000,
    tokenizer="o200k_base",
    as_sent=("systemInstruction",),
    launch=Launch(_gemini_cli),
)
QWEN_CODE = AgentClient(
    name="Qwen Code",
    package="@qwen-code/qwen-code",
    binary="qwen",
    wire=WIRES["chat"],
    group="qwen-agent",
    upstream_model=f"standin-strict-script{TOOL_TURNS}-qwen",
    summary_model="standin-summarizer-qwen",
    window=52_000,
    tokenizer="o200k_base",
    as_sent=("tools",),
    reserve=32_768,
    launch=Launch(_qwen_code),
)
OPENCODE = AgentClient(
    name="opencode",
    package="opencode-ai",
    binary="opencode",
    wire=WIRES["chat"],
    group="opencode-agent",
    upstream_model=f"standin-strict-script{TOOL_TURNS}-opencode",
    summary_model="standin-summarizer-opencode",
    window=42_000,
    tokenizer="o200k_base",
    as_sent=("tools",),
    reserve=32_000,
    launch=Launch(_opencode),
)
PI = AgentClient(
    name="pi",
    package="@mariozechner/pi-coding-agent",
    binary="pi",
    wire=WIRES["chat"],
    group="pi-agent",
    upstream_model=f"standin-strict-script{TOOL_TURNS}-pi",
    summary_model="standin-summarizer-pi",
    window=8_000,
    tokenizer="o200k_base",
    as_sent=("tools",),
    launch=Launch(_pi),
)


def _chat_only(group: str, up: StandinUpstream, model: str, compact: dict[str, Any]) -> dict[str, Any]:
    """A deployment that speaks chat completions only: LiteLLM bridges Responses to it."""
    params = {"model": f"custom_openai/{model}", "api_base": up.url, "api_key": "none"}
    return {"model_name": group, "litellm_params": params, "model_info": {"compact": compact}}


DEPLOYMENTS: dict[str, Callable[[str, StandinUpstream, str, dict[str, Any]], dict[str, Any]]] = {
    "native Responses": WIRES["responses"].deployment,
    "chat-only": _chat_only,
    "Anthropic": WIRES["anthropic"].deployment,
}
"""Where a Responses client's requests can end up: LiteLLM sends them on natively, or bridges them."""


def on_deployment(client: AgentClient, deployment: str) -> AgentClient:
    """``client`` with its model group served by one of ``DEPLOYMENTS`` (its own group and models)."""
    tag = deployment.split()[0].lower()
    wire = dataclasses.replace(client.wire, deployment=DEPLOYMENTS[deployment])
    bridged = {"chat-only": WIRES["chat"], "Anthropic": WIRES["anthropic"]}.get(deployment)
    return dataclasses.replace(
        client,
        bridged=bridged,
        name=f"{client.name}, {deployment}",
        group=f"{client.group}-{tag}",
        upstream_model=f"{client.upstream_model}-{tag}",
        summary_model=f"{client.summary_model}-{tag}",
        wire=wire,
    )


CLIENTS = (CLAUDE_CODE, CLAUDE_CODE_SDK, CODEX, CODEX_BUILTIN, GEMINI_CLI, QWEN_CODE, OPENCODE, PI)
"""Every CLI as ``make clients`` runs it; Claude Code twice: npm's and the Agent SDK's newer build;
Codex twice: on a custom provider (we compact) and on the built-in one (Codex compacts remotely, we
serve it)."""
CODEX_COMPACTING = (CODEX_BUILTIN, CODEX_V2)

USAGE_MODES = ("tail", "msgtail", "zero", "cap", "msgs")
"""Usage as servers LiteLLM users point a proxy at report it (``tools/billing.py``, ``usage-<mode>``):
only the input after the prefix the server holds (Ollama 0.30: a cache over everything before the
new tail), the system prompt and tools and the messages after the prefix of them it holds (a cache
over the messages only), 0 when it holds one (older Ollama), at most the server's context while it
truncates the rest silently (a small ``num_ctx``), the messages only (gateways)."""
SERVER_CONTEXT = 0.5
"""``cap``: where the server's context lies between the CLI's first request and the window."""
CAPTURES = REPO_ROOT / "tests" / "data" / "clients"


def lying(client: AgentClient, mode: str) -> AgentClient:
    """``client`` against a stand-in whose usage lies as ``mode`` says (a group and models of its own)."""
    usage = f"usage-cap{server_context(client)}" if mode == "cap" else f"usage-{mode}"
    return dataclasses.replace(
        client,
        name=f"{client.name}, usage {mode}",
        group=f"{client.group}-{mode}",
        upstream_model=f"{client.upstream_model}-{usage}",
        summary_model=f"{client.summary_model}-{mode}",
    )


def server_context(client: AgentClient) -> int:
    """``cap``: the input the server keeps: ``SERVER_CONTEXT`` of the way from the CLI's first request
    (captured: its system prompt and tools) to what the window leaves the input."""
    capture = min(CAPTURES.glob(f"{client.binary}-*-first.json"))
    first = tokens_of(json.loads(capture.read_text(encoding="utf-8")), client.wire.format, client.tokenizer)
    room = client.window - client.reserve
    return int(first + SERVER_CONTEXT * (room - first))


def lies_as(client: AgentClient) -> str | None:
    """The usage mode ``client``'s stand-in lies with (``lying``), if any."""
    return next((mode for mode in USAGE_MODES if f"-usage-{mode}" in client.upstream_model), None)


def proxy_config(upstream: StandinUpstream, clients: tuple[AgentClient, ...] = CLIENTS) -> dict[str, Any]:
    model_list = [entry for client in clients for entry in client.model_list(upstream)]
    return {
        "model_list": model_list,
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
        "router_settings": {"num_retries": 0},
    }


@contextmanager
def agent_proxy(clients: tuple[AgentClient, ...] = CLIENTS) -> Iterator[tuple[StandinUpstream, ProxyProcess]]:
    """The stand-in and a proxy serving every client's model group, archive in a scratch folder,
    metrics on a port of their own (``count_samples``)."""
    with tempfile.TemporaryDirectory(prefix="agent-clients-") as scratch:
        env = {
            "COMPACT_ARCHIVE_DIR": str(Path(scratch) / "archive"),
            "COMPACT_METRICS_PORT": str(free_port()),
        }
        with StandinUpstream() as upstream, ProxyProcess(proxy_config(upstream, clients), env=env) as proxy:
            yield upstream, proxy


def run_each(clients: tuple[AgentClient, ...]) -> Iterator[ClientFacts]:
    """Every client through one proxy, one at a time, as its users run it: what each did (the proxy's
    word on its usage included). One at a time: three at once on one proxy (with the other test
    worker busy) once made Gemini CLI pay 10 summary calls for 8 applied, its preparations outgrown
    while they waited (issue 25's note); run alone, each CLI's pacing is the one its users see."""
    missing = [str(client.executable) for client in clients if not client.executable.exists()]
    if missing:
        raise FileNotFoundError(
            f"the agent CLIs are not installed ({', '.join(missing)}): run `make clients-install`"
        )
    with agent_proxy(clients) as (upstream, proxy), Relay(proxy.url) as relay:
        for client in clients:
            completed = run_client(client, relay.url, proxy.master_key)
            yield with_usage_seen(facts_of(client, completed, relay.exchanges, upstream), proxy)


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
        env["PWD"] = str(work)  # opencode takes its project folder from PWD, not from its working directory
        env.update(client.env)
        command = client.launch.command(client, home, env, base_url, key)
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
    applied: int = 0
    """Distinct summaries that reached the provider: each compaction event applied."""
    largest: int = 0
    first_size: int = 0
    orphans: int = 0
    not_as_sent: list[str] = field(default_factory=list)
    thinking_forwarded: int = 0
    thinking_removed: int = 0
    client_compactions: int = 0
    """Requests asking the proxy for the client's own compaction (Codex's ``compaction_trigger``)."""
    opaque_forwarded: int = 0
    """Forwarded requests still carrying a compaction item of ours (it must reach the provider expanded)."""
    recalls: int = 0
    """The proxy's follow-ups to the model's recall calls (each a request to the provider the CLI never sent)."""
    recalls_shown: int = 0
    """Requests of the CLI's that carry a recall call: it was shown one (it must never be)."""
    truncated: int = 0
    """Forwarded requests a server with a smaller context than the window cut (``usage-cap``)."""
    largest_billed: int = 0
    """The largest forwarded request as the stand-in billed it, with its reply reserve."""
    samples: dict[str, float] = field(default_factory=dict)
    """``compact_hook_count_samples_total`` of the client's model group, by outcome."""
    said: list[str] = field(default_factory=list)
    """The proxy's warnings that the group's usage was set aside."""

    @property
    def final(self) -> bool:
        return agent_script.AGENT_FINAL in self.completed.stdout


def facts_of(
    client: AgentClient, completed: Completed, relay: list[Exchange], upstream: StandinUpstream
) -> ClientFacts:
    wire = client.wire
    mine = [e for e in relay if e.method == "POST" and wire.carries(e.path, e.body, client.group)]
    recorded = upstream.requests
    forwarded = [
        r["body"]
        for r in recorded
        if isinstance(r["body"], dict) and r["body"].get("model") == client.upstream_model
    ]
    summaries = [
        r for r in recorded if isinstance(r["body"], dict) and r["body"].get("model") == client.summary_model
    ]
    followups = [body for body in forwarded if _recalls_in(body.get(client.upstream_wire.entries))]
    forwarded = [body for body in forwarded if not any(body is f for f in followups)]
    sessions, up = upstream.agent_turns, client.upstream_wire
    turns = max((sessions.get(up.session(body, {}), 0) for body in forwarded), default=0)
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
    facts.truncated = sum(
        1
        for r in recorded
        if lies_as(client) == "cap"
        and any(r["body"] is body for body in forwarded)
        and r.get("reported", r.get("billed", 0)) < r.get("billed", 0)
    )
    facts.largest_billed = max(
        (
            r.get("billed", 0) + up.reserve(r["body"])
            for r in recorded
            if any(r["body"] is b for b in forwarded)
        ),
        default=0,
    )
    facts.recalls = len(followups)
    facts.recalls_shown = sum(_recalls_in(sent.get(wire.entries)) for sent in facts.sent)
    seen_summaries: set[str] = set()
    for body in [*forwarded, *followups]:
        entries = body.get(up.entries) or []
        seen_summaries.update(summaries_in(entries, up.format) or _bridged_summaries(body, client))
        facts.orphans += len(pairing_problems(entries, up.format))
        # a bridge may add a reserve the client never asked for (LiteLLM: 4,096 on Anthropic): not counted
        reserve = up.reserve(body) if client.bridged is None else 0
        facts.largest = max(facts.largest, tokens_of(body, up.format, client.tokenizer) + reserve)
        facts.thinking_forwarded += any(_has_thinking(e) for e in entries)
    if facts.sent:
        facts.first_size = tokens_of(facts.sent[0], wire.format, client.tokenizer) + wire.reserve(
            facts.sent[0]
        )
    facts.applied = len(seen_summaries)
    facts.thinking_removed = sum(int(h.get("x-compact-thinking-removed", 0)) for h in facts.headers)
    asked = [asks_compaction(sent.get("input") or []) for sent in facts.sent]
    facts.client_compactions = sum(asked)
    facts.opaque_forwarded = sum(HANDLE_PREFIX in json.dumps(body) for body in forwarded)
    if client.bridged is None:  # a bridge rewrites the request's fields
        facts.not_as_sent = _not_as_sent(client, facts.sent, forwarded, asked)
    return facts


def _not_as_sent(
    client: AgentClient, sent: list[dict[str, Any]], forwarded: list[dict[str, Any]], asked: list[bool]
) -> list[str]:
    """The fields of ``client.as_sent`` no forwarded request carries as the client sent them, named
    by request. Each sent value is matched with one forwarded value, in any order: a CLI sends some
    requests at once (opencode's title beside its first turn), and the relay records them as their
    answers start, the stand-in as they arrive. A request the proxy answered itself (``asked``) is
    left out: the provider only saw the ping the answer rides on."""
    found: list[str] = []
    for name in client.as_sent:
        pool = Counter(_key(_without_recall_tool(body.get(name))) for body in forwarded if name in body)
        for index, body in enumerate(sent):
            if asked[index] or name not in body:
                continue
            key = _key(body[name])
            if pool[key] > 0:
                pool[key] -= 1
            else:
                found.append(f"request {index}: {name}")
    return found


def _key(value: Any) -> str:
    """A field's value as a key, equal where the values are equal (objects in any key order)."""
    return json.dumps(value, sort_keys=True)


RECALL_TOOL = "compact_recall"


def _recalls_in(entries: Any) -> bool:
    """Whether a conversation holds a call to the proxy's recall tool."""
    return RECALL_TOOL in json.dumps(entries or [])


def _without_recall_tool(value: Any) -> Any:
    """A request's ``tools`` without the recall tool the proxy offers (anything else as it is)."""
    if not isinstance(value, list):
        return value
    return [tool for tool in value if not (isinstance(tool, dict) and RECALL_TOOL in json.dumps(tool)[:300])]


def _bridged_summaries(body: dict[str, Any], client: AgentClient) -> list[str]:
    """Our summaries in a request LiteLLM bridged (it may join the summary to the user messages beside
    it, so it is looked for in every string of the body)."""
    if client.bridged is None:
        return []
    found: list[str] = []

    def visit(value: Any) -> None:
        if isinstance(value, str) and value.startswith(SUMMARY_PREFIX):
            found.append(value)
        elif isinstance(value, dict):
            for child in value.values():
                visit(child)
        elif isinstance(value, list):
            for child in value:
                visit(child)

    visit(body)
    return found


def _has_thinking(entry: Any) -> bool:
    content = entry.get("content") if isinstance(entry, dict) else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")
        for block in content
    )


def no_room(facts: ClientFacts) -> bool:
    """Every request said the reply's reserve and the CLI's system and tools fill the window: the
    hook forwards such requests as sent, by design (a window chosen too small for this CLI)."""
    reasons = [headers.get("x-compact-reason") for headers in facts.headers]
    return bool(reasons) and all(reason == "no_room" for reason in reasons)


def reached_trigger(facts: ClientFacts) -> bool:
    """A request reached the point where a summary is due (the default ``trigger_ratio``)."""
    return facts.largest >= CompactConfig().trigger_ratio * facts.client.window or any(
        headers.get("x-compact-compacted") == "true" for headers in facts.headers
    )


def problems(facts: ClientFacts) -> list[str]:
    """Everything that is wrong with a run; empty when the CLI got through as it should. A window
    that leaves the CLI no room, or that its loop never fills, needs no summary (``standing``)."""
    client, found = facts.client, []
    if facts.completed.exit_code != 0 or not facts.final:
        found.append(f"exit {facts.completed.exit_code}, final answer {'seen' if facts.final else 'missing'}")
    if facts.turns != TOOL_TURNS + 1:
        found.append(f"the stand-in answered {facts.turns} turns of the session, not {TOOL_TURNS + 1}")
    if any(status != 200 for status in facts.statuses):
        found.append(f"answers other than 200: {sorted(set(facts.statuses))}")
    if len(facts.forwarded) != len(facts.sent):
        found.append(f"{len(facts.sent)} requests sent, {len(facts.forwarded)} reached the provider")
    if facts.applied == 0 and reached_trigger(facts) and not no_room(facts):
        found.append("no summary reached the provider")
    if facts.orphans:
        found.append(f"{facts.orphans} orphaned tool calls or results reached the provider")
    if facts.largest > client.window and not no_room(facts):
        found.append(
            f"a forwarded request needs {facts.largest} tokens, over the {client.window}-token window"
        )
    if facts.not_as_sent:
        found.append("not forwarded as sent: " + ", ".join(facts.not_as_sent[:5]))
    if facts.opaque_forwarded:
        found.append(f"{facts.opaque_forwarded} forwarded requests carried our compaction item unexpanded")
    if facts.recalls_shown:
        found.append(f"the CLI was shown a recall call in {facts.recalls_shown} requests")
    if RECALLS_MID_LOOP in client.upstream_model and facts.recalls < len(recaller.MID_LOOP_TURNS):
        found.append(f"{facts.recalls} recalls answered, not {len(recaller.MID_LOOP_TURNS)}")
    if facts.summary_calls > facts.applied + 1 + (lies_as(client) == "cap"):
        found.append(f"{facts.summary_calls} summary calls for {facts.applied} summaries applied")
    found.extend(_lying_problems(facts))
    return found


SET_ASIDE = {
    "tail": "cached_left_out",
    "msgtail": "cached_left_out",
    "zero": "missing",
    "cap": "capped",
    "msgs": "fixed_left_out",
}
"""What each lying mode's usage must be said to be (as well as, for some of its responses, others)."""
TRUNCATED_AT_MOST = 2
"""``cap``: requests the server may cut before its context is learned (the second one past it shows
the bill pinned). A summary prepared for the window before may then go unused: one summary call more
than ``problems`` allows otherwise."""


def _lying_problems(facts: ClientFacts) -> list[str]:
    """Usage that lies must be set aside, said and counted, a truncating server's context learned;
    truthful usage must not be."""
    mode = lies_as(facts.client)
    if mode is None:  # truthful usage is never set aside
        aside = {outcome: n for outcome, n in facts.samples.items() if n and Verdict(outcome).sets_aside}
        return [f"truthful usage set aside: {aside}"] if aside else []
    found = []
    expected = SET_ASIDE[mode]
    if not facts.samples.get(expected):
        found.append(f"usage never counted as {expected}: {facts.samples}")
    if not any(expected in line for line in facts.said):
        found.append(f"no warning that the usage was set aside ({expected})")
    if facts.truncated > TRUNCATED_AT_MOST:
        found.append(
            f"{facts.truncated} requests cut by the server's {server_context(facts.client)}-token context"
        )
    return found


def with_usage_seen(facts: ClientFacts, proxy: ProxyProcess) -> ClientFacts:
    """``facts`` with what the proxy said of its group's usage: the metric and the warnings."""
    facts.samples = count_samples(proxy, facts.client.group)
    facts.said = set_aside_said(proxy, facts.client.group)
    return facts


def count_samples(proxy: ProxyProcess, group: str) -> dict[str, float]:
    """``compact_hook_count_samples_total`` of ``group`` on ``proxy``'s metrics port, by outcome."""
    port = proxy.extra_env["COMPACT_METRICS_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "compact_hook_count_samples_total"
                and sample.labels.get("model_group") == group
            ):
                found[sample.labels["outcome"]] = sample.value
    return found


def set_aside_said(proxy: ProxyProcess, group: str) -> list[str]:
    """The proxy's warnings that ``group``'s usage does not describe the prompt."""
    return [
        line
        for line in proxy.log_text().splitlines()
        if f"model group {group!r}" in line and "does not describe" in line
    ]


def standing(facts: ClientFacts) -> str:
    """How the run went, in a word or three, for the table."""
    if problems(facts):
        return "FAILED"
    if no_room(facts):
        return "ok: no room, forwarded as sent"
    return "ok" if reached_trigger(facts) else "ok: never reached the trigger"

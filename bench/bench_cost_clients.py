"""The priced replay with the real agent CLIs: Claude Code and Codex CLI in a long tool loop.

    .venv/bin/python bench/bench_cost_clients.py [--turns 120]

Each CLI (``make clients-install``) runs the stand-in's scripted agent (``tools/agent_script.py``:
``--turns`` tool turns, each printing a few thousand characters) through a real LiteLLM proxy, once
per configuration: ``no compaction`` (no compact block; the stand-in takes any size), ``compact_hook
today`` and ``compact_hook cost-aware`` (the same window, ``cost_aware: true``). The CLIs send what
they send — Claude Code its system, tools, thinking and ``cache_control`` breakpoints to an
``anthropic/`` deployment; Codex its Responses items with a ``prompt_cache_key`` to an ``openai/``
one — and the stand-in caches like the providers (``tools/prompt_cache.py``). Every request the
provider served is priced with LiteLLM's cost map: Claude Code's as claude-sonnet-4-5, Codex's as
gpt-5, the summaries like the model they run for. The tool loop runs back to back (no pauses).

Measured per CLI and configuration: cost (agent turns + summary calls), cost over ``no
compaction``'s, cache hit share, tokens forwarded, summary calls, turns and exit status. The table
goes to stdout and ``bench/results/cost_clients.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_cost import Prices, Usage  # noqa: E402

from compact_hook.wires import ANTHROPIC  # noqa: E402
from tests.integration.agent_clients import CLIENTS, SUMMARY_WINDOW, AgentClient, run_client  # noqa: E402
from tests.integration.harness import (  # noqa: E402
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    standin_deployment,
)

RESULTS = ROOT / "bench" / "results"
PRICED_AS = {"Claude Code": "claude-sonnet-4-5", "Codex CLI": "gpt-5"}
SETUPS: dict[str, dict[str, Any] | None] = {
    "no compaction": None,
    "compact_hook today": {"cost_aware": False},
    "compact_hook cost-aware": {"cost_aware": True},
}


@dataclass(frozen=True)
class Measured:
    client: str
    setup: str
    exit_code: int
    turns: int
    agent: Usage
    summary: Usage
    summary_calls: int
    agent_cost: float
    summary_cost: float

    @property
    def cost(self) -> float:
        return self.agent_cost + self.summary_cost


def model_list(client: AgentClient, upstream: StandinUpstream, compact: dict[str, Any] | None) -> list[Any]:
    prices = Prices.of(PRICED_AS[client.name]).model_info()
    settings = None if compact is None else {**dataclasses.asdict(_base(client)), **compact}
    extra = {"compact": settings} if settings is not None else {}
    if client.wire.format is ANTHROPIC:
        agent = anthropic_deployment(
            client.group, upstream.root_url, client.upstream_model, **extra, **prices
        )
    else:
        agent = standin_deployment(client.group, upstream.url, client.upstream_model, **extra, **prices)
    summarizer = standin_deployment(
        f"{client.group}-summarizer",
        upstream.url,
        client.summary_model,
        max_input_tokens=SUMMARY_WINDOW,
        **prices,
    )
    return [agent, summarizer]


@dataclass(frozen=True)
class _Compact:
    context_window: int
    summary_model: str
    summary_max_tokens: int = 1000


def _base(client: AgentClient) -> _Compact:
    return _Compact(client.window, f"{client.group}-summarizer")


def measure_one(client: AgentClient, setup: str, scratch: Path) -> Measured:
    with StandinUpstream() as upstream:
        config = {
            "model_list": model_list(client, upstream, SETUPS[setup]),
            "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
            "router_settings": {"num_retries": 0},
        }
        env = {"COMPACT_ARCHIVE_DIR": str(scratch / "archive")}
        with ProxyProcess(config, env=env) as proxy:
            completed = run_client(client, proxy.url, proxy.master_key)
        served = [r for r in upstream.requests if "cache" in r]
        prices = Prices.of(PRICED_AS[client.name])
        agent = sum((Usage.of(r) for r in served if r["body"].get("model") == client.upstream_model), Usage())
        summaries = [r for r in served if r["body"].get("model") == client.summary_model]
        summary = sum((Usage.of(r) for r in summaries), Usage())
        turns = sum(upstream.agent_turns.values())
        return Measured(
            client.name,
            setup,
            completed.exit_code,
            turns,
            agent,
            summary,
            len(summaries),
            prices.cost(agent),
            prices.cost(summary),
        )


def table(runs: list[Measured]) -> str:
    base = {r.client: r.cost for r in runs if r.setup == "no compaction"}
    lines = [
        "| client | configuration | cost USD | agent | summary | ÷ no compaction | cache hit share "
        "| tokens forwarded | summary calls | turns | exit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        share = r.agent.reads / max(1, r.agent.input)
        lines.append(
            f"| {r.client} | {r.setup} | {r.cost:.4f} | {r.agent_cost:.4f} | {r.summary_cost:.4f} | "
            f"{r.cost / base[r.client]:.3f} | {share:.1%} | {r.agent.input:,} | {r.summary_calls} | "
            f"{r.turns} | {r.exit_code} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=120, help="tool turns of the scripted agent")
    parser.add_argument("--out", type=Path, default=RESULTS / "cost_clients.md")
    parser.add_argument(
        "--window",
        action="append",
        default=[],
        metavar="CLIENT=TOKENS",
        help="a CLI's context window (e.g. 'Claude Code=48000'); default: its own in the suite",
    )
    args = parser.parse_args()
    windows = {name: int(tokens) for name, _, tokens in (w.partition("=") for w in args.window)}
    runs, used = [], {}
    with tempfile.TemporaryDirectory(prefix="cost-clients-") as scratch:
        for client in (c for c in CLIENTS if c.name in PRICED_AS):
            if not client.executable.exists():
                sys.exit(f"{client.executable} is not installed: run `make clients-install`")
            scripted = dataclasses.replace(
                client,
                upstream_model=client.upstream_model.replace("script30", f"script{args.turns}"),
                window=windows.get(client.name, client.window),
            )
            used[client.name] = scripted.window
            for setup in SETUPS:
                runs.append(measure_one(scripted, setup, Path(scratch)))
                print(f"{client.name} / {setup}: {runs[-1].cost:.4f} USD", file=sys.stderr)
    version = importlib.metadata.version("litellm")
    command = " ".join([".venv/bin/python bench/bench_cost_clients.py", *sys.argv[1:]])
    sizes = ", ".join(f"{name} {tokens:,}" for name, tokens in used.items())
    text = (
        f"# Priced replay: the real agent CLIs\n\n`{command}` — {datetime.date.today().isoformat()}, "
        f"litellm {version}; windows: {sizes} tokens; prices as in "
        f"cost.md (Claude Code as claude-sonnet-4-5, Codex as gpt-5).\n\n{table(runs)}\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()

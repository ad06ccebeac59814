"""A priced replay: what each way of keeping a long agent conversation in bounds costs at the provider.

    .venv/bin/python bench/bench_cost.py [--quick] [--only TERMS] [--jobs N]

Agent sessions are sent turn by turn (the history up to each point where the client calls the model)
with the official Anthropic SDK to ``/v1/messages`` of real LiteLLM proxies, one fresh proxy per
session, rule set and configuration, in front of the stand-in provider, whose prompt cache
(``tools/prompt_cache.py``) caches like the real providers. Every request the provider served is
priced from its cache counts with LiteLLM's own cost map.

Rule sets. *Anthropic*: an ``anthropic/`` deployment, forwarded natively; the cache is written at
``cache_control`` breakpoints (writes cost 1.25x input, reads 0.1x), priced as claude-sonnet-4-5.
*OpenAI*: an ``openai/`` deployment with ``use_chat_completions_url_for_anthropic_messages`` (where
LiteLLM's ``context_management`` polyfills run); every prefix of 1,024+ tokens is cached by itself,
in 128-token steps (no write fee, reads 0.1x), priced as gpt-5. Summary calls go to a separate
summarizer deployment priced like the agent's model.

Sessions. The two Claude Code transcripts are sent as Claude Code 2.1.332 sends them: its system
prompt and tools (``tests/data/clients/claude-2.1.332-last.json``, ``cache_control`` on ``system[1]``
and ``system[2]``) and, on Anthropic rules, its moving breakpoint on the last message's first block
(OpenAI caches without breakpoints); the eight chat transcripts (OpenHands, SWE-agent, tau-bench)
are converted to Anthropic Messages (``bench/cost_sessions.py``) and run on OpenAI rules.
``max_tokens`` is 1,024 on every turn: the stand-in answers in a few tokens, and Claude Code's
32,000 would be reserved out of these windows.

Time, scaled. The stand-in's cache lifetime is ``TTL`` = 2 s standing for the providers' 300 s (1 s
here is 150 s of a real session). Before a turn whose last message carries tool results the replay
sends at once (tool turns back to back, the cache stays warm); before a turn whose last message is
a person's own words (except the first) it sleeps ``TTL`` x 1.25 = 2.5 s, a person reading and
typing for ~6 minutes: the cache goes cold. SWE-agent transcripts without tool calls return each
observation as a user message: those count as tool results. Each proxy first answers one small
request to the summarizer (then forgotten: a fresh proxy's first request is slow), and a run in
which two back-to-back turns spanned ``TTL`` or more (machine load) is run again, up to 3 times.

Configurations: ``no compaction`` (a plain proxy: the window is large enough); LiteLLM's
``compact_20260112`` and ``clear_tool_uses_20250919`` polyfills, the client sending
``context_management`` with a trigger of max(50,000, 0.92 W) tokens (OpenAI rules only: on an
``anthropic/`` deployment LiteLLM forwards ``context_management`` to Anthropic's own server-side
edit, which the stand-in does not simulate); ``compact_hook today`` with ``context_window`` W =
max(16,000, 0.6 x the session's largest turn, to the thousand); ``compact_hook cost-aware``, the
same with ``cost_aware: true`` and ``cache_ttl_seconds: TTL`` (the hook judges the cache warm or
cold by the clock), when this checkout's ``CompactConfig`` has that setting. Prices are also on
the deployments' ``model_info``, where LiteLLM and the hook read them.

Measured per session, rule set and configuration: cost in USD (agent turns + summary calls), cost
over ``no compaction``'s, cache hit share (tokens read from the cache / all input tokens of agent
turns), tokens forwarded (input tokens of agent turns), compaction events (compact_hook: turns whose
``x-compact-cache`` is ``miss``, ``prepared`` or ``shared``; the polyfill: turns forwarded with a
summary the turn before did not have), summary calls, unused preparations (compact_hook: summaries
prepared in the background and never applied, from its Prometheus metrics) and failed requests
(turns the client saw fail, and provider requests refused). Tables go to stdout and
``bench/results/cost.md``, raw numbers to ``bench/results/cost.json``.

``--quick``: the long Claude Code session and two chat ones. ``--only fa812bfe,OpenAI``: the runs
whose "session rules configuration" contains every term (with their ``no compaction`` baseline).
``--jobs N`` (2): runs at once, each with its own stand-in and proxy. A full run takes ~8 minutes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anthropic  # noqa: E402
import litellm  # noqa: E402

from bench.cost_sessions import CHAT_FILES, Session, all_sessions  # noqa: E402
from compact_hook.settings.model import CompactConfig  # noqa: E402
from tests.integration.harness import (  # noqa: E402
    ProxyProcess,
    StandinUpstream,
    anthropic_deployment,
    free_port,
    standin_deployment,
)
from tests.support import metric_samples, metric_value  # noqa: E402

TTL = 2.0
"""The stand-in's cache lifetime in seconds, standing for the providers' 300 s."""
PROVIDER_TTL = 300.0
PAUSE = TTL * 1.25
MAX_TOKENS = 1024
POLYFILL_MINIMUM = 50_000
SETTLE_SECONDS = 0.6
ATTEMPTS = 3
QUICK_CHAT = ("openhands_ponylang__ponyc-4595", "tau_bench_airline_gpt4o_task2_trial1")
POLYFILL_SUMMARY = "Previous conversation summary: "
EVENT_STATES = ("miss", "prepared", "shared")
COST_AWARE = "cost_aware" in CompactConfig.__dataclass_fields__
COUNTS_LEARNED = "count_ratio" in CompactConfig.__dataclass_fields__
RECALL = "recall" in CompactConfig.__dataclass_fields__
"""Recall (issue 34), on by default: the stand-in's models never call it, so what it costs is its
definition in every agent request's prefix and the handles; measured against it switched off."""
COST_AWARE_SETTINGS: dict[str, Any] = {
    "cost_aware": True,
    # the hook judges the cache warm or cold by the clock: the same scaled lifetime as the stand-in's
    **({"cache_ttl_seconds": TTL} if "cache_ttl_seconds" in CompactConfig.__dataclass_fields__ else {}),
}
RESULTS = ROOT / "bench" / "results"


# -- prices --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    """USD per token, from LiteLLM's cost map; a provider without a write surcharge writes at input."""

    model: str
    input: float
    write: float
    read: float
    output: float

    @classmethod
    def of(cls, model: str) -> Prices:
        entry = litellm.model_cost[model]
        write = entry.get("cache_creation_input_token_cost") or entry["input_cost_per_token"]
        return cls(
            model,
            entry["input_cost_per_token"],
            write,
            entry["cache_read_input_token_cost"],
            entry["output_cost_per_token"],
        )

    def model_info(self) -> dict[str, float]:
        return {
            "input_cost_per_token": self.input,
            "output_cost_per_token": self.output,
            "cache_read_input_token_cost": self.read,
            "cache_creation_input_token_cost": self.write,
        }

    def cost(self, usage: Usage) -> float:
        return (
            usage.uncached * self.input
            + usage.writes * self.write
            + usage.reads * self.read
            + usage.output * self.output
        )

    def row(self, label: str) -> str:
        per_million = (1e6 * p for p in (self.input, self.write, self.read, self.output))
        return f"| {label} | {self.model} | " + " | ".join(f"{p:.3f}" for p in per_million) + " |"


@dataclass
class Usage:
    """Input tokens by how the provider billed them, and output tokens."""

    uncached: int = 0
    writes: int = 0
    reads: int = 0
    output: int = 0

    @property
    def input(self) -> int:
        return self.uncached + self.writes + self.reads

    @classmethod
    def of(cls, record: dict[str, Any]) -> Usage:
        """One recorded request's counts: /v1/messages reports writes, chat and Responses only reads."""
        cache, output = record.get("cache") or {}, int(record.get("output_tokens") or 0)
        if "input_tokens" in cache:
            return cls(
                cache["input_tokens"],
                cache["cache_creation_input_tokens"],
                cache["cache_read_input_tokens"],
                output,
            )
        prompt, cached = cache.get("prompt_tokens", 0), cache.get("cached_tokens", 0)
        return cls(prompt - cached, 0, cached, output)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            *(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True))
        )


# -- what is run ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rules:
    name: str
    priced_as: str
    native_anthropic: bool
    """``/v1/messages`` to an ``anthropic/`` deployment (else ``openai/``, translated to chat)."""

    @property
    def agent_model(self) -> str:
        return f"standin-strict-agent-{self.priced_as}"

    @property
    def summary_model(self) -> str:
        return f"standin-summarizer-{self.priced_as}"

    def deployment(self, name: str, upstream: StandinUpstream, model: str, **info: Any) -> dict[str, Any]:
        if self.native_anthropic:
            return anthropic_deployment(name, upstream.root_url, model, **info)
        return standin_deployment(name, upstream.url, model, **info)


ANTHROPIC_RULES = Rules("Anthropic", "claude-sonnet-4-5", True)
OPENAI_RULES = Rules("OpenAI", "gpt-5", False)


@dataclass(frozen=True)
class Setup:
    name: str
    edit: str | None = None
    """A ``context_management`` edit the client asks for (LiteLLM's polyfill)."""
    hook: dict[str, Any] | None = None
    """compact_hook's settings beyond the window and the summary model; ``None``: no callback."""

    def runs_on(self, rules: Rules) -> bool:
        return self.edit is None or not rules.native_anthropic


PLAIN = Setup("no compaction")
SETUPS = [
    PLAIN,
    Setup("compact_20260112 polyfill", edit="compact_20260112"),
    Setup("clear_tool_uses polyfill", edit="clear_tool_uses_20250919"),
    Setup("compact_hook today", hook={"cost_aware": False} if COST_AWARE else {}),
    *([Setup("compact_hook cost-aware", hook=COST_AWARE_SETTINGS)] if COST_AWARE else []),
    *(
        [Setup("compact_hook cost-aware, recall off", hook={**COST_AWARE_SETTINGS, "recall": False})]
        if RECALL
        else []
    ),
]


TIGHT_WINDOWS = {"fa812bfe_pre_compact": 40_000}
"""Sessions also replayed at a tighter window, where compact_hook summarizes (at 0.6 x peak the
cheap tiers keep the long session under the trigger)."""


def window_for(peak_tokens: int) -> int:
    return max(16_000, int(round(peak_tokens * 0.6, -3)))


def with_tight_windows(sessions: list[Session], windows: dict[str, int]) -> list[Session]:
    """``sessions`` and, for those in ``TIGHT_WINDOWS``, a copy named with its window."""
    extra = []
    for session in sessions:
        tight = TIGHT_WINDOWS.get(session.name)
        if tight is not None:
            copy = dataclasses.replace(session, name=f"{session.name} (W {tight:,})")
            windows[copy.name] = tight
            extra.append(copy)
    return [*sessions, *extra]


def polyfill_trigger(window: int) -> int:
    return max(POLYFILL_MINIMUM, int(0.92 * window))


def context_management(setup: Setup, window: int) -> dict[str, Any] | None:
    if setup.edit is None:
        return None
    edit: dict[str, Any] = {
        "type": setup.edit,
        "trigger": {"type": "input_tokens", "value": polyfill_trigger(window)},
    }
    if setup.edit.startswith("clear_tool_uses"):
        edit["keep"] = {"type": "tool_uses", "value": 3}
    return {"edits": [edit]}


@dataclass(frozen=True)
class Job:
    session: Session
    rules: Rules
    setup: Setup
    window: int

    @property
    def label(self) -> str:
        return f"{self.session.name} / {self.rules.name} / {self.setup.name}"


def proxy_config(job: Job, upstream: StandinUpstream, prices: Prices) -> dict[str, Any]:
    info: dict[str, Any] = prices.model_info()
    if job.setup.hook is not None:
        compact = {"context_window": job.window, "summary_model": "summarizer", **job.setup.hook}
        if job.session.claude_code:
            compact["tokenizer"] = "claude"
        if COUNTS_LEARNED:  # the stand-in bills what we count: a Claude name's prior is not its count
            compact["count_ratio"] = 1.0
        info = {**info, "compact": compact}
    rules = job.rules
    settings: dict[str, Any] = {"use_chat_completions_url_for_anthropic_messages": True}
    if job.setup.hook is not None:
        settings["callbacks"] = ["compact_hook.proxy_handler_instance"]
    return {
        "model_list": [
            rules.deployment("agent", upstream, rules.agent_model, **info),
            rules.deployment("summarizer", upstream, rules.summary_model, **prices.model_info()),
        ],
        "litellm_settings": settings,
        "general_settings": {"context_management_summary_model": "summarizer"},
    }


# -- one run -------------------------------------------------------------------------------------------------


@dataclass
class Turn:
    started: float
    ended: float
    first: int
    last: int
    cache: str
    failed: bool


@dataclass
class Run:
    session: str
    rules: str
    setup: str
    window: int
    turns: int
    agent: Usage
    summary: Usage
    agent_cost: float
    summary_cost: float
    events: int
    summary_calls: int
    failed: int
    unused_preparations: int | None
    unused_source: str
    seconds: float
    max_tool_gap_seconds: float
    attempts: int = 1
    metrics: dict[str, float] = field(default_factory=dict)
    turn_costs: list[float] = field(default_factory=list)
    peak_input: int = 0
    """The largest agent request's input, as the provider billed it: over ``window``, the configuration
    did not keep the session in compact_hook's window."""

    @property
    def cost(self) -> float:
        return self.agent_cost + self.summary_cost

    @property
    def hit_share(self) -> float:
        return self.agent.reads / max(1, self.agent.input)


def replay(job: Job, upstream: StandinUpstream, code: Path) -> Run:
    """One fresh proxy (compact_hook imported from ``code``), the session turn by turn with its
    pauses, then what the provider served."""
    upstream.reset()
    prices = Prices.of(job.rules.priced_as)
    port = free_port() if job.setup.hook is not None else None
    env = {"PYTHONPATH": os.pathsep.join([str(code), str(ROOT)])}
    if port:
        env["COMPACT_METRICS_PORT"] = str(port)
    started = time.monotonic()
    logs = os.environ.get("BENCH_COST_LOGS")  # a folder: each proxy's log kept there
    log_path = Path(logs) / (job.label.replace(" / ", "__").replace(" ", "_") + ".log") if logs else None
    with ProxyProcess(proxy_config(job, upstream, prices), env=env, log_path=log_path) as proxy:
        client = anthropic.Anthropic(api_key=proxy.master_key, base_url=proxy.url, max_retries=0, timeout=600)
        warm_up(client, upstream)
        extra = context_management(job.setup, job.window)
        native = job.rules.native_anthropic
        turns = [
            send(client, upstream, job.session, i, extra, native) for i in range(len(job.session.points))
        ]
        settle(upstream)
        metrics = scrape(port) if port else {}
    return measure(job, prices, upstream.requests, turns, metrics, time.monotonic() - started)


def warm_up(client: anthropic.Anthropic, upstream: StandinUpstream) -> None:
    """One small request to the summarizer, forgotten: a fresh proxy's first request is slow (imports,
    connections), which would otherwise delay the session's second turn."""
    client.messages.create(
        model="summarizer", max_tokens=16, messages=[{"role": "user", "content": "warm-up"}]
    )
    upstream.reset()


def send(
    client: anthropic.Anthropic,
    upstream: StandinUpstream,
    session: Session,
    index: int,
    context: dict[str, Any] | None,
    native: bool,
) -> Turn:
    if index > 0 and session.human[index]:
        time.sleep(PAUSE)
    first, started = len(upstream.requests), time.monotonic()
    try:
        raw = client.messages.with_raw_response.create(
            model="agent",
            max_tokens=MAX_TOKENS,
            **session.request(session.points[index], breakpoint=native),
            extra_body={"context_management": context} if context else None,
        )
        cache, failed = raw.headers.get("x-compact-cache", ""), False
    except anthropic.APIError:
        cache, failed = "", True
    return Turn(started, time.monotonic(), first, len(upstream.requests), cache, failed)


def settle(upstream: StandinUpstream, timeout: float = 60.0) -> None:
    """Wait until the provider has answered everything and no new request came for a moment
    (background preparations finish after the last turn)."""
    deadline = time.monotonic() + timeout
    seen, quiet_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        records = upstream.requests
        answered = all("cache" in r or "output_tokens" in r for r in records if model_of(r))
        if len(records) != seen or not answered:
            seen, quiet_since = len(records), time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLE_SECONDS:
            return
        time.sleep(0.1)


def scrape(port: int) -> dict[str, float]:
    """compact_hook's preparation counts from its own metrics port."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        samples = metric_samples(response.read().decode())
    counts = {
        f"prepared_{outcome}": metric_value(samples, "compact_hook_prepared_total", outcome=outcome)
        for outcome in ("started", "made", "applied", "failed", "dropped", "cancelled")
    }
    counts["prepared_unused"] = metric_value(samples, "compact_hook_prepared_unused")
    counts["prepare_summary_calls"] = metric_value(samples, "compact_hook_prepare_summary_calls_total")
    return counts


def measure(
    job: Job,
    prices: Prices,
    records: list[dict[str, Any]],
    turns: list[Turn],
    metrics: dict[str, float],
    seconds: float,
) -> Run:
    agent_model, summary_model = job.rules.agent_model, job.rules.summary_model
    agent = [r for r in records if model_of(r) == agent_model]
    summaries = [r for r in records if model_of(r) == summary_model]
    agent_usage, summary_usage = total(agent), total(summaries)
    per_turn = [[r for r in records[t.first : t.last] if model_of(r) == agent_model] for t in turns]
    headers = sum(t.cache in EVENT_STATES for t in turns)
    events = headers if job.setup.hook is not None else polyfill_events(per_turn)
    unused, source = unused_preparations(job, metrics, len(summaries), events)
    return Run(
        session=job.session.name,
        rules=job.rules.name,
        setup=job.setup.name,
        window=job.window,
        turns=len(turns),
        agent=agent_usage,
        summary=summary_usage,
        agent_cost=prices.cost(agent_usage),
        summary_cost=prices.cost(summary_usage),
        events=events,
        summary_calls=len(summaries),
        failed=sum(t.failed for t in turns) + sum(1 for r in [*agent, *summaries] if "cache" not in r),
        unused_preparations=unused,
        unused_source=source,
        seconds=round(seconds, 1),
        max_tool_gap_seconds=round(max_tool_gap(job.session, turns), 3),
        metrics=metrics,
        turn_costs=[round(prices.cost(total(rs)), 6) for rs in per_turn],
        peak_input=max((Usage.of(r).input for r in agent), default=0),
    )


def model_of(record: dict[str, Any]) -> str:
    return str((record.get("body") or {}).get("model", ""))


def total(records: list[dict[str, Any]]) -> Usage:
    return sum((Usage.of(r) for r in records), Usage())


def polyfill_events(per_turn: list[list[dict[str, Any]]]) -> int:
    """Turns forwarded with a summary in the system prompt that the turn before did not have."""
    summaries = [forwarded_summary(records[-1]) if records else "" for records in per_turn]
    return sum(1 for i, text in enumerate(summaries) if text and (i == 0 or summaries[i - 1] != text))


def forwarded_summary(record: dict[str, Any]) -> str:
    body = record.get("body") or {}
    system = [m for m in body.get("messages") or [] if m.get("role") == "system"]
    text = json.dumps(system) + json.dumps(body.get("system", ""))
    return text if POLYFILL_SUMMARY in text else ""


def unused_preparations(
    job: Job, metrics: dict[str, float], summary_calls: int, events: int
) -> tuple[int | None, str]:
    if job.setup.hook is None:
        return None, "n/a"
    if metrics:
        return int(metrics["prepared_unused"]), "metrics"
    return max(0, summary_calls - events), "summary calls - events"


def max_tool_gap(session: Session, turns: list[Turn]) -> float:
    """The longest span from the start of a turn to the end of the next one sent back to back: an
    upper bound on the time between the provider's two cache lookups (over ``TTL``, the cache may
    have expired between tool turns, which real pauses of that length would not do)."""
    gaps = [turns[i].ended - turns[i - 1].started for i in range(1, len(turns)) if not session.human[i]]
    return max(gaps, default=0.0)


# -- running many --------------------------------------------------------------------------------------------


def snapshot(into: Path) -> Path:
    """compact_hook as it is now, copied for every proxy of this run: edits made meanwhile do not
    mix in. Copied again (a few seconds later) while the copy does not import: a file being saved."""
    for attempt in range(1, ATTEMPTS + 1):
        shutil.rmtree(into / "compact_hook", ignore_errors=True)
        shutil.copytree(
            ROOT / "compact_hook", into / "compact_hook", ignore=shutil.ignore_patterns("__pycache__")
        )
        check = subprocess.run(
            [sys.executable, "-c", "import compact_hook.proxy.hook"],
            env={**os.environ, "PYTHONPATH": str(into)},
            cwd=into,
            capture_output=True,
            text=True,
        )
        if check.returncode == 0:
            return into
        print(f"  compact_hook does not import (attempt {attempt}): {check.stderr[-300:]}", file=sys.stderr)
        time.sleep(10)
    raise RuntimeError("compact_hook/ does not import")


class Runner:
    """Runs jobs: one stand-in per worker thread, reset before each run; compact_hook from ``code``."""

    def __init__(self, code: Path) -> None:
        self.code = code
        self._local = threading.local()
        self._all: list[StandinUpstream] = []
        self._lock = threading.Lock()

    def mine(self) -> StandinUpstream:
        upstream: StandinUpstream | None = getattr(self._local, "upstream", None)
        if upstream is None:
            upstream = StandinUpstream(cache_ttl=TTL).start()
            self._local.upstream = upstream
            with self._lock:
                self._all.append(upstream)
        return upstream

    def replay(self, job: Job) -> Run:
        """The run, again (up to ``ATTEMPTS`` in all) while two back-to-back turns were too far apart
        or the proxy did not start."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                run = replay(job, self.mine(), self.code)
            except (RuntimeError, TimeoutError) as error:
                if attempt == ATTEMPTS:
                    raise
                print(f"  again: {job.label}: {str(error)[:200]}", file=sys.stderr)
                continue
            run.attempts = attempt
            if run.max_tool_gap_seconds < TTL:
                break
            print(f"  again: {job.label}: turns {run.max_tool_gap_seconds:.2f} s apart", file=sys.stderr)
        return run

    def stop(self) -> None:
        for upstream in self._all:
            upstream.stop()


def jobs_for(sessions: list[Session], windows: dict[str, int], only: list[str]) -> list[Job]:
    jobs: list[Job] = []
    for session in sessions:
        rules_sets = (ANTHROPIC_RULES, OPENAI_RULES) if session.claude_code else (OPENAI_RULES,)
        for rules in rules_sets:
            chosen = [
                Job(session, rules, setup, windows[session.name])
                for setup in SETUPS
                if setup.runs_on(rules)
                and all(term in f"{session.name} {rules.name} {setup.name}" for term in only)
            ]
            if chosen and chosen[0].setup is not PLAIN:
                chosen.insert(0, Job(session, rules, PLAIN, windows[session.name]))
            jobs.extend(chosen)
    return jobs


def run_all(jobs: list[Job], workers: int, code: Path) -> list[Run]:
    """Longest sessions first, ``workers`` at a time, each with its own stand-in and proxy; the
    first run that fails for good stops the others."""
    runner = Runner(code)
    ordered = sorted(jobs, key=lambda job: -len(job.session.points))
    pool = concurrent.futures.ThreadPoolExecutor(workers)
    runs: list[Run] = []
    try:
        futures = {pool.submit(runner.replay, job): job for job in ordered}
        for future in concurrent.futures.as_completed(futures):
            run = future.result()
            print(f"  done: {futures[future].label}: ${run.cost:.4f} in {run.seconds:.0f} s", file=sys.stderr)
            runs.append(run)
    finally:
        pool.shutdown(cancel_futures=True)
        runner.stop()
    order = {job.label: n for n, job in enumerate(jobs)}
    return sorted(runs, key=lambda run: order[f"{run.session} / {run.rules} / {run.setup}"])


# -- report ------------------------------------------------------------------------------------------------

HEADER = (
    "| session | configuration | cost USD | agent | summary | ÷ no compaction | cache hit share "
    "| tokens forwarded | compaction events | summary calls | unused preparations | failed |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def table(runs: list[Run], rules: Rules, sessions: list[str]) -> str:
    mine = [run for run in runs if run.rules == rules.name]
    plain = {run.session: run.cost for run in mine if run.setup == PLAIN.name}
    lines = [HEADER]
    for session in sessions:
        for setup in SETUPS:
            run = next((r for r in mine if r.session == session and r.setup == setup.name), None)
            if run is not None:
                lines.append(row(run, plain.get(session)))
            elif not setup.runs_on(rules) and session in plain:
                lines.append(f"| {session} | {setup.name} |" + " n/a |" * 10)
    lines.extend(totals(mine, plain))
    return "\n".join(lines)


PEERS = ("compact_20260112 polyfill", "clear_tool_uses polyfill")
"""LiteLLM's own: the peers a session's cost-aware run is set against."""
PEER_HEADER = (
    "| session | W | no compaction | best peer within W | cost-aware | ÷ no compaction | ÷ best peer |\n"
    "|---|---|---|---|---|---|---|"
)


def peer_table(runs: list[Run], rules: Rules, sessions: list[str]) -> str:
    """Per session, cost-aware against no compaction and against the cheapest of LiteLLM's polyfills
    whose every request stayed within compact_hook's window W (a polyfill that forwarded more than
    W kept nothing in bounds: it is no peer there, and the table says so)."""
    mine = [run for run in runs if run.rules == rules.name]
    lines = [PEER_HEADER]
    for session in sessions:
        found = {run.setup: run for run in mine if run.session == session}
        plain, aware = found.get(PLAIN.name), found.get("compact_hook cost-aware")
        if plain is None or aware is None:
            continue
        within = [found[name] for name in PEERS if name in found and found[name].peak_input <= aware.window]
        best = min(within, key=lambda run: run.cost, default=None)
        peer = f"{best.setup.removesuffix(' polyfill')} {best.cost:.4f}" if best else "none (over W)"
        versus = f"{aware.cost / best.cost:.3f}" if best else "–"
        cells = [session, f"{aware.window:,}", f"{plain.cost:.4f}", peer, f"{aware.cost:.4f}"]
        lines.append("| " + " | ".join([*cells, f"{aware.cost / plain.cost:.3f}", versus]) + " |")
    return "\n".join(lines)


def row(run: Run, plain: float | None) -> str:
    ratio = f"{run.cost / plain:.3f}" if plain else "–"
    unused = "–" if run.unused_preparations is None else str(run.unused_preparations)
    cells = [
        run.session,
        run.setup,
        f"{run.cost:.4f}",
        f"{run.agent_cost:.4f}",
        f"{run.summary_cost:.4f}",
        ratio,
        f"{run.hit_share:.1%}",
        f"{run.agent.input:,}",
        str(run.events),
        str(run.summary_calls),
        unused,
        str(run.failed),
    ]
    return "| " + " | ".join(cells) + " |"


def totals(runs: list[Run], plain: dict[str, float]) -> Iterator[str]:
    """One row per configuration run on every session of the table: the sums."""
    for setup in SETUPS:
        mine = [run for run in runs if run.setup == setup.name]
        if len(plain) > 1 and {run.session for run in mine} == set(plain):
            yield row(summed(mine), sum(plain.values()))


def summed(runs: list[Run]) -> Run:
    unused = [run.unused_preparations for run in runs if run.unused_preparations is not None]
    return Run(
        session="**all sessions**",
        rules=runs[0].rules,
        setup=runs[0].setup,
        window=0,
        turns=sum(run.turns for run in runs),
        agent=sum((run.agent for run in runs), Usage()),
        summary=sum((run.summary for run in runs), Usage()),
        agent_cost=sum(run.agent_cost for run in runs),
        summary_cost=sum(run.summary_cost for run in runs),
        events=sum(run.events for run in runs),
        summary_calls=sum(run.summary_calls for run in runs),
        failed=sum(run.failed for run in runs),
        unused_preparations=sum(unused) if unused else None,
        unused_source="",
        seconds=sum(run.seconds for run in runs),
        max_tool_gap_seconds=max(run.max_tool_gap_seconds for run in runs),
    )


def price_rows() -> list[str]:
    return [
        Prices.of(rules.priced_as).row(f"{role}, {rules.name} rules")
        for rules in (ANTHROPIC_RULES, OPENAI_RULES)
        for role in ("agent", "summarizer")
    ]


def window_rows(sessions: list[Session], windows: dict[str, int]) -> list[str]:
    return [
        f"| {s.name} | {len(s.points)} | {sum(s.human[1:])} | {windows[s.name]:,} "
        f"| {polyfill_trigger(windows[s.name]):,} |"
        for s in sessions
    ]


def checkout() -> str:
    """The commit measured, and whether compact_hook/ had uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--", "compact_hook")
    return git("rev-parse", "--short", "HEAD") + (" + uncommitted changes in compact_hook/" if dirty else "")


@dataclass(frozen=True)
class Header:
    """What a report says before its tables."""

    command: str
    checkout: str
    sessions: list[Session]
    windows: dict[str, int]


def preamble(header: Header) -> str:
    version, today = importlib.metadata.version("litellm"), datetime.date.today().isoformat()
    minutes = PAUSE * PROVIDER_TTL / TTL / 60
    cost_aware = (
        f"`compact_hook today`: `cost_aware: false` (the timing before cost awareness); `compact_hook "
        f"cost-aware`: {json.dumps(COST_AWARE_SETTINGS)} (the default now, with the scaled lifetime)."
        if COST_AWARE
        else "cost-aware: not available yet (no `cost_aware` in `CompactConfig`)."
    )
    lines = [
        "# Priced replay",
        "",
        f"`{header.command}` — {today}, litellm {version}, checkout {header.checkout}.",
        "",
        f"Time is scaled: the stand-in's prompt cache lives {TTL:g} s for the providers' {PROVIDER_TTL:g} s "
        f"(1 s here = {PROVIDER_TTL / TTL:g} s of a real session). Tool turns are sent back to back; before "
        f"a turn whose last message is a person's own words (except the first) the replay sleeps {PAUSE:g} s "
        f"(~{minutes:g} minutes of reading and typing), so the cache is cold for it. `max_tokens` "
        f"{MAX_TOKENS:,} on every turn. Output tokens are the stand-in's: a few per agent reply (the same "
        "under every configuration) and ~140 per summary, where a real summary runs to a thousand or more, "
        "so summary costs here are a lower bound.",
        "",
        f"Prices, USD per million tokens, from LiteLLM's cost map (`litellm.model_cost`, litellm {version}, "
        f"read {today}); OpenAI has no cache-write surcharge, so writes are priced as input:",
        "",
        "| deployment | priced as | input | cache write | cache read | output |",
        "|---|---|---|---|---|---|",
        *price_rows(),
        "",
        "W is compact_hook's `context_window`: max(16,000, 0.6 x the largest turn, system and tools "
        "included, to the thousand); the polyfills trigger at max(50,000, 0.92 W) input tokens. Pauses: "
        "turns after a person's words.",
        "",
        "| session | turns | pauses | W | polyfill trigger |",
        "|---|---|---|---|---|",
        *window_rows(header.sessions, header.windows),
        "",
        cost_aware,
        "",
    ]
    return "\n".join(lines)


def gap_note(runs: list[Run]) -> str:
    worst = max(runs, key=lambda run: run.max_tool_gap_seconds)
    verdict = (
        "under"
        if worst.max_tool_gap_seconds < TTL
        else "OVER (the cache may have expired between tool turns)"
    )
    again = sum(run.attempts - 1 for run in runs)
    return (
        f"Longest span from the start of a turn to the end of the next, back to back: "
        f"{worst.max_tool_gap_seconds:.2f} s ({worst.session} / {worst.rules} / {worst.setup}), {verdict} "
        f"the {TTL:g} s cache lifetime; runs repeated because that span reached it (machine load): {again}.\n"
    )


def report(runs: list[Run], header: Header, seconds: float, out: Path) -> str:
    """The tables (returned, and written to ``out``) and the raw numbers (``out`` as .json)."""
    parts = [preamble(header)]
    for rules in (ANTHROPIC_RULES, OPENAI_RULES):
        names = [
            s.name
            for s in header.sessions
            if any(r.session == s.name and r.rules == rules.name for r in runs)
        ]
        if names:
            title = f"## {rules.name} rules (priced as {rules.priced_as})"
            parts.append(f"{title}\n\n{table(runs, rules, names)}\n")
            peers = peer_table(runs, rules, names)
            if peers.count("\n") > 1:
                parts.append(f"### {rules.name} rules: cost-aware against the best peer\n\n{peers}\n")
    parts.append(gap_note(runs))
    parts.append(f"{len(runs)} runs in {seconds:.0f} s.\n")
    text = "\n".join(parts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    raw = {
        "command": header.command,
        "seconds": round(seconds),
        "date": datetime.date.today().isoformat(),
        "litellm": importlib.metadata.version("litellm"),
        "ttl_seconds": TTL,
        "provider_ttl_seconds": PROVIDER_TTL,
        "pause_seconds": PAUSE,
        "max_tokens": MAX_TOKENS,
        "checkout": header.checkout,
        "prices_per_token": {
            rules.priced_as: dataclasses.asdict(Prices.of(rules.priced_as))
            for rules in (ANTHROPIC_RULES, OPENAI_RULES)
        },
        "windows": header.windows,
        "cost_aware_settings": COST_AWARE_SETTINGS if COST_AWARE else None,
        "runs": [{**dataclasses.asdict(run), "cost": run.cost, "hit_share": run.hit_share} for run in runs],
    }
    out.with_suffix(".json").write_text(json.dumps(raw, indent=1) + "\n")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the long Claude Code session and two chat ones")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated terms a run's 'session rules configuration' must all contain",
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="runs at once, each with its own stand-in and proxy"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "cost.md", help="the .json goes beside it")
    args = parser.parse_args()
    started = time.monotonic()
    sessions = all_sessions()
    if args.quick:
        sessions = [s for s in sessions if s.name == "fa812bfe_pre_compact" or s.name in QUICK_CHAT]
    windows = {s.name: window_for(s.peak_tokens()) for s in sessions}
    sessions = with_tight_windows(sessions, windows)
    jobs = jobs_for(sessions, windows, [term for term in args.only.split(",") if term])
    if not COST_AWARE:
        print("cost-aware: not available yet", file=sys.stderr)
    for session in sessions:
        print(f"{session.name}: W = {windows[session.name]:,}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-cost-") as code:
        measured = checkout()
        runs = run_all(jobs, args.jobs, snapshot(Path(code)))
    header = Header(
        command=" ".join([".venv/bin/python bench/bench_cost.py", *sys.argv[1:]]),
        checkout=measured,
        sessions=[s for s in sessions if any(r.session == s.name for r in runs)],
        windows=windows,
    )
    print(report(runs, header, time.monotonic() - started, args.out))


assert set(QUICK_CHAT) <= {name.removesuffix(".json") for name in CHAT_FILES}

if __name__ == "__main__":
    main()

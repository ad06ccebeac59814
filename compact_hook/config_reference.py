"""The configuration reference: what each setting means, for the two tables of docs/configuration.md.

Defaults come from ``CompactConfig`` and ``ProcessConfig`` themselves; ``unset`` says what a
``None`` default means. ``scripts/config_reference.py`` writes the tables into docs/configuration.md
between their markers, and a test fails when the README, this file and the code disagree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compact_hook.config import CompactConfig, ProcessConfig
from compact_hook.settings_checks import ENV_PREFIX

MARKERS = {
    "compact": ("<!-- config-reference:compact -->", "<!-- /config-reference:compact -->"),
    "process": ("<!-- config-reference:process -->", "<!-- /config-reference:process -->"),
}


@dataclass(frozen=True, slots=True)
class Doc:
    meaning: str
    unset: str | None = None
    """What a ``None`` default means (e.g. "router's `max_input_tokens`")."""
    suffix: str = ""
    """Said after the default (e.g. " (64 MiB)")."""


COMPACT_KEYS: dict[str, Doc] = {
    "enabled": Doc(
        "`false` switches the model off without deleting the block",
    ),
    "context_window": Doc(
        (
            "input tokens the model accepts. Default: the smallest `model_info.max_input_tokens` of the "
            "group's deployments, else LiteLLM's model map. Unknown → no compaction, one warning per "
            "model"
        ),
        unset="router's `max_input_tokens`",
    ),
    "trigger_ratio": Doc(
        (
            "compact when everything the model reads (messages, system, tool definitions, schemas) "
            "reaches `trigger_ratio × context_window` tokens (inclusive); lowered to `context_window − "
            "output reserve` when the reply the request asks room for (`max_tokens`, "
            "`max_completion_tokens`, `max_output_tokens`) would not fit beside it"
        ),
    ),
    "tail_retention_ratio": Doc(
        (
            "the newest whole units kept verbatim, up to this share of the room the messages have (the "
            "window minus output reserve, system and tool definitions); must be below `trigger_ratio`"
        ),
        unset="`0.25`, or half the trigger if lower",
    ),
    "summary_model": Doc(
        (
            "model group (in this proxy) that writes the summary; `digest` = the built-in digest, no LLM "
            "call at all"
        ),
        unset="the request's model group",
    ),
    "summary_max_tokens": Doc(
        "`max_tokens` of each summary call",
    ),
    "summary_timeout_seconds": Doc(
        "timeout of each summary call (never more than what is left of the deadline)",
    ),
    "summary_deadline_seconds": Doc(
        (
            "all the summary calls of one compaction together, retries and waits for another replica "
            "included; past it the digest stands in where the request must shrink, else it is forwarded "
            "as it is (`reason: summary_failed`)"
        ),
    ),
    "max_summary_calls": Doc(
        (
            "summary calls (chunks) of one compaction at most; a middle larger than that many calls can "
            "read has its oldest part digested, and the digest goes in as the summary so far"
        ),
    ),
    "summary_context_window": Doc(
        "window of the summary model, for chunking a large middle (one call when it fits)",
        unset="the `summary_model` group's window, else `context_window`",
    ),
    "max_retries": Doc(
        "retries of failed or empty summary calls, for one compaction in all (shared by its chunks)",
    ),
    "retry_backoff_seconds": Doc(
        "first backoff; doubles each retry",
        unset="`1.0`",
    ),
    "archive_dir": Doc(
        "where summarized messages are archived: `<archive_dir>/<tenant>/<session>/`",
    ),
    "tokenizer": Doc(
        (
            "`o200k_base`, `cl100k_base`, `claude` (any `anthropic/` or Claude model), or a path to a "
            "`tokenizer.json`"
        ),
        unset="by the deployment's model",
    ),
    "tool_output_max_tokens": Doc(
        (
            "tier 1: a tool result over this keeps its beginning and end (half each) around a `…N tokens "
            "truncated; the full output had L lines…` marker; at least 100"
        ),
    ),
    "tool_output_policy": Doc(
        (
            "`tokens` (cut on token boundaries), `bytes` (cut at `4 × tool_output_max_tokens` UTF-8 "
            "bytes, no tokenizer), `none`"
        ),
    ),
    "clear_tool_results": Doc(
        "tier 2 on/off",
    ),
    "clear_trigger_ratio": Doc(
        ("tier 2 starts when the request reaches this share of the window; must not exceed `trigger_ratio`"),
        unset="`0.7`, or the trigger if lower",
    ),
    "keep_tool_results": Doc(
        "the newest tool results are never cleared",
    ),
    "clear_at_least": Doc(
        (
            "clearing advances only in batches saving at least this many tokens (each batch invalidates "
            "the provider's prompt cache once)"
        ),
    ),
    "protected_tools": Doc(
        "tools whose results are never truncated nor cleared, and survive compaction",
    ),
    "user_message_budget": Doc(
        (
            "tokens of the users' own messages (and protected results) kept verbatim through compaction, "
            "newest first; capped at the tail budget; `0` keeps only the latest user message. A user "
            "message is one without tool results (an Anthropic user message carrying `tool_result` blocks"
            " belongs to its tool turn)"
        ),
    ),
    "pinned_patterns": Doc(
        (
            "a user message whose own text (never a tool output) holds one of these is pinned: kept "
            "word for word, before the summary, through every compaction. The first user message (the "
            "task) and system/developer messages after the head are always pinned. An Anthropic user "
            "message that also carries tool results keeps only its text; the same text is pinned once"
        ),
    ),
    "pinned_budget": Doc(
        (
            "tokens the pinned messages may keep; when they do not fit, each gets a fair share and a "
            "larger one keeps its head and tail around a marker (the full text goes to the archive); "
            "`0` pins nothing"
        ),
        unset="a tenth of the room the messages have (window − output reserve − system and tools)",
    ),
    "normalize": Doc(
        "fix tool-call pairing on requests we change; `always`: on every request",
    ),
    "on_overflow": Doc(
        (
            "a request still over the window after everything: `fit` it (digest, drop oldest, shrink "
            "outputs) or `passthrough` (forward it exactly as the client sent it)"
        ),
    ),
    "breaker_failures": Doc(
        (
            "consecutive failed summaries (per summary model and tenant) after which the summary model is"
            " not called for a while"
        ),
    ),
    "breaker_cooldown_seconds": Doc(
        "how long; doubles each time it opens again, reset by a success",
    ),
    "breaker_max_cooldown_seconds": Doc(
        "the cap of that doubling",
    ),
    "recover": Doc(
        (
            "retry a request the provider refused as too long, compacted to the limit its error reports, "
            "and remember that limit for the group"
        ),
    ),
    "learned_window_ttl_seconds": Doc(
        ("how long a learned limit is used as the group's window (shared by replicas through the store)"),
    ),
    "prepare": Doc(
        (
            "prepare the next compaction in the background before the trigger, so the turn that reaches "
            "it does not wait for a summary (see *Prepared compaction*); `false`: that turn makes the "
            "summary"
        ),
    ),
    "prepare_ratio": Doc(
        "from this share of the window the compaction is prepared; must be below `trigger_ratio`",
        unset="`0.75`, or 85% of the trigger if lower",
    ),
    "thinking_prefix_check": Doc(
        (
            "`/v1/messages`: the model checks each thinking block sent back against everything before it "
            "(*preserved thinking*): blocks produced before a change we made to that prefix are removed "
            "(see *Preserved thinking*); `false`: thinking blocks are kept byte for byte, as older models "
            "need (with `thinking` enabled they refuse a tool turn whose thinking is missing)"
        ),
        unset="by the deployment's model: Claude 5.1 and later (`claude-fable-5-1`, `claude-opus-5-5`, …)",
    ),
    "cost_aware": Doc(
        (
            "time clearing, preparing and compacting by money, from the prompt-cache usage the provider "
            "reports for each conversation (see *Cost-aware timing*): a clearing batch waits while the "
            "cache is warm and a summary is not prepared where clearing suffices, compaction may come "
            "before the trigger when it pays; never later than the trigger, never over the window. "
            "Acts only on priced models, once the provider has reported on the conversation"
        ),
    ),
    "cache_ttl_seconds": Doc(
        "seconds the provider keeps a prompt prefix cached after its last use (Anthropic: 300; `1h`: 3600)",
    ),
    "price_input": Doc(
        (
            "USD per million uncached input tokens, for a model LiteLLM's cost map does not price (its "
            "map, and a deployment's `model_info.input_cost_per_token`, come first); set with `price_output`"
        ),
        unset="LiteLLM's cost map",
    ),
    "price_cache_write": Doc(
        "USD per million input tokens written to the prompt cache", unset="`price_input`"
    ),
    "price_cache_read": Doc("USD per million input tokens read from the prompt cache", unset="`price_input`"),
    "price_output": Doc("USD per million output tokens", unset="LiteLLM's cost map"),
}

PROCESS_KEYS: dict[str, Doc] = {
    "store": Doc(
        (
            "where compactions are remembered: `auto` (Redis if configured, else in-process), `memory`, "
            "`redis`, `off` (remember nothing: every turn over the threshold pays a new summary)"
        ),
    ),
    "redis_url": Doc(
        (
            "our own Redis, e.g. `redis://redis:6379/0`. **Wins over LiteLLM's Redis**; unset, the Redis "
            "LiteLLM itself is configured with (`REDIS_HOST`/`REDIS_PORT`, "
            "`litellm_settings.cache_params` of type redis, `general_settings.coordination_redis`) is "
            "used"
        ),
        unset="unset",
    ),
    "store_max_entries": Doc(
        "bound of the in-process store (LRU), in entries",
    ),
    "store_max_bytes": Doc(
        "bound of the in-process store, in bytes (summaries are most of it)",
        suffix=" (64 MiB)",
    ),
    "store_ttl_seconds": Doc(
        "lifetime of a remembered compaction (in-process and Redis)",
    ),
    "redis_timeout_seconds": Doc(
        "per Redis call; slower counts as down",
    ),
    "lock_ttl_seconds": Doc(
        ('expiry of a replica\'s "I am summarizing this" lock, so a crashed holder blocks no one for long'),
    ),
    "lock_wait_seconds": Doc(
        "how long a replica waits for another's summary before making it itself",
    ),
    "failure_ttl_seconds": Doc(
        (
            "a failed summary is remembered this long (per conversation, shared by replicas): later turns"
            " and waiting replicas do not repeat it"
        ),
    ),
    "prepare_concurrency": Doc(
        "compactions prepared in the background at once, per proxy process",
    ),
    "prepare_queue": Doc(
        (
            "more that may wait for a slot; beyond it the oldest waiting one of the tenant with most "
            "waiting is dropped (that conversation's trigger then makes its summary itself)"
        ),
    ),
    "archive_max_age_days": Doc(
        (
            "archive entries (and their audits) older than this many days are deleted, checked at most "
            "once an hour by each proxy process that writes there; `compact-hook archive prune` does it "
            "by hand"
        ),
        unset="unset (kept forever)",
    ),
    "metrics_port": Doc(
        (
            "serve the Prometheus metrics on this port too (see *Metrics*): for proxies without LiteLLM's"
            " `prometheus` callback, whose `/metrics` serves them anyway"
        ),
        unset="unset",
    ),
    "metrics_host": Doc(
        "address `COMPACT_METRICS_PORT` listens on (`0.0.0.0` in a container)",
    ),
    "log_level": Doc(
        "level of the `compact_hook` logger (stderr of the proxy)",
    ),
}


def compact_table() -> str:
    """The ``model_info.compact`` keys: key, default, meaning."""
    rows = [
        _row(f"`{field.name}`", field, COMPACT_KEYS[field.name])
        for field in dataclasses.fields(CompactConfig)
    ]
    return "\n".join(["| key | default | meaning |", "|---|---|---|", *rows])


def process_table() -> str:
    """The process-wide ``COMPACT_*`` environment variables: variable, default, meaning."""
    rows = [
        _row(f"`{ENV_PREFIX}{field.name.upper()}`", field, PROCESS_KEYS[field.name])
        for field in dataclasses.fields(ProcessConfig)
    ]
    return "\n".join(["| variable | default | meaning |", "|---|---|---|", *rows])


def tables() -> dict[str, str]:
    return {"compact": compact_table(), "process": process_table()}


def with_tables(readme: str) -> str:
    """``readme`` with each table between its markers replaced by the generated one."""
    for name, table in tables().items():
        start, end = MARKERS[name]
        before, found, rest = readme.partition(start)
        if not found or end not in rest:
            raise ValueError(f"README has no {start} ... {end} markers")
        readme = f"{before}{start}\n{table}\n{end}{rest.partition(end)[2]}"
    return readme


def write_readme(path: Path) -> bool:
    """Rewrite the README's tables; True if anything changed."""
    text = path.read_text(encoding="utf-8")
    updated = with_tables(text)
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return updated != text


def _row(name: str, field: dataclasses.Field[Any], doc: Doc) -> str:
    default = _default_text(_default(field))
    shown = doc.unset if default is None and doc.unset is not None else f"{default}{doc.suffix}"
    return f"| {name} | {shown} | {doc.meaning} |"


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _default_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(f'"{item}"' for item in value) + "]`"
    text = str(value)
    home = str(Path.home())
    if text.startswith(home + "/"):
        text = "~" + text[len(home) :]
    return f"`{text}`"

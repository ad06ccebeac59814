"""Per-model settings: one frozen, validated object, built from YAML or ``COMPACT_*``.

Precedence (highest first): a model's ``model_info.compact`` block, then ``COMPACT_*``
environment variables, then the defaults below. Every mistake raises ``ValueError``
naming the offending key, so a bad ``litellm_config.yaml`` fails proxy start-up loudly
instead of silently compacting with a setting nobody asked for.

Each setting is declared once, on its field (``compact_hook.settings.setting``): its default, its
meaning (docs/configuration.md's table is generated from it), its check, whether it scopes a
stored compaction, and what leaving it unset stands for. The process-wide settings are in
``compact_hook.settings.process``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from compact_hook.core.pricing import Prices
from compact_hook.settings.checks import environ_values, yaml_values
from compact_hook.settings.setting import Below, Fraction, Unset, check_declared, setting
from compact_hook.settings.summary import SummarySettings

DEFAULT_PROTECTED_TOOLS = ("manage_todo_list",)
DEFAULT_PINNED_PATTERNS = (
    "<system-reminder>",
    "# AGENTS.md instructions",
    "<user_instructions>",
    "<environment_context>",
    "CLAUDE.md",
)
"""Text clients inject to instruct the agent (Claude Code, Codex): a user message holding one is pinned."""
DEFAULT_PINNED_SHARE = 0.1
ToolOutputPolicy = Literal["tokens", "bytes", "none"]
NormalizeMode = Literal["changed", "always"]
OverflowMode = Literal["fit", "passthrough"]
RemoteCompaction = Literal["ours", "theirs"]
MIN_TOOL_OUTPUT_TOKENS = 100
DIGEST = "digest"
"""``summary_model: digest``: summarize with the built-in deterministic digest, no LLM call."""


@dataclass(frozen=True)
class CompactConfig(SummarySettings):
    """Per-model compaction settings (``context_window`` ``None``: the proxy hook fills it from the
    router; used directly, an unknown window means "never compact")."""

    tool_output_max_tokens: int = setting(
        5_000,
        (
            "tier 1: a tool result over this keeps its beginning and end (half each) around a `…N tokens "
            "truncated; the full output had L lines…` marker; at least 100"
        ),
        at_least=MIN_TOOL_OUTPUT_TOKENS,
        scope=True,
    )
    tool_output_policy: ToolOutputPolicy = setting(
        "tokens",
        (
            "`tokens` (cut on token boundaries), `bytes` (cut at `4 × tool_output_max_tokens` UTF-8 bytes, "
            "no tokenizer), `none`"
        ),
        scope=True,
    )
    clear_tool_results: bool = setting(True, "tier 2 on/off", scope=True)
    clear_trigger_ratio: float | None = setting(
        None,
        "tier 2 starts when the request reaches this share of the window; must not exceed `trigger_ratio`",
        fraction=Fraction.CLOSED,
        below_trigger=Below("clearing is the cheaper tier and comes first", strict=False),
        scope=True,
        unset=Unset("`0.7`, or the trigger if lower", lambda c: min(0.7, c.trigger_ratio)),
    )
    keep_tool_results: int = setting(3, "the newest tool results are never cleared", at_least=0, scope=True)
    clear_at_least: int = setting(
        5_000,
        (
            "clearing advances only in batches saving at least this many tokens (each batch invalidates the "
            "provider's prompt cache once)"
        ),
        at_least=1,
        scope=True,
    )
    protected_tools: tuple[str, ...] = setting(
        DEFAULT_PROTECTED_TOOLS,
        "tools whose results are never truncated nor cleared, and survive compaction",
        non_empty=True,
        scope=True,
    )
    recall: bool = setting(
        True,
        (
            "name each tool output that clearing, truncation or a summary takes out by a handle "
            "(`recall 048213`) and offer the model a tool that reads it back, answered by the proxy on every "
            "wire (docs/compatibility.md); the tool is beside the client's own in every request of an "
            "agent's conversation from its first (no request without tools gets it); `false`: as before"
        ),
        scope=True,
    )
    recall_max_tokens: int = setting(
        16_000,
        (
            "the most the recall answers of one request give back, in all (an answer over its share: "
            "its head and tail, with a note on what was cut), and never more than the window has room for"
        ),
        at_least=256,
    )
    recall_conversation_max_bytes: int = setting(
        8 * 1024 * 1024,
        (
            "the most the recall answers of one conversation give back while it lives, in all requests "
            "(shared by the replicas through the store; past it, a recall is told the budget is spent); "
            "at most 64 MiB"
        ),
        at_least=1024,
        at_most=64 * 1024 * 1024,
    )
    recall_max_rounds: int = setting(
        3,
        (
            "model calls the recall answers of one request may add (the last round's answers say there "
            "are no more; a recall call after them is taken out of the reply); at most 8"
        ),
        at_least=1,
        at_most=8,
    )
    recall_round_timeout_seconds: float = setting(
        120.0,
        (
            "how long one recall round's model call may take; a round that times out or meets a 429 or "
            "5xx is tried once more, then the request answers with that error (the client retries)"
        ),
        at_least=1,
    )
    user_message_budget: int = setting(
        20_000,
        (
            "tokens of the users' own messages (and protected results) kept verbatim through compaction, "
            "newest first; capped at the tail budget; `0` keeps only the latest user message. A user message "
            "is one without tool results (an Anthropic user message carrying `tool_result` blocks belongs to "
            "its tool turn)"
        ),
        at_least=0,
        scope=True,
    )
    pinned_patterns: tuple[str, ...] = setting(
        DEFAULT_PINNED_PATTERNS,
        (
            "a user message whose own text (never a tool output) holds one of these is pinned: kept word for "
            "word, before the summary, through every compaction. The first user message (the task) and "
            "system/developer messages after the head are always pinned. An Anthropic user message that also "
            "carries tool results keeps only its text; the same text is pinned once"
        ),
        non_empty=True,
        scope=True,
    )
    pinned_budget: int | None = setting(
        None,
        (
            "tokens the pinned messages may keep; when they do not fit, each gets a fair share and a larger "
            "one keeps its head and tail around a marker (the full text goes to the archive); `0` pins "
            "nothing"
        ),
        at_least=0,
        scope=True,
        unset=Unset("a tenth of the room the messages have (window − output reserve − system and tools)"),
    )
    normalize: NormalizeMode = setting(
        "changed", "fix tool-call pairing on requests we change; `always`: on every request"
    )
    on_overflow: OverflowMode = setting(
        "fit",
        (
            "a request still over the window after everything: `fit` it (digest, drop oldest, shrink "
            "outputs) or `passthrough` (forward it exactly as the client sent it)"
        ),
    )
    remote_compaction: RemoteCompaction = setting(
        "ours",
        (
            "Codex's remote compaction (a Responses request ending in `compaction_trigger`): `ours` answers "
            "it with our summary, on any model; `theirs` forwards it to a provider that serves it (OpenAI's "
            "and Azure's Responses API). See *Codex's remote compaction*"
        ),
    )
    breaker_failures: int = setting(
        3,
        (
            "consecutive failed summaries (per summary model and tenant) after which the summary model is "
            "not called for a while"
        ),
        at_least=1,
    )
    breaker_cooldown_seconds: float = setting(
        60.0, "how long; doubles each time it opens again, reset by a success", at_least=0.001
    )
    breaker_max_cooldown_seconds: float = setting(
        960.0, "the cap of that doubling", at_least="breaker_cooldown_seconds"
    )
    recover: bool = setting(
        True,
        (
            "retry a request the provider refused as too long, compacted to the limit its error reports, and "
            "remember that limit (for the group where the error states it, else for the key or team)"
        ),
    )
    learned_window_ttl_seconds: float = setting(
        86_400.0,
        "how long a learned limit is used as the group's window (shared by replicas through the store)",
        at_least=1,
    )
    learned_window_floor: float = setting(
        0.5,
        (
            "the smallest window a refusal or a server's ceiling may teach, as a share of `context_window`: "
            "a stated limit below it is kept at it (and logged: set `context_window` instead), but for "
            "the key or team whose request was refused; one that leaves the conversation no room beside "
            "system, tools and the reply is not used"
        ),
        fraction=Fraction.CLOSED,
    )
    prepare: bool = setting(
        True,
        (
            "prepare the next compaction in the background before the trigger, so the turn that reaches it "
            "does not wait for a summary (see *Prepared compaction*); `false`: that turn makes the summary"
        ),
    )
    prepare_ratio: float | None = setting(
        None,
        "from this share of the window the compaction is prepared; must be below `trigger_ratio`",
        fraction=Fraction.OPEN,
        below_trigger=Below("a compaction is prepared before the turn that needs it"),
        unset=Unset(
            "`0.75`, or 85% of the trigger if lower", lambda c: min(0.75, round(c.trigger_ratio * 0.85, 4))
        ),
    )
    thinking_prefix_check: bool | None = setting(
        None,
        (
            "`/v1/messages`: thinking blocks produced before a change we made to the prefix are removed, as "
            "models that check them need (see *Preserved thinking*); `false`: kept byte for byte"
        ),
        unset=Unset(
            "by the deployment's model: Claude 5.1 and later (`claude-fable-5-1`, `claude-opus-5-5`, …)"
        ),
    )
    cost_aware: bool = setting(
        True,
        (
            "refine clearing, preparing and compacting by money, from the prompt-cache usage the provider "
            "reports (see *Cost-aware timing*): a clearing batch waits while the cache is warm, and once "
            "a conversation is being cleared the next batch goes when it pays, under `clear_trigger_ratio` "
            "too; compaction may come before the trigger when it pays; never later, never over the window. "
            "Priced models only"
        ),
    )
    cache_ttl_seconds: float = setting(
        300.0,
        "seconds the provider keeps a prompt prefix cached after its last use (Anthropic: 300; `1h`: 3600)",
        at_least=0.001,
    )
    price_input: float | None = setting(
        None,
        (
            "USD per million uncached input tokens, for a model LiteLLM's cost map does not price (its map, "
            "and a deployment's `model_info.input_cost_per_token`, come first); set with `price_output`"
        ),
        at_least=0,
        unset=Unset("LiteLLM's cost map"),
    )
    price_cache_write: float | None = setting(
        None,
        "USD per million input tokens written to the prompt cache",
        at_least=0,
        unset=Unset("`price_input`"),
    )
    price_cache_read: float | None = setting(
        None,
        "USD per million input tokens read from the prompt cache",
        at_least=0,
        unset=Unset("`price_input`"),
    )
    price_output: float | None = setting(
        None, "USD per million output tokens", at_least=0, unset=Unset("LiteLLM's cost map")
    )

    def __post_init__(self) -> None:
        check_declared(self)
        if (self.price_input is None) != (self.price_output is None):
            raise ValueError("price_input: set with price_output (USD per million tokens), or neither")

    @property
    def prices(self) -> Prices | None:
        """The prices set here (USD per million tokens: a cache write or read unset costs as input)."""
        if self.price_input is None or self.price_output is None:
            return None
        write = self.price_input if self.price_cache_write is None else self.price_cache_write
        read = self.price_input if self.price_cache_read is None else self.price_cache_read
        return Prices.per_million(self.price_input, write, read, self.price_output)

    @property
    def uses_digest(self) -> bool:
        """Summaries come from the built-in digest, not from a model."""
        return self.summary_model == DIGEST

    @property
    def prepares(self) -> bool:
        """Compactions are prepared in the background (a digest costs nothing to make at the trigger)."""
        return self.prepare and not self.uses_digest

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any], base: CompactConfig | None = None) -> CompactConfig:
        """Build from a ``model_info["compact"]`` block layered over ``base`` (or the defaults)."""
        return dataclasses.replace(base or cls(), **yaml_values(cls, settings))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CompactConfig:
        """Defaults overridden by ``COMPACT_<SETTING>`` variables, e.g. ``COMPACT_TRIGGER_RATIO=0.8``."""
        return cls(**environ_values(cls, environ))


def revised(config: CompactConfig, **changes: Any) -> CompactConfig:
    """``dataclasses.replace``, remembered: requests revise their group's settings the same few ways
    (no recall tool, nothing prepared ahead, the learned window), and a replace checks every setting
    again — a tenth of a millisecond, on every request."""
    return _revised(config, tuple(sorted(changes.items())))


@functools.lru_cache(maxsize=1024)
def _revised(config: CompactConfig, changes: tuple[tuple[str, Any], ...]) -> CompactConfig:
    return dataclasses.replace(config, **dict(changes))

"""The first of the per-model settings (``CompactConfig`` carries on from them, in this order): on or
off, the window and the trigger, the summary and its call, the archive, and how tokens are counted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from compact_hook.settings.setting import Below, Fraction, Unset, setting

DEFAULT_ARCHIVE_DIR = str(Path("~/.local/state/compact_hook/archive").expanduser())
SUMMARY_TOKENS = (256, 4_096)
"""The least and the most ``summary_max_tokens`` is derived as: a summary needs a few hundred tokens
to hold its sections, and a longer one than 4,096 is more to read on every turn that follows."""
SUMMARY_PROMPT_ALLOWANCE = 664
"""What a summary call's own instructions take of its window (ours are ~400 tokens), with a margin."""


def summary_tokens_for(window: int | None, digest: bool = False) -> int:
    """``summary_max_tokens`` where the operator set none. The summary model's window, less a
    twentieth and the prompt, is shared in four: the running summary a chunk carries and the answer
    take one each, the transcript two — a 4K summary model gets 806, and ~1,800 for the transcript;
    from an 18K window on, 4,096. The digest, which calls no model, is capped at 4,096."""
    least, most = SUMMARY_TOKENS
    if window is None or digest:
        return most
    return max(least, min(most, int(0.95 * window - SUMMARY_PROMPT_ALLOWANCE) // 4))


SUMMARY_CALL_MARGIN = 0.05
"""The share of the summary model's window a summary call leaves unused (our count may be short)."""
MIN_TRANSCRIPT_TOKENS = 512
"""The least transcript a summary call must carry beside its prompt, the running summary and the
answer (``engine.summary.summarize.MIN_CHUNK_TOKENS``): less, and no summary is ever made."""


def transcript_room(window: int, summary_tokens: int) -> int:
    """The transcript one summary call carries in a ``window``-token summary model beside its prompt
    (at most ``SUMMARY_PROMPT_ALLOWANCE``), a running summary and an answer of ``summary_tokens`` each."""
    return int((1 - SUMMARY_CALL_MARGIN) * window) - SUMMARY_PROMPT_ALLOWANCE - 2 * summary_tokens - 64


@dataclass(frozen=True)
class SummarySettings:
    """On or off, the window, the trigger, the summary and its call, the archive, counting."""

    enabled: bool = setting(True, "`false` switches the model off without deleting the block")
    context_window: int | None = setting(
        None,
        (
            "input tokens the model accepts. Default: the smallest `model_info.max_input_tokens` of the "
            "group's deployments, else LiteLLM's model map. Unknown → no compaction, one warning per model"
        ),
        at_least=1,
        unset=Unset("router's `max_input_tokens`"),
    )
    trigger_ratio: float = setting(
        0.92,
        (
            "compact when everything the model reads (messages, system, tool definitions, schemas) reaches "
            "`trigger_ratio × context_window` tokens (inclusive); lowered to `context_window − output "
            "reserve` when the reply the request asks room for (`max_tokens`, `max_completion_tokens`, "
            "`max_output_tokens`) would not fit beside it"
        ),
        fraction=Fraction.CLOSED,
        scope=True,
    )
    tail_retention_ratio: float | None = setting(
        None,
        (
            "the newest whole units kept verbatim, up to this share of the room the messages have (the "
            "window minus output reserve, system and tool definitions); must be below `trigger_ratio`"
        ),
        fraction=Fraction.OPEN,
        below_trigger=Below("otherwise a compaction cannot get under the trigger"),
        scope=True,
        unset=Unset("`0.25`, or half the trigger if lower", lambda c: min(0.25, c.trigger_ratio / 2)),
    )
    summary_model: str | None = setting(
        None,
        (
            "model group (in this proxy) that writes the summary; `digest` = the built-in digest, no LLM "
            "call at all"
        ),
        non_empty=True,
        scope=True,
        unset=Unset("the request's model group"),
    )
    summary_max_tokens: int | None = setting(
        None,
        (
            "`max_tokens` of each summary call (a chunked summary carries its running summary, as long, into "
            "the next call); one that leaves the summary model under 512 tokens of transcript fails "
            "start-up"
        ),
        at_least=1,
        scope=True,
        unset=Unset(
            "a quarter of what the summary model's window leaves beside its prompt, at least 256 and at "
            "most 4,096 (4,096 where the window is unknown, or with the `digest`): a 4K summary model "
            "keeps half for the transcript",
            lambda c: c.summary_tokens,
        ),
    )
    summary_tool_output_tokens: int = setting(
        1_000,
        (
            "with `recall`, each tool output the summary model reads keeps its beginning and end, about this "
            "many tokens (its handle names the whole, which the model can read back): a summary's input is "
            "the middle it reads, and large outputs were most of it; `0`: read as forwarded"
        ),
        at_least=0,
    )
    summary_timeout_seconds: float = setting(
        120.0, "timeout of each summary call (never more than what is left of the deadline)", at_least=0.001
    )
    summary_deadline_seconds: float = setting(
        60.0,
        (
            "all the summary calls of one compaction together, retries and waits for another replica "
            "included; past it the digest stands in where the request must shrink, else it is forwarded as "
            "it is (`reason: summary_failed`)"
        ),
        at_least=0.001,
    )
    max_summary_calls: int = setting(
        12,
        (
            "summary calls (chunks) of one compaction at most; a middle larger than that many calls can read "
            "has its oldest part digested, and the digest goes in as the summary so far"
        ),
        at_least=1,
    )
    summary_context_window: int | None = setting(
        None,
        "window of the summary model, for chunking a large middle (one call when it fits)",
        at_least=1,
        scope=True,
        unset=Unset("the `summary_model` group's window, else `context_window`"),
    )
    max_retries: int = setting(
        2,
        "retries of failed or empty summary calls, for one compaction in all (shared by its chunks)",
        at_least=0,
    )
    retry_backoff_seconds: float = setting(1.0, "first backoff; doubles each retry", at_least=0)
    archive_dir: str = setting(
        DEFAULT_ARCHIVE_DIR,
        "where summarized messages are archived: `<archive_dir>/<tenant>/<session>/`",
        non_empty=True,
    )
    tokenizer: str | None = setting(
        None,
        (
            "`o200k_base`, `cl100k_base`, `claude` (any `anthropic/` or Claude model), or a path to a "
            "`tokenizer.json`"
        ),
        non_empty=True,
        scope=True,
        unset=Unset("by the deployment's model"),
    )
    count_ratio: float | None = setting(
        None,
        (
            "the provider's tokens per token `tokenizer` counts, until its usage teaches better (each "
            "response's usage does, per conversation and per model group: see *Counts the provider agrees "
            "with*); between 0.2 and 5"
        ),
        at_least=0.2,
        at_most=5.0,
        unset=Unset(
            "by the deployment's model: measured for Claude (1.10 with the `claude` tokenizer for Claude 3 "
            "to Opus 4.6, 1.44 for Opus 4.7 on; 1.19 / 1.49 with o200k), else 1"
        ),
    )
    count_floor: float = setting(
        0.75,
        (
            "what the provider's usage may lower our count to in the figures we report, as a share of "
            "`count_ratio`: a provider counting more than our tokenizer is followed at once, one counting "
            "less only gradually and down to this — and never in what we forward, which stays within the "
            "window at `count_ratio` (see *Counts the provider agrees with*)"
        ),
        at_least=0.1,
        at_most=1.0,
    )

    @property
    def summary_tokens(self) -> int:
        """``summary_max_tokens``, or what it is derived as where unset (``summary_tokens_for``)."""
        window = self.summary_context_window or self.context_window
        return self.summary_max_tokens or summary_tokens_for(window, self.summary_model == "digest")

"""``check``: a dry run of what the proxy would do to a request, with no model call.

The digest stands in for the summary model (deterministic, so the output is too); nothing is
stored or archived. Where the cut falls is read from the archive's audit of the summarized
entries: before the cut, summarized, kept verbatim from the middle (users' own words), the tail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from compact_hook.cli.count import parse
from compact_hook.cli.inputs import Loaded
from compact_hook.core.counting import item_strings
from compact_hook.core.limits import Limits
from compact_hook.core.outcomes import Removal
from compact_hook.engine.compactor import Compactor
from compact_hook.engine.result import CompactRequest, CompactResult
from compact_hook.settings.model import DIGEST, CompactConfig
from compact_hook.state.archive import Audit
from compact_hook.state.tokenizers import DEFAULT_TOKENIZER, counter_for

BAR_WIDTH = 36


class Collected:
    """An archive that keeps the audits in memory (a dry run writes nothing)."""

    def __init__(self) -> None:
        self.audits: list[Audit] = []

    async def save(
        self, session_id: str, messages: Sequence[Any], tenant: str = "", audit: Audit | None = None
    ) -> Path | None:
        if audit is not None:
            self.audits.append(audit)
        return Path("(dry run)")


@dataclass(frozen=True, slots=True)
class Checked:
    config: CompactConfig
    result: CompactResult
    counts: list[int]
    audits: list[Audit]


async def never(messages: list[Any]) -> str:  # the digest is used instead
    raise AssertionError("a dry run makes no model call")


async def dry_run(loaded: Loaded, config: CompactConfig) -> Checked:
    config = dataclasses.replace(config, summary_model=DIGEST)
    conversation = parse(loaded)
    counter = counter_for(config.tokenizer or DEFAULT_TOKENIZER)
    collected = Collected()
    request = CompactRequest(conversation, config, never, "check", archive=collected, counter=counter)
    result = await Compactor(store=None).compact(request)
    items = conversation.items()
    counts = counter.count(conversation.prints(), lambda i: item_strings(items[i]))
    return Checked(config, result, counts, collected.audits)


def report(checked: Checked, wire: str) -> RenderableType:
    return Group(_settings(checked, wire), _tiers(checked), _cut(checked))


def _settings(checked: Checked, wire: str) -> Table:
    config, result = checked.config, checked.result
    limits = Limits.of(config, None, 0)
    table = Table(title="settings", show_header=False)
    table.add_row("format", wire)
    table.add_row("tokenizer", config.tokenizer or DEFAULT_TOKENIZER)
    table.add_row("window", f"{config.context_window:,}" if config.context_window else "unknown")
    if limits is not None:
        table.add_row("clear from / compact at", f"{limits.clear:,} / {limits.compact:,} tokens")
    table.add_row("request", f"{result.input_tokens:,} tokens → {result.output_tokens:,} forwarded")
    return table


def _tiers(checked: Checked) -> Table:
    result = checked.result
    summarized = [a for a in checked.audits if a.removal is Removal.SUMMARIZED]
    table = Table(title="what each tier would do")
    table.add_column("tier")
    table.add_column("effect")
    table.add_row("1 truncate oversized tool outputs", f"{result.truncated} output(s)")
    table.add_row("2 clear old tool results", f"{result.cleared} result(s)")
    summary = (
        "nothing" if not result.compacted else f"{result.stats.compacted_message_count} entries → 1 summary"
    )
    if summarized:
        audit = summarized[-1]
        summary += (
            f" ({audit.tokens_before:,} → {audit.tokens_after:,} tokens, {audit.summarizer or 'digest'})"
        )
    table.add_row("3 summarize the middle (digest)", summary)
    table.add_row("fit to the window", f"{result.dropped} dropped")
    table.add_row("normalize tool pairing", f"{result.normalized} fix(es)")
    table.add_row("reason", result.reason.value if result.reason is not None else "-")
    return table


def _cut(checked: Checked) -> RenderableType:
    summarized = [a for a in checked.audits if a.removal is Removal.SUMMARIZED and a.entries is not None]
    counts = checked.counts
    if not summarized:
        return Text(f"no cut: {len(counts)} entries, {sum(counts):,} tokens forwarded as they are")
    first, last = summarized[-1].entries or (0, 0)
    middle = sum(counts[first : last + 1])
    gone = min(middle, summarized[-1].tokens_before)
    before = f"entries 0-{first - 1}" if first else "none"
    segments = [
        (f"before the cut ({before})", sum(counts[:first])),
        (f"summarized (within {first}-{last})", gone),
        ("kept verbatim from the middle", middle - gone),
        (f"tail (entries {last + 1}-{len(counts) - 1})", sum(counts[last + 1 :])),
    ]
    total = max(1, sum(tokens for _, tokens in segments))
    table = Table(title="where it would cut (client's entries, tokens)")
    table.add_column("segment")
    table.add_column("tokens", justify="right")
    table.add_column("bar")
    for name, tokens in segments:
        table.add_row(name, f"{tokens:,}", "█" * round(BAR_WIDTH * tokens / total))
    return table

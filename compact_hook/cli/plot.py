"""The ``replay`` plot: client vs forwarded tokens per turn (matplotlib, imported only here)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from compact_hook.cli.inputs import InputError

WIDTH_INCHES, HEIGHT_INCHES, DPI = 10.0, 5.0, 100


def plot(turns: Sequence[tuple[int, int, bool]], trigger: int | None, window: int | None, out: Path) -> None:
    """``turns``: (sent, forwarded, compaction event) per turn. PNG or SVG by the file's suffix."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InputError("plots need matplotlib: pip install 'compact_hook[cli]'") from exc
    if out.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"plot file must end in .png or .svg, not {out.suffix!r}")
    figure, axes = plt.subplots(figsize=(WIDTH_INCHES, HEIGHT_INCHES), dpi=DPI)
    numbers = list(range(1, len(turns) + 1))
    axes.plot(numbers, [sent for sent, _, _ in turns], label="client sent")
    axes.plot(numbers, [forwarded for _, forwarded, _ in turns], label="forwarded")
    events = [(n, forwarded) for n, (_, forwarded, event) in zip(numbers, turns, strict=True) if event]
    if events:
        axes.scatter(*zip(*events, strict=True), marker="v", color="red", zorder=3, label="compaction")
    if trigger:
        axes.axhline(trigger, linestyle="--", color="orange", label=f"trigger ({trigger:,})")
    if window:
        axes.axhline(window, linestyle=":", color="black", label=f"window ({window:,})")
    axes.set_xlabel("turn")
    axes.set_ylabel("tokens")
    axes.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(out, dpi=DPI)
    plt.close(figure)

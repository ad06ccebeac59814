"""``compact-hook replay`` against a real proxy: the per-turn table and the plot."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from compact_hook.cli.main import main
from tests.integration.harness import ProxyProcess, standin_deployment

pytestmark = pytest.mark.integration

TRANSCRIPT = (
    Path(__file__).resolve().parents[1]
    / "data"
    / "transcripts"
    / "openai"
    / "claude_code_fa812bfe_pre_compact.json"
)


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_replay_prints_each_turn_and_plots_sent_against_forwarded(
    standin: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    compact = {"context_window": 12_000, "archive_dir": str(tmp_path / "archive"), "retry_backoff_seconds": 0}
    config = {
        "model_list": [standin_deployment("agent", standin.url, "standin-agent", compact=compact)],
        "litellm_settings": {"callbacks": "compact_hook.proxy_handler_instance"},
    }
    plot = tmp_path / "replay.png"
    with ProxyProcess(config) as proxy:
        argv = [
            "replay",
            str(TRANSCRIPT),
            "--proxy",
            proxy.url,
            "--model",
            "agent",
            "--key",
            proxy.master_key,
        ]
        argv += ["--turns", "40", "--plot", str(plot), "--config", str(proxy.config_path)]
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert "40 turns" in out and ("prepared" in out or "miss" in out) and "hit" in out, out
    events = int(out.split(" compaction event(s)")[0].split()[-1])
    assert events >= 1 and "plot:" in out
    assert png_size(plot) == (1000, 500) and plot.stat().st_size > 10_000

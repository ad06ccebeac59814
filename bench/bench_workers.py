"""Several worker processes of one proxy, no Redis: the in-process store against the file store.

    .venv/bin/python bench/bench_workers.py [--stores memory,file] [--workers 1,2,4,2r]

One proxy (``litellm --num_workers N``; ``2r``: two workers recycled every 6 requests with
``--max_requests_before_restart``), no Redis, a compacting chat group (window 20,000, the README's
defaults otherwise), a Claude Code session replayed turn by turn — 30 requests across its ~104K
tokens — each on a connection of its own, so the kernel hands each to any worker
(``tests/integration/stateful.py``: ``replay_apart``). Per setup: summary calls, different
summaries forwarded, and requests whose summary differs from the previous request's (the first
summary counts: one worker's changes are its compactions). Writes ``bench/results/workers.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.harness import ProxyProcess, StandinUpstream  # noqa: E402
from tests.integration.stateful import WORKERS_POINTS, replay_apart, workers_config  # noqa: E402

RECYCLED = "2r"


def arguments(workers: str) -> tuple[str, ...]:
    count = "2" if workers == RECYCLED else workers
    recycle = ("--max_requests_before_restart", "6") if workers == RECYCLED else ()
    return ("--num_workers", count, *recycle, "--timeout_worker_healthcheck", "120")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stores", default="memory,file")
    parser.add_argument("--workers", default=f"1,2,4,{RECYCLED}")
    options = parser.parse_args()
    rows = []
    with StandinUpstream() as standin:
        for store in options.stores.split(","):
            for workers in options.workers.split(","):
                started = time.monotonic()
                env = {"COMPACT_STORE": store}
                proxy = ProxyProcess(
                    workers_config(standin), env=env, args=arguments(workers), fork=False, startup_timeout=300
                )
                with proxy:
                    trail = replay_apart(standin, proxy)
                label = "2, recycled every 6 requests" if workers == RECYCLED else workers
                changes = f"{trail.changes} of {len(WORKERS_POINTS)}"
                row = f"| {store} | {label} | {trail.summary_calls} | {trail.distinct} | {changes} |"
                print(row, f"({time.monotonic() - started:.0f} s)", flush=True)
                rows.append(row)
    table = "\n".join(
        [
            "| store | `--num_workers` | summary calls | different summaries forwarded "
            "| requests whose summary differs from the previous request's |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    (ROOT / "bench" / "results" / "workers.md").write_text(
        "# Several workers, no Redis: `.venv/bin/python bench/bench_workers.py`\n\n" + table + "\n"
    )
    print(table)


if __name__ == "__main__":
    main()

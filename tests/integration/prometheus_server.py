"""A real Prometheus (Debian's ``prometheus`` package) on a free port, scraping the targets a test
names every second and evaluating the rule files it is given every second; its HTTP API read back."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from tests.integration.harness import free_port

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "compact_hook.rules.yml"
"""The alert rules we ship."""
EVALUATION_SECONDS = 1
INTERVAL = f"{EVALUATION_SECONDS}s"  # scrapes and rule evaluations


class PrometheusServer:
    """``prometheus`` with its own config and storage folder; a context manager, so a test owns it."""

    def __init__(self, targets: list[str], rule_files: list[Path]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="prometheus-")
        self._config = {
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [{"job_name": "compact_hook", "static_configs": [{"targets": targets}]}],
        }
        self._proc: subprocess.Popen[bytes] | None = None
        self.log = Path(self._dir.name) / "prometheus.log"

    def __enter__(self) -> Self:
        executable = shutil.which("prometheus")
        if executable is None:
            raise RuntimeError("prometheus is not installed (make system-deps: apt-get install prometheus)")
        config = Path(self._dir.name) / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config))
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(
                [
                    executable,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self._dir.name}/data",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.wait_for(lambda: self._get("/-/ready", raw=True) == "ready", "ready", timeout=30)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=20)
        self._dir.cleanup()

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (``/api/v1/query``)."""
        found: list[dict[str, Any]] = self._get(f"/api/v1/query?query={urllib.parse.quote(expr)}")["result"]
        return found

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts pending or firing now, with their rule group (``/api/v1/rules``)."""
        active = []
        for group in self.rule_groups():
            for rule in group["rules"]:
                active += [{**alert, "group": group["name"]} for alert in rule.get("alerts", [])]
        return active

    def rule_groups(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = self._get("/api/v1/rules")["groups"]
        return groups

    def targets_up(self) -> int:
        return sum(t["health"] == "up" for t in self._get("/api/v1/targets")["activeTargets"])

    def wait_for(self, done: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self._attempt(done):
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus: not {what} after {timeout:.0f} s")
            time.sleep(0.25)

    @staticmethod
    def _attempt(done: Callable[[], bool]) -> bool:
        try:
            return done()
        except OSError:  # not listening yet
            return False

    def _get(self, path: str, raw: bool = False) -> Any:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url + path, timeout=10) as response:
            text = response.read().decode()
        if raw:
            return text.strip().lower().removeprefix("prometheus server is ").removesuffix(".")
        body = json.loads(text)
        assert body["status"] == "success", body
        return body["data"]

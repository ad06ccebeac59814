"""llama.cpp's own server (``tools/llama_server.py``) for the tests: started on a free port, stopped
when done (its stdin closes with the test process, should the test die first)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from types import TracebackType

from tests.integration.harness import REPO_ROOT, free_port

START_SECONDS = 60.0
"""How long loading the model may take before the test gives up (a wait, not a goal)."""


class LlamaServer:
    """``with LlamaServer(ctx=4096) as server:`` — ``server.url`` ends in ``/v1``; ``server.root_url`` not."""

    def __init__(self, ctx: int = 4096, parallel: int = 1) -> None:
        self.port = free_port()
        self.root_url = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.root_url}/v1"
        self._command = [
            sys.executable,
            str(REPO_ROOT / "tools" / "llama_server.py"),
            *("--port", str(self.port), "--ctx", str(ctx), "--parallel", str(parallel)),
            "--until-stdin-closes",
        ]
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LlamaServer:
        self._process = subprocess.Popen(
            self._command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_SECONDS
        while not self._healthy():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"llama.cpp's server did not start: {' '.join(self._command)}")
            time.sleep(0.1)
        return self

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.root_url}/health", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

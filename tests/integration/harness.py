"""Helpers for end-to-end tests: a real ``litellm`` proxy subprocess and the stand-in upstream.

The proxy runs as a separate process (exactly what users deploy), so tests exercise config loading, callback
import and the HTTP stack for real. Its output goes to a file, not a pipe, so a chatty proxy can never block
on a full pipe buffer and the whole log is still available when something goes wrong.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import IO, Any

import yaml

from tests.integration.launcher import EXEC_PROXIES, Forked, launcher

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDIN_PATH = REPO_ROOT / "tools" / "standin_upstream.py"
DEFAULT_MASTER_KEY = "sk-compact-hook-integration-master-key-0123456789abcdef"
STARTUP_TIMEOUT = 90.0
STOP_GRACE = 10.0
LOG_TAIL_CHARS = 4000
# Ambient settings that would connect a test proxy to shared infrastructure; pass them via ``env`` instead.
HERMETIC_UNSET = ("DATABASE_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_URL", "REDIS_PASSWORD", "LITELLM_CONFIG")


def load_tool(name: str) -> ModuleType:
    """Import ``tools/<name>.py`` by path: ``tools`` is a script folder, not a package."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered before exec so dataclass/typing lookups by module name work
    spec.loader.exec_module(module)
    return module


standin_upstream = load_tool("standin_upstream")
StandinUpstream = standin_upstream.StandinUpstream
SUMMARY_MARKER: str = standin_upstream.SUMMARY_MARKER


PORTS_PER_WORKER = 1500
_next_port = itertools.count(random.randrange(PORTS_PER_WORKER))


def free_port() -> int:
    """A free port from this test worker's own range, below the kernel's ephemeral ports.

    A proxy binds its port seconds after we choose it. Asked of the kernel (``bind(0)``), the
    same number could meanwhile go to another worker's proxy or to any outgoing connection; a
    proxy that then fails to bind looks live (the other one answers) and vanishes later. Each
    xdist worker draws from its own 1,500 ports here instead, each checked free when drawn.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = 20_000 + (int(worker) % 8 if worker.isdigit() else 0) * PORTS_PER_WORKER
    for _ in range(PORTS_PER_WORKER):
        port = base + next(_next_port) % PORTS_PER_WORKER
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {base}..{base + PORTS_PER_WORKER - 1}")


def shared_environment() -> dict[str, str]:
    """What every test proxy's environment holds: ours minus shared infrastructure, plus test defaults."""
    env = {k: v for k, v in os.environ.items() if k not in HERMETIC_UNSET}
    # as a user's proxy, the bytecode it compiles is kept: LiteLLM tries a failing import again on every
    # request, and without it compiles that module each time (~4 ms a request, benches included)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no remote cost-map fetch: no internet, faster start
            "PYTHONUNBUFFERED": "1",  # log_text() sees output as it is printed
            "PYTHONFAULTHANDLER": "1",  # a crash in native code leaves its stacks in the log (exec'd proxies)
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            # the checkout's compact_hook wins over any installed copy, and works when none is installed
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
    )
    return env


def litellm_executable() -> Path:
    """The ``litellm`` CLI beside the running interpreter, so the proxy sees the same packages."""
    path = Path(sys.executable).parent / "litellm"
    if not path.exists():
        raise FileNotFoundError(f"litellm executable not found beside {sys.executable}")
    return path


def standin_deployment(
    model_name: str, upstream_url: str, model: str = "standin", **model_info: Any
) -> dict[str, Any]:
    """A ``model_list`` entry routing ``model_name`` to the stand-in; ``model`` picks its behaviour.

    An ``openai/`` deployment with ``api_base`` ``upstream_url`` (``StandinUpstream.url``, ending in ``/v1``):
    chat completions go to ``{api_base}/chat/completions``, Responses calls to ``{api_base}/responses``.
    """
    entry: dict[str, Any] = {
        "model_name": model_name,
        "litellm_params": {"model": f"openai/{model}", "api_base": upstream_url, "api_key": "none"},
    }
    if model_info:
        entry["model_info"] = model_info
    return entry


def anthropic_deployment(
    model_name: str, upstream_root_url: str, model: str = "standin", **model_info: Any
) -> dict[str, Any]:
    """A ``model_list`` entry routing ``model_name`` to the stand-in's Anthropic Messages endpoint.

    ``upstream_root_url`` is ``http://host:port`` (``StandinUpstream.root_url``): litellm appends
    ``/v1/messages`` itself, so a trailing ``/v1`` is dropped rather than doubled.
    """
    api_base = upstream_root_url.rstrip("/").removesuffix("/v1")
    entry: dict[str, Any] = {
        "model_name": model_name,
        "litellm_params": {"model": f"anthropic/{model}", "api_base": api_base, "api_key": "none"},
    }
    if model_info:
        entry["model_info"] = model_info
    return entry


def gemini_deployment(
    model_name: str, upstream_root_url: str, model: str = "gemini-2.5-standin", **model_info: Any
) -> dict[str, Any]:
    """A ``model_list`` entry routing ``model_name`` to the stand-in's Google ``generateContent``.

    A ``gemini/`` deployment with ``api_base`` ``http://host:port`` (``StandinUpstream.root_url``):
    LiteLLM posts to ``{api_base}/models/<model>:generateContent`` (``:streamGenerateContent?alt=sse``),
    for Gemini 2.x and 3 names alike (its ``v1beta`` / ``v1alpha`` are for Google's own host only).
    ``model_info`` as for the other deployments (``compact=...``, ``max_input_tokens=...``).
    """
    entry: dict[str, Any] = {
        "model_name": model_name,
        "litellm_params": {
            "model": f"gemini/{model}",
            "api_base": upstream_root_url.rstrip("/"),
            "api_key": "none",
        },
    }
    if model_info:
        entry["model_info"] = model_info
    return entry


def compact_info(archive: Path, *layers: Mapping[str, Any], **settings: Any) -> dict[str, Any]:
    """The ``model_info`` that turns compaction on, for the ``*_deployment`` helpers (``**compact_info(...)``):
    archived under ``archive``, a failed summary call retried at once, then each of ``layers`` and
    ``settings`` over what comes before."""
    compact: dict[str, Any] = {"archive_dir": str(archive), "retry_backoff_seconds": 0}
    for layer in layers:
        compact.update(layer)
    return {"compact": {**compact, **settings}}


def _tail(text: str, limit: int = LOG_TAIL_CHARS) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _liveliness_ok(url: str) -> bool:
    """True once the proxy answers ``/health/liveliness`` with 200 (env HTTP proxies ignored)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/health/liveliness", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


class ProxyDied(AssertionError):
    """A proxy ended before the test stopped it: the tests that used it saw only refused connections,
    so its exit (a signal's name when it crashed) and the end of its log are said here."""

    def __init__(self, proxy: ProxyProcess) -> None:
        code = proxy.died or 0
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        said = f"the proxy on port {proxy.port} {how}"  # first and last: a report may keep either end only
        super().__init__(f"{said}; its log ends:\n{proxy.log_text()[-3000:]}\n({said})")


class ProxyProcess:
    """A real ``litellm --config`` proxy on 127.0.0.1: started on enter, SIGTERM (then SIGKILL) on exit."""

    def __init__(
        self,
        config: dict[str, Any],
        *,
        port: int | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
        fork: bool = not EXEC_PROXIES,
        args: Sequence[str] = (),
    ) -> None:
        self.config = config
        self.args = tuple(args)
        """More of the ``litellm`` command's options (``--num_workers 2``)."""
        self.fork = fork
        """Forked from the launcher that imported LiteLLM once (see ``launcher``), else exec'd."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = dict(env or {})
        self.master_key = self.extra_env.get("LITELLM_MASTER_KEY", DEFAULT_MASTER_KEY)
        self.startup_timeout = startup_timeout
        self.startup_seconds: float | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="litellm-proxy-")
        self.config_path = Path(self._tmp.name) / "config.yaml"
        self.log_path = log_path or Path(self._tmp.name) / "proxy.log"
        self._proc: subprocess.Popen[bytes] | Forked | None = None
        self._log_file: IO[bytes] | None = None
        self._final_log: str | None = None
        self.died: int | None = None
        """The exit code of a proxy that had ended before it was stopped (negative: the signal's)."""

    # -- public API ----------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """What the ``openai`` client wants as ``base_url``."""
        return f"{self.url}/v1"

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.master_key}"}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def log_text(self) -> str:
        """Everything the proxy printed so far (stdout and stderr interleaved); still readable after exit."""
        if self._final_log is not None:
            return self._final_log
        try:
            return self.log_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def start(self) -> ProxyProcess:
        """Launch and wait for liveliness; on failure stop the process and put the log tail in the error."""
        self._launch()
        started = time.monotonic()
        try:
            self._wait_until_live()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Terminate gracefully (lets the proxy run its shutdown hooks), kill if it hangs, keep the log."""
        if self._proc is not None:
            self.died = self._proc.poll()
            self._signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self._proc.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._final_log is None:
            self._final_log = self.log_text()
        self._tmp.cleanup()

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if self.died is not None and exc_type is None:
            raise ProxyDied(self)

    # -- internals -----------------------------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        """Inherited env minus shared infrastructure, plus test-proxy defaults, plus the caller's env."""
        env = shared_environment()
        env["LITELLM_MASTER_KEY"] = self.master_key
        # the file store in the proxy's own folder: no other proxy (test) shares it unless told to
        env["COMPACT_STORE_DIR"] = str(Path(self._tmp.name) / "store")
        env.update(self.extra_env)
        return env

    def _command(self) -> list[str]:
        return [
            str(litellm_executable()),
            "--config",
            str(self.config_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.args,
        ]

    def _launch(self) -> None:
        """Write the config and start the process in its own session so signals reach only it."""
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.fork:  # from a process that imported LiteLLM once (see launcher)
            self.log_path.write_bytes(b"")
            self._proc = launcher(shared_environment()).launch(
                self._command(), self._environment(), self._tmp.name, self.log_path
            )
            return
        self._log_file = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self._environment(),
            cwd=self._tmp.name,
            start_new_session=True,
        )

    def _exited(self) -> bool:
        return self._proc is not None and self._proc.poll() is not None

    def _wait_until_live(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._exited():
                assert self._proc is not None
                raise RuntimeError(
                    f"litellm proxy exited with code {self._proc.returncode} before becoming live; "
                    f"log tail:\n{_tail(self.log_text())}"
                )
            if _liveliness_ok(self.url):
                return
            time.sleep(0.1)
        raise TimeoutError(
            f"litellm proxy not live after {self.startup_timeout:.0f} s; log tail:\n{_tail(self.log_text())}"
        )

    def _signal(self, sig: signal.Signals) -> None:
        """Signal the proxy's process group (the proxy and any workers it forked), if it is still there."""
        assert self._proc is not None
        if self._proc.poll() is not None:
            return
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass


def proxy_start_failure(
    config: dict[str, Any], env: dict[str, str] | None = None, timeout: float = 90
) -> str:
    """Start a proxy that must refuse to start; return its output once it exits.

    Raises AssertionError if it becomes live instead, TimeoutError if it neither exits nor becomes live.
    """
    proxy = ProxyProcess(config, env=env)
    proxy._launch()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proxy._exited():
                return proxy.log_text()
            if _liveliness_ok(proxy.url):
                raise AssertionError(f"proxy started although it should not have:\n{_tail(proxy.log_text())}")
            time.sleep(0.1)
        raise TimeoutError(f"proxy neither failed nor started in {timeout:.0f} s:\n{_tail(proxy.log_text())}")
    finally:
        proxy.stop()

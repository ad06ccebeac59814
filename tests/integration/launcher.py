"""Real LiteLLM proxies without paying LiteLLM's import for each: a launcher process forks them.

Importing ``litellm.proxy.proxy_server`` takes 11-15 s of CPU on the CI machine, and the suite
starts dozens of proxies: a third of its CPU went to importing the same modules again. The
launcher (this file run as a script, one per test worker) imports them once; each proxy is a fork
of it that runs the ``litellm`` command's own entry point (``run_server``) with the proxy's argv,
environment, working folder and log file — what ``litellm --config …`` does after its imports.
Nothing LiteLLM reads at import time differs between our proxies (the launcher starts with the
environment they share; what a test sets, ``COMPACT_*``, ``REDIS_*``, is read at start-up, after
the fork). ``COMPACT_TEST_EXEC_PROXIES=1`` starts every proxy with ``exec`` instead.

The launcher stays single-threaded (a fork copies only the calling thread, so no lock can be
held in the child): it answers one line of JSON per launch with the child's pid, and reports
each child's exit status when it reaps it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

EXEC_PROXIES = os.environ.get("COMPACT_TEST_EXEC_PROXIES") == "1"


class Forked:
    """A proxy the launcher forked: the part of ``subprocess.Popen`` the harness uses."""

    def __init__(self, launcher: Launcher, pid: int) -> None:
        self._launcher = launcher
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._launcher.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"proxy {self.pid}", timeout or 0)
        self.returncode = code
        return code


class Launcher:
    """The harness's side: starts the launcher once, sends it launches, collects exit codes."""

    def __init__(self, env: dict[str, str]) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        self._pids: list[int] = []
        self._exits: dict[int, int] = {}
        self._changed = threading.Condition()
        self._send = threading.Lock()
        threading.Thread(target=self._read, name="proxy-launcher", daemon=True).start()

    def launch(self, argv: list[str], env: dict[str, str], cwd: str, log: Path) -> Forked:
        request = {"argv": argv, "env": env, "cwd": cwd, "log": str(log)}
        with self._send, self._changed:
            assert self._proc.stdin is not None
            known = len(self._pids)
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            if not self._changed.wait_for(lambda: len(self._pids) > known or self._closed(), timeout=60):
                raise RuntimeError("the proxy launcher did not answer within 60 s")
            if len(self._pids) == known:
                raise RuntimeError(f"the proxy launcher exited with code {self._proc.returncode}")
            return Forked(self, self._pids[known])

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits, timeout=timeout)
            return self._exits.get(pid)

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def _closed(self) -> bool:
        return self._proc.poll() is not None

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            message = json.loads(line)
            with self._changed:
                if "pid" in message:
                    # pids are reused (pid_max is 32,768 here): an earlier child's exit is not this one's
                    self._exits.pop(message["pid"], None)
                    self._pids.append(message["pid"])
                else:
                    self._exits[message["exited"]] = message["code"]
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()


_launcher: Launcher | None = None
_launcher_lock = threading.Lock()


def launcher(env: dict[str, str]) -> Launcher:
    """This test worker's launcher, started on first use with the environment proxies share."""
    global _launcher
    with _launcher_lock:
        if _launcher is None or _launcher._closed():
            _launcher = Launcher(env)
        return _launcher


# -- the launcher process ---------------------------------------------------------------------------


def _serve() -> None:
    from litellm.proxy import proxy_server  # noqa: F401  the import every proxy would pay
    from litellm.proxy.proxy_cli import run_server

    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0.1)
        _reap(children)
        if not ready:
            continue
        line = sys.stdin.readline()
        if not line:
            return
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_child(run_server, request)
        children.add(pid)
        _reply({"pid": pid})


def _run_child(run_server: Any, request: dict[str, Any]) -> None:
    """In the fork: become the proxy (own session, log, folder, environment, argv), never return."""
    code = 1
    try:
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        sys.stdin = open(os.devnull)  # noqa: SIM115  the child's own; never closed before exit
        faulthandler.enable()  # a crash in native code (tokenizers, uvloop) leaves its stacks in the log
        run_server.main(args=sys.argv[1:], prog_name="litellm", standalone_mode=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reap(children: set[int]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            _reply({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _reply(message: dict[str, Any], out: IO[str] | None = None) -> None:
    stream = out or sys.stdout
    stream.write(json.dumps(message) + "\n")
    stream.flush()


if __name__ == "__main__":
    _serve()

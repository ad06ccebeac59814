"""A real ``redis-server`` on a free port, owned by the test that starts it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType

from tests.integration.harness import free_port


class RedisServer:
    """``redis-server`` without persistence; ``stop()``/``start()`` can be called mid-test."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="redis-")
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RuntimeError(
                "redis-server is not installed (make test installs it: apt-get install redis-server)"
            )
        self._proc = subprocess.Popen(
            [executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self._dir.name,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not self._answers_ping():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        self._proc = None

    def flush(self) -> None:
        """Forget every key."""
        _redis_cli("-p", str(self.port), "flushall")

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self._dir.cleanup()


def _redis_cli(*args: str) -> str:
    executable = shutil.which("redis-cli")
    if executable is None:
        raise RuntimeError("redis-cli is not installed (it comes with redis-server's Debian package)")
    done = subprocess.run([executable, *args], capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


class _Node:
    """One ``redis-server`` process with extra arguments, restartable with its own folder."""

    def __init__(self, folder: str, port: int, *extra: str) -> None:
        self.port = port
        self.folder = folder
        self.extra = extra
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RuntimeError("redis-server is not installed (make test installs it)")
        self._proc = subprocess.Popen(
            [executable, *self.extra, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""],
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while "PONG" not in _redis_cli("-p", str(self.port), "ping"):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        self._proc = None


class RedisClusterServer:
    """A real Redis Cluster: ``masters`` nodes (no replicas) on free ports, every slot assigned.

    ``url`` names it for ``COMPACT_REDIS_URL`` (``redis+cluster://``); ``startup_nodes`` for
    LiteLLM's own settings. ``stop_node``/``start_node`` restart one master in place: it rejoins
    with its slots (its ``nodes.conf`` kept), with its data when ``persistent`` (an append-only
    file synced on every write), else empty."""

    def __init__(self, masters: int = 3, persistent: bool = False) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="redis-cluster-")
        self.nodes: list[_Node] = []
        kept = ("--appendonly", "yes", "--appendfsync", "always") if persistent else ("--appendonly", "no")
        for number in range(masters):
            folder = f"{self._dir.name}/{number}"
            os.makedirs(folder)
            port, bus = free_port(), free_port()
            cluster = (
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                str(bus),
                "--cluster-node-timeout",
                "2000",
            )
            self.nodes.append(_Node(folder, port, *cluster, *kept))

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def startup_nodes(self) -> list[dict[str, object]]:
        return [{"host": "127.0.0.1", "port": node.port} for node in self.nodes]

    def start(self) -> RedisClusterServer:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        output = _redis_cli("--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes")
        self.wait_ok(output)
        return self

    def wait_ok(self, context: str = "") -> None:
        """Until every node says the cluster is up (all slots served)."""
        deadline = time.monotonic() + 30
        while not all(
            "cluster_state:ok" in _redis_cli("-p", str(node.port), "cluster", "info") for node in self.nodes
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not come up: {context[-500:]}")
            time.sleep(0.1)

    def flush(self) -> None:
        """Forget every key (each test starts from an empty cluster)."""
        for node in self.nodes:
            _redis_cli("-p", str(node.port), "flushall")

    def stop_node(self, number: int) -> None:
        self.nodes[number].stop()

    def start_node(self, number: int) -> None:
        self.nodes[number].start()
        self.wait_ok()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisClusterServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self._dir.cleanup()


class RedisSentinelServer:
    """A master and its replica, watched by two sentinels (quorum 1) under ``SERVICE``.

    ``url`` names it for ``COMPACT_REDIS_URL`` (``redis+sentinel://``); ``sentinel_nodes`` and
    ``SERVICE`` for LiteLLM's own settings."""

    SERVICE = "compactmaster"

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="redis-sentinel-")
        master, replica = free_port(), free_port()
        self.master = _Node(self._folder("master"), master, "--appendonly", "no")
        self.replica = _Node(
            self._folder("replica"), replica, "--appendonly", "no", "--replicaof", "127.0.0.1", str(master)
        )
        self.sentinels = []
        for number in range(2):
            folder = self._folder(f"sentinel{number}")
            config = f"{folder}/sentinel.conf"
            with open(config, "w") as file:
                file.write(
                    f"sentinel monitor {self.SERVICE} 127.0.0.1 {master} 1\n"
                    f"sentinel down-after-milliseconds {self.SERVICE} 2000\n"
                    f"sentinel failover-timeout {self.SERVICE} 5000\n"
                )
            self.sentinels.append(_Node(folder, free_port(), config, "--sentinel"))

    def _folder(self, name: str) -> str:
        folder = f"{self._dir.name}/{name}"
        os.makedirs(folder)
        return folder

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.SERVICE}"

    @property
    def sentinel_nodes(self) -> list[list[object]]:
        return [["127.0.0.1", node.port] for node in self.sentinels]

    def start(self) -> RedisSentinelServer:
        self.master.start()
        self.replica.start()
        for node in self.sentinels:
            node.start()
        deadline = time.monotonic() + 20
        query = ("sentinel", "get-master-addr-by-name", self.SERVICE)
        while str(self.master.port) not in _redis_cli("-p", str(self.sentinels[0].port), *query):
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinels did not find the master")
            time.sleep(0.1)
        return self

    def flush(self) -> None:
        """Forget every key (each test starts from an empty master)."""
        _redis_cli("-p", str(self.master.port), "flushall")

    def stop(self) -> None:
        for node in [*self.sentinels, self.replica, self.master]:
            node.stop()

    def __enter__(self) -> RedisSentinelServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self._dir.cleanup()

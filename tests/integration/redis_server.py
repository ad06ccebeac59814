"""A real ``redis-server`` on a free port, owned by the test that starts it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from types import TracebackType
from typing import Self

from tests.integration.harness import free_port


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
            raise RuntimeError(
                "redis-server is not installed (make test installs it: apt-get install redis-server)"
            )
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

    def kill(self) -> None:
        """Gone at once, as a crashed host: no shutdown, no goodbye to its replicas or sentinels."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)


class _Servers:
    """Redis processes in one temporary folder, started in order and stopped in reverse; a
    context manager, so a test owns them."""

    def __init__(self, prefix: str) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix=prefix)
        self.nodes: list[_Node] = []

    def _node(self, name: str, port: int, *extra: str) -> _Node:
        folder = self._folder(name)
        os.makedirs(folder)
        self.nodes.append(_Node(folder, port, *extra))
        return self.nodes[-1]

    def _folder(self, name: str) -> str:
        return f"{self._dir.name}/{name}"

    def start(self) -> Self:
        for node in self.nodes:
            node.start()
        self._ready()
        return self

    def _ready(self) -> None:
        """Wait until the servers work together (nothing to wait for when there is one)."""

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self._dir.cleanup()


class RedisServer(_Servers):
    """``redis-server`` without persistence; ``stop()``/``start()`` can be called mid-test."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__("redis-")
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._node("server", self.port, "--appendonly", "no")

    def flush(self) -> None:
        """Forget every key."""
        _redis_cli("-p", str(self.port), "flushall")


class RedisClusterServer(_Servers):
    """A real Redis Cluster: ``masters`` nodes (no replicas) on free ports, every slot assigned.

    ``url`` names it for ``COMPACT_REDIS_URL`` (``redis+cluster://``); ``startup_nodes`` for
    LiteLLM's own settings. ``stop_node``/``start_node`` restart one master in place: it rejoins
    with its slots (its ``nodes.conf`` kept), with its data when ``persistent`` (an append-only
    file synced on every write), else empty."""

    def __init__(self, masters: int = 3, persistent: bool = False) -> None:
        super().__init__("redis-cluster-")
        kept = ("--appendonly", "yes", "--appendfsync", "always") if persistent else ("--appendonly", "no")
        for number in range(masters):
            bus = ("--cluster-port", str(free_port()), "--cluster-node-timeout", "2000")
            self._node(str(number), free_port(), "--cluster-enabled", "yes", *bus, *kept)

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def startup_nodes(self) -> list[dict[str, object]]:
        return [{"host": "127.0.0.1", "port": node.port} for node in self.nodes]

    def _ready(self) -> None:
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        output = _redis_cli("--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes")
        self.wait_ok(output)

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


class RedisSentinelServer(_Servers):
    """A master and its replica, watched by two sentinels (quorum 1) under ``SERVICE``.

    ``url`` names it for ``COMPACT_REDIS_URL`` (``redis+sentinel://``); ``sentinel_nodes`` and
    ``SERVICE`` for LiteLLM's own settings."""

    SERVICE = "compactmaster"

    def __init__(self) -> None:
        super().__init__("redis-sentinel-")
        # Redis waits 5 s before a replica's first (diskless) sync, to batch replicas; a test that
        # writes at once and WAITs for the replica raced that against the client's 5 s read timeout
        no_delay = ("--repl-diskless-sync-delay", "0")
        self.master = self._node("master", free_port(), "--appendonly", "no", *no_delay)
        replica_of = ("--replicaof", "127.0.0.1", str(self.master.port))
        self.replica = self._node("replica", free_port(), "--appendonly", "no", *replica_of)
        self.sentinels = [self._sentinel(f"sentinel{number}") for number in range(2)]

    def _sentinel(self, name: str) -> _Node:
        config = f"{self._folder(name)}/sentinel.conf"
        node = self._node(name, free_port(), config, "--sentinel")
        with open(config, "w") as file:
            file.write(
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.master.port} 1\n"
                f"sentinel down-after-milliseconds {self.SERVICE} 2000\n"
                f"sentinel failover-timeout {self.SERVICE} 5000\n"
            )
        return node

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.SERVICE}"

    @property
    def sentinel_nodes(self) -> list[list[object]]:
        return [["127.0.0.1", node.port] for node in self.sentinels]

    def _ready(self) -> None:
        deadline = time.monotonic() + 20
        query = ("sentinel", "get-master-addr-by-name", self.SERVICE)
        while str(self.master.port) not in _redis_cli("-p", str(self.sentinels[0].port), *query):
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinels did not find the master")
            time.sleep(0.1)
        while "master_link_status:up" not in _redis_cli("-p", str(self.replica.port), "info", "replication"):
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not sync with the master")
            time.sleep(0.05)

    def flush(self) -> None:
        """Forget every key (each test starts from an empty master)."""
        _redis_cli("-p", str(self.master.port), "flushall")

    def master_port(self) -> int | None:
        """The master the first sentinel names now (None while it names none)."""
        said = _redis_cli(
            "-p", str(self.sentinels[0].port), "sentinel", "get-master-addr-by-name", self.SERVICE
        )
        ports = [int(line) for line in said.split() if line.isdigit()]
        return ports[0] if ports else None

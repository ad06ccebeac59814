"""The Redis a process shares its state through: one server, a Cluster, or a Sentinel-managed master.

``COMPACT_REDIS_URL`` names one with the URL forms redis-py and its users know — ``redis://`` and
``rediss://`` for one server, ``redis+cluster://`` (``rediss+cluster://``) for a cluster, given one or
more of its nodes, ``redis+sentinel://`` (``rediss+sentinel://``) for a master behind sentinels:

    redis://[user:password@]host:6379/0
    redis+cluster://[user:password@]host:7000[,host:7001...]
    redis+sentinel://[user:password@]host:26379[,host:26380...]/service-name[/db]

Unset, LiteLLM's own client is used (``REDIS_HOST``/``REDIS_PORT``, ``cache_params`` with
``redis_startup_nodes`` or ``sentinel_nodes``, ``general_settings.coordination_redis``); its topology
is read off the client. Either way the store says at start-up which it uses.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}
"""The cluster URL schemes, and whether they use TLS."""
SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
SCHEMES = frozenset({"redis", "rediss", "unix", *CLUSTER_SCHEMES, *SENTINEL_SCHEMES})


@dataclass(frozen=True, slots=True)
class SharedRedis:
    """A client, how its Redis is laid out, where it was configured, and where it points (no
    credentials: it is logged)."""

    client: Any
    topology: Topology
    source: str
    where: str


class Topology(enum.StrEnum):
    """How the shared Redis is laid out (the store's start-up line, the
    ``compact_hook_store_redis`` metric)."""

    SINGLE = "single"
    CLUSTER = "cluster"
    SENTINEL = "sentinel"


def check_url(name: str, url: str | None) -> None:
    """A URL ``from_url`` can open, or a ``ValueError`` naming the setting and the form it wants:
    said at start-up rather than on the first request."""
    if url is None:
        return
    parts = urlsplit(url)
    try:
        if parts.scheme not in SCHEMES:
            schemes = ", ".join(f"{scheme}://" for scheme in sorted(SCHEMES))
            raise ValueError(f"the scheme must be one of {schemes}, got {url.split(':', 1)[0]!r}")
        if parts.scheme != "unix":
            _host_ports(_hosts(parts.netloc), 0)
        if parts.scheme in SENTINEL_SCHEMES:
            _service_and_db(parts.path)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def from_url(url: str) -> SharedRedis:
    """The client a ``COMPACT_REDIS_URL`` names (see the module docstring)."""
    parts = urlsplit(url)
    if parts.scheme in CLUSTER_SCHEMES:
        return _cluster(parts.scheme, parts.netloc)
    if parts.scheme in SENTINEL_SCHEMES:
        return _sentinel(parts.scheme, parts.netloc, parts.path)
    import redis.asyncio

    return SharedRedis(
        redis.asyncio.from_url(url), Topology.SINGLE, "COMPACT_REDIS_URL", _hosts(parts.netloc)
    )


def of_litellm(client: Any) -> SharedRedis:
    """LiteLLM's own async client, its layout read off its type."""
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.sentinel import SentinelConnectionPool

    source = "LiteLLM's Redis settings"
    if isinstance(client, RedisCluster):
        nodes = getattr(client.nodes_manager, "startup_nodes", {}) or {}
        return SharedRedis(client, Topology.CLUSTER, source, ",".join(sorted(nodes)))
    pool = getattr(client, "connection_pool", None)
    if isinstance(pool, SentinelConnectionPool):
        return SharedRedis(client, Topology.SENTINEL, source, f"service {pool.service_name}")
    kwargs = getattr(pool, "connection_kwargs", {}) or {}
    where = f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return SharedRedis(client, Topology.SINGLE, source, where)


class SentinelWatch:
    """Where a Sentinel-managed client last found its master, and where the sentinels say it is
    now: a store that set Redis aside asks, and comes back as soon as they name another master,
    rather than waiting out its rest on a replica that is gone (``TieredStore``)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def used(self) -> str | None:
        """The master the client last resolved (None: it never did)."""
        return _address(self._pool.master_address)

    async def named(self) -> str | None:
        """The master the sentinels name now (None while they name none: the old one is down and no
        replica promoted yet)."""
        from redis.asyncio.sentinel import MasterNotFoundError

        try:
            found = await self._pool.sentinel_manager.discover_master(self._pool.service_name)
        except MasterNotFoundError:
            return None
        return _address(found)


def sentinel_watch(shared: SharedRedis) -> SentinelWatch | None:
    """A watch on a Sentinel-managed client's master (None for one server or a cluster)."""
    from redis.asyncio.sentinel import SentinelConnectionPool

    pool = getattr(shared.client, "connection_pool", None)
    return SentinelWatch(pool) if isinstance(pool, SentinelConnectionPool) else None


def _address(found: Any) -> str | None:
    if not found:
        return None
    host, port = found
    return f"{host}:{port}"


def _cluster(scheme: str, netloc: str) -> SharedRedis:
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    credentials, hosts = _split_credentials(netloc)
    nodes = [ClusterNode(host, port) for host, port in _host_ports(hosts, 6379)]
    client = RedisCluster(
        startup_nodes=nodes,
        ssl=CLUSTER_SCHEMES[scheme],
        username=credentials.get("username"),
        password=credentials.get("password"),
    )
    return SharedRedis(client, Topology.CLUSTER, "COMPACT_REDIS_URL", hosts)


def _sentinel(scheme: str, netloc: str, path: str) -> SharedRedis:
    from redis.asyncio.sentinel import Sentinel

    credentials, hosts = _split_credentials(netloc)
    service, db = _service_and_db(path)
    tls = {"ssl": True} if SENTINEL_SCHEMES[scheme] else {}
    options: dict[str, Any] = {**credentials, **tls}  # Sentinel's keywords are typed from redis 8.2 on
    sentinel = Sentinel(_host_ports(hosts, 26379), sentinel_kwargs=options, **options)
    client = sentinel.master_for(service, db=db)
    return SharedRedis(client, Topology.SENTINEL, "COMPACT_REDIS_URL", f"service {service} via {hosts}")


def _split_credentials(netloc: str) -> tuple[dict[str, str], str]:
    """``user:password@hosts`` → the client's credentials and the hosts."""
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        return {}, netloc
    user, colon, password = userinfo.partition(":")
    credentials = {"password": unquote(password)} if colon else {"password": unquote(user)}
    if colon and user:
        credentials["username"] = unquote(user)
    return credentials, hosts


def _service_and_db(path: str) -> tuple[str, int]:
    """A sentinel URL's ``/service-name[/db]``."""
    service, _, db = path.strip("/").partition("/")
    if not service:
        raise ValueError("a redis+sentinel:// URL names the service after the hosts: /service-name")
    if db and not db.isdigit():
        raise ValueError(f"the database after the service is a number, got {db!r}")
    return service, int(db or 0)


def _host_ports(hosts: str, default_port: int) -> list[tuple[str, int]]:
    found = []
    for host in hosts.split(","):
        name, colon, port = host.strip().rpartition(":") if ":" in host else (host.strip(), "", "")
        if not name or (colon and not port.isdigit()):
            raise ValueError(f"no host in {host!r} (host or host:port)")
        found.append((name.strip("[]"), int(port) if colon else default_port))
    return found


def _hosts(netloc: str) -> str:
    return _split_credentials(netloc)[1]


MOVED_HINT = " (MOVED: this Redis is a cluster; name it redis+cluster://host:port in COMPACT_REDIS_URL)"
"""Added to a failed call's log line when a single-server client met a cluster."""


def is_outage(error: BaseException) -> bool:
    """Whether an error says Redis (or the part of a cluster a key lives on) cannot be reached
    now, rather than that one command failed: a connection refused or lost, a timeout, a cluster
    with no node for a slot, no master behind the sentinels."""
    from redis import exceptions

    unreachable = (
        asyncio.TimeoutError,
        TimeoutError,
        OSError,
        exceptions.ConnectionError,
        exceptions.TimeoutError,
        exceptions.ClusterDownError,
        exceptions.SlotNotCoveredError,
        exceptions.MaxConnectionsError,
    )
    return isinstance(error, unreachable)

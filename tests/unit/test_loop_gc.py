"""The cyclic garbage collector run between event-loop callbacks (``proxy.lifecycle.loop_gc``)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import subprocess
import sys
import weakref
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from compact_hook.proxy.lifecycle import loop_gc
from compact_hook.proxy.lifecycle.loop_gc import LoopGC, Oldest, run_on_loop, runs_on_loop

TARGET: contextvars.ContextVar[object] = contextvars.ContextVar("target")
PADS = [contextvars.ContextVar(f"pad{i}") for i in range(64)]


class Stream:
    """Like LiteLLM's ``CustomStreamWrapper``: in a cycle, and its finalizer sets a context variable."""

    sets = True

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        if self.sets:
            TARGET.set(object())


class SetWatch:
    """Counts the collections that start while a ``ContextVar.set`` runs (the C call in progress)."""

    def __init__(self) -> None:
        self.inside = 0
        self.inside_set = 0
        self.collections = 0

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if getattr(arg, "__name__", "") == "set" and isinstance(
            getattr(arg, "__self__", None), contextvars.ContextVar
        ):
            self.inside += 1 if event == "c_call" else -1 if event in ("c_return", "c_exception") else 0

    def collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.collections += 1
            self.inside_set += self.inside > 0


@pytest.fixture(autouse=True)
def collector_as_it_was() -> Iterator[None]:
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.set_threshold(*thresholds)
    if enabled:
        gc.enable()


async def busy(rounds: int) -> None:
    """Set context variables and leave finalizable cycles behind, yielding to the loop now and then."""
    for number in range(rounds):
        Stream()
        for pad in PADS:
            pad.set([number])
        if number % 10 == 0:
            await asyncio.sleep(0)


def watched(run_on: bool) -> SetWatch:
    watch = SetWatch()

    async def main() -> None:
        collector = LoopGC(tick_seconds=0)
        if run_on:
            collector.start(asyncio.get_running_loop())
        gc.set_threshold(5, 10, 10)
        sys.setprofile(watch.profile)
        try:
            await busy(2_000)
        finally:
            sys.setprofile(None)
            collector.stop()

    gc.callbacks.append(watch.collection)
    try:
        asyncio.run(main())
    finally:
        gc.callbacks.remove(watch.collection)
    return watch


def watched_apart(how: str) -> dict[str, int]:
    """``watched`` in a process of its own: should a collection start inside a set after all, the
    finalizer's set may crash that process (SIGSEGV), not the test run."""
    done = subprocess.run([sys.executable, __file__, how], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the process ended with {done.returncode}: {done.stderr[-2000:]}"
    counts: dict[str, int] = json.loads(done.stdout)
    return counts


def test_with_the_loop_collecting_no_collection_starts_inside_a_context_variables_set() -> None:
    counts = watched_apart("loop")
    assert counts["collections"] > 100  # it did collect, from the loop
    assert counts["inside_set"] == 0


@pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="from 3.12 the interpreter collects between bytecodes"
)
def test_left_to_the_interpreter_collections_start_inside_a_context_variables_set() -> None:
    """What the loop prevents (CPython gh-148891): the same work, collected by the interpreter (its
    finalizers set nothing: their sets would crash the process)."""
    assert watched_apart("interpreter")["inside_set"] > 0


def test_cycles_are_freed_with_the_automatic_collector_off() -> None:
    async def main() -> bool:
        collector = LoopGC(tick_seconds=0)
        collector.start(asyncio.get_running_loop())
        try:
            assert not gc.isenabled()
            stream = Stream()
            gone = weakref.ref(stream)
            del stream
            kept = []
            for _ in range(200):
                kept.append([[] for _ in range(50)])  # allocations past generation 0's threshold
                await asyncio.sleep(0)
                if gone() is None:
                    return True
            return False
        finally:
            collector.stop()

    assert asyncio.run(main())
    assert gc.isenabled()  # given back on stop


def test_what_the_process_held_when_the_loop_began_collecting_is_frozen_until_it_stops() -> None:
    """A collection of the oldest generation walks only what came after (LiteLLM's start-up heap
    is never walked again); garbage there is collected before it is frozen."""

    async def main() -> tuple[int, int, bool]:
        stream = Stream()
        gone = weakref.ref(stream)
        del stream
        held = [[] for _ in range(1_000)]
        collector = LoopGC(tick_seconds=0)
        collector.start(asyncio.get_running_loop())
        try:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            frozen = gc.get_freeze_count()
            return frozen, len(held), gone() is None
        finally:
            collector.stop()

    Stream.sets = False
    try:
        frozen, held, collected = asyncio.run(main())
    finally:
        Stream.sets = True
    assert frozen >= held and collected  # the cycle went before the rest was frozen
    assert gc.get_freeze_count() == 0  # given back on stop


def test_the_oldest_generation_waits_until_a_quarter_of_what_it_kept_has_joined() -> None:
    collector = LoopGC()
    gc.disable()
    gc.collect(1)  # the oldest generation's count is now past a threshold of 0
    gc.set_threshold(1_000_000, 1_000_000, 0)
    collector.oldest = Oldest(kept=1_000, joined=249)
    assert collector.collect_due() is None
    collector.oldest.joined = 250
    assert collector.collect_due() == 2
    assert collector.oldest.joined == 0
    assert collector.oldest.kept == pytest.approx(len(gc.get_objects(2)), abs=100)


def test_a_younger_collection_counts_its_survivors_toward_the_oldest() -> None:
    collector = LoopGC()
    gc.disable()
    gc.collect(0)  # generation 1's count is now past a threshold of 0
    gc.set_threshold(1_000_000, 0, 1_000_000)
    survivors = [[] for _ in range(500)]
    assert collector.collect_due() == 1
    assert collector.oldest.joined >= len(survivors)


def test_a_forked_child_gets_the_interpreters_collector_back() -> None:
    async def main() -> None:
        collector = LoopGC()
        collector.start(asyncio.get_running_loop())
        collector.forget()  # what os.register_at_fork runs in the child
        assert gc.isenabled() and collector.loop is None

    asyncio.run(main())


def test_only_the_proxy_and_only_before_312_has_the_loop_collect_by_default() -> None:
    assert runs_on_loop("loop") and not runs_on_loop("interpreter")
    assert runs_on_loop("auto") == (sys.version_info < (3, 12))

    async def main() -> bool:
        run_on_loop("loop")  # no proxy config loaded: a test's or a script's loop ends, nobody would collect
        return loop_gc.LOOP_GC.loop is None and gc.isenabled()

    assert asyncio.run(main())


if __name__ == "__main__":  # watched_apart's process
    Stream.sets = sys.argv[1] == "loop"
    watch = watched(run_on=sys.argv[1] == "loop")
    print(json.dumps({"collections": watch.collections, "inside_set": watch.inside_set}))

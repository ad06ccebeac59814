"""The loop's handed-off work (``compact_hook.offload``): run in threads below the loop's priority."""

from __future__ import annotations

import contextvars
import os
import threading

import pytest

from compact_hook import offload
from compact_hook.offload import NICER_BY, off_loop

WHO = contextvars.ContextVar("who", default="nobody")


def priority_here() -> tuple[int, int]:
    """The calling thread's id and its nice value."""
    thread = threading.get_native_id()
    return thread, os.getpriority(os.PRIO_PROCESS, thread)


async def test_the_work_runs_off_the_loops_thread_below_its_priority() -> None:
    loop_thread, loop_nice = priority_here()
    thread, nice = await off_loop(priority_here)
    assert thread != loop_thread
    assert nice == min(19, loop_nice + NICER_BY)
    assert priority_here() == (loop_thread, loop_nice)  # the loop's own thread is left as it was


async def test_results_exceptions_and_context_cross_over() -> None:
    WHO.set("the request")
    assert await off_loop(WHO.get) == "the request"
    assert await off_loop(sum, [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        await off_loop(divmod, 1, 0)


def test_a_forked_child_makes_its_own_pool() -> None:
    parent = offload.pool()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.write(write, b"new" if offload.pool() is not parent else b"same")
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    assert os.read(read, 8) == b"new"
    assert offload.pool() is parent

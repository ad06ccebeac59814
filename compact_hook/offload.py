"""The work the event loop hands off, run where it cannot slow the loop down.

Tokenizing a history new to the proxy (a burst of sessions, every live session after a restart:
50–200K tokens each), planning a summary's chunks, fitting a request to its window: CPU work that
would hold the loop, and with it every request in flight, hooked or not. It runs in threads
(HuggingFace ``tokenizers`` releases the GIL while it encodes), and those threads run at a lower
CPU priority than the loop's: where the machine's cores are busy, the kernel serves the loop
first and our work takes what is left, instead of taking a core from the loop (Python's default
executor runs at the loop's own priority, so 40 first contacts counted at once left the loop a
third of a core). On Linux a thread's nice value is its own (``setpriority`` of its thread id);
elsewhere the threads keep the process's priority.

One pool per process, made on first use (a proxy forked from a launcher gets its own), as many
threads as cores: at a low priority more threads cost the loop nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

NICER_BY = 10
"""How much lower the threads' priority is than the loop's (Linux's nice: a thread 10 steps nicer
gets about a tenth of what the loop gets of a core both want; 19, the most, would starve our work
on a machine busy with other processes)."""

P = ParamSpec("P")
T = TypeVar("T")

_pool: tuple[int, ThreadPoolExecutor] | None = None
_lock = threading.Lock()


async def off_loop(work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``work(*args, **kwargs)`` in one of the pool's threads (with this task's context vars, as
    ``asyncio.to_thread``), awaited."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, work, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(pool(), call)


def pool() -> ThreadPoolExecutor:
    """This process's pool (a forked child makes its own: its parent's threads did not follow it)."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            workers = os.cpu_count() or 2
            executor = ThreadPoolExecutor(workers, thread_name_prefix="compact-hook", initializer=lowered)
            _pool = (os.getpid(), executor)
        return _pool[1]


def lowered() -> None:
    """The calling thread's CPU priority lowered by ``NICER_BY`` (its own on Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + NICER_BY)

"""Our log lines reach the proxy's stderr, and no client can flood them.

Every line we log has a fixed template (arguments are passed separately), so lines are
rate-limited per (level, template, model group): at most ``burst`` per ``window`` seconds. One
busy model group cannot silence another's lines, and the first line after a quiet window says
how many were suppressed (``flush`` says it for the rest at shutdown). Counting is the metrics'
job (``compact_hook_requests_total``, ``compact_hook_summary_calls_total``): lines are for reading.

The model group comes from the request being handled (``for_model_group``, set by the gate once
the router knows the group): a context variable, so the background work a request starts logs
under its group too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar

PACKAGE = "compact_hook"
BURST = 20
WINDOW_SECONDS = 60.0
MAX_TEMPLATES = 1000

MODEL_GROUP: ContextVar[str] = ContextVar("compact_hook_model_group", default="")

logger = logging.getLogger(__name__)

Key = tuple[int, str, str]


def for_model_group(group: str) -> None:
    """Lines logged from here on in this request (and what it starts) count toward ``group``'s
    limits; ``group`` must be one the router knows (the limits stay bounded)."""
    MODEL_GROUP.set(group)


class RateLimit(logging.Filter):
    def __init__(
        self, burst: int = BURST, window: float = WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.burst, self.window, self.clock = burst, window, clock
        self._state: dict[Key, tuple[float, int, int]] = {}

    def reset(self) -> None:
        """Forget what was logged (each template's burst is whole again)."""
        self._state.clear()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "compact_flush", False) or getattr(record, "compact_admitted", False):
            return True
        admitted = self.admit(record.levelno, str(record.msg))
        if admitted is None:
            return False
        record.msg = admitted
        return True

    def admit(self, level: int, template: str) -> str | None:
        """A line of ``template`` counted against its limit: the template to log (it says how many
        were suppressed, the first time after a quiet window), or None when over the limit."""
        key = (level, template[:200], MODEL_GROUP.get())
        now = self.clock()
        start, count, suppressed = self._state.get(key, (now, 0, 0))
        said = template
        if now - start >= self.window:
            if suppressed:
                said = f"{template} [{suppressed} similar lines suppressed in the last {now - start:.0f} s]"
            start, count, suppressed = now, 0, 0
        if len(self._state) >= MAX_TEMPLATES and key not in self._state:
            self.flush()
            self._state.clear()
        if count >= self.burst:
            self._state[key] = (start, count, suppressed + 1)
            return None
        self._state[key] = (start, count + 1, suppressed)
        return said

    def flush(self) -> None:
        """Say how many lines each limit suppressed that no later line has said yet."""
        for (level, template, group), (start, count, suppressed) in list(self._state.items()):
            if suppressed:
                logger.log(
                    level,
                    "compact_hook: %d lines like %r%s suppressed",
                    suppressed,
                    template,
                    f" (model group {group})" if group else "",
                    extra={"compact_flush": True},
                )
                self._state[(level, template, group)] = (start, count, 0)


def say(target: logging.Logger, level: int, template: str, *args: object) -> None:
    """``target.log(level, template, *args)`` for a line said on every request: its limit is asked
    before the line is made (making a line walks the stack, and a busy group's are mostly dropped)."""
    if not target.isEnabledFor(level):
        return
    limit = LIMIT[0] if LIMIT else None
    admitted = limit.admit(level, template) if limit is not None else template
    if admitted is not None:
        target.log(level, admitted, *args, extra={"compact_admitted": True}, stacklevel=2)


LIMIT: list[RateLimit] = []
"""The process's limit, once ``configure_logging`` made it."""


def configure_logging(level: str) -> RateLimit:
    """Our lines (one per summary call, one per compaction) reach the proxy's stderr, rate-limited."""
    package_logger = logging.getLogger(PACKAGE)
    package_logger.setLevel(level.upper())
    if not package_logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        package_logger.addHandler(handler)
    limit = next(
        (f for f in package_logger.filters if isinstance(f, RateLimit)),
        RateLimit(),
    )
    LIMIT[:] = [limit]
    for name in [PACKAGE, *logging.Logger.manager.loggerDict]:
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            child = logging.getLogger(name)
            if not any(isinstance(existing, RateLimit) for existing in child.filters):
                child.addFilter(limit)
    return limit

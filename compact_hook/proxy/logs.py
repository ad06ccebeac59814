"""Our log lines reach the proxy's stderr, and no client can flood them.

Every line we log has a fixed template (arguments are passed separately), so lines are
rate-limited per (level, template): at most ``burst`` per ``window`` seconds, and the first
line after a quiet window says how many were suppressed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

PACKAGE = "compact_hook"
BURST = 20
WINDOW_SECONDS = 60.0
MAX_TEMPLATES = 1000


class RateLimit(logging.Filter):
    def __init__(
        self, burst: int = BURST, window: float = WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.burst, self.window, self.clock = burst, window, clock
        self._state: dict[tuple[int, str], tuple[float, int, int]] = {}

    def reset(self) -> None:
        """Forget what was logged (each template's burst is whole again)."""
        self._state.clear()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, str(record.msg)[:200])
        now = self.clock()
        start, count, suppressed = self._state.get(key, (now, 0, 0))
        if now - start >= self.window:
            if suppressed:
                record.msg = f"{record.msg} [{suppressed} similar lines suppressed]"
            start, count, suppressed = now, 0, 0
        if len(self._state) >= MAX_TEMPLATES and key not in self._state:
            self._state.clear()
        if count >= self.burst:
            self._state[key] = (start, count, suppressed + 1)
            return False
        self._state[key] = (start, count + 1, suppressed)
        return True


def configure_logging(level: str) -> None:
    """Our lines (one per summary call, one per compaction) reach the proxy's stderr, rate-limited."""
    package_logger = logging.getLogger(PACKAGE)
    package_logger.setLevel(level.upper())
    if not package_logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        package_logger.addHandler(handler)
    limit = RateLimit()
    for name in [PACKAGE, *logging.Logger.manager.loggerDict]:
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            child = logging.getLogger(name)
            if not any(isinstance(existing, RateLimit) for existing in child.filters):
                child.addFilter(limit)

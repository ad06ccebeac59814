"""Run our clean-up when the proxy shuts down.

LiteLLM 1.106.2 has no shutdown callback for custom loggers, and uvicorn re-raises SIGTERM
once its lifespan has ended, so the process dies before ``asyncio.run`` would cancel the tasks
still pending: background work would leave its locks behind in Redis for their whole TTL.
What the proxy's lifespan does await on shutdown is ``GracefulShutdownManager.wait_for_drain``
(after the in-flight requests drained): our clean-up is chained after it. Without that
manager nothing is chained, and the locks merely expire.
"""

from __future__ import annotations

import importlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

MANAGER_MODULE = "litellm.proxy.shutdown.graceful_shutdown_manager"
CHAINED = "_compact_hook_chained"

Cleanup = Callable[[], Awaitable[None]]

# Every hook instance registers its own clean-up (a process may build more than one); bound
# methods are held weakly so a discarded hook is not kept alive by the registry.
_cleanups: list[weakref.WeakMethod[Cleanup] | Callable[[], Cleanup]] = []


def on_shutdown(cleanup: Cleanup) -> bool:
    """Have ``cleanup`` awaited once the proxy has drained its requests; True if chained."""
    try:
        manager: Any = importlib.import_module(MANAGER_MODULE).GracefulShutdownManager
        original = manager.wait_for_drain
    except (ImportError, AttributeError):
        logger.warning("compact_hook: no shutdown hook in this LiteLLM; background work is not cancelled")
        return False
    if not any(ref() == cleanup for ref in _cleanups):
        _cleanups.append(weakref.WeakMethod(cleanup) if hasattr(cleanup, "__self__") else lambda: cleanup)
    if getattr(original, CHAINED, False):
        return True

    async def wait_for_drain(*args: Any, **kwargs: Any) -> Any:
        try:
            return await original(*args, **kwargs)
        finally:
            await _run_cleanups()

    setattr(wait_for_drain, CHAINED, True)
    manager.wait_for_drain = staticmethod(wait_for_drain)
    return True


async def _run_cleanups() -> None:
    """Await every live registered clean-up once; one failing does not stop the others."""
    pending = [cleanup for ref in _cleanups if (cleanup := ref()) is not None]
    _cleanups.clear()
    for cleanup in pending:
        try:
            await cleanup()
        except Exception:
            logger.exception("compact_hook: clean-up at shutdown failed")


def shutting_down() -> bool:
    """The proxy drains for shutdown (LiteLLM's own flag): start no background work."""
    try:
        manager: Any = importlib.import_module(MANAGER_MODULE).GracefulShutdownManager
        return bool(manager.is_shutting_down())
    except (ImportError, AttributeError):
        return False

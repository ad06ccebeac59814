"""A circuit breaker per summary model (and tenant): stop calling a model that keeps failing.

After ``breaker_failures`` consecutive failed summaries the breaker opens for
``breaker_cooldown_seconds``; each time it opens again the cooldown doubles, up to
``breaker_max_cooldown_seconds``; a success closes it and forgets the count. When a cooldown
ends, requests may try again (a *probe*: one attempt, no retries). The state is a short note in
the store, so replicas share it.

Keyed by the tenant too: a client whose content makes the summary model fail must not open the
breaker for every other tenant of the proxy (each tenant pays at most ``breaker_failures``
failures per cooldown, which is still bounded).
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from compact_hook.core.failures import SummaryFailure
from compact_hook.core.tenancy import tenant_scoped
from compact_hook.engine.result import CompactRequest
from compact_hook.settings.model import CompactConfig
from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)

NOTE_PREFIX = b"breaker:"


class Circuit(enum.Enum):
    CLOSED = "closed"
    """Call the model as usual."""
    OPEN = "open"
    """Do not call it."""
    PROBE = "probe"
    """A cooldown just ended: one attempt, no retries."""


@dataclass(frozen=True, slots=True)
class State:
    failures: int = 0
    open_until: float = 0.0
    cooldown: float = 0.0

    @classmethod
    def parse(cls, text: str | None) -> State:
        if not text:
            return cls()
        try:
            raw = json.loads(text)
            return cls(int(raw["failures"]), float(raw["open_until"]), float(raw["cooldown"]))
        except (ValueError, KeyError, TypeError):
            return cls()

    def dumps(self) -> str:
        return json.dumps(
            {"failures": self.failures, "open_until": self.open_until, "cooldown": self.cooldown}
        )


class Breaker:
    """Reads and updates breaker notes; wall-clock time, because replicas compare it.

    ``opened`` / ``closed`` count the transitions this process made (metrics).
    """

    def __init__(self, store: CompactionStore | None, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self.opened = 0
        self.closed = 0

    @staticmethod
    def of(request: CompactRequest) -> bytes:
        """The key of the breaker a request's summaries go through: its summary model's, for its tenant."""
        return Breaker.key(request.summary_model, request.tenant)

    @staticmethod
    def key(summary_model: str, tenant: str) -> bytes:
        """The breaker a request's summaries go through: its summary model's, for its tenant."""
        return NOTE_PREFIX + tenant_scoped(tenant, f"breaker\n{summary_model}")

    async def gate(self, key: bytes, config: CompactConfig) -> Circuit:
        state = await self._state(key)
        if state.failures < config.breaker_failures:
            return Circuit.CLOSED
        return Circuit.OPEN if self.clock() < state.open_until else Circuit.PROBE

    async def heard(self, key: bytes, config: CompactConfig, failure: SummaryFailure | None) -> None:
        """A model summary was attempted: close the breaker (``failure`` None), or count a failure;
        a refusal (auth, other 4xx) opens it at once: the next call would be refused the same way."""
        if failure is None:
            await self.succeeded(key)
        else:
            await self.failed(key, config, at_once=failure is SummaryFailure.REFUSED)

    async def succeeded(self, key: bytes) -> None:
        if self.store is None:
            return
        state = await self._state(key)
        if state.failures:
            self.closed += 1 if state.open_until else 0  # it had opened: a probe succeeded
            await self.store.set_note(key, State().dumps(), 1)

    async def failed(self, key: bytes, config: CompactConfig, at_once: bool = False) -> None:
        if self.store is None:
            return
        state = await self._state(key)
        failures = max(state.failures + 1, config.breaker_failures if at_once else 0)
        if failures < config.breaker_failures:
            await self.store.set_note(key, State(failures).dumps(), config.breaker_max_cooldown_seconds * 2)
            return
        cooldown = (
            config.breaker_cooldown_seconds
            if not state.cooldown
            else min(state.cooldown * 2, config.breaker_max_cooldown_seconds)
        )
        logger.error(
            "compact_hook: summary model %s; not calling it for %.0f s",
            "refused a call" if at_once else f"failed {failures} times in a row",
            cooldown,
        )
        self.opened += 1
        opened = State(failures, self.clock() + cooldown, cooldown)
        await self.store.set_note(key, opened.dumps(), cooldown + config.breaker_max_cooldown_seconds * 2)

    async def _state(self, key: bytes) -> State:
        return State.parse(await self.store.get_note(key)) if self.store is not None else State()

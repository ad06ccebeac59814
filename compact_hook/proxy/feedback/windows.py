"""The windows providers teach us, per model group and tenant: evidence, not truth.

A provider's "too long" is parsed for its limit (each provider words it its own way). A limit the
error states, below the configured window, is remembered for the model group (``Taught.STATED``); a
shrink with no stated limit (our guess from what was sent) only for the tenant whose request it was
(``GUESSED``: a throttle worded like "too many tokens" must never cut another tenant's window); a
bill pinned at a server's context only for that tenant too (``CEILING``), and only until a later
bill refutes it. Each for ``learned_window_ttl_seconds``, in the store (replicas share them), read
never below ``learned_window_floor`` of the configured window (``proxy.request.settings``), and used
only where it leaves the conversation room (``core.limits``: nothing learned makes us forward more,
nor stops us compacting).
"""

from __future__ import annotations

import enum
import functools
import logging
import time
from collections import OrderedDict

from compact_hook.core.evidence import Judged
from compact_hook.core.tenancy import tenant_tag
from compact_hook.state.store import CompactionStore

logger = logging.getLogger(__name__)

NOTE_PREFIX = b"window:"
REFRESH_SECONDS = 5.0
"""How long a replica reads what the store says before asking it again."""
MEMO_KEYS = 1_024
"""Windows a replica keeps read (groups and tenants in them, the most recently read)."""
FORGOTTEN = "-"
"""A window note refuted before it expired."""


class Taught(enum.Enum):
    """How a window was taught, and so whom it binds."""

    STATED = "stated"
    """The provider's refusal stated its limit: the model group's."""
    GUESSED = "guessed"
    """A refusal with no limit stated, guessed from what was sent: that tenant's only."""
    CEILING = "ceiling"
    """A bill pinned at a server's context while we forwarded more: that tenant's only, until refuted."""
    BELOW_FLOOR = "below_floor"
    """A stated limit under ``learned_window_floor`` of the configured window: the group keeps the
    floor, the tenant whose request was refused uses the limit as stated (read apart: ``exact``) —
    or each of its turns would be refused once (a proxy told more than twice the server's context)."""


class LearnedWindows:
    """Per model group and tenant, the windows a provider taught us; read through a short memo."""

    def __init__(self, store: CompactionStore | None) -> None:
        self.store = store
        self._memo: OrderedDict[bytes, tuple[float, int | None]] = OrderedDict()

    async def get(self, group: str, tenant: str) -> int | None:
        """The smallest window the group and the tenant were taught, if any (read never below
        ``learned_window_floor``: ``proxy.request.settings``)."""
        found = [await self._read(_window_key(group, tenant, taught)) for taught in FLOORED]
        known = [window for window in found if window is not None]
        return min(known) if known else None

    async def exact(self, group: str, tenant: str) -> int | None:
        """A limit the provider stated below the floor when it refused this tenant's request, if any."""
        return await self._read(_window_key(group, tenant, Taught.BELOW_FLOOR))

    async def learn(self, group: str, window: int, ttl: float, tenant: str, taught: Taught) -> int:
        """Remember ``window`` (or a smaller one already known) for ``ttl`` seconds."""
        key = _window_key(group, tenant, taught)
        known = await self._read(key)
        if known is not None and known <= window:
            return known
        await self._write(key, window, str(window), ttl)
        logger.warning("compact_hook: model %r: window now %d tokens%s", group, window, _SAID[taught])
        return window

    async def refuted(self, group: str, tenant: str, judged: Judged, ttl: float) -> None:
        """A bill under a server's supposed context, for a request that fits it whole, while its usage
        did not describe the prompt: a server truncating to that context bills all of what fits (a
        cache left out bills less). The window taken from the ceiling is forgotten, and said."""
        key = _window_key(group, tenant, Taught.CEILING)
        window = await self._read(key)
        if window is None or judged.verdict.usable or judged.billed + judged.forwarded.reserve >= window:
            return
        await self._write(key, None, FORGOTTEN, ttl)
        logger.warning(
            "compact_hook: model %r: the %d-token window taken from a bill pinned at a server's context is "
            "forgotten for that key or team: %s, under that context (a cache left out, not a ceiling)",
            group,
            window,
            judged.seen(),
        )

    async def _write(self, key: bytes, window: int | None, text: str, ttl: float) -> None:
        self._remember(key, window)
        if self.store is not None:
            await self.store.set_note(key, text, ttl)

    async def _read(self, key: bytes) -> int | None:
        found = self._memo.get(key)
        if found is not None and time.monotonic() - found[0] < REFRESH_SECONDS:
            return found[1]
        note = await self.store.get_note(key) if self.store is not None else None
        window = int(note) if note is not None and note.isdigit() else None
        self._remember(key, window)
        return window

    def _remember(self, key: bytes, window: int | None) -> None:
        self._memo[key] = (time.monotonic(), window)
        self._memo.move_to_end(key)
        while len(self._memo) > MEMO_KEYS:
            self._memo.popitem(last=False)


FLOORED = (Taught.STATED, Taught.GUESSED, Taught.CEILING)
"""The windows read never below ``learned_window_floor`` of the configured one."""

_SAID = {
    Taught.STATED: " (the provider stated its limit)",
    Taught.GUESSED: " for that key or team (guessed: no limit stated)",
    Taught.CEILING: " for that key or team (its bills pinned at a server's context)",
    Taught.BELOW_FLOOR: " for that key or team (the provider stated it, below learned_window_floor)",
}


@functools.lru_cache(maxsize=MEMO_KEYS)
def _window_key(group: str, tenant: str, taught: Taught) -> bytes:
    """The group's key for a stated limit; the tenant's for a guess (as before ceilings were told
    apart: a window guessed then is read as one now), a ceiling's of its own."""
    if taught is Taught.STATED:
        scope = group
    elif taught is Taught.GUESSED:
        scope = f"{group}\n{tenant_tag(tenant)}"
    else:
        scope = f"{group}\n{tenant_tag(tenant)}\n{taught.value}"
    return NOTE_PREFIX + scope.encode("utf-8", "surrogatepass")

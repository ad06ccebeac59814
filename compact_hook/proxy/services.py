"""What the proxy-side objects share: settings, model settings, metrics, and the engine.

The compactor is built on first use: LiteLLM's own Redis settings (which the store may use)
are only known once LiteLLM has loaded its config, after it built our callback.
"""

from __future__ import annotations

import functools

from compact_hook.engine.ahead.background import Background
from compact_hook.engine.ahead.prepare import PrepareSetup
from compact_hook.engine.compactor import Compactor
from compact_hook.engine.run import ProcessMemory
from compact_hook.engine.summary.once import Leases
from compact_hook.proxy import server
from compact_hook.proxy.answers.codex import Mementos
from compact_hook.proxy.feedback.ratios import LearnedRatios
from compact_hook.proxy.feedback.windows import LearnedWindows
from compact_hook.proxy.lifecycle.shutdown import on_shutdown, shutting_down
from compact_hook.proxy.observe.metrics import Metrics
from compact_hook.proxy.recall.offer import RecallBudget
from compact_hook.proxy.request.models import ModelSettings
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from compact_hook.state.archive import ArchiveFolders
from compact_hook.state.backends import build_stores
from compact_hook.state.recent import Recent


class Services:
    """One per hook: the base settings, the process settings, per-model settings, metrics, and
    the lazily built compactor, learned windows, count ratios and Codex compaction mementos."""

    def __init__(self, base: CompactConfig, process: ProcessConfig, metrics: Metrics) -> None:
        self.base, self.process, self.metrics = base, process, metrics
        self.models = ModelSettings(base)
        self.recent = Recent()
        """Each conversation's last request: the next works only on what is new (``state.recent``)."""
        self._compactor: Compactor | None = None

    @property
    def built(self) -> Compactor | None:
        """The compactor if it was built (metrics read it at scrape time, never building it)."""
        return self._compactor

    @property
    def compactor(self) -> Compactor:
        if self._compactor is None:
            process = self.process
            stores = build_stores(process, server.proxy_global("redis_usage_cache"))
            prepared = stores.prepared
            background = Background(process.prepare_concurrency, process.prepare_queue)
            self._compactor = Compactor(
                stores.main,
                Leases(process.lock_ttl_seconds, process.lock_wait_seconds, process.failure_ttl_seconds),
                prepare=PrepareSetup(prepared, background, shutting_down) if prepared is not None else None,
                memory=ProcessMemory(folders=ArchiveFolders(process.archive_max_age_days)),
            )
            on_shutdown(self._compactor.close)
        return self._compactor

    @functools.cached_property
    def learned(self) -> LearnedWindows:
        """Windows providers taught us, in the compactor's store (replicas share them)."""
        return LearnedWindows(self.compactor.store)

    @functools.cached_property
    def mementos(self) -> Mementos:
        """What our answers to Codex's compaction stand for, in the compactor's store (replicas share
        them), kept as long as the conversation's state."""
        store = self.compactor.store
        assert store is not None  # the proxy's compactor always has one
        return Mementos(store, self.process.store_ttl_seconds)

    def recall_budget(self, tenant: str, session: str, config: CompactConfig) -> RecallBudget:
        """A conversation's recall budget, in the compactor's store (replicas share it), kept as long
        as the conversation's state (``proxy.recall.offer.RecallBudget``)."""
        store = self.compactor.store
        assert store is not None  # the proxy's compactor always has one
        limit, ttl = config.recall_conversation_max_bytes, self.process.store_ttl_seconds
        return RecallBudget.of(store, tenant, session, limit, ttl)

    @functools.cached_property
    def ratios(self) -> LearnedRatios:
        """How each group's provider counts against us, in the compactor's store (replicas share it)."""
        return LearnedRatios(self.compactor.store)

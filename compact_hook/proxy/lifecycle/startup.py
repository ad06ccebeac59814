"""What the hook does while the proxy starts: check the ``compact`` blocks, warm the tokenizers."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from compact_hook.proxy import server
from compact_hook.proxy.request.models import validate_model_list
from compact_hook.settings.model import CompactConfig
from compact_hook.state.tokenizers import load_tokenizer

logger = logging.getLogger(__name__)


def validate_loaded_proxy_config(base: CompactConfig, lock_ttl: float | None = None) -> set[str]:
    """Fail proxy start-up on a bad ``compact`` block, naming the model and the key; return the
    tokenizers the compacting models use (``lock_ttl``: see ``validate_model_list``).

    LiteLLM builds its callbacks while it loads the config file and before it builds the
    router, so we read the same file it is loading.
    """
    path = server.proxy_global("user_config_file_path")
    if not isinstance(path, str) or not Path(path).is_file():
        return set()
    config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    model_list = config.get("model_list") if isinstance(config, Mapping) else None
    if not isinstance(model_list, list):
        return set()
    return validate_model_list(model_list, base, lock_ttl)


def preload_tokenizers(specs: Iterable[str]) -> None:
    """Load the tokenizers the configured models use (≈1 s each) while the proxy starts; the
    others are never loaded (o200k alone is ~130 MB)."""
    for spec in specs:
        try:
            load_tokenizer(spec)
        except Exception:
            logger.exception("compact_hook: could not preload the %s tokenizer", spec)

"""Which model groups compact, and with what settings, read from the LiteLLM router.

Settings live in ``model_info.compact`` (``litellm_params`` keys would leak to the
provider). They are resolved once per (router, model group) — the proxy rebinds
``llm_router`` on a config reload, which invalidates the memo — so a request pays a dict
lookup, not a config parse.

What a group's tokens cost (``group_prices``): a deployment's ``model_info`` cost keys (what LiteLLM
itself bills with) over LiteLLM's cost map entry for its model, else the ``price_*`` settings, else
no price (no money reported, cost-aware timing acts as without). A deployment LiteLLM prices at
nothing (0.0 for a model it does not know, or a local one) is not priced: there is nothing to weigh.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from compact_hook.core.calibration import claude_version, family_prior
from compact_hook.core.pricing import Prices
from compact_hook.proxy import server
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.summary import MIN_TRANSCRIPT_TOKENS, summary_tokens_for, transcript_room
from compact_hook.state.tokenizers import tokenizer_name_for_model

logger = logging.getLogger(__name__)


def compact_block(deployment: Mapping[str, Any]) -> object:
    """The raw ``model_info.compact`` value of a deployment (None when absent)."""
    model_info = deployment.get("model_info")
    return model_info.get("compact") if isinstance(model_info, Mapping) else None


def settings_from_block(block: object, base: CompactConfig) -> CompactConfig | None:
    """``compact: true`` / ``{...}`` → settings; absent, ``false`` or ``enabled: false`` → None."""
    if block is None or block is False:
        return None
    config = base if block is True else CompactConfig.from_dict(block, base)  # type: ignore[arg-type]
    return config if config.enabled else None


def validate_model_list(
    model_list: Iterable[Any], base: CompactConfig, lock_ttl: float | None = None
) -> set[str]:
    """Raise ``ValueError`` naming the model and key of the first bad ``compact`` block; return
    the tokenizers the compacting deployments will use. ``lock_ttl``: the replicas' compaction
    lock (``COMPACT_LOCK_TTL_SECONDS``); a model whose summaries may outlast it is warned of — its
    lock would expire mid-summary and another replica make the same summary again."""
    tokenizers: set[str] = set()
    entries = [entry for entry in model_list if isinstance(entry, Mapping)]
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("model_name", "?")
        try:
            config = settings_from_block(compact_block(entry), base)
        except ValueError as exc:
            raise ValueError(f"compact_hook: model {name!r}: model_info.compact.{exc}") from exc
        if config is None:
            continue
        tokenizers.add(config.tokenizer or tokenizer_name_for_model(_provider_model(entry, str(name))))
        _check_summary_room(str(name), config, entries, entry)
        if lock_ttl is not None and config.summary_deadline_seconds > lock_ttl:
            logger.warning(
                "compact_hook: model %r: summary_deadline_seconds (%g) is longer than "
                "COMPACT_LOCK_TTL_SECONDS (%g): a summary that takes that long loses its lock, and "
                "another replica may make it again",
                name,
                config.summary_deadline_seconds,
                lock_ttl,
            )
    return tokenizers


def _check_summary_room(
    name: str, config: CompactConfig, entries: Sequence[Mapping[str, Any]], entry: Mapping[str, Any]
) -> None:
    """At start-up, not on every request: a summary model whose window (as the config file or
    LiteLLM's model map says it) leaves no transcript beside the prompt and two ``summary_max_tokens``
    would fail every summary, so the proxy does not start (where the window is known here)."""
    if config.uses_digest:
        return
    group = config.summary_model or name
    own = [d for d in entries if d.get("model_name") == group] or [entry]
    windows = [w for w in (_compact_window(d) or _deployment_window(d) for d in own) if w]
    window = config.summary_context_window or (min(windows) if windows else None)
    if window is None:
        return
    tokens = config.summary_max_tokens or summary_tokens_for(window)
    if transcript_room(window, tokens) < MIN_TRANSCRIPT_TOKENS:
        set_by = "summary_max_tokens" if config.summary_max_tokens else "the summary model's window"
        raise ValueError(
            f"compact_hook: model {name!r}: model_info.compact.summary_max_tokens: {tokens} tokens for the "
            f"answer and as many for the running summary leave the summary model {group!r} ({window} tokens) "
            f"{transcript_room(window, tokens)} tokens of transcript beside its prompt, under "
            f"{MIN_TRANSCRIPT_TOKENS}: no summary could be made ({set_by} is too "
            f"{'large' if config.summary_max_tokens else 'small'}; or use summary_model: digest)"
        )


class ModelSettings:
    """Per-group resolution with a memo invalidated when the router object changes."""

    def __init__(self, base: CompactConfig) -> None:
        self.base = base
        self._router: object = None
        self._memo: dict[str, CompactConfig | None] = {}
        self._prices: dict[str, Prices | None] = {}
        self._warned: set[str] = set()

    def resolve(self, router: Any, group: str) -> CompactConfig | None:
        """Memoized per group the router knows: a client cannot grow the memo by inventing
        model names (the hook runs before LiteLLM rejects them)."""
        self._forget_other(router)
        if group in self._memo:
            return self._memo[group]
        deployments = server.deployments(router, group)
        if not deployments:
            return None
        self._memo[group] = self._resolve(router, group, deployments)
        return self._memo[group]

    def prices(self, router: Any, group: str, config: CompactConfig) -> Prices | None:
        """The group's prices (``group_prices``), memoized like its settings; only for groups the
        router knows (``group`` is a resolved model or its configured summary model)."""
        self._forget_other(router)
        if group not in self._prices:
            self._prices[group] = group_prices(router, group, config)
        return self._prices[group]

    def _forget_other(self, router: Any) -> None:
        """A config reload rebinds the router: what was resolved for the old one is forgotten."""
        if router is not self._router:
            self._router, self._memo, self._prices = router, {}, {}

    def _resolve(
        self, router: Any, group: str, deployments: Sequence[Mapping[str, Any]]
    ) -> CompactConfig | None:
        blocks = [block for block in map(compact_block, deployments) if block is not None]
        if not blocks:
            return None
        try:
            config = settings_from_block(blocks[0], self.base)
        except ValueError as exc:
            logger.error("compact_hook: model %r: model_info.compact.%s; compaction off for it", group, exc)
            return None
        if config is None:
            return None
        window = config.context_window or group_window(router, group, deployments)
        if window is None and group not in self._warned:
            self._warned.add(group)
            logger.warning(
                "compact_hook: model %r: context window unknown; set model_info.compact.context_window "
                "(or model_info.max_input_tokens). Not compacting it.",
                group,
            )
        tokenizer = config.tokenizer or tokenizer_name_for_model(_provider_model(deployments[0], group))
        summary_window = config.summary_context_window or self._summary_window(router, config)
        return dataclasses.replace(
            config,
            context_window=window,
            summary_context_window=summary_window,
            summary_max_tokens=config.summary_max_tokens
            or summary_tokens_for(summary_window or window, config.uses_digest),
            tokenizer=tokenizer,
            count_ratio=config.count_ratio or _prior(tokenizer, group, deployments),
            thinking_prefix_check=_prefix_check(config, group, deployments),
        )

    def _summary_window(self, router: Any, config: CompactConfig) -> int | None:
        """The summary model group's own window, so a large middle is read in as few calls as it allows."""
        group = config.summary_model
        if group is None or config.uses_digest:
            return None
        return group_window(router, group, server.deployments(router, group))


def group_window(router: Any, group: str, deployments: Sequence[Mapping[str, Any]]) -> int | None:
    """The smallest known window of a group's deployments (the router reports the largest)."""
    windows = [w for w in (_deployment_window(d) for d in deployments) if w]
    if not windows:
        info = server.group_info(router, group)
        window = getattr(info, "max_input_tokens", None) if info is not None else None
        windows = [int(window)] if window else []
    windows.extend(w for w in (_compact_window(d) for d in deployments) if w)
    return min(windows) if windows else None


def _prefix_check(config: CompactConfig, group: str, deployments: Sequence[Mapping[str, Any]]) -> bool:
    """Set, or by the models: one deployment that checks makes the group check (removing stale
    thinking is valid everywhere the check runs; keeping it is not)."""
    if config.thinking_prefix_check is not None:
        return config.thinking_prefix_check
    return any(runs_prefix_check(_provider_model(d, group)) for d in deployments)


def _prior(tokenizer: str, group: str, deployments: Sequence[Mapping[str, Any]]) -> float:
    """The measured ratio of the group's models (``core.calibration.family_prior``): the largest, where
    a group mixes them (counting a request high compacts it a little early; low, the provider refuses it)."""
    return max(family_prior(_provider_model(d, group), tokenizer) for d in deployments)


def _provider_model(deployment: Mapping[str, Any], group: str) -> str:
    params = deployment.get("litellm_params")
    model = params.get("model") if isinstance(params, Mapping) else None
    return model if isinstance(model, str) else group


def _compact_window(deployment: Mapping[str, Any]) -> int | None:
    """A ``compact.context_window`` set on the deployment (a summary group compacts too, maybe)."""
    block = compact_block(deployment)
    value = block.get("context_window") if isinstance(block, Mapping) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _deployment_window(deployment: Mapping[str, Any]) -> int | None:
    model_info = deployment.get("model_info")
    explicit = model_info.get("max_input_tokens") if isinstance(model_info, Mapping) else None
    if isinstance(explicit, int | float) and not isinstance(explicit, bool) and explicit > 0:
        return int(explicit)
    known = _cost_map_entry(deployment).get("max_input_tokens")
    return int(known) if isinstance(known, int | float) and known > 0 else None


PREFIX_CHECK_SINCE = (5, 1)
"""Claude models from 5.1 on check each thinking block sent back against its prefix (Anthropic,
*Preserved thinking*: Fable 5.1/5.2, Mythos, Opus/Sonnet/Haiku 5.5); older ones ignore earlier
turns' thinking but, with ``thinking`` enabled, refuse a tool turn whose thinking is missing."""


def runs_prefix_check(model: str) -> bool:
    """Whether a deployment's model (``anthropic/claude-opus-5-5``, ``anthropic.claude-fable-5-1-v1:0``,
    ``claude-sonnet-4-5-20250929``) runs the prefix check: by its version (``core.calibration``)."""
    version = claude_version(model)
    return version is not None and version >= PREFIX_CHECK_SINCE


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


INPUT, WRITE, READ, OUTPUT = (
    "input_cost_per_token",
    "cache_creation_input_token_cost",
    "cache_read_input_token_cost",
    "output_cost_per_token",
)


def group_prices(router: Any, group: str, config: CompactConfig) -> Prices | None:
    """The first priced deployment's prices, else the settings'."""
    priced = (deployment_prices(deployment) for deployment in server.deployments(router, group))
    return next((prices for prices in priced if prices is not None), config.prices)


def deployment_prices(deployment: Mapping[str, Any]) -> Prices | None:
    """LiteLLM's prices of one deployment; a cache write or read it does not price costs as input."""
    known = _numbers(_cost_map_entry(deployment))
    model_info = deployment.get("model_info")
    known.update(_numbers(model_info if isinstance(model_info, Mapping) else {}))
    if INPUT not in known or OUTPUT not in known or known[INPUT] + known[OUTPUT] <= 0:
        return None  # LiteLLM answers 0.0 for a model it does not know: not priced, not free
    base = known[INPUT]
    return Prices(base, known.get(WRITE, base), known.get(READ, base), known[OUTPUT])


def _cost_map_entry(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    """LiteLLM's cost map entry for the deployment's model (its window, its prices), or nothing."""
    try:
        import litellm

        info = litellm.get_model_info(model=_provider_model(deployment, ""))
    except Exception:  # LiteLLM raises for a model its map does not know
        return {}
    return info if isinstance(info, Mapping) else {}


def _numbers(source: Mapping[str, Any]) -> dict[str, float]:
    return {
        key: float(value)
        for key in (INPUT, WRITE, READ, OUTPUT)
        if isinstance(value := source.get(key), int | float) and not isinstance(value, bool) and value >= 0
    }

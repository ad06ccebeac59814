"""A model's compaction settings from a ``litellm_config.yaml``, resolved as the proxy does."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from compact_hook.cli.inputs import InputError
from compact_hook.proxy.request.models import ModelSettings, validate_model_list
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig


def read_config(path: Path) -> dict[str, Any]:
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("model_list"), list):
        raise InputError(f"{path}: no model_list")
    return config


def validate(path: Path) -> list[str]:
    """What the proxy checks at start-up; the model groups with compaction on."""
    config = read_config(path)
    base = CompactConfig.from_env()
    ProcessConfig.from_env()
    validate_model_list(config["model_list"], base)
    return [
        str(entry.get("model_name"))
        for entry in config["model_list"]
        if isinstance(entry, dict) and _compacts(entry)
    ]


def resolve(path: Path, model: str) -> CompactConfig:
    """The settings the proxy would use for ``model`` (window from the block or LiteLLM's model map)."""
    from litellm.router import Router

    config = read_config(path)
    validate_model_list(config["model_list"], CompactConfig.from_env())
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    router = Router(model_list=config["model_list"])
    resolved = ModelSettings(CompactConfig.from_env()).resolve(router, model)
    if resolved is None:
        raise InputError(f"{path}: model {model!r} does not compact (no model_info.compact, or disabled)")
    return resolved


def _compacts(entry: dict[str, Any]) -> bool:
    info = entry.get("model_info")
    block = info.get("compact") if isinstance(info, dict) else None
    return (
        block is not None
        and block is not False
        and not (isinstance(block, dict) and block.get("enabled") is False)
    )

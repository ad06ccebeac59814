"""Each setting declared once: its check, scope and "left unset" rule come from its field."""

import pytest

from compact_hook.core.chain import SCOPE_SETTINGS, Owner, scope_of
from compact_hook.settings.model import CompactConfig
from compact_hook.settings.process import ProcessConfig
from compact_hook.settings.setting import resolved


def test_the_scope_is_the_settings_declared_to_scope_a_compaction() -> None:
    assert SCOPE_SETTINGS == (
        "trigger_ratio",
        "tail_retention_ratio",
        "summary_model",
        "summary_max_tokens",
        "summary_context_window",
        "tokenizer",
        "tool_output_max_tokens",
        "tool_output_policy",
        "clear_tool_results",
        "clear_trigger_ratio",
        "keep_tool_results",
        "clear_at_least",
        "protected_tools",
        "recall",
        "user_message_budget",
        "pinned_patterns",
        "pinned_budget",
    )


@pytest.mark.parametrize(
    ("config", "scope"),
    [
        (CompactConfig(recall=False), "7c69ba693f314b5ccf5407d4a7021540"),
        (
            CompactConfig(
                trigger_ratio=0.5,
                clear_trigger_ratio=0.4,
                protected_tools=("b", "a"),
                pinned_budget=7,
                recall=False,
            ),
            "75a38f1788ec58c2fda726f3ba01b3b4",
        ),
    ],
)
def test_scope_hashes_are_those_of_earlier_releases(config: CompactConfig, scope: str) -> None:
    """Computed by the release before settings were declared once: stored compactions stay reachable
    (with ``recall`` off — on, the placeholders and summaries name handles: not the same compaction)."""
    assert scope_of(config, Owner("m", "t", "openai"), "p1").hex() == scope


def test_a_setting_added_to_the_scope_later_changes_it_only_when_set() -> None:
    owner = Owner("m", "t", "openai")
    before = CompactConfig(recall=False)
    assert scope_of(CompactConfig(recall=True), owner, "p1") != scope_of(before, owner, "p1")


def test_a_setting_left_unset_stands_for_its_rule_and_a_set_one_for_itself() -> None:
    lowered = CompactConfig(trigger_ratio=0.4)
    assert resolved(lowered, "clear_trigger_ratio") == 0.4
    assert resolved(lowered, "tail_retention_ratio") == 0.2
    assert resolved(lowered, "prepare_ratio") == pytest.approx(0.34)
    assert resolved(CompactConfig(), "tail_retention_ratio") == 0.25
    assert resolved(CompactConfig(prepare_ratio=0.4), "prepare_ratio") == 0.4
    assert resolved(CompactConfig(), "context_window") is None  # decided outside the settings


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"breaker_cooldown_seconds": 100.0, "breaker_max_cooldown_seconds": 50.0}, "at least 100.0"),
        ({"pinned_patterns": ("ok", " ")}, "pinned_patterns: must not be empty"),
        ({"trigger_ratio": 0.5, "prepare_ratio": 0.5}, "prepare_ratio: must be below trigger_ratio"),
        ({"trigger_ratio": 0.5, "clear_trigger_ratio": 0.5}, None),
        ({"tool_output_max_tokens": 99}, "tool_output_max_tokens: must be at least 100"),
    ],
)
def test_each_declared_rule_is_checked(settings: dict[str, object], message: str | None) -> None:
    if message is None:
        CompactConfig(**settings)  # type: ignore[arg-type]
        return
    with pytest.raises(ValueError, match=message):
        CompactConfig(**settings)  # type: ignore[arg-type]


def test_a_process_setting_has_an_upper_bound_where_declared() -> None:
    with pytest.raises(ValueError, match="metrics_port: must be at most 65535"):
        ProcessConfig(metrics_port=70000)
    assert ProcessConfig(metrics_port=65535).metrics_port == 65535

from typing import Any

import pytest

from compact_hook.settings.model import CompactConfig
from compact_hook.settings.setting import resolved


def test_defaults_match_the_documented_values() -> None:
    config = CompactConfig()
    assert config.trigger_ratio == 0.92
    assert (
        resolved(config, "tail_retention_ratio") == 0.25 and resolved(config, "clear_trigger_ratio") == 0.7
    )  # derived: the fields stay unset
    assert config.tail_retention_ratio is None and config.clear_trigger_ratio is None
    assert config.max_retries == 2
    assert config.context_window is None
    assert config.summary_model is None


def test_config_is_frozen() -> None:
    with pytest.raises(AttributeError):
        CompactConfig().trigger_ratio = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("trigger_ratio", 0),
        ("trigger_ratio", 1.5),
        ("trigger_ratio", -0.1),
        ("trigger_ratio", "0.9"),
        ("trigger_ratio", True),
        ("tail_retention_ratio", 1.0),
        ("tail_retention_ratio", 0.95),
        ("context_window", 0),
        ("context_window", 1000.5),
        ("context_window", "128000"),
        ("summary_max_tokens", 0),
        ("max_retries", -1),
        ("max_retries", 1.0),
        ("max_retries", False),
        ("summary_timeout_seconds", 0),
        ("archive_dir", ""),
        ("summary_model", "  "),
        ("tokenizer", 5),
        ("enabled", "yes"),
        ("tool_output_policy", "lines"),
        ("tool_output_max_tokens", 10),
        ("clear_trigger_ratio", 0.95),
        ("keep_tool_results", -1),
        ("clear_at_least", 0),
        ("user_message_budget", -5),
        ("protected_tools", "manage_todo_list"),
        ("protected_tools", ("ok", "")),
        ("normalize", "sometimes"),
        ("on_overflow", "explode"),
    ],
)
def test_invalid_values_raise_value_error_naming_the_key(key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=key):
        CompactConfig(**{key: value})


def test_from_dict_layers_over_the_base() -> None:
    base = CompactConfig(trigger_ratio=0.8, max_retries=5)
    config = CompactConfig.from_dict({"context_window": 1000, "trigger_ratio": 0.9}, base)
    assert (config.context_window, config.trigger_ratio, config.max_retries) == (1000, 0.9, 5)


def test_from_dict_rejects_unknown_keys_by_name() -> None:
    with pytest.raises(ValueError, match="trigger_ration"):
        CompactConfig.from_dict({"trigger_ration": 0.9})


def test_from_dict_rejects_a_non_mapping() -> None:
    with pytest.raises(ValueError, match="compact"):
        CompactConfig.from_dict(["trigger_ratio"])  # type: ignore[arg-type]


def test_int_is_accepted_where_a_float_is_expected() -> None:
    assert CompactConfig(trigger_ratio=1).trigger_ratio == 1


def test_environment_overrides_defaults() -> None:
    config = CompactConfig.from_env(
        {
            "COMPACT_TRIGGER_RATIO": "0.8",
            "COMPACT_MAX_RETRIES": "4",
            "COMPACT_SUMMARY_MODEL": "cheap",
            "X": "1",
        }
    )
    assert (config.trigger_ratio, config.max_retries, config.summary_model) == (0.8, 4, "cheap")


def test_environment_can_switch_a_default_off_and_unset_optionals() -> None:
    config = CompactConfig.from_env({"COMPACT_ENABLED": "false", "COMPACT_CONTEXT_WINDOW": "none"})
    assert config.enabled is False and config.context_window is None


@pytest.mark.parametrize(
    ("var", "value"),
    [("COMPACT_MAX_RETRIES", "two"), ("COMPACT_TRIGGER_RATIO", "2"), ("COMPACT_ENABLED", "maybe")],
)
def test_bad_environment_values_name_the_variable_or_key(var: str, value: str) -> None:
    with pytest.raises(ValueError, match=var.removeprefix("COMPACT_").lower() + "|" + var):
        CompactConfig.from_env({var: value})


def test_from_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACT_TAIL_RETENTION_RATIO", "0.3")
    assert CompactConfig.from_env().tail_retention_ratio == 0.3


def test_yaml_lists_become_tuples_and_env_lists_are_comma_separated() -> None:
    config = CompactConfig.from_dict({"protected_tools": ["manage_todo_list", "TodoWrite"]})
    assert config.protected_tools == ("manage_todo_list", "TodoWrite")
    env = CompactConfig.from_env({"COMPACT_PROTECTED_TOOLS": "a, b ,c"})
    assert env.protected_tools == ("a", "b", "c")


def test_summary_model_digest_means_no_model() -> None:
    assert CompactConfig(summary_model="digest").uses_digest
    assert not CompactConfig(summary_model="gpt-4o-mini").uses_digest


def test_defaults_that_depend_on_the_trigger_follow_it() -> None:
    lowered = CompactConfig(trigger_ratio=0.5)
    assert (
        resolved(lowered, "clear_trigger_ratio") == 0.5 and resolved(lowered, "tail_retention_ratio") == 0.25
    )
    assert resolved(CompactConfig(trigger_ratio=0.3), "tail_retention_ratio") == 0.15
    from_block = CompactConfig.from_dict({"trigger_ratio": 0.5}, base=CompactConfig.from_env())
    assert from_block.trigger_ratio == 0.5
    assert (
        resolved(from_block, "clear_trigger_ratio") == 0.5
        and resolved(from_block, "tail_retention_ratio") == 0.25
    )


def test_an_explicit_contradiction_with_the_trigger_still_fails_naming_the_key() -> None:
    with pytest.raises(ValueError, match="clear_trigger_ratio"):
        CompactConfig(trigger_ratio=0.5, clear_trigger_ratio=0.7)
    with pytest.raises(ValueError, match="tail_retention_ratio"):
        CompactConfig(trigger_ratio=0.5, tail_retention_ratio=0.5)


def test_a_lowered_trigger_from_the_environment_alone_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACT_TRIGGER_RATIO", "0.4")
    config = CompactConfig.from_env()
    assert (
        config.trigger_ratio == 0.4
        and resolved(config, "clear_trigger_ratio") == 0.4
        and resolved(config, "tail_retention_ratio") == 0.2
    )


@pytest.mark.parametrize(
    ("key", "value"), [("tool_output_policy", "some"), ("normalize", "never"), ("on_overflow", "x")]
)
def test_choices_are_checked_against_their_literal_values(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=key):
        CompactConfig(**{key: value})


def test_recall_rounds_and_bytes_have_an_upper_bound() -> None:
    """Key or team metadata can set them (issue 45, item 12): unbounded, a key bought unbounded model
    calls and store bytes per request."""
    with pytest.raises(ValueError, match="recall_max_rounds"):
        CompactConfig(recall_max_rounds=9)
    with pytest.raises(ValueError, match="recall_conversation_max_bytes"):
        CompactConfig(recall_conversation_max_bytes=64 * 1024 * 1024 + 1)
    assert (
        CompactConfig(recall_max_rounds=8, recall_conversation_max_bytes=64 * 1024 * 1024).recall_max_rounds
        == 8
    )

import compact_hook


def test_package_root_exports_exactly_the_public_api() -> None:
    assert compact_hook.__all__ == sorted(
        [
            "CompactConfig",
            "CompactResult",
            "CompactStats",
            "compact_messages",
            "count_tokens",
            "proxy_handler_instance",
            "should_compact",
        ]
    )


def test_every_exported_name_resolves() -> None:
    for name in compact_hook.__all__:
        assert getattr(compact_hook, name) is not None


def test_proxy_handler_instance_is_an_instance_with_its_own_hook_methods() -> None:
    instance = compact_hook.proxy_handler_instance
    assert not isinstance(instance, type)
    # LiteLLM only calls hooks defined on the leaf class itself (a vars(cls) check).
    assert "async_pre_call_hook" in vars(type(instance))
    assert "async_post_call_response_headers_hook" in vars(type(instance))

"""Fixtures for end-to-end tests: one stand-in upstream per session, reset before each test that uses it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.harness import ProxyProcess, StandinUpstream


@pytest.fixture(scope="session")
def standin() -> Iterator[Any]:
    """One stand-in for the whole session: starting it is cheap, but proxies configured against it are not."""
    with StandinUpstream() as upstream:
        yield upstream


@pytest.fixture(autouse=True)
def _reset_standin(request: pytest.FixtureRequest) -> None:
    """Each test sees only its own requests; tests that never touch the stand-in do not start it."""
    if "standin" in request.fixturenames:
        request.getfixturevalue("standin").reset()


@pytest.fixture
def upstream(standin: Any) -> Any:
    """The session stand-in, already reset (an explicit alternative to relying on the autouse reset)."""
    standin.reset()
    return standin


@pytest.fixture(scope="module")
def billing_proxy(standin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """The billing tests' proxy (``billing.billing_config``): one per test module."""
    from tests.integration.billing import billing_config

    with ProxyProcess(billing_config(standin, tmp_path_factory.mktemp("archive"))) as proxy:
        yield proxy

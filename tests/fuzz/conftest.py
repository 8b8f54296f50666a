"""The fuzz tests' many-case variants run only when slow tests are asked for by name
(``pytest -m slow tests/fuzz``): a plain ``pytest`` runs the few-hundred-case default."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    expr = config.getoption("markexpr") or ""
    wanted = "slow" in expr and "not slow" not in expr
    if wanted:
        return
    skip = pytest.mark.skip(reason="thousands of fuzz cases: run with `pytest -m slow tests/fuzz`")
    for item in items:
        if item.get_closest_marker("fuzz_many"):
            item.add_marker(skip)

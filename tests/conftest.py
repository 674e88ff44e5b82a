"""Shared pytest set-up: figures render off-screen, and each test starts with none open."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Force the non-interactive backend before anything imports pyplot, so figure tests
    # run the same on a headless CI machine as on a desktop.
    import matplotlib

    matplotlib.use("agg", force=True)


@pytest.fixture
def pyplot():
    """matplotlib.pyplot, with every figure closed before and after the test."""
    import matplotlib.pyplot as plt

    plt.close("all")
    yield plt
    plt.close("all")

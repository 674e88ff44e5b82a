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


@pytest.fixture
def tiny_gpt(tmp_path):
    """A factory of small GPT-style presets (a file in tmp_path), for scaled-vs-full checks."""
    from memwall.networks import load_network

    def make(layers: int, d_model: int, d_ff: int, vocab: int, seq_len: int):
        path = tmp_path / f"tiny-gpt-{layers}x{d_model}.toml"
        path.write_text(
            f'id = "tiny-gpt"\nname = "tiny"\nkind = "transformer"\nyear = 2024\nsource = "test"\n'
            f'status = "synthetic"\n[transformer]\nlayers = {layers}\nd_model = {d_model}\nheads = 4\n'
            f"d_ff = {d_ff}\nvocab = {vocab}\nseq_len = {seq_len}\ndropout = true\nlinear_bias = true\n"
            "tied_embeddings = true\n"
        )
        return load_network(path)

    return make

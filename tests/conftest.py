"""Shared pytest set-up: figures render off-screen, each test starts with none open, and
one small real sweep per session serves the sweep, figure and report tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run, so CI cannot fail on a draw that no
# developer saw: a new example is found by changing a test's seed, not by chance.
settings.register_profile("memwall", derandomize=True)
settings.load_profile("memwall")


def pytest_configure(config: pytest.Config) -> None:
    # The per-user cache (memwall.execute.cache) of this session's own: tests never read or
    # write the developer's ~/.cache/memwall, and subprocesses inherit the setting.
    import os
    import tempfile

    os.environ["MEMWALL_CACHE"] = tempfile.mkdtemp(prefix="memwall-test-cache-")
    # Force the non-interactive backend before anything imports pyplot, so figure tests
    # run the same on a headless CI machine as on a desktop.
    import matplotlib

    matplotlib.use("agg", force=True)


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch):
    """Each test a per-user cache of its own (the session's fixtures share the session's):
    a test that runs a case or a prediction runs it, whatever an earlier test stored."""
    monkeypatch.setenv("MEMWALL_CACHE", str(tmp_path_factory.mktemp("cache")))


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


@pytest.fixture(scope="session")
def sweep_cases() -> list:
    """A few cheap real cases with data for every simulated figure: 1980s machines and an
    H100 on classic networks per-example (batches 1 and 2 on the old ones), the H100's
    batch window and a decode at two batches, and the H100 with its memory bandwidth over
    four decades."""
    from memwall.study import design

    old, new, nets = ["vax-11-780", "cray-1"], "h100-sxm", ["nettalk", "encoder-8-3-8"]
    cases = design.product(old, nets, [1, 2], updates="per-example")
    cases += design.product([new], nets, [1], updates="per-example")
    cases += design.product([new], ["gpt2-small"], [1, 4], seq_len=16)
    cases += design.product([new], ["gpt2-small"], [1, 4], phase="decode", context=16)
    cases += design.product(design.synthetic_machines(new, decades=4, per_decade=1), nets[:1], [1],
                        updates="per-example")
    return cases


@pytest.fixture(scope="session")
def quick_sweep(tmp_path_factory, sweep_cases):
    """:func:`memwall.execute.sweep.run_sweep` of ``sweep_cases``, run once per session.
    Its folder is shared: a test that writes there copies it first."""
    from memwall.execute import sweep as sw

    result = sw.run_sweep(sweep_cases, tmp_path_factory.mktemp("quick-sweep"), jobs=2, progress=False)
    assert not result.failed, result.failed
    return result


@pytest.fixture(scope="session")
def fast_measurements() -> Path:
    """Published single GEMMs, which predict in seconds (the shipped set's GPT-3 step
    would take twenty)."""
    from memwall.data import era_data_dir

    return era_data_dir() / "measurements" / "deepbench_v100.toml"



def _deliver_ctrl_c() -> None:
    """The Ctrl-C tests (tests/test_robustness.py) send SIGINT to memwall subprocesses. A
    suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits
    SIGINT ignored, and so would every subprocess: memwall would never see Ctrl-C. The
    suite runs with Python's own handler, as a terminal gives it."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_deliver_ctrl_c()

"""A link's measured collective rate (issue 26, "achievable bandwidth from sources", for
the interconnect): ``[interconnect.<node|cluster>] sustained`` is NCCL's measured bus
bandwidth as this model's per-device rate; every collective's bandwidth term is charged at
it, never above the peak; a what-if on the peak moves it and says so (docs/timing.md,
"Devices and the interconnect")."""

from __future__ import annotations

from pathlib import Path

import pytest

from memwall import interconnect as ic
from memwall.errors import InputError
from memwall.interconnect import Group, Interconnect, Link
from memwall.profiles import all_machines, load_machine
from memwall.simulation import Case, run_case
from memwall.simulation.sensitivity import scaled

S = 1e9
PEAK = Link(bandwidth=300e9, latency=2e-6)
MEASURED = Link(bandwidth=300e9, latency=2e-6, sustained=230e9)


def test_every_collective_is_charged_at_the_sustained_rate() -> None:
    n = 8
    assert ic.ring_all_reduce(S, n, MEASURED) == pytest.approx(2 * (n - 1) * 2e-6 + 2 * (n - 1) / n * S / 230e9)
    box = Interconnect("test", 8, MEASURED, Link(25e9, 5e-6, sustained=20e9))
    assert ic.all_gather(box, Group(n), S) == pytest.approx((n - 1) * 2e-6 + (n - 1) / n * S / 230e9)
    # across 4 nodes: one ring at the slower of the node's measured rate and its NICs' (8 x 20 GB/s)
    bandwidth = 2 * 31 / 32 * S / min(230e9, 8 * 20e9)
    want = min(2 * (28 * 2e-6 + 3 * 5e-6), 2 * (7 * 2e-6 + 2 * 5e-6)) + bandwidth
    assert ic.all_reduce(box, Group(32), S) == pytest.approx(want)
    assert ic.p2p(box, 8, S) == pytest.approx(5e-6 + S / 20e9)
    # a link stating none runs at its peak
    assert PEAK.rate == PEAK.bandwidth and MEASURED.rate == 230e9


def test_scaling_a_link_moves_its_measured_rate_with_it() -> None:
    doubled = MEASURED.scaled(2.0)
    assert (doubled.bandwidth, doubled.sustained) == (600e9, 460e9)
    assert ic.ring_all_reduce(S, 8, doubled) < ic.ring_all_reduce(S, 8, MEASURED)


def _child(tmp_path: Path, sustained: str) -> Path:
    path = tmp_path / "a100-measured-links.toml"
    path.write_text(f"""format_version = 1
base = "a100-sxm"
id = "a100-measured-links"
name = "A100 with a measured NVLink rate (test)"

[interconnect.node]
sustained = {{ value = "{sustained}", source = "fixture", status = "measured", derivation = "test" }}

[sources]
fixture = "memwall test fixture"
""")
    return path


def test_a_sustained_rate_above_the_links_peak_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_machine(str(_child(tmp_path, "400 GB/s")))
    assert err.value.field == "interconnect.node.sustained" and "above the link's peak" in str(err.value)
    assert load_machine(str(_child(tmp_path, "230 GB/s"))).interconnect.node.sustained == pytest.approx(230e9)


def test_a_what_if_on_the_links_peak_moves_its_sustained_rate_and_lists_it(tmp_path: Path) -> None:
    path = str(_child(tmp_path, "240 GB/s"))
    m = load_machine(path, sets={"interconnect.node.bandwidth": "'600 GB/s'"})
    assert m.interconnect.node.bandwidth == pytest.approx(600e9)
    assert m.interconnect.node.sustained == pytest.approx(480e9)
    moved = m.what_if["moved"]
    assert moved["interconnect.node.sustained"]["to"] == pytest.approx(480e9)
    assert "interconnect.node.bandwidth x 2" in moved["interconnect.node.sustained"]["by"]
    # named in the same --set, the figure set wins over the scaling
    both = load_machine(path, sets={"interconnect.node.bandwidth": "'600 GB/s'",
                                    "interconnect.node.sustained": "'500 GB/s'"})
    assert both.interconnect.node.sustained == pytest.approx(500e9)
    assert both.what_if["moved"]["interconnect.node.sustained"]["by"] == "set"


def test_the_sensitivity_moves_a_links_measured_rate_with_its_peak(tmp_path: Path) -> None:
    m = load_machine(str(_child(tmp_path, "240 GB/s")))
    up = scaled(m, "interconnect.node.bandwidth", 1.01)
    assert up.interconnect.node.sustained == pytest.approx(240e9 * 1.01)


def test_a_tensor_parallel_step_is_slower_on_the_measured_rate_than_on_the_peak(tmp_path: Path) -> None:
    case = Case(machine="a100-sxm", network="gpt2-small", batch=4, tp=4, dtype="bf16")
    peak = run_case(case)
    measured = run_case(case, machine=load_machine(str(_child(tmp_path, "150 GB/s"))))
    assert measured["seconds"] > peak["seconds"]


def test_every_shipped_sustained_link_rate_is_sourced_and_below_its_peak() -> None:
    for m in all_machines():
        links = [] if m.interconnect is None else [("node", m.interconnect.node), ("cluster", m.interconnect.cluster)]
        for name, link in links:
            if link is None or link.sustained is None:
                continue
            assert 0 < link.sustained <= link.bandwidth, m.id
            fig = m.provenance[f"interconnect.{name}.sustained"]
            assert fig.source in m.sources and fig.status in ("measured", "secondary", "verified"), m.id
            assert fig.derivation, m.id


def test_an_all_reduce_within_a_node_runs_at_the_nodes_measured_all_reduce_rate() -> None:
    nvls = Link(bandwidth=450e9, latency=2e-6, sustained=370e9, sustained_all_reduce=480e9)
    box = Interconnect("test", 8, nvls, Link(50e9, 5e-6, sustained=48e9))
    n = 8
    # within the node: the all-reduce at 480 (the switch reduces), the gathers at 370
    want = ic.flat_all_reduce(S, n, Link(450e9, 2e-6, sustained=480e9))
    assert ic.all_reduce(box, Group(n), S) == pytest.approx(want)
    assert ic.all_reduce(box, Group(n), S) < ic.ring_all_reduce(S, n, Link(450e9, 2e-6))
    assert ic.all_gather(box, Group(n), S) == pytest.approx((n - 1) * 2e-6 + (n - 1) / n * S / 370e9)
    # across nodes NCCL's ring or tree through every device: the node's ring rate, not NVLS's
    bandwidth = 2 * 31 / 32 * S / min(370e9, 8 * 48e9)
    across = min(2 * (28 * 2e-6 + 3 * 5e-6), 2 * (7 * 2e-6 + 2 * 5e-6)) + bandwidth
    assert ic.all_reduce(box, Group(32), S) == pytest.approx(across)
    assert nvls.scaled(2.0).sustained_all_reduce == 960e9


def test_an_all_reduce_rate_above_twice_the_peak_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h100-nvls.toml"
    path.write_text("""format_version = 1
base = "h100-sxm"
id = "h100-nvls"
name = "H100 with a bad all-reduce rate (test)"

[interconnect.node]
sustained_all_reduce = { value = "950 GB/s", source = "fixture", status = "measured", derivation = "test" }

[sources]
fixture = "memwall test fixture"
""")
    with pytest.raises(InputError) as err:
        load_machine(str(path))
    assert err.value.field == "interconnect.node.sustained_all_reduce" and "twice" in str(err.value)
    m = load_machine("h100-sxm", sets={"interconnect.node.bandwidth": "'900 GB/s'"})
    assert m.interconnect.node.sustained_all_reduce == pytest.approx(2 * 478.87e9)
    assert "interconnect.node.sustained_all_reduce" in m.what_if["moved"]


def test_the_h100s_node_runs_its_gathers_below_the_peak_and_its_all_reduce_above() -> None:
    h100 = load_machine("h100-sxm").interconnect
    peak = Interconnect("peak", 8, Link(h100.node.bandwidth, h100.node.latency))
    assert ic.all_gather(h100, Group(8), S) > ic.all_gather(peak, Group(8), S)
    assert ic.all_reduce(h100, Group(8), S) < ic.all_reduce(peak, Group(8), S)

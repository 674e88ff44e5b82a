"""The link model's closed forms (docs/timing.md, "Devices and the interconnect"), the
[interconnect] profile table, and its refusals."""

from __future__ import annotations

import math

import pytest

from memwall import interconnect as ic
from memwall.errors import InputError
from memwall.interconnect import Group, Interconnect, Link
from memwall.profiles import load_machine

NODE = Link(bandwidth=100e9, latency=2e-6)
CLUSTER = Link(bandwidth=25e9, latency=5e-6)
BOX = Interconnect("test", 8, NODE, CLUSTER)
S = 1e9


def test_ring_all_reduce_is_2_n_minus_1_steps_and_2_n_minus_1_over_n_of_the_bytes() -> None:
    n = 8
    assert ic.ring_all_reduce(S, n, NODE) == pytest.approx(2 * (n - 1) * 2e-6 + 2 * (n - 1) / n * S / 100e9)


def test_tree_all_reduce_has_log_steps_and_the_same_bandwidth_term() -> None:
    n = 64
    assert ic.tree_all_reduce(S, n, NODE) == pytest.approx(2 * 6 * 2e-6 + 2 * (n - 1) / n * S / 100e9)
    # the flat all-reduce takes the faster: the tree at many devices, both equal in bandwidth
    assert ic.flat_all_reduce(S, n, NODE) == ic.tree_all_reduce(S, n, NODE)


def test_all_gather_and_reduce_scatter_move_n_minus_1_over_n() -> None:
    n = 4
    want = (n - 1) * 2e-6 + (n - 1) / n * S / 100e9
    assert ic.all_gather(BOX, Group(n), S) == pytest.approx(want)
    assert ic.reduce_scatter(BOX, Group(n), S) == pytest.approx(want)


def test_one_device_communicates_nothing() -> None:
    for kind in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        assert ic.collective(BOX, kind, Group(1), S) == 0.0


def test_an_all_reduce_across_nodes_is_nccls_ring_or_tree_through_every_device() -> None:
    # 32 devices, 8 a node, 4 nodes (NCCL 2.7.5 tuning.cc): one ring through all 32, its
    # 2(n-k) steps inside nodes at the node's alpha and 2(k-1) between them at the
    # cluster's; or a tree, 2((q-1) alpha_node + log2(k) alpha_cluster); both pipelined at
    # beta = min(beta_node, q beta_cluster) = min(100, 8 x 25) GB/s
    n, k, q = 32, 4, 8
    bandwidth = 2 * (n - 1) / n * S / min(100e9, q * 25e9)
    ring = 2 * (n - k) * 2e-6 + 2 * (k - 1) * 5e-6 + bandwidth
    tree = 2 * ((q - 1) * 2e-6 + 2 * 5e-6) + bandwidth
    assert ic.all_reduce(BOX, Group(32), S) == pytest.approx(min(ring, tree))
    # the measured DGX A100 figure this rests on: 8 NICs of 24 GB/s make 192 GB/s of bus bandwidth
    nics = Interconnect("a100", 8, Link(300e9, 1e-9, sustained=231.6e9), Link(25e9, 1e-9, sustained=24e9))
    seconds = ic.all_reduce(nics, Group(64), 8e9)
    assert 2 * 63 / 64 * 8e9 / seconds == pytest.approx(192e9, rel=1e-3)


def test_an_all_gather_across_nodes_is_one_ring_whose_steps_grow_with_the_devices() -> None:
    for nodes in (2, 16, 128):
        n = 8 * nodes
        want = (n - nodes) * 2e-6 + (nodes - 1) * 5e-6 + (n - 1) / n * S / min(100e9, 8 * 25e9)
        assert ic.all_gather(BOX, Group(n), S) == pytest.approx(want)
        assert ic.reduce_scatter(BOX, Group(n), S) == pytest.approx(want)
    # small messages at scale: the latency of n steps, not of k + q
    assert ic.all_gather(BOX, Group(1024), 1e3) > 1000 * 2e-6


def test_a_strided_group_lands_one_member_a_node() -> None:
    g = Group(size=4, stride=8)  # data parallel across four 8-GPU nodes
    assert (g.per_node(8), g.nodes(8)) == (1, 4)
    assert ic.all_reduce(BOX, g, S) == pytest.approx(ic.flat_all_reduce(S, 4, CLUSTER))
    assert Group(size=4, stride=2).per_node(8) == 4


def test_all_to_all_sends_n_minus_1_over_n_of_its_buffer() -> None:
    n = 8
    assert ic.all_to_all(BOX, Group(n), S) == pytest.approx((n - 1) * 2e-6 + (n - 1) / n * S / 100e9)
    assert ic.bus_bytes("all-to-all", n, S) == pytest.approx(7 / 8 * S)
    assert ic.bus_bytes("all-reduce", n, S) == pytest.approx(2 * 7 / 8 * S)


def test_p2p_takes_the_node_link_inside_a_node_and_the_cluster_link_across() -> None:
    assert ic.p2p(BOX, 1, S) == pytest.approx(2e-6 + S / 100e9)
    assert ic.p2p(BOX, 8, S) == pytest.approx(5e-6 + S / 25e9)


@pytest.mark.parametrize("p, m", [(1, 1), (2, 4), (4, 8), (16, 64), (8, 1)])
def test_bubble_fraction_is_p_minus_1_over_m_plus_p_minus_1(p: int, m: int) -> None:
    assert ic.bubble_fraction(p, m) == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize("g", [2, 4])
@pytest.mark.parametrize("n", [1, 8, 64])
def test_zero_bytes_per_parameter_rajbhandari(n: int, g: int) -> None:
    w, o = 2, 12
    assert ic.zero_bytes_per_parameter(0, n, w, g, o) == w + g + o
    assert ic.zero_bytes_per_parameter(1, n, w, g, o) == pytest.approx(w + g + o / n)
    assert ic.zero_bytes_per_parameter(2, n, w, g, o) == pytest.approx(w + (g + o) / n)
    assert ic.zero_bytes_per_parameter(3, n, w, g, o) == pytest.approx((w + g + o) / n)


def test_zero_stage_out_of_range_is_refused() -> None:
    with pytest.raises(InputError, match="ZeRO stage"):
        ic.zero_bytes_per_parameter(4, 8)


@pytest.mark.parametrize("kind", ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p"])
@pytest.mark.parametrize("size, stride", [(8, 1), (64, 1), (16, 8)])
def test_more_bandwidth_is_never_slower(kind: str, size: int, stride: int) -> None:
    for factor in (1.5, 2.0, 10.0):
        faster = Interconnect("test", 8, NODE.scaled(factor), CLUSTER.scaled(factor))
        assert ic.collective(faster, kind, Group(size, stride), S) < ic.collective(BOX, kind, Group(size, stride), S)


def test_a_group_beyond_one_node_needs_the_cluster_table() -> None:
    one_node = Interconnect("solo", 8, NODE)
    assert ic.all_reduce(one_node, Group(8), S) > 0
    with pytest.raises(InputError, match="solo.*interconnect.cluster"):
        ic.all_reduce(one_node, Group(16), S)


def test_profiles_read_the_interconnect_table_in_si_units() -> None:
    h100 = load_machine("h100-sxm").interconnect
    assert h100 is not None
    assert h100.devices_per_node == 8
    assert h100.node.bandwidth == pytest.approx(450e9)
    assert h100.cluster is not None and h100.cluster.bandwidth == pytest.approx(50e9)
    assert math.isclose(h100.node.latency, 1.9e-6)
    # an inheriting profile keeps its base's links
    assert load_machine("h200").interconnect == h100.__class__("h200", 8, h100.node, h100.cluster)
    assert load_machine("cray-1").interconnect is None


def test_a_figure_without_provenance_in_the_table_is_refused(tmp_path) -> None:
    from memwall.profiles import validate_paths

    text = (load_machine("h100-sxm").path.read_text()  # type: ignore[union-attr]
            .replace('devices_per_node = { value = 8, source = "mle_net", status = "secondary", note = "HGX/DGX '
                     'H100: 8 GPUs on 4 third-generation NVSwitches" }', "devices_per_node = 8"))
    path = tmp_path / "h100-sxm.toml"
    path.write_text(text)
    errors = validate_paths([path])
    assert any("interconnect.devices_per_node" in str(e) for e in errors), errors


def test_exposed_time_follows_each_overlap_rule() -> None:
    from memwall.timing import BUCKET_BYTES, time_communication
    from memwall.workloads.parallel import Comm

    g = Group(8)
    one = ic.all_gather(BOX, g, S)
    comms = [Comm("crit", "all-gather", 8, 1, int(S), 3, "micro", "critical"),
             Comm("bwd", "all-reduce", 8, 1, int(S), 1, "step", "backward"),
             Comm("pre", "all-gather", 8, 1, int(S), 4, "micro", "compute")]
    m, t_micro, t_bwd = 2, 1.5 * one, 0.001
    crit, bwd, pre = time_communication(BOX, comms, micro_batches=m, micro_seconds=t_micro, backward_seconds=t_bwd)
    assert crit.exposed == pytest.approx(m * 3 * one) == pytest.approx(crit.seconds)
    t_ar = ic.all_reduce(BOX, g, S)
    assert bwd.exposed == pytest.approx(max(ic.all_reduce(BOX, g, BUCKET_BYTES), t_ar - t_bwd))
    # the first gather of each micro-batch is waited for; the other three hide behind 1.5 of them
    assert pre.exposed == pytest.approx(m * (one + (3 * one - t_micro)))
    assert pre.sent == pytest.approx(m * 4 * 7 / 8 * S)

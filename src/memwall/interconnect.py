"""The link model: how long collectives and point-to-point transfers take between devices.

Owns: :class:`Link` (one class of link: bandwidth per device per direction, latency per
algorithm step), :class:`Interconnect` (a profile's ``[interconnect]``: devices per node,
the link within a node and the link across nodes), :class:`Group` (the devices of one
collective, placed on nodes by their rank stride) and the closed forms of
``docs/timing.md``, "Devices and the interconnect": ring and tree all-reduce, all-gather,
reduce-scatter, all-to-all and point-to-point; a ring or tree that spans nodes as NCCL's
own tuning model times it (one ring through every device, its steps at the latency of the
hop they cross, its bandwidth the slower of the node's link and the node's share of its
NICs); the 1F1B pipeline bubble, plain or interleaved (:func:`bubble_fraction`); ZeRO's bytes per parameter
(:func:`zero_bytes_per_parameter`). Every function is pure: seconds from bytes, devices
and links, nothing from the engine.

Bytes ``S`` are what one device holds: the buffer an all-reduce reduces, the gathered
result of an all-gather, the input of a reduce-scatter, the buffer an all-to-all
exchanges. A group of ``n`` devices with ``q`` on each node spans ``k = n / q`` nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .errors import InputError

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p")


@dataclass(frozen=True)
class Link:
    """One class of link, as one device sees it."""

    bandwidth: float  # bytes per second per device, one direction: the datasheet's peak
    latency: float  # seconds per step of a collective's algorithm (alpha)
    energy: float | None = None  # joules per bit a device sends; None: not stated
    sustained: float | None = None  # bytes per second NCCL's collectives are measured to reach; None: the peak
    sustained_all_reduce: float | None = None  # ... its all-reduce within one node, where it differs; None: sustained

    @property
    def rate(self) -> float:
        """beta, the rate every collective's bandwidth term is charged at: the measured
        sustained rate where the profile states one, else the peak (docs/timing.md,
        "Devices and the interconnect")."""
        return self.bandwidth if self.sustained is None else self.sustained

    def for_all_reduce(self) -> Link:
        """The link as an all-reduce within one node sees it: at its measured all-reduce
        rate where the profile states one (NVLink SHARP reduces in the switch, so the bus
        bandwidth can exceed the wire's), else as every collective."""
        if self.sustained_all_reduce is None:
            return self
        return replace(self, sustained=self.sustained_all_reduce, sustained_all_reduce=None)

    def scaled(self, factor: float) -> Link:
        """The same link with ``factor`` times the bandwidth, its measured rates moved with
        it (what-if and invariant tests)."""
        def times(rate: float | None) -> float | None:
            return None if rate is None else rate * factor

        return replace(self, bandwidth=self.bandwidth * factor, sustained=times(self.sustained),
                       sustained_all_reduce=times(self.sustained_all_reduce))


@dataclass(frozen=True)
class Interconnect:
    """A machine's links: ``node`` joins the ``devices_per_node`` devices of one node,
    ``cluster`` joins nodes (None: the profile describes one node only)."""

    machine: str  # the profile id, for errors
    devices_per_node: int
    node: Link
    cluster: Link | None = None


@dataclass(frozen=True)
class Group:
    """The devices of one collective: ``size`` of them, ``stride`` ranks apart (ranks are
    filled node by node: rank r is on node r // devices_per_node)."""

    size: int
    stride: int = 1

    def per_node(self, devices_per_node: int) -> int:
        """q: members on one node (the group is aligned: strides and sizes divide or are powers of two)."""
        if self.stride >= devices_per_node:
            return 1
        return max(1, min(self.size, devices_per_node // self.stride))

    def nodes(self, devices_per_node: int) -> int:
        """k: nodes the group spans."""
        return -(-self.size // self.per_node(devices_per_node))


def _ring(steps: int, fraction: float, nbytes: float, link: Link) -> float:
    """``steps`` latency terms and ``fraction`` of ``nbytes`` through ``link``."""
    return steps * link.latency + fraction * nbytes / link.rate


def ring_all_reduce(nbytes: float, n: int, link: Link) -> float:
    """2(n-1) alpha + 2(n-1)/n . S / beta."""
    return _ring(2 * (n - 1), 2 * (n - 1) / n, nbytes, link) if n > 1 else 0.0


def tree_all_reduce(nbytes: float, n: int, link: Link) -> float:
    """A double binary tree (NCCL): 2 ceil(log2 n) alpha + 2(n-1)/n . S / beta (the same
    bandwidth term as the ring, nccl-tests PERFORMANCE.md; fewer latency steps)."""
    return _ring(2 * math.ceil(math.log2(n)), 2 * (n - 1) / n, nbytes, link) if n > 1 else 0.0


def flat_all_reduce(nbytes: float, n: int, link: Link) -> float:
    """The faster of ring and tree, as NCCL's tuner picks."""
    return min(ring_all_reduce(nbytes, n, link), tree_all_reduce(nbytes, n, link))


def ring_gather(nbytes: float, n: int, link: Link) -> float:
    """All-gather or reduce-scatter: (n-1) alpha + (n-1)/n . S / beta."""
    return _ring(n - 1, (n - 1) / n, nbytes, link) if n > 1 else 0.0


class _Placed:
    """A group on a machine's links: q members per node over k nodes."""

    def __init__(self, ic: Interconnect, group: Group) -> None:
        if group.size < 1 or group.stride < 1:
            raise InputError(f"a group needs at least one device and a stride of one, got {group}", field="parallel")
        self.q = group.per_node(ic.devices_per_node)
        self.k = group.nodes(ic.devices_per_node)
        self.n = self.q * self.k
        self.node = ic.node
        if self.k > 1 and ic.cluster is None:
            raise InputError(f"machine {ic.machine!r} describes one node of {ic.devices_per_node} devices: a group "
                             f"of {group.size} devices spanning {self.k} nodes needs [interconnect.cluster]",
                             field="interconnect.cluster")
        self.cluster = ic.cluster or ic.node


def _spanning_bytes(p: _Placed, passes: int, nbytes: float) -> float:
    """The bandwidth term of ``passes`` passes of NCCL's ring or tree over k > 1 nodes (its
    tuning model, nccl_2_7_5 tuning.cc): passes (n-1)/n S / min(beta_node, q beta_cluster),
    every step pipelined through the NVLink hops and the node's q NICs at once, so the
    slower of the two carries the bytes."""
    return passes * (p.n - 1) / p.n * nbytes / min(p.node.rate, p.q * p.cluster.rate)


def _spanning_ring(p: _Placed, passes: int, nbytes: float) -> float:
    """``passes`` passes of one ring through all n devices of k > 1 nodes: per pass (n - k)
    steps between devices of a node at the node's alpha and (k - 1) between nodes at the
    cluster's (NCCL's nsteps - nInterSteps and nInterSteps), and the bytes."""
    steps = passes * ((p.n - p.k) * p.node.latency + (p.k - 1) * p.cluster.latency)
    return steps + _spanning_bytes(p, passes, nbytes)


def all_reduce(ic: Interconnect, group: Group, nbytes: float) -> float:
    """Within a node: the faster of ring and tree, at the node's all-reduce rate
    (:meth:`Link.for_all_reduce`). Across k nodes, as NCCL's tuner times its two
    algorithms, the faster of: a ring through all n devices, 2 (n-k) alpha_node +
    2 (k-1) alpha_cluster + 2 (n-1)/n . S / beta; a tree (a chain in each node, a double
    binary tree across nodes), 2 [(q-1) alpha_node + ceil(log2 k) alpha_cluster] +
    2 (n-1)/n . S / beta; beta = min(beta_node, q beta_cluster)."""
    p = _Placed(ic, group)
    if p.k == 1:
        return flat_all_reduce(nbytes, p.q, p.node.for_all_reduce())
    tree = 2 * ((p.q - 1) * p.node.latency + math.ceil(math.log2(p.k)) * p.cluster.latency)
    return min(_spanning_ring(p, 2, nbytes), tree + _spanning_bytes(p, 2, nbytes))


def all_gather(ic: Interconnect, group: Group, nbytes: float) -> float:
    """Gather pieces of S/n into S. Within a node: a ring, (q-1) alpha + (q-1)/q . S / beta.
    Across k nodes: NCCL's one ring through all n devices (the only algorithm its
    all-gather had before PAT, and still the one for several devices a node),
    (n-k) alpha_node + (k-1) alpha_cluster + (n-1)/n . S / min(beta_node, q beta_cluster)."""
    p = _Placed(ic, group)
    if p.k == 1:
        return ring_gather(nbytes, p.q, p.node)
    return _spanning_ring(p, 1, nbytes)


def reduce_scatter(ic: Interconnect, group: Group, nbytes: float) -> float:
    """The mirror of :func:`all_gather`: the same time."""
    return all_gather(ic, group, nbytes)


def all_to_all(ic: Interconnect, group: Group, nbytes: float) -> float:
    """Each device sends S/n to every other: (q-1) alpha_node + (q-1)/n . S / beta_node
    within the node, then (k-1) alpha_cluster + (n-q)/n . S / beta_cluster across."""
    p = _Placed(ic, group)
    n = p.n
    if n == 1:
        return 0.0
    within = (p.q - 1) * p.node.latency + (p.q - 1) / n * nbytes / p.node.rate
    across = (p.k - 1) * p.cluster.latency + (n - p.q) / n * nbytes / p.cluster.rate if p.k > 1 else 0.0
    return within + across


def p2p(ic: Interconnect, stride: int, nbytes: float) -> float:
    """One device sends S to the device ``stride`` ranks on: alpha + S / beta, over the node
    link when both are on one node (stride < devices_per_node), else the cluster's."""
    p = _Placed(ic, Group(2, stride))
    link = p.node if p.k == 1 else p.cluster
    return link.latency + nbytes / link.rate


def collective(ic: Interconnect, kind: str, group: Group, nbytes: float) -> float:
    """Seconds of one collective of ``kind`` (one of :data:`COLLECTIVES`)."""
    if kind == "p2p":
        return p2p(ic, group.stride, nbytes)
    fn = {"all-reduce": all_reduce, "all-gather": all_gather, "reduce-scatter": reduce_scatter,
          "all-to-all": all_to_all}.get(kind)
    if fn is None:
        raise InputError(f"unknown collective {kind!r}; one of {', '.join(COLLECTIVES)}", field="collective")
    return fn(ic, group, nbytes)


def sent_by_link(ic: Interconnect, kind: str, group: Group, nbytes: float) -> dict[str, float]:
    """Bytes one device sends over each class of link (``node``, ``cluster``) for one
    collective, by the same algorithms the times follow: within a node the ring's
    (q-1)/q S per pass; across k nodes NCCL's one ring, whose q channels leave each node
    by a different device's NIC, so a device sends (n-1)/n S per pass, 1/q of it over its
    NIC and the rest over the node's link; an all-to-all's (q-1)/n S stays on the node
    and (n-q)/n S leaves it. They add up to :func:`bus_bytes`."""
    p = _Placed(ic, Group(2, group.stride) if kind == "p2p" else group)
    n = p.n
    if kind == "p2p":
        return {"node": nbytes, "cluster": 0.0} if p.k == 1 else {"node": 0.0, "cluster": nbytes}
    if kind == "all-to-all":
        return {"node": (p.q - 1) / n * nbytes if n > 1 else 0.0, "cluster": (n - p.q) / n * nbytes if n > 1 else 0.0}
    passes = 2 if kind == "all-reduce" else 1
    if p.k == 1:
        return {"node": passes * (p.q - 1) / p.q * nbytes, "cluster": 0.0}
    sent = passes * (n - 1) / n * nbytes
    return {"node": sent * (p.q - 1) / p.q, "cluster": sent / p.q}


def bus_bytes(kind: str, n: int, nbytes: float) -> float:
    """Bytes one device sends for a collective: 2(n-1)/n S for an all-reduce, (n-1)/n S for
    the others, S for a point-to-point send."""
    if kind == "p2p":
        return nbytes
    if n <= 1:
        return 0.0
    return (2 if kind == "all-reduce" else 1) * (n - 1) / n * nbytes


def bubble_fraction(stages: int, micro_batches: int, interleave: int = 1) -> float:
    """1F1B's idle share of a pipeline step: (p-1)/(m+p-1); interleaved over V virtual stages
    a device, (p-1)/(V m + p - 1), i.e. Narayanan et al.'s (p-1)/(V m) of the ideal time
    (Narayanan et al. 2021, section 2.2)."""
    if stages < 1 or micro_batches < 1 or interleave < 1:
        raise InputError(f"need at least one stage, one micro-batch and one virtual stage, got p={stages}, "
                         f"m={micro_batches}, V={interleave}", field="pp")
    return (stages - 1) / (interleave * micro_batches + stages - 1)


def zero_bytes_per_parameter(stage: int, n: int, w: float = 2, g: float = 2, optimizer: float = 12) -> float:
    """Bytes a device holds per parameter with ZeRO (Rajbhandari et al. 2020): w + g + o at
    stage 0, w + g + o/N at 1, w + (g + o)/N at 2, (w + g + o)/N at 3."""
    if stage not in (0, 1, 2, 3):
        raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}", field="zero")
    if n < 1:
        raise InputError(f"need at least one data-parallel device, got {n}", field="dp")
    return (w if stage < 3 else w / n) + (g if stage < 2 else g / n) + (optimizer if stage < 1 else optimizer / n)

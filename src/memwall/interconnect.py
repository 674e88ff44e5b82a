"""The link model: how long collectives and point-to-point transfers take between devices.

Owns: :class:`Link` (one class of link: bandwidth per device per direction, latency per
algorithm step), :class:`Interconnect` (a profile's ``[interconnect]``: devices per node,
the link within a node and the link across nodes), :class:`Group` (the devices of one
collective, placed on nodes by their rank stride) and the closed forms of
``docs/timing.md``, "Devices and the interconnect": ring and tree all-reduce, all-gather,
reduce-scatter, all-to-all and point-to-point, each hierarchical when its group spans
nodes; the 1F1B pipeline bubble, plain or interleaved (:func:`bubble_fraction`); ZeRO's bytes per parameter
(:func:`zero_bytes_per_parameter`). Every function is pure: seconds from bytes, devices
and links, nothing from the engine.

Bytes ``S`` are what one device holds: the buffer an all-reduce reduces, the gathered
result of an all-gather, the input of a reduce-scatter, the buffer an all-to-all
exchanges. A group of ``n`` devices with ``q`` on each node spans ``k = n / q`` nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        return Link(self.bandwidth, self.latency, self.energy, self.sustained_all_reduce)

    def scaled(self, factor: float) -> Link:
        """The same link with ``factor`` times the bandwidth, its measured rates moved with
        it (what-if and invariant tests)."""
        return Link(self.bandwidth * factor, self.latency, self.energy,
                    None if self.sustained is None else self.sustained * factor,
                    None if self.sustained_all_reduce is None else self.sustained_all_reduce * factor)


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
        self.node = ic.node
        if self.k > 1 and ic.cluster is None:
            raise InputError(f"machine {ic.machine!r} describes one node of {ic.devices_per_node} devices: a group "
                             f"of {group.size} devices spanning {self.k} nodes needs [interconnect.cluster]",
                             field="interconnect.cluster")
        self.cluster = ic.cluster or ic.node


def all_reduce(ic: Interconnect, group: Group, nbytes: float) -> float:
    """Within a node: the faster of ring and tree, at the node's all-reduce rate
    (:meth:`Link.for_all_reduce`). Across k nodes: reduce-scatter within the node,
    all-reduce of S/q across nodes (ring or tree), all-gather within the node."""
    p = _Placed(ic, group)
    if p.k == 1:
        return flat_all_reduce(nbytes, p.q, p.node.for_all_reduce())
    return 2 * ring_gather(nbytes, p.q, p.node) + flat_all_reduce(nbytes / p.q, p.k, p.cluster)


def all_gather(ic: Interconnect, group: Group, nbytes: float) -> float:
    """Gather pieces of S/n into S: across nodes first (S/q per device), then within the node."""
    p = _Placed(ic, group)
    return ring_gather(nbytes / p.q, p.k, p.cluster) + ring_gather(nbytes, p.q, p.node)


def reduce_scatter(ic: Interconnect, group: Group, nbytes: float) -> float:
    """The mirror of :func:`all_gather`: the same time."""
    return all_gather(ic, group, nbytes)


def all_to_all(ic: Interconnect, group: Group, nbytes: float) -> float:
    """Each device sends S/n to every other: (q-1) alpha_node + (q-1)/n . S / beta_node
    within the node, then (k-1) alpha_cluster + (n-q)/n . S / beta_cluster across."""
    p = _Placed(ic, group)
    n = p.q * p.k
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
    collective, by the same hierarchical algorithms the times follow: within a node the
    ring's (q-1)/q S per pass, across k nodes (k-1)/k of the S/q each node's device
    carries; an all-to-all's (q-1)/n S stays on the node and (n-q)/n S leaves it. On one
    node they add up to :func:`bus_bytes`."""
    p = _Placed(ic, Group(2, group.stride) if kind == "p2p" else group)
    n = p.q * p.k
    if kind == "p2p":
        return {"node": nbytes, "cluster": 0.0} if p.k == 1 else {"node": 0.0, "cluster": nbytes}
    if kind == "all-to-all":
        return {"node": (p.q - 1) / n * nbytes if n > 1 else 0.0, "cluster": (n - p.q) / n * nbytes if n > 1 else 0.0}
    passes = 2 if kind == "all-reduce" else 1
    return {"node": passes * (p.q - 1) / p.q * nbytes, "cluster": passes * (p.k - 1) / p.k * nbytes / p.q}


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

"""The liveness pass: lifetimes and classes derived from the declared kernels, never placed."""

from __future__ import annotations

import bisect

import pytest

from memwall.networks import load_network
from memwall.workloads.config import TrainingConfig
from memwall.workloads.graph import PARAMETER_CLASSES, Graph
from memwall.workloads.liveness import classes, derive
from memwall.workloads.step import build_step, declare

CASES = [("lecun-1989", TrainingConfig(batch=3)), ("nettalk", TrainingConfig(batch=2, optimizer="adam")),
         ("resnet-50", TrainingConfig(batch=1)), ("gpt2-small", TrainingConfig(batch=1, seq_len=64)),
         ("deepseek-v3", TrainingConfig(batch=1, seq_len=16, dtype="bf16")),
         ("llama3-8b", TrainingConfig(batch=1, seq_len=32, checkpoint="sqrt")),
         ("bert-large", TrainingConfig(batch=1, seq_len=32, checkpoint="selective", phase="forward"))]


def _uses(g: Graph) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for j, op in enumerate(g.ops):
        for t in op.touches:
            out.setdefault(g.root(t)[0], []).append(j)
    return out


def _check_lifetimes(g: Graph) -> None:
    _, layout = derive(g)
    uses = _uses(g)
    for tid, js in uses.items():
        d = g.tensors[tid]
        if d.whole_step:
            assert layout.alloc_before[tid] == 0 and layout.free_after[tid] is None, tid
        else:
            assert (layout.alloc_before[tid], layout.free_after[tid]) == (min(js), max(js)), tid
    # a tensor no kernel touches is never allocated (unless it lives the whole step)
    assert {t for t in layout.alloc_before if not g.tensors[t].whole_step} == {t for t in uses if not g.tensors[t].whole_step}


def _check_no_overlap(g: Graph) -> None:
    """Tensors live at the same time never share a byte; only parameters and the batch outlive the step."""
    _, layout = derive(g)
    starts: dict[int, list[str]] = {}
    ends: dict[int, list[str]] = {}
    for t, j in layout.alloc_before.items():
        starts.setdefault(j, []).append(t)
        if layout.free_after[t] is not None:
            ends.setdefault(layout.free_after[t], []).append(t)
    live: dict[str, tuple[int, int]] = {}
    spans: list[tuple[int, int, str]] = []  # live spans, sorted by address
    for j in range(len(g.ops)):
        for t in starts.get(j, ()):
            r = layout.refs[t]
            span = (r.addr, r.addr + r.bytes, t)
            i = bisect.bisect(spans, span)
            assert i == 0 or spans[i - 1][1] <= span[0], (t, spans[i - 1][2])
            assert i == len(spans) or span[1] <= spans[i][0], (t, spans[i][2])
            spans.insert(i, span)
            live[t] = span[:2]
        for t in ends.get(j, ()):
            spans.remove((*live.pop(t), t))
    assert set(live) == set(layout.live_at_end)
    for t in layout.live_at_end:
        d = g.tensors[t]
        assert d.whole_step and (d.cls in PARAMETER_CLASSES or d.cls == "input"), t


def test_toy_lifetimes_and_addresses():
    _check_lifetimes(_toy()[0])
    _check_no_overlap(_toy()[0])
    a, b = derive(_toy()[0])[0], derive(_toy()[0])[0]
    assert [k.as_dict() for k in a] == [k.as_dict() for k in b]


@pytest.mark.parametrize(("nid", "cfg"), CASES, ids=[c[0] for c in CASES])
def test_each_tensor_lives_from_its_first_use_to_its_last(nid, cfg):
    _check_lifetimes(declare(load_network(nid), cfg))


@pytest.mark.parametrize(("nid", "cfg"), CASES, ids=[c[0] for c in CASES])
def test_live_tensors_never_overlap_and_only_parameters_outlive_the_step(nid, cfg):
    _check_no_overlap(declare(load_network(nid), cfg))


def test_addresses_are_deterministic_across_builds(tiny_gpt):
    net = tiny_gpt(3, 64, 256, 100, 32)
    for cfg in (TrainingConfig(batch=2, checkpoint="every:2"), TrainingConfig(batch=2, optimizer="adam")):
        a, b = build_step(net, cfg), build_step(net, cfg)
        assert [k.reads + k.writes for k in a.kernels] == [k.reads + k.writes for k in b.kernels]
    c, d = build_step(load_network("lecun-1989"), TrainingConfig(batch=4)), build_step(load_network("lecun-1989"),
                                                                                         TrainingConfig(batch=4))
    assert [k.as_dict() for k in c.kernels] == [k.as_dict() for k in d.kernels]


def _toy() -> tuple[Graph, dict[str, str]]:
    """x -> [block 0: y = x.W, relu] -> head -> loss; backward reads y and the relu mask."""
    g = Graph("fp32")
    t = {"x": g.tensor("x", 64, cls="input", whole_step=True)}
    w = g.param("w", 64 * 64, training=True, optimizer="sgd")
    with g.at(block=0):
        t["qkv"] = g.tensor("qkv", 3 * 64)
        t["q"] = g.view(t["qkv"], "q", 0, 64 * 4)
        t["k"] = g.view(t["qkv"], "k", 64 * 4, 64 * 4)
        t["y"] = g.tensor("y", 64)
        t["scratch"] = g.tensor("scratch", 64)
        g.gemm("fwd", "forward", t["x"], w.w, t["qkv"], 1, 3 * 64, 64)
        g.ew("use.q", "forward", (t["q"],), (t["scratch"],), 64, {"mul": 1})
        g.ew("act", "forward", (t["scratch"],), (t["y"],), 64, {"max": 1})
    t["head"] = g.tensor("head", 64)
    g.ew("head", "forward", (t["y"],), (t["head"],), 64, {"add": 1})
    t["dy"] = g.tensor("dy", 64)
    g.ew("loss", "backward", (t["head"],), (t["dy"],), 64, {"add": 1}, role="loss")
    g.ew("head.bwd", "backward", (t["dy"], t["head"]), (t["dy"],), 64, {"add": 1})
    with g.at(block=0):
        g.ew("act.bwd", "backward", (t["dy"], t["y"]), (t["dy"],), 64, {"mul": 1})
        g.ew("k.bwd", "backward", (t["dy"], t["k"]), (t["dy"],), 64, {"mul": 1})
        g.gemm("dW", "backward", t["dy"], t["x"], w.g, 64, 64, 1)
    g.updates("sgd")
    return g, t


def test_class_follows_use():
    g, t = _toy()
    cls = classes(g)
    # touched by a block's forward and read in backward: saved
    assert cls[t["y"]] == "activations" and cls[t["qkv"]] == "activations"
    # forward only: workspace; the head's buffer, read in backward, is still not a layer's saving
    assert cls[t["scratch"]] == "workspace" and cls[t["head"]] == "workspace" and cls[t["dy"]] == "workspace"
    assert cls[t["x"]] == "input"


def test_a_view_keeps_its_parent_alive():
    g, t = _toy()
    kernels, layout = derive(g)
    names = [op.name for op in g.ops]
    # qkv itself is last touched by "use.q" (through q), but its view k is read in k.bwd
    assert layout.free_after[t["qkv"]] == names.index("k.bwd")
    assert layout.refs[t["k"]].addr == layout.refs[t["qkv"]].addr + 64 * 4
    assert layout.refs[t["k"]].cls == "activations"
    (kbwd,) = [k for k in kernels if k.name == "k.bwd"]
    assert kbwd.reads[1].name == "k" and kbwd.reads[1].bytes == 256


def test_adding_a_kernel_never_touches_a_free_list():
    """A custom builder declares one more kernel (a dropout on L1's output) and gets a valid step."""
    net = load_network("nettalk")
    cfg = TrainingConfig(batch=4)
    plain_g = declare(net, cfg)
    g = declare(net, cfg)
    # the extra kernel and its gradient: declared, nothing else
    y = next(t for t, d in g.tensors.items() if d.name == "L1.y")
    fwd = next(j for j, op in enumerate(g.ops) if op.name == "L1.epilogue")
    with g.at(block=0):
        mask = g.tensor("L1.mask", 4 * 80, 1)
        g.ew("L1.dropout", "forward", (y,), (mask, y), 4 * 80, {"mul": 1})
        extra = g.ops.pop()
        g.ops.insert(fwd + 1, extra)
        dz = next(t for t, d in g.tensors.items() if d.name == "L1.dz")
        bwd = next(j for j, op in enumerate(g.ops) if op.name == "L1.epilogue.bwd")
        g.ew("L1.dropout.bwd", "backward", (dz, mask), (dz,), 4 * 80, {"mul": 1})
        g.ops.insert(bwd + 1, g.ops.pop())
    kernels, layout = derive(g)
    _, plain = derive(plain_g)
    assert mask in layout.alloc_before and layout.free_after[mask] == [op.name for op in g.ops].index("L1.dropout.bwd")
    assert layout.refs[mask].cls == "activations"
    assert layout.ledger.activations == plain.ledger.activations + 4 * 80
    assert not [t for t in layout.live_at_end if not g.tensors[t].whole_step]
    assert len(kernels) == len(plain_g.ops) + 2

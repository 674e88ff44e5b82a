"""memwall: the memory traffic of backpropagation, replayed through real machines.

Stages, each in its own module and each handing the next a plain value:
``profiles`` (machines) and ``networks`` -> ``workloads`` (training step, kernels,
access streams) -> ``engine`` (the Cython cache simulator, ``memwall._csim``) ->
``timing`` (cycles: compute, stall per level) -> ``experiments`` / ``cli`` / ``report``.
"""

__version__ = "0.1.0"

# Modules whose source decides a simulated result: the workloads (graph, lowering,
# liveness, builders), the engine's wrapper, timing and the case runner, and the sweep's
# row-maker. The compiled core (csim/*.pyx) is not in an installed wheel, so it is not
# hashed: an edit there must bump __version__.
_MODEL_SOURCES = ("workloads", "simulate.py", "timing.py", "engine.py", "streams.py", "levels.py",
                  "profiles.py", "networks.py", "traces.py", "units.py", "experiments/sweep.py")


def _model_hash() -> str:
    import hashlib
    from pathlib import Path

    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in _MODEL_SOURCES:
        path = here / name
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if f.is_file():
                h.update(f.relative_to(here).as_posix().encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:10]


# Part of every stored result's key (sweep cases, validation predictions, figure data):
# it changes with __version__ and with any edit to the lowering or timing source, so a
# stored result is never reused by a model that would compute it differently.
MODEL_VERSION = f"{__version__}+{_model_hash()}"

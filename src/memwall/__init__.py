"""memwall: the memory traffic of backpropagation, replayed through real machines.

Stages, each in its own module and each handing the next a plain value:
``profiles`` (machines) and ``networks`` -> ``workloads`` (training step, kernels,
access streams) -> ``engine`` (the Cython cache simulator, ``memwall._csim``) ->
``timing`` (cycles: compute, stall per level) -> ``simulation`` (one case, end to end) ->
``execute`` (many cases) / ``study`` (which cases the science needs) / ``figures`` /
``cli``. From Python: ``memwall.run(machine, network, **options)`` and
``memwall.sweep(**lists)`` (:mod:`memwall.api`).
"""

__version__ = "0.1.0"

# Part of every stored result's key: __version__ plus a hash of the source and compiled
# engine that decide a result, derived from the run layer's imports (model_version.py).
# Inside the package, import it from .model_version, never from here.
from .model_version import MODEL_VERSION  # noqa: E402

__all__ = ["MODEL_VERSION", "__version__", "run", "sweep"]


def __getattr__(name: str) -> object:
    # The Python API (memwall.api) is re-exported lazily: importing memwall, as every
    # command does first, does not build the whole simulator. Inside the package, import
    # it from .api, never from here.
    if name == "run":
        from .api import run

        return run
    if name == "sweep":
        from .api import sweep

        return sweep
    raise AttributeError(f"module 'memwall' has no attribute {name!r}")

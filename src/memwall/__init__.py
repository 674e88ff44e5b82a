"""memwall: the memory traffic of backpropagation, replayed through real machines.

Stages, each in its own module and each handing the next a plain value:
``profiles`` (machines) and ``networks`` -> ``workloads`` (training step, kernels,
access streams) -> ``engine`` (the Cython cache simulator, ``memwall._csim``) ->
``timing`` (cycles: compute, stall per level) -> ``experiments`` / ``cli`` / ``report``.
"""

__version__ = "0.1.0"

# Part of every stored result's key: __version__ plus a hash of the source and compiled
# engine that decide a result, derived from the run layer's imports (model_version.py).
# Inside the package, import it from .model_version, never from here.
from .model_version import MODEL_VERSION  # noqa: E402

__all__ = ["MODEL_VERSION", "__version__"]

"""memwall: the memory traffic of backpropagation, replayed through real machines.

Stages, each in its own module and each handing the next a plain value:
``profiles`` (machines) and ``networks`` -> ``workloads`` (training step, kernels,
access streams) -> ``engine`` (the Cython cache simulator, ``memwall._csim``) ->
``timing`` (cycles: compute, stall per level) -> ``experiments`` / ``cli`` / ``report``.
"""

__version__ = "0.1.0"

# Bumped whenever a result could change for the same inputs; part of every sweep
# case's cache key, so stored results from an older model are never reused.
MODEL_VERSION = __version__

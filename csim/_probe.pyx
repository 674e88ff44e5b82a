# cython: language_level=3
"""Compiled loops for measuring the host: a pointer chase and STREAM-like kernels.

Owns only the inner loops that Python cannot run fast enough to time a cache level:
``chase`` (dependent loads, for latency), ``triad`` and ``copy`` (for bandwidth). Each
repeats its loop inside C with the GIL released, so several Python threads can run one
each at the same time (one per core), and so the call overhead vanishes for working
sets as small as the first-level cache. ``memwall.host`` chooses sizes, repeats and
threads and turns times into figures.

The bandwidth loops are compiled once per instruction set (GCC ``target_clones`` on
x86-64 Linux) and the loader picks the widest the CPU has: a probe built for the
baseline ISA (SSE2) would understate what the first-level cache delivers to AVX2 or
AVX-512 code such as the BLAS, while ``-march=native`` would make the build
unportable.
"""

from libc.stdint cimport intptr_t

cdef extern from *:
    """
    #include <stddef.h>
    #include <stdint.h>
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    #define MW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
    /* Keep GCC from turning the copy loop into a memcpy call: glibc's memcpy switches to
       non-temporal stores for large blocks, which would skip the write-allocate fill that
       the cache model counts. */
    #define MW_NO_MEMCPY __attribute__((optimize("no-tree-loop-distribute-patterns")))
    #else
    #define MW_CLONES
    #define MW_NO_MEMCPY
    #endif
    /* An empty asm with a memory clobber between repeats: the compiler may not fold the
       repeats of an idempotent loop into one. */
    #define MW_BARRIER() __asm__ __volatile__("" ::: "memory")

    MW_CLONES static void mw_triad(double *restrict a, const double *restrict b,
                                   const double *restrict c, double s, size_t n, size_t reps) {
        for (size_t r = 0; r < reps; r++) {
            for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
            MW_BARRIER();
        }
    }

    MW_CLONES MW_NO_MEMCPY static void mw_copy(double *restrict a, const double *restrict b,
                                               size_t n, size_t reps) {
        for (size_t r = 0; r < reps; r++) {
            for (size_t i = 0; i < n; i++) a[i] = b[i];
            MW_BARRIER();
        }
    }

    static intptr_t mw_chase(const intptr_t *next, intptr_t start, size_t steps) {
        intptr_t p = start;
        /* Each load's address is the previous load's value: one latency per step. */
        for (size_t i = 0; i < steps; i++) p = next[p];
        return p;
    }
    """
    void mw_triad(double *a, const double *b, const double *c, double s, size_t n, size_t reps) nogil
    void mw_copy(double *a, const double *b, size_t n, size_t reps) nogil
    intptr_t mw_chase(const intptr_t *nxt, intptr_t start, size_t steps) nogil


def triad(double[::1] a, const double[::1] b, const double[::1] c, double s, size_t reps) -> None:
    """``a[i] = b[i] + s*c[i]`` over the whole arrays, ``reps`` times, without the GIL."""
    cdef size_t n = a.shape[0]
    if b.shape[0] != <Py_ssize_t>n or c.shape[0] != <Py_ssize_t>n:
        raise ValueError("triad: arrays differ in length")
    if n == 0 or reps == 0:
        return
    with nogil:
        mw_triad(&a[0], &b[0], &c[0], s, n, reps)


def copy(double[::1] a, const double[::1] b, size_t reps) -> None:
    """``a[i] = b[i]`` over the whole arrays, ``reps`` times, without the GIL."""
    cdef size_t n = a.shape[0]
    if b.shape[0] != <Py_ssize_t>n:
        raise ValueError("copy: arrays differ in length")
    if n == 0 or reps == 0:
        return
    with nogil:
        mw_copy(&a[0], &b[0], n, reps)


def chase(const intptr_t[::1] nxt, intptr_t start, size_t steps) -> int:
    """Follow ``p = nxt[p]`` from ``start`` for ``steps`` loads; returns where it ended
    (returned so the loads are not dead code). Every index must be within the array."""
    cdef intptr_t p
    if nxt.shape[0] == 0:
        raise ValueError("chase: empty array")
    if start < 0 or start >= nxt.shape[0]:
        raise ValueError("chase: start outside the array")
    with nogil:
        p = mw_chase(&nxt[0], start, steps)
    return p

# cython: language_level=3
"""memwall's cache-hierarchy engine: replays references through set-associative levels.

Owns the C state of a hierarchy (per level: one flat array of 16-byte ways, each its tag
and its stamp with the dirty bit; at a plain LRU/FIFO level of 2 to 16 ways that mostly
misses (below the first, or a first level larger than the host's caches), each set's
recency order in one word, so a miss takes its victim without a pass over the stamps;
tree-PLRU bits, a seeded generator, the 3C shadows)
and the hot loops: explicit arrays (with the first level held in locals when it is a plain
LRU/FIFO write-back level), affine loop nests expanded in place, and the end-of-run flush.
The rules are exactly /ENGINE_SEMANTICS.md, plus the inclusion options stated in
tests/reference_model.py, which is the oracle these loops are tested against.

No Python object is touched per access and the GIL is released around every loop.
Code running without the GIL reports trouble in ``engine_t.err``; the caller raises.
"""

cimport cython
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

from _types cimport addr_t, flag_t, index_t, size_t32
from _structs cimport *

import numpy as np

ENGINE_NAME = "csim 1.0 (Cython, timestamp LRU, MRU fast path)"

# The enum codes, exported once: memwall.engine translates a LevelSpec's words with these.
POLICY_CODES = {"lru": POLICY_LRU, "fifo": POLICY_FIFO, "random": POLICY_RANDOM, "plru": POLICY_PLRU}
INCLUSION_CODES = {"none": INCL_NONE, "inclusive": INCL_INCLUSIVE, "exclusive": INCL_EXCLUSIVE}
# The order of Engine.counts_flat: each level's counters_t fields, then memory_t's.
LEVEL_COUNTS = ("reads", "writes", "read_misses", "write_misses", "compulsory", "capacity", "conflict",
                "writebacks", "bytes_in", "bytes_out", "back_invalidations")
MEMORY_COUNTS = ("reads", "writes", "bytes_read", "bytes_written")

# The keys of one level handed to Engine (every one required, no other accepted).
LEVEL_KEYS = ("name", "size", "line", "ways", "policy", "write_through", "inclusion", "seed", "stack")
# ("stack": True for the one level of a capacity sweep, the last; its ways are the largest swept)

cdef extern from *:
    """
    /* A prefetch hint the compiler keeps: a helper made of __builtin_prefetch alone looks
       side-effect free to gcc's inter-procedural analysis, which then deletes its calls;
       a volatile asm statement is never deleted. */
    static inline void memwall_prefetch(const void *p) {
    #if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
        __asm__ __volatile__("prefetcht0 %0" : : "m"(*(const char *)p));
    #elif defined(__GNUC__)
        __asm__ __volatile__("" : : "r"(p));
        __builtin_prefetch(p, 0, 3);
    #endif
    }
    """
    void memwall_prefetch(const void *p) nogil

cdef extern from *:
    """
    /* Whether n accesses may hold a bad one (size 0, or a range that wraps past 2^64, which
       needs an address in the top 4 GiB): a reduction without a branch per access, which
       the compiler vectorizes. Exact answers come from the caller's scan of the block. */
    #include <stdint.h>
    static int memwall_block_suspect(const uint64_t *a, const uint32_t *s, Py_ssize_t n) {
        /* x == 0 exactly when ~(x | -x) has its top bit set: OR, subtract and NOT, which
           SSE2 (x86-64's baseline, all a portable -O3 build may use) has for 32- and 64-bit
           lanes; an unsigned minimum or a 64-bit compare it has not, and gcc scalarized them. */
        uint32_t zero = 0;
        uint64_t top = 0;
        for (Py_ssize_t i = 0; i < n; i++) {    /* two loops, each of one element width */
            const uint32_t x = s[i];            /* a size of 0 */
            zero |= ~(x | (0u - x));
        }
        for (Py_ssize_t i = 0; i < n; i++) {    /* an address's high half, all ones */
            const uint64_t y = ~a[i] >> 32;
            top |= ~(y | (0u - y));
        }
        return (int)(zero >> 31) | (int)(top >> 63);
    }
    """
    bint memwall_block_suspect(const uint64_t *a, const uint32_t *s, Py_ssize_t n) nogil

cdef extern from *:
    """
    #if defined(__GNUC__)
    #define memwall_unlikely(x) __builtin_expect(!!(x), 0)
    #else
    #define memwall_unlikely(x) (x)
    #endif
    """
    bint memwall_unlikely(bint x) nogil
    int __builtin_ctzll(unsigned long long x) nogil   # (x != 0)

cdef extern from *:
    """
    /* a % d for a, d < 2^32 without a division: magic = ceil(2^64 / d) (Lemire, Kaser and
       Kurz, "Faster remainder by direct computation", Software: Practice and Experience
       49(6), 2019). Two multiplications: a 64-bit division's latency is what a lookup in a
       level whose set count is not a power of two (a GPU's L2) waited on before its set. */
    #include <stdint.h>
    static inline uint64_t memwall_mod32(uint64_t a, uint64_t magic, uint64_t d) {
    #if defined(__SIZEOF_INT128__)
        return (uint64_t)(((unsigned __int128)(magic * a) * d) >> 64);
    #else
        (void)magic;
        return a % d;
    #endif
    }
    """
    uint64_t memwall_mod32(uint64_t a, uint64_t magic, uint64_t d) nogil

cdef extern from *:
    """
    /* Zeroed memory for a level's ways. Levels of 2 MiB or more are mapped in huge pages
       where Linux offers them (transparent huge pages on request: MADV_HUGEPAGE): a 32 MiB
       level's 8 MiB of ways then costs 4 page faults instead of 2048, and its random
       lookups miss the host's TLB far less. Release with memwall_free_ways(p, bytes). */
    #include <stdlib.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    #define MEMWALL_HUGE ((size_t)2 << 20)
    static void *memwall_alloc_ways(size_t bytes) {
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (bytes >= MEMWALL_HUGE) {
            size_t len = (bytes + MEMWALL_HUGE - 1) & ~(MEMWALL_HUGE - 1);
            void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                return NULL;
            madvise(p, len, MADV_HUGEPAGE); /* a hint: refused, the pages are small */
            return p;
        }
    #endif
        return calloc(1, bytes ? bytes : 1);
    }
    static void memwall_free_ways(void *p, size_t bytes) {
        if (p == NULL)
            return;
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (bytes >= MEMWALL_HUGE) {
            munmap(p, (bytes + MEMWALL_HUGE - 1) & ~(MEMWALL_HUGE - 1));
            return;
        }
    #endif
        free(p);
    }
    """
    void *memwall_alloc_ways(size_t bytes) nogil
    void memwall_free_ways(void *p, size_t bytes) nogil

cdef extern from *:
    """
    /* A set's recency order in one word (an ``ordered`` level: 2..16 ways): nibble r holds
       the way at rank r, rank 0 the most recently used (LRU) or installed (FIFO), rank
       ways-1 the oldest. It ranks the ways exactly as their stamps do, an invalid way
       (stamp 0) below every valid one and the invalid ones lowest way first, so the victim
       oldest_way would choose is the top rank: a miss needs no pass over the stamps (as
       the shared ceiling's move-to-front sets need none). */
    #include <stdint.h>
    #define MEMWALL_NIBBLES 0x1111111111111111ULL
    static inline uint64_t memwall_order_init(uint64_t ways) {  /* empty: way 0 the victim */
        uint64_t p = 0;
        for (uint64_t r = 0; r < ways; r++)
            p |= (ways - 1 - r) << (4 * r);
        return p;
    }
    static inline uint64_t memwall_order_victim(uint64_t p, uint64_t ways) {
        return (p >> (4 * (ways - 1))) & 15;
    }
    /* The victim installed: it moves from the top rank to rank 0. */
    static inline uint64_t memwall_order_rotate(uint64_t p, uint64_t ways) {
        uint64_t v = memwall_order_victim(p, ways);
        uint64_t keep = ways == 16 ? ~0ULL : (1ULL << (4 * ways)) - 1;
        return ((p << 4) | v) & keep;
    }
    /* Way k to rank 0, the ways above it in recency down one rank. The lowest nibble equal
       to k is found exactly by the zero-nibble test (a borrow only corrupts the nibbles
       above the first zero one); the ranks beyond ``ways`` are zero and lie above it. */
    static inline uint64_t memwall_order_touch(uint64_t p, uint64_t k) {
        uint64_t x = p ^ (k * MEMWALL_NIBBLES);
        uint64_t z = (x - MEMWALL_NIBBLES) & ~x & (8 * MEMWALL_NIBBLES);
        int r = __builtin_ctzll(z) >> 2;
        uint64_t low = p & ((1ULL << (4 * r)) - 1);
        uint64_t high = r == 15 ? 0 : (p >> (4 * r + 4)) << (4 * r + 4);
        return high | (low << 4) | k;
    }
    """
    uint64_t memwall_order_init(uint64_t ways) nogil
    uint64_t memwall_order_victim(uint64_t p, uint64_t ways) nogil
    uint64_t memwall_order_rotate(uint64_t p, uint64_t ways) nogil
    uint64_t memwall_order_touch(uint64_t p, uint64_t k) nogil

cdef extern from *:
    """
    /* memwall_find16_avx512: the way of a 16-way set that holds a line, or -1, for the
       lookup of an ``ordered`` level (its victim comes from the order, so only the tags
       are scanned; find_in_order). The ways are 16
       bytes each, tag then stamp, so the set is 256 bytes: at a ``simd_tags`` level (its
       ways outgrow the host's caches), where the CPU has AVX-512F (asked once, at import:
       memwall_detect_simd), four 512-bit compares test all 16 tags
       (the stamps' lanes masked out) instead of 16 compares and branches, as the shared
       ceiling's SIMD build compares its tags; a tag match counts only in a valid way
       (stamp != 0), and the lowest such way is returned, as the scalar loop returns it.
       The AVX-512 function alone is compiled for that target, so the module still runs on
       any x86-64; elsewhere, at a level whose ways the host's caches hold, and with
       memwall_simd16 cleared (a test's hook), find_in_order scans with find_line. */
    #include <stdint.h>
    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    #define MEMWALL_X86_SIMD 1
    __attribute__((target("avx512f")))
    static int64_t memwall_find16_avx512(const uint64_t *w, uint64_t line) {
        const __m512i key = _mm512_set1_epi64((long long)line);
        /* bit b: 64-bit word b of the set (way b / 2); the even words are the tags */
        uint32_t m = (uint32_t)(_mm512_cmpeq_epi64_mask(_mm512_loadu_si512((const void *)(w + 0)), key) & 0x55)
                   | (uint32_t)(_mm512_cmpeq_epi64_mask(_mm512_loadu_si512((const void *)(w + 8)), key) & 0x55) << 8
                   | (uint32_t)(_mm512_cmpeq_epi64_mask(_mm512_loadu_si512((const void *)(w + 16)), key) & 0x55) << 16
                   | (uint32_t)(_mm512_cmpeq_epi64_mask(_mm512_loadu_si512((const void *)(w + 24)), key) & 0x55) << 24;
        while (m) {
            int b = __builtin_ctz(m);
            if (w[b + 1] != 0)
                return b >> 1;
            m &= m - 1;
        }
        return -1;
    }
    #else
    static int64_t memwall_find16_avx512(const uint64_t *w, uint64_t line) {  /* never called here */
        (void)w; (void)line;
        return -1;
    }
    #endif
    static int memwall_simd16 = 0;
    static int memwall_detect_simd(void) {
    #ifdef MEMWALL_X86_SIMD
        __builtin_cpu_init();
        memwall_simd16 = __builtin_cpu_supports("avx512f") != 0;
    #endif
        return memwall_simd16;
    }
    """
    int64_t memwall_find16_avx512(const uint64_t *w, uint64_t line) nogil
    int memwall_detect_simd() nogil
    int memwall_simd16


cdef extern from *:
    """
    /* memwall_replay_o16: replay_first_fast's loop for the one configuration a GPU's step
       replays in: a single simulated level (its fetches and write-backs go to main
       memory), LRU, ``ordered`` with 16 ways and ``simd_tags``, on a host with AVX-512F.
       The same rules in the same order (ENGINE_SEMANTICS; replay_first_fast's comments),
       written as one C function of that target, so the 16-tag compare is inlined and the
       loop's state fits the registers: the general loop keeps its counters and clocks on
       the stack (its other paths need the registers), and spent about twice the
       microbenchmark's time per lookup on them. The level's running state comes in and
       goes out through ``st`` (memwall_range_t: a fast first level's clock, most recent
       line and counts over a range, which commit_range puts back, for this loop and the
       general one); the caller adds the counters. */
    #include <stdint.h>
    typedef struct {
        uint64_t clock, reads, writes, read_misses, write_misses, writebacks, bytes_in;
        uint64_t mru_valid, mru_line, mru_idx;
    } memwall_range_t;
    #ifdef MEMWALL_X86_SIMD
    __attribute__((target("avx512f")))
    static void memwall_replay_o16(uint64_t *ways, uint64_t *order, uint64_t sets, uint64_t magic,
                                   uint64_t mask, int pow2, int shift, const uint64_t *addr,
                                   const uint32_t *size, const uint8_t *is_write, int64_t i0,
                                   int64_t i1, memwall_range_t *st) {
        const uint64_t lb = 1ULL << shift;
        uint64_t clock = st->clock, reads = 0, writes = 0, read_misses = 0, write_misses = 0;
        uint64_t writebacks = 0, bytes_in = 0;
        uint64_t mru_valid = st->mru_valid, mru_line = st->mru_line, mru_idx = st->mru_idx;
        uint64_t s = 0, s_line = 0;  /* the line whose set s is (0 with s = 0: unknown) */
        for (int64_t i = i0; i < i1; i++) {
            const uint64_t a = addr[i], end = a + (size[i] - 1);
            const uint64_t wr = is_write[i] != 0;
            uint64_t line = a >> shift;
            const uint64_t last = end >> shift;
            for (;;) {
                if (wr) writes++; else reads++;
                if (mru_valid && line == mru_line) {
                    ways[2 * mru_idx + 1] |= wr;
                } else {
                    if (line == s_line + 1 && line != 0) {
                        if (++s == sets) s = 0;
                    } else if (pow2) {
                        s = line & mask;
                    } else if (magic != 0 && (line >> 32) == 0) {
                        s = memwall_mod32(line, magic, sets);
                    } else {
                        s = line % sets;
                    }
                    s_line = line;
                    uint64_t *w = ways + 32 * s;
                    const uint64_t victim = memwall_order_victim(order[s], 16);
                    const int64_t found = memwall_find16_avx512(w, line);
                    uint64_t k;
                    if (found >= 0) {
                        k = (uint64_t)found;
                        clock += 2;
                        w[2 * k + 1] = clock | (w[2 * k + 1] & 1) | wr;
                        order[s] = memwall_order_touch(order[s], k);
                    } else {
                        k = victim;
                        const uint64_t oldest = w[2 * k + 1];
                        if (wr) write_misses++; else read_misses++;
                        /* a write covering the whole line allocates without a fetch */
                        if (!(wr && a <= (line << shift) && end >= (line << shift) + (lb - 1)))
                            bytes_in += lb;
                        if (oldest & 1)  /* the victim is valid and dirty: written back */
                            writebacks++;
                        w[2 * k] = line;
                        clock += 2;
                        w[2 * k + 1] = clock | wr;
                        order[s] = memwall_order_rotate(order[s], 16);
                    }
                    mru_valid = 1;
                    mru_line = line;
                    mru_idx = 16 * s + k;
                }
                if (line == last) break;
                line++;
            }
        }
        st->clock = clock; st->reads = reads; st->writes = writes;
        st->read_misses = read_misses; st->write_misses = write_misses;
        st->writebacks = writebacks; st->bytes_in = bytes_in;
        st->mru_valid = mru_valid; st->mru_line = mru_line; st->mru_idx = mru_idx;
    }
    #else
    static void memwall_replay_o16(uint64_t *ways, uint64_t *order, uint64_t sets, uint64_t magic,
                                   uint64_t mask, int pow2, int shift, const uint64_t *addr,
                                   const uint32_t *size, const uint8_t *is_write, int64_t i0,
                                   int64_t i1, memwall_range_t *st) {  /* never called here */
        (void)ways; (void)order; (void)sets; (void)magic; (void)mask; (void)pow2; (void)shift;
        (void)addr; (void)size; (void)is_write; (void)i0; (void)i1; (void)st;
    }
    #endif
    """
    ctypedef struct memwall_range_t:
        uint64_t clock, reads, writes, read_misses, write_misses, writebacks, bytes_in
        uint64_t mru_valid, mru_line, mru_idx
    void memwall_replay_o16(uint64_t *ways, uint64_t *order, uint64_t sets, uint64_t magic, uint64_t mask,
                            int pow2, int shift, const uint64_t *addr, const uint32_t *size,
                            const uint8_t *is_write, int64_t i0, int64_t i1, memwall_range_t *st) nogil


# Whether this host compares the tags of a ``simd_tags`` level with AVX-512 (bench_ceiling prints it)
SIMD_TAG_COMPARE = bool(memwall_detect_simd())


def _test_simd16(bint on) -> bool:
    """Test hook: compare 16 tags with AVX-512 (where the CPU has it) or with the scalar
    loop; returns whether AVX-512 is now in use. Both must give the same counts."""
    global memwall_simd16
    memwall_simd16 = memwall_detect_simd() if on else 0
    return bool(memwall_simd16)


cdef inline void order_hit(uint64_t *order, uint64_t set, uint64_t way) noexcept nogil:
    """A way of an ordered level's set touched (an LRU hit, or a line put in it): to rank
    0. Nothing at a level that keeps no order (``order`` NULL)."""
    if order != NULL:
        order[set] = memwall_order_touch(order[set], way)


cdef inline void order_fill(uint64_t *order, uint64_t set, uint64_t ways) noexcept nogil:
    """The victim (the top rank) of an ordered level's set filled: to rank 0. Nothing at a
    level that keeps no order."""
    if order != NULL:
        order[set] = memwall_order_rotate(order[set], ways)

cdef enum:
    MAX_STREAMS = 8                                     # accesses of an innermost body in locals
    PREFETCH_LINES = 64                                 # host cache lines hinted and not yet used:
                                                        #   about what a core's miss buffers hold
    PREFETCH_AHEAD_MIN = 4                              # accesses
    PREFETCH_AHEAD_MAX = 16                             # accesses
    PREFETCH_MIN_BYTES = 256 * 1024                     # of a level's ways
    PREFETCH_ROWS_MIN_BYTES = 1024 * 1024               # of the first level's ways: more than a
                                                        #   host core's L2 (1-2 MiB today) holds
    PREFETCH_CHUNK = 4096                               # accesses
    WAY_HINTS = 256                                     # first-level way predictor entries (a power of two)
    VALIDATE_BLOCK = 4096                               # accesses checked without a branch each
    PREFETCH_MISS_RATIO = 16                            # prefetch after a chunk whose first-
                                                        #   level misses reached 1/16 of it

cdef uint64_t EMPTY_KEY = 0xFFFFFFFFFFFFFFFFULL    # free slot of a lineset_t


# ----------------------------------------------------------------------------- random
cdef inline uint64_t splitmix64(uint64_t *state) noexcept nogil:
    # splitmix64 (Steele, Lea, Flood 2014): portable and exactly reproducible in Python.
    state[0] += 0x9E3779B97F4A7C15ULL
    cdef uint64_t z = state[0]
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef inline uint64_t hash64(uint64_t x) noexcept nogil:
    x ^= x >> 33
    x *= 0xFF51AFD7ED558CCDULL
    x ^= x >> 33
    return x


# ------------------------------------------------------------------ 3C: seen lines
cdef int lineset_init(lineset_t *s) noexcept nogil:
    s.capacity = 1024
    s.count = 0
    s.has_empty_key = 0
    s.keys = <uint64_t *> malloc(s.capacity * sizeof(uint64_t))
    if s.keys == NULL:
        return -1
    memset(s.keys, 0xFF, s.capacity * sizeof(uint64_t))
    return 0


cdef int lineset_grow(lineset_t *s) noexcept nogil:
    cdef uint64_t old_cap = s.capacity, i, j, mask
    cdef uint64_t *old = s.keys
    cdef uint64_t *keys = <uint64_t *> malloc(2 * old_cap * sizeof(uint64_t))
    if keys == NULL:
        return -1  # the old table stays valid and owned; __dealloc__ frees it
    memset(keys, 0xFF, 2 * old_cap * sizeof(uint64_t))
    mask = 2 * old_cap - 1
    for i in range(old_cap):
        if old[i] != EMPTY_KEY:
            j = hash64(old[i]) & mask
            while keys[j] != EMPTY_KEY:
                j = (j + 1) & mask
            keys[j] = old[i]
    free(old)
    s.keys = keys
    s.capacity = 2 * old_cap
    return 0


cdef bint lineset_add(lineset_t *s, uint64_t key, int *err) noexcept nogil:
    """Add ``key``; return whether it was there already."""
    cdef uint64_t j, mask
    if key == EMPTY_KEY:
        if s.has_empty_key:
            return 1
        s.has_empty_key = 1
        return 0
    if 2 * (s.count + 1) > s.capacity:
        if lineset_grow(s) != 0:
            err[0] = ERR_NOMEM
            return 1
    mask = s.capacity - 1
    j = hash64(key) & mask
    while s.keys[j] != EMPTY_KEY:
        if s.keys[j] == key:
            return 1
        j = (j + 1) & mask
    s.keys[j] = key
    s.count += 1
    return 0


# -------------------------------------------------- 3C: fully associative LRU shadow
cdef int fa_init(fa_lru_t *f, int64_t lines) noexcept nogil:
    cdef uint64_t nslots = 1
    while nslots < <uint64_t> (2 * lines):
        nslots <<= 1
    f.lines = lines
    f.used = 0
    f.head = -1
    f.tail = -1
    f.slot_mask = nslots - 1
    f.key = <uint64_t *> malloc(lines * sizeof(uint64_t))
    f.prev = <int64_t *> malloc(lines * sizeof(int64_t))
    f.next = <int64_t *> malloc(lines * sizeof(int64_t))
    f.slots = <int64_t *> malloc(nslots * sizeof(int64_t))
    if f.key == NULL or f.prev == NULL or f.next == NULL or f.slots == NULL:
        return -1
    memset(f.slots, 0xFF, nslots * sizeof(int64_t))  # all -1
    return 0


cdef inline void fa_unlink(fa_lru_t *f, int64_t node) noexcept nogil:
    if f.prev[node] >= 0:
        f.next[f.prev[node]] = f.next[node]
    else:
        f.head = f.next[node]
    if f.next[node] >= 0:
        f.prev[f.next[node]] = f.prev[node]
    else:
        f.tail = f.prev[node]


cdef inline void fa_push_head(fa_lru_t *f, int64_t node) noexcept nogil:
    f.prev[node] = -1
    f.next[node] = f.head
    if f.head >= 0:
        f.prev[f.head] = node
    f.head = node
    if f.tail < 0:
        f.tail = node


cdef void fa_slot_delete(fa_lru_t *f, uint64_t i) noexcept nogil:
    # Backward-shift deletion keeps linear probing correct without tombstones.
    cdef uint64_t j = i, k, mask = f.slot_mask
    while True:
        j = (j + 1) & mask
        if f.slots[j] < 0:
            break
        k = hash64(f.key[f.slots[j]]) & mask
        if (j > i and (k <= i or k > j)) or (j < i and (k <= i and k > j)):
            f.slots[i] = f.slots[j]
            i = j
    f.slots[i] = -1


cdef bint fa_access(fa_lru_t *f, uint64_t line, bint allocate) noexcept nogil:
    """Look ``line`` up, refresh it on a hit, install it (evicting LRU) on a miss."""
    cdef uint64_t mask = f.slot_mask
    cdef uint64_t j = hash64(line) & mask
    cdef int64_t node
    while f.slots[j] >= 0:
        node = f.slots[j]
        if f.key[node] == line:
            if f.head != node:
                fa_unlink(f, node)
                fa_push_head(f, node)
            return 1
        j = (j + 1) & mask
    if not allocate:
        return 0
    if f.used < f.lines:
        node = f.used
        f.used += 1
    else:
        node = f.tail
        fa_unlink(f, node)
        j = hash64(f.key[node]) & mask
        while f.slots[j] != node:
            j = (j + 1) & mask
        fa_slot_delete(f, j)
    f.key[node] = line
    j = hash64(line) & mask
    while f.slots[j] >= 0:
        j = (j + 1) & mask
    f.slots[j] = node
    fa_push_head(f, node)
    return 0


# ------------------------------------------------------------ one level: the policy
cdef inline uint64_t set_index(uint64_t line, bint pow2, uint64_t mask, uint64_t magic, uint64_t sets) noexcept nogil:
    """The set of ``line`` in a level of these fields (set_of, for a caller keeping them in locals)."""
    if pow2:
        return line & mask
    if magic != 0 and (line >> 32) == 0:
        return memwall_mod32(line, magic, sets)
    return line % sets


cdef inline uint64_t set_of(level_t *L, uint64_t line) noexcept nogil:
    return set_index(line, L.sets_pow2, L.set_mask, L.set_magic, L.sets)


cdef inline int64_t find_way(level_t *L, uint64_t base, uint64_t line) noexcept nogil:
    cdef uint64_t w
    for w in range(L.ways):
        # A way is valid iff its stamp is non-zero; an invalid way's tag is 0, itself a
        # legal line number, so the stamp is read on a tag match.
        if L.way[base + w].tag == line and L.way[base + w].sd != 0:
            return <int64_t> w
    return -1


cdef inline uint64_t oldest_way(const way_t *w, uint64_t nways) noexcept nogil:
    """The way with the smallest stamp, the first of equals: the first invalid way (stamp
    0) if there is one, else the LRU or FIFO way.

    Conditional moves, not branches: which stamp is older, a host predicts no better than
    a coin toss on a set that hits and misses at random, and a scan that branched on it
    cost most of a miss's time there. Two chains (even and odd ways), merged at the end
    by the smaller stamp and then the lower way, so the moves wait on half as many
    compares in a row."""
    cdef uint64_t k, sd, best0 = 0, best1 = 1, old0 = w[0].sd, old1
    cdef bint older
    if nways == 1:
        return 0
    old1 = w[1].sd
    for k in range(2, nways - 1, 2):
        sd = w[k].sd
        older = sd < old0
        best0 = k if older else best0
        old0 = sd if older else old0
        sd = w[k + 1].sd
        older = sd < old1
        best1 = k + 1 if older else best1
        old1 = sd if older else old1
    if nways & 1:
        sd = w[nways - 1].sd
        older = sd < old0
        best0 = nways - 1 if older else best0
        old0 = sd if older else old0
    older = old1 < old0 or (old1 == old0 and best1 < best0)
    return best1 if older else best0


cdef inline int64_t find_or_oldest(const way_t *w, uint64_t nways, uint64_t line, uint64_t *oldest) noexcept nogil:
    """The way of a set that holds ``line`` (find_way over a set's own ways), or -1 with
    oldest_way's choice in ``oldest``, in one pass over the set: a lookup that misses
    reads each way once, not once to find and again to choose the victim. The stamps are ranked as oldest_way ranks them (two chains of
    conditional moves, the first of equals)."""
    cdef uint64_t k, sd0, sd1, best0 = 0, best1 = 1
    cdef uint64_t old0 = 0xFFFFFFFFFFFFFFFFULL, old1 = 0xFFFFFFFFFFFFFFFFULL
    cdef bint older
    k = 0
    while k + 1 < nways:
        sd0 = w[k].sd
        sd1 = w[k + 1].sd
        if w[k].tag == line and sd0 != 0:
            return <int64_t> k
        if w[k + 1].tag == line and sd1 != 0:
            return <int64_t> (k + 1)
        older = sd0 < old0
        best0 = k if older else best0
        old0 = sd0 if older else old0
        older = sd1 < old1
        best1 = k + 1 if older else best1
        old1 = sd1 if older else old1
        k += 2
    if k < nways:  # an odd way count: the last way, on the even chain
        sd0 = w[k].sd
        if w[k].tag == line and sd0 != 0:
            return <int64_t> k
        older = sd0 < old0
        best0 = k if older else best0
        old0 = sd0 if older else old0
    older = old1 < old0 or (old1 == old0 and best1 < best0)
    oldest[0] = best1 if older else best0
    return -1


cdef inline void plru_touch(level_t *L, uint64_t set, uint64_t way) noexcept nogil:
    # Walk from the root; each node's bit is set to point away from `way`
    # (0 = the victim is on the left, 1 = on the right).
    cdef uint8_t *bits = L.plru + set * (L.ways - 1)
    cdef uint64_t node = 0, lo = 0, n = L.ways, half
    while n > 1:
        half = n >> 1
        if way < lo + half:
            bits[node] = 1
            node = 2 * node + 1
        else:
            bits[node] = 0
            node = 2 * node + 2
            lo += half
        n = half


cdef inline void touch(level_t *L, uint64_t set, uint64_t way) noexcept nogil:
    """A hit: LRU refreshes the stamp, PLRU its tree bits; FIFO and random change nothing."""
    if L.policy == POLICY_LRU:
        L.clock += 2
        L.way[set * L.ways + way].sd = L.clock | (L.way[set * L.ways + way].sd & 1)
        order_hit(L.order, set, way)
    elif L.policy == POLICY_PLRU:
        plru_touch(L, set, way)


cdef uint64_t choose_victim(level_t *L, uint64_t set) noexcept nogil:
    cdef uint64_t base = set * L.ways, w, node = 0, lo = 0, n, half
    cdef uint8_t *bits
    if L.policy == POLICY_LRU or L.policy == POLICY_FIFO:
        # Invalid ways have stamp 0, so the first smallest stamp is the lowest invalid
        # way when there is one: 'invalid first' comes for free.
        # (sd orders ways by stamp: stamps are distinct, the dirty bit is below them.)
        return oldest_way(L.way + base, L.ways)
    for w in range(L.ways):
        if L.way[base + w].sd == 0:
            return w
    if L.policy == POLICY_RANDOM:
        return splitmix64(&L.rng) % L.ways
    bits = L.plru + set * (L.ways - 1)
    n = L.ways
    while n > 1:
        half = n >> 1
        if bits[node] == 0:
            node = 2 * node + 1
        else:
            node = 2 * node + 2
            lo += half
        n = half
    return lo


cdef inline void install(level_t *L, uint64_t set, uint64_t way, uint64_t line, bint dirty) noexcept nogil:
    cdef uint64_t idx = set * L.ways + way
    L.way[idx].tag = line
    L.clock += 2
    L.way[idx].sd = L.clock | (dirty != 0)  # LRU: last use; FIFO: install time
    order_hit(L.order, set, way)
    if L.policy == POLICY_PLRU:
        plru_touch(L, set, way)


cdef inline void invalidate(level_t *L, uint64_t idx) noexcept nogil:
    # (Never at an ``ordered`` level: no inclusion there or below, no victim level, so
    # nothing but a reset empties its ways, and its order needs no invalid way moved.)
    L.way[idx].sd = 0
    L.way[idx].tag = 0
    if L.mru_valid and L.mru_idx == idx:
        L.mru_valid = 0


cdef inline void classify_ref(level_t *L, uint64_t line, bint hit, bint allocate, int *err) noexcept nogil:
    cdef bint seen = lineset_add(&L.seen, line, err)
    cdef bint fa_hit = fa_access(&L.shadow, line, allocate)
    if not hit:
        if not seen:
            L.c.compulsory += 1
        elif not fa_hit:
            L.c.capacity += 1
        else:
            L.c.conflict += 1


# ------------------------------------------- one level in capacity-sweep mode: an LRU stack
cdef int stack_init(stack_t *st, uint64_t sets, uint64_t depth) noexcept nogil:
    st.depth = depth
    if sets * depth > (<uint64_t> -1) // sizeof(uint64_t):
        return -1
    st.tag = <uint64_t *> memwall_alloc_ways(sets * depth * sizeof(uint64_t))  # (huge pages when large)
    st.dirty_from = <uint64_t *> memwall_alloc_ways(sets * depth * sizeof(uint64_t))
    st.count = <uint64_t *> calloc(sets, sizeof(uint64_t))
    st.read_hist = <uint64_t *> calloc(depth + 1, sizeof(uint64_t))
    st.write_hist = <uint64_t *> calloc(depth + 1, sizeof(uint64_t))
    st.full_write_hist = <uint64_t *> calloc(depth + 1, sizeof(uint64_t))
    st.wb_diff = <int64_t *> calloc(depth + 2, sizeof(int64_t))
    if (st.tag == NULL or st.dirty_from == NULL or st.count == NULL or st.read_hist == NULL
            or st.write_hist == NULL or st.full_write_hist == NULL or st.wb_diff == NULL):
        return -1
    return 0


cdef void stack_free(stack_t *st, uint64_t sets) noexcept nogil:
    memwall_free_ways(st.tag, sets * st.depth * sizeof(uint64_t))
    memwall_free_ways(st.dirty_from, sets * st.depth * sizeof(uint64_t))
    free(st.count)
    free(st.read_hist)
    free(st.write_hist)
    free(st.full_write_hist)
    free(st.wb_diff)


cdef void stack_clear(stack_t *st, uint64_t sets) noexcept nogil:
    memset(st.count, 0, sets * sizeof(uint64_t))
    memset(st.read_hist, 0, (st.depth + 1) * sizeof(uint64_t))
    memset(st.write_hist, 0, (st.depth + 1) * sizeof(uint64_t))
    memset(st.full_write_hist, 0, (st.depth + 1) * sizeof(uint64_t))
    memset(st.wb_diff, 0, (st.depth + 2) * sizeof(int64_t))


cdef inline void stack_writebacks(stack_t *st, uint64_t above, uint64_t upto) noexcept nogil:
    """One write-back in every cache of W ways, above < W <= upto."""
    if upto > above:
        st.wb_diff[above + 1] += 1
        st.wb_diff[upto + 1] -= 1


cdef void stack_ref(level_t *L, uint64_t line, uint64_t nbytes, bint is_write) noexcept nogil:
    """One lookup at a level in capacity-sweep mode: its stack distance, counted; the
    line moves to the top of its set's stack (write-back, write-allocate, LRU)."""
    cdef stack_t *st = &L.st
    cdef uint64_t set = set_of(L, line), depth = st.depth
    cdef uint64_t *tags = st.tag + set * depth
    cdef uint64_t *dirty_from = st.dirty_from + set * depth
    cdef uint64_t n = st.count[set], d, moved, dirty
    if is_write:
        L.c.writes += 1
    else:
        L.c.reads += 1
    for d in range(n):
        if tags[d] == line:
            break
    else:
        d = n  # not among the depth most recent lines of its set
    if d < n:
        dirty = dirty_from[d]
        stack_writebacks(st, dirty, d)  # it sank to d: evicted from the caches of <= d ways
        if dirty < d:
            dirty = d
        moved = d
    else:
        d = depth
        if n == depth:  # the deepest line leaves every cache swept
            stack_writebacks(st, dirty_from[depth - 1], depth)
            moved = depth - 1
        else:
            st.count[set] = n + 1
            moved = n
        dirty = depth
    while moved:  # (a loop: the moves are short, and a call costs more than most)
        tags[moved] = tags[moved - 1]
        dirty_from[moved] = dirty_from[moved - 1]
        moved -= 1
    tags[0] = line
    dirty_from[0] = 0 if is_write else dirty
    if is_write:
        st.write_hist[d] += 1
        if nbytes == L.line_bytes:
            st.full_write_hist[d] += 1
    else:
        st.read_hist[d] += 1


cdef void stack_flush(level_t *L) noexcept nogil:
    """The end-of-run flush of every cache swept. An entry at stack position p, dirty above
    dirty_from ways, was evicted dirty from the caches of dirty_from < W <= p ways (not yet
    counted: it would be when it is next looked up or leaves the stack) and is flushed dirty
    from those of more than both: together, one write-back in each cache above dirty_from."""
    cdef stack_t *st = &L.st
    cdef uint64_t set, p, i
    for set in range(L.sets):
        for p in range(st.count[set]):
            i = set * st.depth + p
            stack_writebacks(st, st.dirty_from[i], st.depth)
            st.dirty_from[i] = st.depth


# ------------------------------------------------------------ references and levels
cdef inline void mark_dirty_set(level_t *L, uint64_t set) noexcept nogil:
    """Note that a way of ``set`` may turn dirty (levels below the first; see dirty_sets)."""
    if L.dirty_sets != NULL:
        L.dirty_sets[set >> 6] |= 1ULL << (set & 63)


cdef void ref(engine_t *e, int lv, addr_t addr, uint64_t size, bint is_write) noexcept nogil:
    """A reference of ``size`` bytes at level ``lv`` (main memory when lv == n)."""
    cdef level_t *L
    cdef uint64_t line, last, end, lo, hi, line_lo
    if lv == e.n:
        if is_write:
            e.mem.writes += 1
            e.mem.bytes_written += size
        else:
            e.mem.reads += 1
            e.mem.bytes_read += size
        return
    L = &e.levels[lv]
    end = addr + (size - 1)  # inclusive; the caller guarantees no wrap
    line = addr >> L.line_shift
    last = end >> L.line_shift
    while True:
        line_lo = line << L.line_shift
        lo = addr if addr > line_lo else line_lo
        hi = line_lo + (L.line_bytes - 1)
        if end < hi:
            hi = end
        line_ref(e, lv, line, lo, hi - lo + 1, is_write)
        if line == last:
            break
        line += 1


cdef bint back_invalidate(engine_t *e, int j, addr_t addr, uint64_t nbytes) noexcept nogil:
    """Remove every line of level j inside [addr, addr+nbytes); return whether any was dirty."""
    cdef level_t *U = &e.levels[j]
    cdef uint64_t line = addr >> U.line_shift
    cdef uint64_t last = (addr + (nbytes - 1)) >> U.line_shift
    cdef uint64_t set, idx
    cdef int64_t way
    cdef bint dirty = 0
    while True:
        set = set_of(U, line)
        way = find_way(U, set * U.ways, line)
        if way >= 0:
            idx = set * U.ways + <uint64_t> way
            dirty |= <bint> (U.way[idx].sd & 1)
            U.c.back_invalidations += 1
            invalidate(U, idx)
        if line == last:
            break
        line += 1
    return dirty


cdef void evict(engine_t *e, int lv, uint64_t vline, bint vdirty) noexcept nogil:
    """What leaving level lv does to a victim line (already invalidated there)."""
    cdef level_t *L = &e.levels[lv]
    cdef int j
    if L.inclusion == INCL_INCLUSIVE:
        # The data of a dirty copy above leaves with the victim: one write-back, here.
        for j in range(lv):
            if back_invalidate(e, j, vline << L.line_shift, L.line_bytes):
                vdirty = 1
    if lv + 1 < e.n and e.levels[lv + 1].inclusion == INCL_EXCLUSIVE:
        # Every victim, clean or dirty, moves down into the victim cache.
        L.c.bytes_out += L.line_bytes
        if vdirty:
            L.c.writebacks += 1
        victim_install(e, lv + 1, vline, vdirty)
    elif vdirty:
        L.c.writebacks += 1
        L.c.bytes_out += L.line_bytes
        ref(e, lv + 1, vline << L.line_shift, L.line_bytes, 1)


cdef uint64_t replace_victim(engine_t *e, int lv, uint64_t set, uint64_t line, bint dirty) noexcept nogil:
    """Choose a victim in ``set`` (an invalid way first), evict it, install ``line`` there;
    return the way's index in the level's flat array."""
    cdef level_t *L = &e.levels[lv]
    cdef uint64_t way = choose_victim(L, set)
    cdef uint64_t idx = set * L.ways + way
    cdef uint64_t vline
    cdef bint vdirty
    if L.way[idx].sd != 0:
        vline = L.way[idx].tag
        vdirty = <bint> (L.way[idx].sd & 1)
        invalidate(L, idx)
        evict(e, lv, vline, vdirty)
    install(L, set, way, line, dirty)
    return idx


cdef void victim_install(engine_t *e, int lv, uint64_t line, bint dirty) noexcept nogil:
    """Install a victim of the level above into exclusive level lv (not a lookup)."""
    cdef level_t *L = &e.levels[lv]
    cdef uint64_t set = set_of(L, line), base = set * L.ways, idx
    cdef int64_t found = find_way(L, base, line)
    if dirty:
        mark_dirty_set(L, set)
    if found >= 0:  # cannot happen while exclusivity holds; merge rather than duplicate
        idx = base + <uint64_t> found
        L.way[idx].sd |= (dirty != 0)
        touch(L, set, <uint64_t> found)
        return
    replace_victim(e, lv, set, line, dirty)


cdef bint fetch_exclusive(engine_t *e, int lv, uint64_t line) noexcept nogil:
    """A read reference to ``line`` at exclusive level lv on behalf of the level above.

    A hit moves the line up (it leaves lv, its dirtiness going with it); a miss
    fetches from below without allocating here. Returns whether the line was dirty.
    """
    cdef level_t *L = &e.levels[lv]
    cdef uint64_t set = set_of(L, line), idx
    cdef int64_t way = find_way(L, set * L.ways, line)
    cdef bint dirty
    L.c.reads += 1
    if L.classify:
        classify_ref(L, line, way >= 0, 1, &e.err)
    if way >= 0:
        idx = set * L.ways + <uint64_t> way
        dirty = <bint> (L.way[idx].sd & 1)
        invalidate(L, idx)
        return dirty
    L.c.read_misses += 1
    L.c.bytes_in += L.line_bytes
    ref(e, lv + 1, line << L.line_shift, L.line_bytes, 0)
    return 0


cdef void line_ref_general(engine_t *e, int lv, addr_t line, addr_t lo, uint64_t nbytes, bint is_write) noexcept nogil:
    """One lookup of ``line`` at level lv (the ENGINE_SEMANTICS rules), every option."""
    cdef level_t *L = &e.levels[lv]
    cdef uint64_t set = set_of(L, line)
    cdef uint64_t base = set * L.ways, idx
    cdef int64_t found = find_way(L, base, line)
    cdef bint exclusive_below = L.next_exclusive, fill_dirty = 0
    cdef level_t *B
    mark_dirty_set(L, set)  # (a write, or an exclusive fetch's dirty fill: any reference may)
    if is_write:
        L.c.writes += 1
    else:
        L.c.reads += 1
    if L.classify:
        classify_ref(L, line, found >= 0, not (is_write and L.write_through), &e.err)
    L.mru_valid = 0
    if found >= 0:
        idx = base + <uint64_t> found
        touch(L, set, <uint64_t> found)
        if is_write:
            if L.write_through:
                L.c.bytes_out += nbytes
                ref(e, lv + 1, lo, nbytes, 1)
            else:
                L.way[idx].sd |= 1
        # A write hit at a write-through level does not allocate in the 3C shadow, which may
        # not hold the line: its next read must then go through the shadow, not the fast path.
        if lv == 0 and L.way[idx].sd != 0 and L.way[idx].tag == line and not (
                L.classify and is_write and L.write_through):
            L.mru_valid = 1
            L.mru_line = line
            L.mru_idx = idx
        return
    if is_write:
        L.c.write_misses += 1
        if L.write_through:  # no-write-allocate
            L.c.bytes_out += nbytes
            ref(e, lv + 1, lo, nbytes, 1)
            return
    else:
        L.c.read_misses += 1
    if not (is_write and nbytes == L.line_bytes):
        L.c.bytes_in += L.line_bytes
        if exclusive_below:
            fill_dirty = fetch_exclusive(e, lv + 1, line)
        else:
            ref(e, lv + 1, line << L.line_shift, L.line_bytes, 0)
    elif exclusive_below:
        # A full-line write allocates here without a fetch; the copy below is stale.
        B = &e.levels[lv + 1]
        found = find_way(B, set_of(B, line) * B.ways, line)
        if found >= 0:
            invalidate(B, set_of(B, line) * B.ways + <uint64_t> found)
    # Victim choice after the fetch: the fetch may have back-invalidated ways here.
    idx = replace_victim(e, lv, set, line, is_write or fill_dirty)
    if lv == 0:
        L.mru_valid = 1
        L.mru_line = line
        L.mru_idx = idx


cdef inline void next_line_ref(engine_t *e, int lv, uint64_t line, bint is_write) noexcept nogil:
    """A whole-line reference from level lv to the level below it (or to main memory)."""
    cdef level_t *L = &e.levels[lv]
    if lv + 1 == e.n:
        if is_write:
            e.mem.writes += 1
            e.mem.bytes_written += L.line_bytes
        else:
            e.mem.reads += 1
            e.mem.bytes_read += L.line_bytes
    elif L.next_same_line:
        line_ref(e, lv + 1, line, line << L.line_shift, L.line_bytes, is_write)
    else:
        ref(e, lv + 1, line << L.line_shift, L.line_bytes, is_write)


cdef inline void fast_hit(level_t *L, uint64_t idx, uint64_t line, bint is_write, bint first) noexcept nogil:
    """A hit in way ``idx`` of a ``fast`` level: its counter, the LRU stamp (or FIFO's dirty
    bit), and at the first level the most recent line."""
    cdef uint64_t sd = L.way[idx].sd
    if is_write:
        L.c.writes += 1
    else:
        L.c.reads += 1
    cdef uint64_t set
    if L.policy == POLICY_LRU:
        L.clock += 2
        L.way[idx].sd = L.clock | (sd & 1) | <uint64_t> is_write
        if L.order != NULL:
            set = idx >> __builtin_ctzll(L.ways) if (L.ways & (L.ways - 1)) == 0 else idx // L.ways
            order_hit(L.order, set, idx - set * L.ways)
    elif is_write:
        L.way[idx].sd = sd | 1
    if first:
        L.mru_valid = 1
        L.mru_line = line
        L.mru_idx = idx


cdef void line_ref_fast(engine_t *e, int lv, addr_t line, uint64_t nbytes, bint is_write) noexcept nogil:
    """line_ref_general for a level with ``fast`` set (LRU or FIFO, write-back, no 3C, no
    inclusion to keep, no victim level below): nothing below can touch this level's ways
    while it fetches or writes back, so the victim of a miss (oldest_way) may be chosen
    before the fetch, and nothing is looked up twice."""
    cdef level_t *L = &e.levels[lv]
    cdef uint64_t nways = L.ways
    cdef uint64_t set = set_of(L, line)
    cdef way_t *w = L.way + set * nways
    cdef uint64_t best = 0, oldest
    cdef int64_t found
    if L.order != NULL:
        found = find_in_order(w, nways, L.order, set, line, &best, L.simd_tags)
    else:
        found = find_or_oldest(w, nways, line, &best)
    if is_write:
        mark_dirty_set(L, set)
    if found >= 0:
        fast_hit(L, set * nways + <uint64_t> found, line, is_write, lv == 0)
        return
    if is_write:
        L.c.writes += 1
        L.c.write_misses += 1
    else:
        L.c.reads += 1
        L.c.read_misses += 1
    oldest = w[best].sd
    if not (is_write and nbytes == L.line_bytes):
        L.c.bytes_in += L.line_bytes
        next_line_ref(e, lv, line, 0)
    if oldest & 1:  # the victim is valid and dirty: write it back (after the fetch)
        L.c.writebacks += 1
        L.c.bytes_out += L.line_bytes
        next_line_ref(e, lv, w[best].tag, 1)
    w[best].tag = line
    L.clock += 2
    w[best].sd = L.clock | <uint64_t> is_write
    order_fill(L.order, set, nways)
    if lv == 0:
        L.mru_valid = 1
        L.mru_line = line
        L.mru_idx = set * nways + best


cdef void line_ref_through(engine_t *e, int lv, addr_t line, addr_t lo, uint64_t nbytes, bint is_write) noexcept nogil:
    """line_ref_general for a level with ``through`` set (write-through and no-write-allocate,
    LRU or FIFO, no 3C, no inclusion to keep, no victim level below): no way is ever dirty,
    so a victim leaves without a write-back, and nothing below touches this level's ways,
    so the lookup finds the line and the oldest way in one pass."""
    cdef level_t *L = &e.levels[lv]
    cdef uint64_t nways = L.ways
    cdef uint64_t set = set_of(L, line)
    cdef way_t *w = L.way + set * nways
    cdef uint64_t best = 0
    cdef int64_t found = find_or_oldest(w, nways, line, &best)
    if is_write:
        L.c.writes += 1
    else:
        L.c.reads += 1
    L.mru_valid = 0
    if found >= 0:
        if L.policy == POLICY_LRU:
            L.clock += 2
            w[found].sd = L.clock  # (never dirty)
        if is_write:  # written through, in place
            L.c.bytes_out += nbytes
            ref(e, lv + 1, lo, nbytes, 1)
        best = <uint64_t> found
    elif is_write:  # no-write-allocate: only the level below sees it
        L.c.write_misses += 1
        L.c.bytes_out += nbytes
        ref(e, lv + 1, lo, nbytes, 1)
        return
    else:
        L.c.read_misses += 1
        L.c.bytes_in += L.line_bytes
        next_line_ref(e, lv, line, 0)
        w[best].tag = line
        L.clock += 2
        w[best].sd = L.clock
    if lv == 0:
        L.mru_valid = 1
        L.mru_line = line
        L.mru_idx = set * nways + best


cdef inline void line_ref(engine_t *e, int lv, addr_t line, addr_t lo, uint64_t nbytes, bint is_write) noexcept nogil:
    """One lookup of ``line`` at level lv (the ENGINE_SEMANTICS rules)."""
    if e.levels[lv].fast:
        line_ref_fast(e, lv, line, nbytes, is_write)
    elif e.levels[lv].through:
        line_ref_through(e, lv, line, lo, nbytes, is_write)
    elif e.levels[lv].stack:
        stack_ref(&e.levels[lv], line, nbytes, is_write)
    else:
        line_ref_general(e, lv, line, lo, nbytes, is_write)


cdef inline void access(engine_t *e, addr_t addr, uint64_t size, bint is_write) noexcept nogil:
    """One demand access."""
    e.accesses += 1
    access_lines(e, addr, size, is_write)


@cython.cdivision(True)
cdef inline void access_lines(engine_t *e, addr_t addr, uint64_t size, bint is_write) noexcept nogil:
    """One demand access, not counted in e.accesses; re-touching the first level's most
    recent line is counted without a lookup (it changes no replacement, shadow or
    dirty-bit outcome)."""
    cdef level_t *L
    cdef uint64_t line, last, end, lo, hi, line_lo
    if e.n == 0:
        ref(e, 0, addr, size, is_write)
        return
    L = &e.levels[0]
    end = addr + (size - 1)
    line = addr >> L.line_shift
    last = end >> L.line_shift
    if last != line and L.fast:
        # An access of several lines at a fast first level: replay_first_fast's loop, which
        # keeps that level's state in locals across the lines, not a call per line.
        replay_one_fast(e, addr, size, is_write)
        return
    while True:
        if L.mru_valid and line == L.mru_line and not (is_write and L.write_through):
            if is_write:
                L.c.writes += 1
                L.way[L.mru_idx].sd |= 1
            else:
                L.c.reads += 1
        else:
            line_lo = line << L.line_shift
            lo = addr if addr > line_lo else line_lo
            hi = line_lo + (L.line_bytes - 1)
            if end < hi:
                hi = end
            line_ref(e, 0, line, lo, hi - lo + 1, is_write)
        if line == last:
            break
        line += 1


# ------------------------------------------------------------------ explicit arrays
cdef inline void prefetch_bytes(const void *p, uint64_t nbytes) noexcept nogil:
    cdef uint64_t off
    for off in range(0, nbytes, 64):
        memwall_prefetch(<const char *> p + off)


cdef inline void prefetch_set(level_t *L, addr_t addr) noexcept nogil:
    """Hint the host to fetch the ways of the set ``addr`` maps to at level L."""
    prefetch_bytes(L.way + set_of(L, addr >> L.line_shift) * L.ways, L.ways * sizeof(way_t))


cdef inline void prefetch_sets(engine_t *e, addr_t addr) noexcept nogil:
    """Hint the host to fetch the sets ``addr`` maps to in the levels marked ``prefetch``."""
    cdef int lv
    cdef uint64_t set
    cdef level_t *B
    for lv in range(1, e.n):
        B = &e.levels[lv]
        if B.prefetch:
            set = set_of(B, addr >> B.line_shift)
            if B.stack:
                prefetch_bytes(B.st.tag + set * B.st.depth, B.st.depth * sizeof(uint64_t))
                prefetch_bytes(B.st.dirty_from + set * B.st.depth, B.st.depth * sizeof(uint64_t))
            else:
                prefetch_bytes(B.way + set * B.ways, B.ways * sizeof(way_t))


cdef index_t prefetch_distance(engine_t *e) noexcept nogil:
    """How far ahead an explicit trace hints its sets: PREFETCH_LINES host lines in flight,
    shared over the host lines each access's hints fetch. A hint that lands long before its
    use has taken a miss buffer the accesses in between needed, or is evicted again: with
    hier3's two deep levels of 16 ways (256 B a set, four host lines each) 8 accesses ahead
    replays a random trace 1.08x faster than 16 (benchmarks/bench_ceiling.py)."""
    cdef int lv
    cdef uint64_t lines = 0
    cdef level_t *B
    for lv in range(1, e.n):
        B = &e.levels[lv]
        if B.prefetch:
            if B.stack:
                lines += 2 * ((B.st.depth * sizeof(uint64_t) + 63) // 64)
            else:
                lines += (B.ways * sizeof(way_t) + 63) // 64
    cdef uint64_t most = PREFETCH_AHEAD_MAX, least = PREFETCH_AHEAD_MIN, budget = PREFETCH_LINES
    if lines == 0:
        return <index_t> most
    return <index_t> min(most, max(least, budget // lines))


cdef void replay_range(engine_t *e, const addr_t *addr, const size_t32 *size, const flag_t *is_write,
                       index_t i0, index_t i1, index_t n, bint prefetch) noexcept nogil:
    """Accesses i0 .. i1-1 of n (e.n > 0); ``prefetch``: hint the deep levels' sets
    e.prefetch_ahead accesses ahead, once per change of first-level line."""
    cdef index_t i, ahead = e.prefetch_ahead
    cdef int shift0 = e.levels[0].line_shift
    cdef uint64_t line, last_pf = 0
    if e.levels[0].fast:
        replay_first_fast(e, addr, size, is_write, i0, i1, n, prefetch)
        return
    for i in range(i0, i1):
        if prefetch and i + ahead < n:
            line = addr[i + ahead] >> shift0
            if line != last_pf:
                last_pf = line
                prefetch_sets(e, addr[i + ahead])
        access(e, addr[i], size[i], is_write[i] != 0)


cdef void replay_first_fast(engine_t *e, const addr_t *addr, const size_t32 *size,
                            const flag_t *is_write, index_t i0, index_t i1, index_t n,
                            bint prefetch) noexcept nogil:
    """replay_range when the first level is ``fast`` (LRU or FIFO, write-back, nothing below
    touches its ways): that level's clock, counters and most recent line live in locals for
    the whole range, so a hit costs a set scan and no stores but the way's stamp. It is
    line_ref_fast and access_lines written out for level 0; the levels below are reached
    through next_line_ref as usual."""
    cdef level_t *L = &e.levels[0]
    cdef way_t *ways = L.way
    cdef way_t *w
    cdef uint64_t nways = L.ways, set_mask = L.set_mask, magic = L.set_magic, sets = L.sets, lb = L.line_bytes
    cdef int shift = L.line_shift
    cdef bint lru = L.policy == POLICY_LRU, pow2 = L.sets_pow2
    cdef uint64_t clock = L.clock
    cdef index_t ahead = e.prefetch_ahead
    cdef uint64_t reads = 0, writes = 0, read_misses = 0, write_misses = 0
    cdef uint64_t writebacks = 0, bytes_in = 0
    cdef bint mru_valid = L.mru_valid
    cdef uint64_t mru_line = L.mru_line, mru_idx = L.mru_idx
    cdef uint64_t a, end, line, last, sd, oldest, best = 0, k, last_pf = 0, s = 0
    cdef uint64_t s_line = 0  # the line whose set s is (0 with s = 0 unknown: line 0 is computed)
    cdef uint64_t *order = L.order
    cdef bint simd = L.simd_tags
    cdef bint to_memory = e.n == 1  # its fetches and write-backs go to main memory
    cdef int64_t found
    cdef bint wr
    cdef index_t i
    if to_memory and lru and simd and nways == 16 and order != NULL and memwall_simd16:
        replay_o16(e, L, addr, size, is_write, i0, i1)
        return
    for i in range(i0, i1):
        if prefetch and i + ahead < n:
            line = addr[i + ahead] >> shift
            if line != last_pf:
                last_pf = line
                prefetch_sets(e, addr[i + ahead])
        a = addr[i]
        wr = is_write[i] != 0
        end = a + (size[i] - 1)
        line = a >> shift
        last = end >> shift
        while True:
            if wr:
                writes += 1
            else:
                reads += 1
            if mru_valid and line == mru_line:
                # The most recent line again: no replacement state changes (LRU: it is the
                # most recent already), only the dirty bit.
                ways[mru_idx].sd |= <uint64_t> wr
            else:
                if line == s_line + 1 and line != 0:  # the next line of a run: the next set
                    s += 1
                    if s == sets:
                        s = 0
                else:
                    s = set_index(line, pow2, set_mask, magic, sets)
                s_line = line
                w = ways + s * nways
                if nways == 1:  # direct-mapped: no scan (the branch is the same every time)
                    k = 0 if w[0].tag == line and w[0].sd != 0 else 1
                elif order != NULL:
                    found = find_in_order(w, nways, order, s, line, &best, simd)
                    k = <uint64_t> found if found >= 0 else nways
                else:
                    found = find_or_oldest(w, nways, line, &best)
                    k = <uint64_t> found if found >= 0 else nways
                if k < nways:  # hit
                    sd = w[k].sd
                    if lru:
                        clock += 2
                        w[k].sd = clock | (sd & 1) | <uint64_t> wr
                        order_hit(order, s, k)
                    elif wr:
                        w[k].sd = sd | 1
                else:
                    if nways == 1:
                        best = 0
                    oldest = w[best].sd
                    if wr:
                        write_misses += 1
                    else:
                        read_misses += 1
                    # A write covering the whole line allocates without a fetch.
                    if not (wr and a <= (line << shift) and end >= (line << shift) + (lb - 1)):
                        bytes_in += lb
                        if not to_memory:  # (the last level: counted below, in one sum)
                            next_line_ref(e, 0, line, 0)
                    if oldest & 1:  # the victim is valid and dirty: write it back, after the fetch
                        writebacks += 1
                        if not to_memory:
                            next_line_ref(e, 0, w[best].tag, 1)
                    w[best].tag = line
                    clock += 2
                    w[best].sd = clock | <uint64_t> wr
                    order_fill(order, s, nways)
                    k = best
                mru_valid = 1
                mru_line = line
                mru_idx = <uint64_t> (w - ways) + k
            if line == last:
                break
            line += 1
    cdef memwall_range_t st
    st.clock, st.mru_valid, st.mru_line, st.mru_idx = clock, mru_valid, mru_line, mru_idx
    st.reads, st.writes, st.read_misses, st.write_misses = reads, writes, read_misses, write_misses
    st.writebacks, st.bytes_in = writebacks, bytes_in
    commit_range(e, L, &st, to_memory, i1 - i0)


cdef inline void commit_range(engine_t *e, level_t *L, const memwall_range_t *st, bint to_memory,
                              index_t accesses) noexcept nogil:
    """The end of a fast first level's run over a range of accesses (replay_first_fast's loop
    or memwall_replay_o16): its clock and most recent line back in the level, its counts
    added, and where its fetches and write-backs go to main memory (a single level), what
    next_line_ref would have counted for them, summed once for the range."""
    cdef uint64_t lb = L.line_bytes
    L.clock = st.clock
    L.mru_valid = st.mru_valid != 0
    L.mru_line = st.mru_line
    L.mru_idx = st.mru_idx
    L.c.reads += st.reads
    L.c.writes += st.writes
    L.c.read_misses += st.read_misses
    L.c.write_misses += st.write_misses
    L.c.writebacks += st.writebacks
    L.c.bytes_in += st.bytes_in
    L.c.bytes_out += st.writebacks * lb
    if to_memory:
        e.mem.reads += st.bytes_in // lb
        e.mem.bytes_read += st.bytes_in
        e.mem.writes += st.writebacks
        e.mem.bytes_written += st.writebacks * lb
    e.accesses += <uint64_t> accesses


cdef void replay_o16(engine_t *e, level_t *L, const addr_t *addr, const size_t32 *size,
                     const flag_t *is_write, index_t i0, index_t i1) noexcept nogil:
    """replay_first_fast through memwall_replay_o16 (its configuration checked by the
    caller): the level's state handed over and taken back by commit_range, as the general
    loop's is (no prefetch: a single level has no sets below to hint)."""
    cdef memwall_range_t st
    st.clock = L.clock
    st.mru_valid = L.mru_valid
    st.mru_line = L.mru_line
    st.mru_idx = L.mru_idx
    memwall_replay_o16(<uint64_t *> L.way, L.order, L.sets, L.set_magic, L.set_mask, L.sets_pow2, L.line_shift,
                       addr, size, is_write, i0, i1, &st)
    commit_range(e, L, &st, 1, i1 - i0)


cdef void replay_one_fast(engine_t *e, addr_t addr, uint64_t size, bint is_write) noexcept nogil:
    """access_lines of one access through replay_first_fast (the first level is ``fast``),
    not counted in e.accesses."""
    cdef size_t32 size32 = <size_t32> size
    cdef flag_t flag = <flag_t> is_write
    replay_first_fast(e, &addr, &size32, &flag, 0, 1, 1, 0)
    e.accesses -= 1


cdef inline int64_t find_line(const way_t *w, uint64_t nways, uint64_t line) noexcept nogil:
    """The way of a set that holds ``line``, or -1: tags first (a stamp is read only on a
    tag match: an invalid way's tag is 0, itself a legal line number)."""
    cdef uint64_t k
    for k in range(nways):
        if w[k].tag == line and w[k].sd != 0:
            return <int64_t> k
    return -1


cdef inline int64_t find_in_order(const way_t *w, uint64_t nways, const uint64_t *order, uint64_t set,
                                  uint64_t line, uint64_t *victim, bint simd) noexcept nogil:
    """find_or_oldest at an ``ordered`` level: the victim is the order's top rank, so only
    the tags are scanned: at a ``simd_tags`` level, where the host has AVX-512, with four
    vector compares (memwall_find16_avx512), else with the unrolled scan of 16 ways."""
    victim[0] = memwall_order_victim(order[set], nways)
    if nways != 16:
        return find_line(w, nways, line)
    if simd and memwall_simd16:
        return memwall_find16_avx512(<const uint64_t *> w, line)
    return find_line(w, 16, line)


cdef void below_pow2(engine_t *e, int lv, uint64_t line, uint64_t is_write) noexcept nogil:
    """A whole-line reference from level lv to the level below it: next_line_ref, with
    line_ref_fast written out for a ``fast`` level of a power-of-two set count and the line
    size of lv (the miss path of replay_first_pow2; it recurses down the same way): one
    pass over the set finds the line or the victim (find_or_oldest), as line_ref_fast."""
    cdef level_t *L
    cdef way_t *t
    cdef uint64_t nways, k = 0, oldest, lb, set
    cdef int64_t found
    if lv + 1 == e.n or not e.levels[lv].next_same_line or not e.levels[lv + 1].fast \
            or not e.levels[lv + 1].sets_pow2:
        next_line_ref(e, lv, line, is_write != 0)
        return
    L = &e.levels[lv + 1]
    nways = L.ways
    lb = L.line_bytes
    set = line & L.set_mask
    t = L.way + set * nways
    # The common way counts as constants: the scan is then unrolled, with no loop counter
    # (as the ceiling compiles its sets per way count).
    if L.order != NULL:
        found = find_in_order(t, nways, L.order, set, line, &k, L.simd_tags)
    elif nways == 16:
        found = find_or_oldest(t, 16, line, &k)
    elif nways == 8:
        found = find_or_oldest(t, 8, line, &k)
    else:
        found = find_or_oldest(t, nways, line, &k)
    if is_write:  # (its set marked dirty by the caller: writeback_pow2)
        L.c.writes += 1
    else:
        L.c.reads += 1
    if found >= 0:
        k = <uint64_t> found
        if L.policy == POLICY_LRU:
            L.clock += 2
            t[k].sd = L.clock | (t[k].sd & 1) | is_write
            order_hit(L.order, set, k)
        elif is_write:
            t[k].sd |= 1
        return
    oldest = t[k].sd
    if is_write:  # a whole line: allocated without a fetch
        L.c.write_misses += 1
    else:
        L.c.read_misses += 1
        L.c.bytes_in += lb
        below_pow2(e, lv + 1, line, 0)
    if oldest & 1:  # the victim is valid and dirty: write it back, after the fetch
        L.c.writebacks += 1
        L.c.bytes_out += lb
        writeback_pow2(e, lv + 1, t[k].tag)
    t[k].tag = line
    L.clock += 2
    t[k].sd = L.clock | is_write
    order_fill(L.order, set, nways)


cdef void writeback_pow2(engine_t *e, int lv, uint64_t line) noexcept nogil:
    """below_pow2 of a whole-line write-back from level lv, its set in the level below
    marked possibly dirty first (a mark for the flush: see dirty_sets). The mark is here,
    not in below_pow2: a store there, even on its write path only, slowed every miss by
    about a tenth (measured on seq and random x hier3), as the compiler laid it out."""
    cdef level_t *B
    if lv + 1 < e.n:
        B = &e.levels[lv + 1]
        mark_dirty_set(B, set_of(B, line))
    below_pow2(e, lv, line, 1)


cdef void replay_first_pow2(engine_t *e, const addr_t *addr, const size_t32 *size,
                            const flag_t *is_write, index_t i0, index_t i1, index_t n,
                            bint prefetch) noexcept nogil:
    """replay_first_fast for a ``fast`` first level whose set count is a power of two, shaped
    as the shared ceiling's plain-C replay shapes its loop (cachelimit.c's step), cheapest
    case first, none changing a count:

    1. the same line as the previous access (one line each): the write flag is OR-ed into
       a register, committed into the way's dirty bit when the line changes (nothing can
       read that bit in between: no other lookup happens at this level, and the levels
       below never touch it);
    2. a hit in the way where this line was last found (WAY_HINTS hints, indexed by the
       line's low bits, each checked against the way's tag and valid stamp before use):
       the stamp refreshed (LRU), no scan;
    3. a hit elsewhere: the set's tags scanned, the stamp refreshed, the hint kept;
    4. a miss: the victim (oldest_way), the fetch and the dirty victim's write-back below
       (next_line_ref), and on this path only, the sets below of the access
       e.prefetch_ahead on are hinted to the host (where the levels are marked ``prefetch``).

    Reads and writes are counted per access (writes in a register, reads as the rest). An
    access of several lines goes through replay_first_fast, one access at a time, the
    state handed over in the level's fields."""
    cdef level_t *L = &e.levels[0]
    cdef way_t *ways = L.way
    cdef way_t *t
    cdef uint64_t nways = L.ways, mask = L.set_mask, lb = L.line_bytes
    cdef int shift = L.line_shift
    cdef bint lru = L.policy == POLICY_LRU
    cdef uint64_t clock = L.clock
    cdef uint64_t nw = 0, nsplit = 0  # (the misses' counters go to L.c as they happen: the
    cdef uint64_t a, line, base, oldest, k, wr, pd = 0  #  fewer locals, the fewer spilled)
    cdef uint64_t prev, prev_idx, s
    cdef uint64_t *order = L.order
    cdef int64_t found
    cdef index_t i, ahead = e.prefetch_ahead
    cdef uint64_t hint[WAY_HINTS]
    if i0 >= i1:
        return
    memset(hint, 0, sizeof(hint))  # (way 0 of set 0: verified before use like any hint)
    if L.mru_valid:
        prev = L.mru_line
        prev_idx = L.mru_idx
    else:
        prev = (addr[i0] >> shift) ^ 1  # not the first access's line: its lookup runs
        prev_idx = 0
    for i in range(i0, i1):
        a = addr[i]
        wr = is_write[i] != 0
        line = a >> shift
        if memwall_unlikely(((a + (size[i] - 1)) >> shift) != line):
            # several lines: replay_first_fast's loop, the state in the level's fields
            if pd:
                ways[prev_idx].sd |= 1
            pd = 0
            L.clock = clock
            L.mru_valid = 1
            L.mru_line = prev
            L.mru_idx = prev_idx
            replay_first_fast(e, addr, size, is_write, i, i + 1, n, 0)
            clock = L.clock
            prev = L.mru_line
            prev_idx = L.mru_idx
            nsplit += 1
            continue
        nw += wr
        if line == prev:  # 1. the previous access's line again
            pd |= wr
            continue
        if pd:
            ways[prev_idx].sd |= 1
        prev = line
        pd = wr
        if nways > 1:
            # 2. the way this line was last found in, if it is still there (a way predictor:
            # verified, so a stale or colliding hint only costs the scan below)
            k = hint[line & (WAY_HINTS - 1)]
            if ways[k].tag == line and ways[k].sd != 0:
                prev_idx = k
                if lru:
                    clock += 2
                    ways[k].sd = clock | (ways[k].sd & 1)
                    s = line & mask
                    order_hit(order, s, k - s * nways)
                continue
        if nways == 1:
            # direct-mapped: the one way; a hit changes no replacement state (a way's stamp
            # only ranks it within its set)
            base = line & mask
            t = ways + base
            if t[0].tag == line and t[0].sd != 0:
                prev_idx = base
                continue
            found = -1
        else:
            base = (line & mask) * nways
            t = ways + base
            found = find_line(t, 8, line) if nways == 8 else find_line(t, nways, line)  # (see below_pow2)
        if found >= 0:  # 3. a hit elsewhere in the set
            k = <uint64_t> found
            prev_idx = base + k
            hint[line & (WAY_HINTS - 1)] = prev_idx
            if lru:
                clock += 2
                t[k].sd = clock | (t[k].sd & 1)
                order_hit(order, line & mask, k)
            continue
        # 3. a miss
        if prefetch and i + ahead < n:
            prefetch_sets(e, addr[i + ahead])
        if order != NULL:  # the order's top rank, as oldest_way would choose it
            k = memwall_order_victim(order[line & mask], nways)
        else:
            k = 0 if nways == 1 else oldest_way(t, 8) if nways == 8 else oldest_way(t, nways)
        oldest = t[k].sd
        if wr:
            L.c.write_misses += 1
        else:
            L.c.read_misses += 1
        if not (wr and size[i] == lb):  # (one line: a write of lb bytes covers it)
            L.c.bytes_in += lb
            below_pow2(e, 0, line, 0)
        if oldest & 1:  # the victim is valid and dirty: write it back, after the fetch
            L.c.writebacks += 1
            L.c.bytes_out += lb
            writeback_pow2(e, 0, t[k].tag)
        t[k].tag = line
        clock += 2
        t[k].sd = clock | wr
        order_fill(order, line & mask, nways)
        prev_idx = base + k
        hint[line & (WAY_HINTS - 1)] = prev_idx
        pd = 0
    if pd:
        ways[prev_idx].sd |= 1
    L.clock = clock
    L.mru_valid = 1
    L.mru_line = prev
    L.mru_idx = prev_idx
    L.c.writes += nw
    L.c.reads += <uint64_t> (i1 - i0) - nsplit - nw
    e.accesses += <uint64_t> (i1 - i0) - nsplit


# Called through a pointer so that the compiler keeps the loop a function of its own, with
# its own registers, rather than inlining it into the Python wrapper of Engine.replay,
# where its locals were spilled to the stack (measured: the loop ran slower inlined).
ctypedef void (*replay_fn)(engine_t *, const addr_t *, const size_t32 *, const flag_t *, index_t, index_t,
                           index_t, bint) noexcept nogil
cdef replay_fn replay_pow2_call = replay_first_pow2


cdef void flush_all(engine_t *e) noexcept nogil:
    cdef int lv
    cdef uint64_t wi, bits, set
    cdef level_t *L
    for lv in range(e.n):
        L = &e.levels[lv]
        if L.stack:
            stack_flush(L)
            continue
        if L.dirty_sets == NULL:
            flush_ways(e, lv, 0, L.sets * L.ways)
            continue
        # Only the sets marked as possibly dirty, in set order: the same order as the scan of
        # every way (no other set holds a dirty way). A word is re-read after each set, so a
        # set marked while flushing (by nothing today) would still be visited in order.
        for wi in range((L.sets + 63) >> 6):
            while L.dirty_sets[wi] != 0:
                bits = L.dirty_sets[wi]
                set = (wi << 6) + <uint64_t> __builtin_ctzll(bits)
                L.dirty_sets[wi] = bits & (bits - 1)
                flush_ways(e, lv, set * L.ways, (set + 1) * L.ways)


cdef void flush_ways(engine_t *e, int lv, uint64_t i0, uint64_t i1) noexcept nogil:
    """Write back the dirty ways i0 .. i1-1 of level lv, in way order."""
    cdef level_t *L = &e.levels[lv]
    cdef uint64_t idx
    for idx in range(i0, i1):
        if L.way[idx].sd & 1:  # (only a valid way is dirty)
            L.way[idx].sd &= ~1ULL
            L.c.writebacks += 1
            L.c.bytes_out += L.line_bytes
            ref(e, lv + 1, L.way[idx].tag << L.line_shift, L.line_bytes, 1)


# ------------------------------------------------------------------- loop nests


cdef uint64_t NO_MEMO = 0xFFFFFFFFFFFFFFFFULL    # memo_idx of an access not yet seen


cdef inline bint memo_hit(engine_t *e, nest_t *ns, int64_t k, uint64_t addr) noexcept nogil:
    """Access k (one row) as a first-level hit found without a set scan, if it is one.

    A loop body that interleaves accesses (a packed A and B panel, a load and a store)
    moves the first level's most recent line on every access, so the MRU shortcut never
    fires; but each access mostly re-touches the line it touched last. Each access keeps
    that line and its way; when the line is unchanged and the way still holds it, the
    lookup would find it there (a line sits in at most one way of its set), so the hit is
    applied exactly as line_ref_fast applies one: same counters, stamp and MRU state."""
    cdef level_t *L = &e.levels[0]
    cdef uint64_t line = addr >> L.line_shift, idx = ns.memo_idx[k]
    cdef bint is_write = ns.is_write[k] != 0
    if (idx == NO_MEMO or line != ns.memo_line[k] or ((addr + (ns.size[k] - 1)) >> L.line_shift) != line
            or (L.mru_valid and line == L.mru_line)):
        return 0
    if L.way[idx].tag != line or L.way[idx].sd == 0:
        return 0
    e.accesses += 1
    fast_hit(L, idx, line, is_write, 1)
    return 1


cdef inline void issue_one(engine_t *e, nest_t *ns, int64_t k) noexcept nogil:
    """Access k at its current address: ``rows`` runs of ``size`` bytes, ``row_stride`` apart."""
    cdef uint32_t r
    cdef uint64_t addr = ns.cur[k]
    cdef level_t *L
    if ns.memo and ns.rows[k] == 1:
        if memo_hit(e, ns, k, addr):
            return
        access(e, addr, ns.size[k], ns.is_write[k])
        L = &e.levels[0]
        if L.mru_valid and L.mru_line == addr >> L.line_shift:
            ns.memo_line[k] = L.mru_line
            ns.memo_idx[k] = L.mru_idx
        return
    cdef uint64_t stride = <uint64_t> ns.row_stride[k]
    cdef uint32_t rows = ns.rows[k]
    cdef level_t *F = e.levels  # (NULL with no level)
    # Two rows ahead, the set of a row's first line is hinted; a row of several lines runs
    # through consecutive sets, which the host's own prefetcher follows once it has begun
    # (its first set was the lookup that waited: hinting it saved about a tenth of a GPU
    # step's replay, measured with memwall_replay_o16, benchmarks/README.md)
    cdef bint ahead = (e.n > 0 and F.prefetch_rows and rows > 2)
    if ahead:
        prefetch_set(F, addr + stride)
        prefetch_set(F, addr + 2 * stride)
    access(e, addr, ns.size[k], ns.is_write[k])
    for r in range(1, rows):
        addr += stride
        if ahead and r + 2 < rows:
            prefetch_set(F, addr + 2 * stride)
        access(e, addr, ns.size[k], ns.is_write[k])


cdef inline void issue_range(engine_t *e, nest_t *ns, int64_t a, int64_t b) noexcept nogil:
    cdef int64_t j
    for j in range(a, b):
        issue_one(e, ns, ns.issue[j])


cdef inline bint mru_retouch(level_t *L, uint64_t addr, uint64_t size, bint mru_ok, bint is_write) noexcept nogil:
    """An access that only re-touches the first level's most recent line: its dirty bit
    set (a write), nothing else changed; the caller counts it (as access_lines counts it).
    ``mru_ok``: not a write at a write-through level (that one must go through)."""
    cdef uint64_t line = addr >> L.line_shift
    if mru_ok and L.mru_valid and line == L.mru_line and ((addr + (size - 1)) >> L.line_shift) == line:
        if is_write:
            L.way[L.mru_idx].sd |= 1
        return 1
    return 0


cdef uint64_t stream(engine_t *e, uint64_t addr, uint64_t stride, int64_t count, uint64_t size,
                     bint is_write) noexcept nogil:
    """``count`` demand accesses of ``size`` bytes, ``stride`` apart from ``addr`` (e.n > 0);
    returns the address after the last. Re-touches of the first level's most recent line
    are counted here in a register (as access_lines counts them)."""
    cdef level_t *L = &e.levels[0]
    cdef bint mru_ok = not (is_write and L.write_through)
    cdef uint64_t nmru = 0
    cdef int64_t it
    e.accesses += <uint64_t> count
    for it in range(count):
        if mru_retouch(L, addr, size, mru_ok, is_write):
            nmru += 1
        else:
            access_lines(e, addr, size, is_write)
        addr += stride
    if is_write:
        L.c.writes += nmru
    else:
        L.c.reads += nmru
    return addr


cdef bint streams(engine_t *e, nest_t *ns, int d, int64_t b0, int64_t b1, int64_t c) noexcept nogil:
    """The innermost loop d when its body is a few accesses of one row each: ``c``
    iterations of the body, in order, the addresses in locals, not a call of issue_one
    per access. At a fast first level each access keeps its memo as issue_one keeps it;
    at any other, re-touches of the first level's most recent line are counted as
    access_lines counts them. Leaves each access's cur c strides on, as nest_body's loop
    does. False, doing nothing, when the body does not qualify."""
    cdef uint64_t addr[MAX_STREAMS]
    cdef uint64_t stride[MAX_STREAMS]
    cdef uint64_t size[MAX_STREAMS]
    cdef bint wr[MAX_STREAMS]
    cdef bint mru_ok[MAX_STREAMS]
    cdef int64_t ids[MAX_STREAMS]
    cdef int64_t n = b1 - b0, q, it, k
    cdef level_t *L = &e.levels[0]
    cdef int shift = L.line_shift
    cdef uint64_t a, reads = 0, writes = 0
    if n < 1 or n > MAX_STREAMS:
        return 0
    for q in range(n):
        k = ns.issue[b0 + q]
        if ns.rows[k] != 1:
            return 0
        ids[q] = k
        addr[q] = ns.cur[k]
        stride[q] = <uint64_t> ns.strides[k * ns.stride_cols + d]
        size[q] = ns.size[k]
        wr[q] = ns.is_write[k] != 0
        mru_ok[q] = not (wr[q] and L.write_through)
    if ns.memo:  # the fast first level: each access's memo of its last line, as issue_one
        for it in range(c):
            for q in range(n):
                a = addr[q]
                k = ids[q]
                if not memo_hit(e, ns, k, a):
                    access(e, a, size[q], wr[q])
                    if L.mru_valid and L.mru_line == a >> shift:
                        ns.memo_line[k] = L.mru_line
                        ns.memo_idx[k] = L.mru_idx
                addr[q] = a + stride[q]
        for q in range(n):
            ns.cur[ids[q]] = addr[q]
        return 1
    e.accesses += <uint64_t> (c * n)
    for it in range(c):
        for q in range(n):
            a = addr[q]
            if mru_retouch(L, a, size[q], mru_ok[q], wr[q]):
                if wr[q]:
                    writes += 1
                else:
                    reads += 1
            else:
                access_lines(e, a, size[q], wr[q])
            addr[q] = a + stride[q]
    L.c.reads += reads
    L.c.writes += writes
    for q in range(n):
        ns.cur[ids[q]] = addr[q]
    return 1


cdef void nest_body(engine_t *e, nest_t *ns, int d) noexcept nogil:
    """Issue depth-d 'before' accesses, the iterations of loop d, then depth-d 'after'."""
    cdef int64_t it, j, k, c
    cdef int64_t a0, a1, i0, i1, b0, b1
    issue_range(e, ns, ns.issue_start[2 * d], ns.issue_start[2 * d + 1])
    if d < ns.n_loops:
        c = ns.counts[d]
        i0 = ns.inner_start[d]
        i1 = ns.inner_start[d + 1]
        if d == ns.n_loops - 1:
            # Innermost loop: its body holds no loop, so issue it flat.
            b0 = ns.issue_start[2 * d + 2]
            b1 = ns.issue_start[2 * d + 4]
            k = ns.issue[b0] if b1 - b0 == 1 else -1
            if k >= 0 and i1 - i0 == 1 and ns.inner[i0] == k and ns.rows[k] == 1 and e.n > 0:
                # The body is one access of one row: a stream, its state in registers.
                # (It leaves cur[k] c strides on, as the loop below does.)
                ns.cur[k] = stream(e, ns.cur[k], <uint64_t> ns.strides[k * ns.stride_cols + d],
                                   c, ns.size[k], ns.is_write[k] != 0)
            elif e.n > 0 and streams(e, ns, d, b0, b1, c):
                pass
            else:
                for it in range(c):
                    for j in range(b0, b1):
                        issue_one(e, ns, ns.issue[j])
                    for j in range(i0, i1):
                        k = ns.inner[j]
                        ns.cur[k] += <uint64_t> ns.strides[k * ns.stride_cols + d]
        else:
            for it in range(c):
                nest_body(e, ns, d + 1)
                for j in range(i0, i1):
                    k = ns.inner[j]
                    ns.cur[k] += <uint64_t> ns.strides[k * ns.stride_cols + d]
        for j in range(i0, i1):
            k = ns.inner[j]
            ns.cur[k] -= <uint64_t> c * <uint64_t> ns.strides[k * ns.stride_cols + d]
    issue_range(e, ns, ns.issue_start[2 * d + 1], ns.issue_start[2 * d + 2])


# ------------------------------------------------------------------- the owner
cdef int log2_exact(uint64_t x) noexcept nogil:
    cdef int s = 0
    while (1ULL << s) < x:
        s += 1
    return s


cdef class Engine:
    """The C state of one hierarchy. Every malloc here is freed in __dealloc__.

    ``levels``: a list of mappings with exactly the keys of ``LEVEL_KEYS`` (``policy`` a
    value of ``POLICY_CODES``, ``inclusion`` one of ``INCLUSION_CODES``, sizes in bytes),
    already validated by memwall.engine. (Attributes: _csim.pxd.)
    """

    def __cinit__(self, list levels, bint classify=False):
        cdef int i, j, n = len(levels)
        cdef level_t *L
        cdef uint64_t nways_total, nbits, ways_bytes
        self.names = []
        memset(&self.e, 0, sizeof(engine_t))
        if n:
            self.e.levels = <level_t *> calloc(n, sizeof(level_t))
            if self.e.levels == NULL:
                raise MemoryError("cannot allocate the cache levels")
        self.e.n = n
        for i in range(n):
            spec = levels[i]
            if sorted(spec) != sorted(LEVEL_KEYS):
                raise ValueError(f"level {i}: keys {sorted(spec)}, expected {sorted(LEVEL_KEYS)}")
            if spec["policy"] not in POLICY_CODES.values() or spec["inclusion"] not in INCLUSION_CODES.values():
                raise ValueError(f"level {i}: unknown policy or inclusion code")
            name = str(spec["name"])
            self.names.append(name)
            L = &self.e.levels[i]
            L.line_bytes = spec["line"]
            L.ways = spec["ways"]
            L.sets = spec["size"] // (L.ways * L.line_bytes)
            L.line_shift = log2_exact(L.line_bytes)
            L.sets_pow2 = (L.sets & (L.sets - 1)) == 0
            L.set_mask = L.sets - 1
            L.set_magic = (0xFFFFFFFFFFFFFFFFULL // L.sets + 1) if not L.sets_pow2 and L.sets < (1ULL << 32) else 0
            L.policy = spec["policy"]
            L.write_through = spec["write_through"]
            L.inclusion = spec["inclusion"]
            L.seed = spec["seed"]
            L.classify = classify
            nways_total = L.sets * L.ways
            if spec["stack"]:
                if (i != n - 1 or L.policy != POLICY_LRU or L.write_through or L.inclusion != INCL_NONE
                        or classify):
                    raise ValueError(f"level {i}: a capacity-sweep level is the last, LRU, write-back, "
                                     "without inclusion or 3C")
                L.stack = 1
                if stack_init(&L.st, L.sets, L.ways) != 0:
                    raise MemoryError(f"cannot allocate the stacks of level {name!r}")
                continue
            nbits = L.sets * (L.ways - 1) if L.ways > 1 else 1
            # Zeroed pages: an empty level is all zeros, and the OS hands them out lazily,
            # so a 32 MiB level costs nothing until its sets are used.
            if nways_total > (<uint64_t> -1) // sizeof(way_t):
                raise MemoryError(f"cannot allocate level {name!r}")
            L.way = <way_t *> memwall_alloc_ways(nways_total * sizeof(way_t))
            L.plru = <uint8_t *> calloc(nbits, 1)
            if L.way == NULL or L.plru == NULL:
                raise MemoryError(f"cannot allocate level {name!r}")
            if i > 0:
                L.dirty_sets = <uint64_t *> calloc((L.sets + 63) >> 6, sizeof(uint64_t))
                if L.dirty_sets == NULL:
                    raise MemoryError(f"cannot allocate level {name!r}")
            if classify:
                if lineset_init(&L.seen) != 0 or fa_init(&L.shadow, <int64_t> nways_total) != 0:
                    raise MemoryError(f"cannot allocate the 3C shadows of level {name!r}")
        for i in range(n):
            L = &self.e.levels[i]
            ways_bytes = L.sets * L.ways * sizeof(way_t)  # (a stack: as many bytes)
            L.next_exclusive = i + 1 < n and self.e.levels[i + 1].inclusion == INCL_EXCLUSIVE
            L.next_same_line = i + 1 < n and self.e.levels[i + 1].line_bytes == L.line_bytes
            L.inclusive_below = 0
            for j in range(i + 1, n):
                if self.e.levels[j].inclusion == INCL_INCLUSIVE:
                    L.inclusive_below = 1
            L.prefetch = i > 0 and ways_bytes >= PREFETCH_MIN_BYTES
            L.prefetch_rows = i == 0 and not L.stack and ways_bytes >= PREFETCH_ROWS_MIN_BYTES
            L.fast = (not L.stack and (L.policy == POLICY_LRU or L.policy == POLICY_FIFO) and not L.write_through
                      and not L.classify and L.inclusion != INCL_INCLUSIVE
                      and not L.next_exclusive and not L.inclusive_below)
            L.through = (not L.stack and (L.policy == POLICY_LRU or L.policy == POLICY_FIFO) and L.write_through
                         and not L.classify and L.inclusion == INCL_NONE
                         and not L.next_exclusive and not L.inclusive_below)
            # Ordered (level_t.order) where misses are what a lookup mostly costs: below the
            # first level (each lookup there is a miss above), or a first level too large for
            # the host's caches (a GPU's L2: steps that stream through it). A small first
            # level hits far more than it misses, and the order's update on every hit cost
            # more than the scans it saved (the ceiling's mlp trace through hier3's 32 KiB
            # L1: 0.57x -> 0.40x of the scalar C replay).
            if (L.fast and L.inclusion == INCL_NONE and 2 <= L.ways <= 16
                    and (i > 0 or ways_bytes >= PREFETCH_ROWS_MIN_BYTES)):
                L.order = <uint64_t *> memwall_alloc_ways(L.sets * sizeof(uint64_t))
                if L.order == NULL:
                    raise MemoryError(f"cannot allocate level {self.names[i]!r}")
                # The vector compare pays where the set's four host lines mostly come from
                # memory (a GPU's L2, hier3's 32 MiB L3); where the ways sit in the host's
                # caches the scan's early exit on a hit is cheaper (the ceiling's mlp trace
                # through hier3's 1 MiB L2: 0.52x of the scalar C build with the scan, 0.50x
                # with the vector compare)
                L.simd_tags = L.ways == 16 and ways_bytes >= PREFETCH_ROWS_MIN_BYTES
        self.e.prefetch_ahead = prefetch_distance(&self.e)
        self._clear(False)

    def __dealloc__(self):
        cdef int i
        cdef level_t *L
        if self.e.levels == NULL:
            return
        for i in range(self.e.n):
            L = &self.e.levels[i]
            memwall_free_ways(L.way, L.sets * L.ways * sizeof(way_t))
            memwall_free_ways(L.order, L.sets * sizeof(uint64_t))
            free(L.dirty_sets)
            free(L.plru)
            free(L.seen.keys)
            free(L.shadow.key)
            free(L.shadow.prev)
            free(L.shadow.next)
            free(L.shadow.slots)
            stack_free(&L.st, L.sets)
        free(self.e.levels)
        self.e.levels = NULL

    cdef void _clear(self, bint arrays) noexcept:
        cdef int i
        cdef level_t *L
        cdef uint64_t nways_total, nslots, first, set
        for i in range(self.e.n):
            L = &self.e.levels[i]
            nways_total = L.sets * L.ways
            if L.stack:
                stack_clear(&L.st, L.sets)
            elif arrays:  # fresh from calloc they are zero already
                memset(L.way, 0, nways_total * sizeof(way_t))
                if L.dirty_sets != NULL:
                    memset(L.dirty_sets, 0, ((L.sets + 63) >> 6) * sizeof(uint64_t))
                memset(L.plru, 0, L.sets * (L.ways - 1) if L.ways > 1 else 1)
            if L.order != NULL:
                first = memwall_order_init(L.ways)
                for set in range(L.sets):
                    L.order[set] = first
            L.clock = 0
            L.rng = L.seed
            L.mru_valid = 0
            memset(&L.c, 0, sizeof(counters_t))
            if L.classify:
                memset(L.seen.keys, 0xFF, L.seen.capacity * sizeof(uint64_t))
                L.seen.count = 0
                L.seen.has_empty_key = 0
                nslots = L.shadow.slot_mask + 1
                memset(L.shadow.slots, 0xFF, nslots * sizeof(int64_t))
                L.shadow.used = 0
                L.shadow.head = -1
                L.shadow.tail = -1
        memset(&self.e.mem, 0, sizeof(memory_t))
        self.e.accesses = 0
        self.e.err = ERR_NONE

    def reset(self):
        """Empty every level and zero every counter, as if newly built."""
        self._clear(True)

    def _check(self):
        if self.e.err == ERR_NOMEM:
            self.e.err = ERR_NONE
            raise MemoryError("out of memory growing a 3C shadow; the counters are incomplete")

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def validate(self, const uint64_t[::1] addr, const uint32_t[::1] size):
        """Index of the first access with size 0 or a range past 2**64, or -1."""
        cdef Py_ssize_t i, j, n = addr.shape[0], end
        cdef Py_ssize_t bad = -1
        if size.shape[0] < n:
            raise ValueError("size is shorter than addr")
        with nogil:
            i = 0
            while i < n and bad < 0:
                end = i + VALIDATE_BLOCK if n - i > VALIDATE_BLOCK else n
                # Without a branch per access (the compiler vectorizes it): can a block hold
                # a bad access at all? A range can wrap only from an address in the top 4 GiB.
                if memwall_block_suspect(&addr[i], &size[i], end - i):
                    for j in range(i, end):
                        if size[j] == 0 or addr[j] + (size[j] - 1) < addr[j]:
                            bad = j
                            break
                i = end
        return bad

    def replay(self, const uint64_t[::1] addr, const uint32_t[::1] size, const uint8_t[::1] is_write):
        """Replay explicit accesses (validated by the caller: see ``validate``)."""
        cdef Py_ssize_t i, n = addr.shape[0]
        if size.shape[0] != n or is_write.shape[0] != n:
            raise ValueError("addr, size and is_write must have the same length")
        cdef bint pf = 0
        cdef int lv
        cdef uint64_t misses0, misses_prev = PREFETCH_CHUNK
        cdef Py_ssize_t i_end
        cdef level_t *L = &self.e.levels[0]
        if n == 0:
            return
        for lv in range(self.e.n):
            pf |= self.e.levels[lv].prefetch
        with nogil:
            if self.e.n == 0:
                for i in range(n):
                    access(&self.e, addr[i], size[i], is_write[i] != 0)
            elif L.fast and L.sets_pow2:
                # The ceiling's loop: the sets below are hinted only on a first-level miss.
                replay_pow2_call(&self.e, &addr[0], &size[0], &is_write[0], 0, n, n, pf)
            else:
                # In chunks of PREFETCH_CHUNK accesses: the deep levels' sets are prefetched
                # in a chunk that follows one where the first level missed often (elsewhere
                # the hints cost more than they save).
                i = 0
                while i < n:
                    i_end = i + PREFETCH_CHUNK if n - i > PREFETCH_CHUNK else n
                    misses0 = L.c.read_misses + L.c.write_misses
                    replay_range(&self.e, &addr[0], &size[0], &is_write[0], i, i_end, n,
                                 pf and misses_prev * PREFETCH_MISS_RATIO >= PREFETCH_CHUNK)
                    misses_prev = L.c.read_misses + L.c.write_misses - misses0
                    i = i_end
        self._check()

    def replay_nest(self, tuple counts, tuple accesses):
        """Replay a loop nest in place: its ``counts`` (outermost first) and its
        ``accesses`` (memwall.streams.Access, as LoopNest has checked them: base, strides,
        size, is_write, after, rows, row_stride). The nest's program, which accesses issue
        at which depth, before or after the loops inside, is built here in C arrays: a
        sweep hands the engine tens of thousands of nests, and building it in Python with
        NumPy arrays cost more than replaying most of them."""
        cdef nest_t ns
        cdef Py_ssize_t n = len(accesses), n_loops = len(counts)
        cdef Py_ssize_t cols = n_loops if n_loops > 0 else 1
        cdef Py_ssize_t i, d, k, m
        cdef bint flag
        # int64 words: counts, strides, row_stride, issue, issue_start, inner, inner_start,
        # then uint64 words: cur, memo_line, memo_idx; then uint32: size, rows; uint8: is_write,
        # depth, after
        cdef Py_ssize_t words = (n_loops + n * cols + n + n + (2 * n_loops + 3) + n * n_loops + (n_loops + 1)
                                 + 3 * n + 1)
        cdef int64_t *w64 = <int64_t *> calloc(words, sizeof(int64_t))
        cdef uint32_t *w32 = <uint32_t *> calloc(2 * n + 1, sizeof(uint32_t))
        cdef uint8_t *w8 = <uint8_t *> calloc(3 * n + 1, sizeof(uint8_t))
        cdef int64_t *c_counts
        cdef int64_t *strides
        cdef int64_t *row_stride
        cdef int64_t *issue
        cdef int64_t *issue_start
        cdef int64_t *inner
        cdef int64_t *inner_start
        cdef uint64_t *cur
        cdef uint64_t *memo_line
        cdef uint64_t *memo_idx
        cdef uint32_t *size
        cdef uint32_t *rows
        cdef uint8_t *is_write
        cdef uint8_t *depth
        cdef uint8_t *after
        if w64 == NULL or w32 == NULL or w8 == NULL:
            free(w64)
            free(w32)
            free(w8)
            raise MemoryError("cannot allocate a loop nest's program")
        try:
            # the arrays, laid out in the three blocks and handed to the walk as they are
            ns.counts = c_counts = w64
            ns.strides = strides = c_counts + n_loops
            ns.row_stride = row_stride = strides + n * cols
            ns.issue = issue = row_stride + n
            ns.issue_start = issue_start = issue + n
            ns.inner = inner = issue_start + (2 * n_loops + 3)
            ns.inner_start = inner_start = inner + n * n_loops
            ns.cur = cur = <uint64_t *> (inner_start + (n_loops + 1))
            ns.memo_line = memo_line = cur + n
            ns.memo_idx = memo_idx = memo_line + n
            ns.size = size = w32
            ns.rows = rows = size + n
            ns.is_write = is_write = w8
            depth = is_write + n
            after = depth + n
            ns.n_loops = <int> n_loops
            ns.stride_cols = cols
            ns.memo = self.e.n > 0 and self.e.levels[0].fast
            for d in range(n_loops):
                c_counts[d] = counts[d]
            for i in range(n):
                a = accesses[i]
                st = a.strides
                depth[i] = len(st)
                for d in range(depth[i]):
                    strides[i * cols + d] = st[d]
                cur[i] = a.base
                size[i] = a.size
                is_write[i] = 1 if a.is_write else 0
                after[i] = 1 if a.after else 0
                rows[i] = a.rows
                row_stride[i] = a.row_stride
                memo_idx[i] = NO_MEMO
            m = 0
            issue_start[0] = 0
            for d in range(n_loops + 1):
                for flag in (False, True):
                    for i in range(n):
                        if depth[i] == d and after[i] == flag:
                            issue[m] = i
                            m += 1
                    issue_start[2 * d + 1 + flag] = m
            m = 0
            inner_start[0] = 0
            for d in range(n_loops):
                for i in range(n):
                    if depth[i] > d:
                        inner[m] = i
                        m += 1
                inner_start[d + 1] = m
            with nogil:
                nest_body(&self.e, &ns, 0)
        finally:
            free(w64)
            free(w32)
            free(w8)
        self._check()

    def flush(self):
        """Write back every dirty line, first level first, set by set, way by way."""
        with nogil:
            flush_all(&self.e)
        self._check()

    def counters(self):
        """``{"levels": [{"name": ..., <counters_t field>: value, ...}], "memory": {<memory_t
        field>: value}, "accesses": n}``: Cython converts each struct to a dict keyed by
        its field names, so the fields' order in _structs.pxd cannot matter."""
        cdef int i
        levels = []
        for i in range(self.e.n):
            row = {"name": self.names[i]}
            row.update(<dict> self.e.levels[i].c)
            levels.append(row)
        return {"levels": levels, "memory": <dict> self.e.mem, "accesses": self.e.accesses}

    def counts_flat(self):
        """Every counter as one flat tuple, for snapshots taken kernel by kernel: each
        level's counters_t fields in the order of LEVEL_COUNTS, then memory_t's in the order
        of MEMORY_COUNTS, then the accesses."""
        cdef int i
        cdef counters_t *c
        out = []
        for i in range(self.e.n):
            c = &self.e.levels[i].c
            out += (c.reads, c.writes, c.read_misses, c.write_misses, c.compulsory, c.capacity, c.conflict,
                    c.writebacks, c.bytes_in, c.bytes_out, c.back_invalidations)
        out += (self.e.mem.reads, self.e.mem.writes, self.e.mem.bytes_read, self.e.mem.bytes_written,
                self.e.accesses)
        return tuple(out)

    def state_digest(self):
        """What every later replay's counters depend on, hashed: per level, each set's valid
        lines with their dirty bits and their ages (the clock now minus the line's stamp),
        whichever ways hold them. Two hierarchies of the same geometry with equal digests
        count any later trace alike, bit for bit: the policy reads a set's lines in stamp
        order only, and equal ages give equal orders. (Equal ages are more than that needs:
        two states in the same order at other ages digest apart, and are merely not found
        equal.) Two 64-bit lanes a level, each a sum over the sets of a mix of the set's
        index and its lines' (order-free) sum: 128 bits, so two different states digest
        alike with a chance of about 2**-128. None where a level's behaviour depends on
        more than that (random or PLRU replacement, 3C shadows, a capacity sweep)."""
        cdef int i
        cdef level_t *L
        cdef uint64_t set, w, sd, base, now, wa, wb, sa, sb, la, lb, nways
        out = []
        for i in range(self.e.n):
            L = &self.e.levels[i]
            if L.stack or L.classify or (L.policy != POLICY_LRU and L.policy != POLICY_FIFO):
                return None
        for i in range(self.e.n):
            L = &self.e.levels[i]
            now = L.clock >> 1
            nways = L.ways
            la = lb = 0
            with nogil:
                for set in range(L.sets):
                    base = set * nways
                    sa = sb = 0
                    for w in range(nways):
                        sd = L.way[base + w].sd
                        if sd == 0:
                            continue
                        wa = hash64(L.way[base + w].tag * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL)
                        wb = hash64(L.way[base + w].tag ^ 0xD6E8FEB86659FD93ULL)
                        sa += hash64(wa ^ (((now - (sd >> 1)) << 1) | (sd & 1)))
                        sb += hash64(wb + ((((now - (sd >> 1)) << 1) | (sd & 1)) * 0xBF58476D1CE4E5B9ULL))
                    la += hash64(sa ^ (set * 0x94D049BB133111EBULL))
                    lb += hash64(sb + set + 0x2545F4914F6CDD1DULL)
            out.append(la)
            out.append(lb)
        return np.array(out, dtype=np.uint64).tobytes()

    def copy_state_from(self, Engine other):
        """Take ``other``'s cache contents (ways, replacement state, clocks), keeping this
        engine's own counters: ``other`` must have the same levels (geometry and policies)."""
        cdef int i
        cdef level_t *L
        cdef level_t *O
        if other.e.n != self.e.n:
            raise ValueError("copy_state_from: the hierarchies differ in their levels")
        for i in range(self.e.n):
            L = &self.e.levels[i]
            O = &other.e.levels[i]
            if (L.sets != O.sets or L.ways != O.ways or L.line_bytes != O.line_bytes or L.policy != O.policy
                    or L.write_through != O.write_through or L.inclusion != O.inclusion):
                raise ValueError(f"copy_state_from: level {i} differs in its geometry or policies")
            if L.stack or L.classify or O.stack or O.classify:
                raise ValueError("copy_state_from: a capacity-sweep or 3C level holds more than its ways")
        for i in range(self.e.n):
            L = &self.e.levels[i]
            O = &other.e.levels[i]
            memcpy(L.way, O.way, L.sets * L.ways * sizeof(way_t))
            if L.order != NULL and O.order != NULL:
                memcpy(L.order, O.order, L.sets * sizeof(uint64_t))
            memcpy(L.plru, O.plru, L.sets * (L.ways - 1) if L.ways > 1 else 1)
            if L.dirty_sets != NULL:
                memcpy(L.dirty_sets, O.dirty_sets, ((L.sets + 63) >> 6) * sizeof(uint64_t))
            L.clock = O.clock
            L.rng = O.rng
            L.mru_valid = O.mru_valid
            L.mru_line = O.mru_line
            L.mru_idx = O.mru_idx

    def stack_counts(self, int level):
        """A capacity-sweep level's counts, numpy arrays over ways W = 0 .. depth: ``read``,
        ``write``, ``full_write`` lookups by stack distance W (W = depth: deeper or never
        seen), and ``writebacks`` at W ways so far (index 0 unused)."""
        cdef level_t *L = self._test_level(level)
        cdef uint64_t w, depth = L.st.depth
        cdef int64_t total = 0
        if not L.stack:
            raise ValueError(f"level {level} is not in capacity-sweep mode")
        read = np.array(<uint64_t[:depth + 1]> L.st.read_hist, dtype=np.uint64)
        write = np.array(<uint64_t[:depth + 1]> L.st.write_hist, dtype=np.uint64)
        full = np.array(<uint64_t[:depth + 1]> L.st.full_write_hist, dtype=np.uint64)
        cdef int64_t[::1] diff = np.array(<int64_t[:depth + 2]> L.st.wb_diff, dtype=np.int64)
        cdef uint64_t set, p, i, dirty
        wb = np.zeros(depth + 1, dtype=np.uint64)
        # The write-backs of evictions that already happened but are counted only when the
        # line is next looked up or leaves its stack: dirty_from < W <= p for an entry at p.
        for set in range(L.sets):
            for p in range(L.st.count[set]):
                i = set * depth + p
                dirty = L.st.dirty_from[i]
                if dirty < p:
                    diff[dirty + 1] += 1
                    diff[p + 1] -= 1
        for w in range(1, depth + 1):
            total += diff[w]
            wb[w] = total
        return {"read": read, "write": write, "full_write": full, "writebacks": wb}

    # ---- test hooks: reach state the public API does not show, and call the policy's
    # verbs one at a time (tests/test_policies.py)
    cdef level_t *_test_level(self, int level) except NULL:
        if not 0 <= level < self.e.n:
            raise IndexError(f"no level {level}")
        return &self.e.levels[level]

    def _test_set_index(self, int level, uint64_t addr):
        cdef level_t *L = self._test_level(level)
        return set_of(L, addr >> L.line_shift)

    cdef level_t *_test_set(self, int level, uint64_t set) except NULL:
        """The level of a hook that reads one set's ways: one with ways, and that set in it."""
        cdef level_t *L = self._test_level(level)
        if L.stack:
            raise ValueError("a capacity-sweep level has no ways")
        if set >= L.sets:
            raise IndexError(f"no set {set}")
        return L

    def _test_victim(self, int level, uint64_t set):
        """The way the policy would evict from ``set`` now (random: draws from the generator)."""
        return choose_victim(self._test_set(level, set), set)

    def _test_touch(self, int level, uint64_t set, uint64_t way):
        """A hit on a valid way, as a lookup makes it (replacement state only)."""
        cdef level_t *L = self._test_level(level)
        if L.stack:
            raise ValueError("a capacity-sweep level has no ways")
        if set >= L.sets or way >= L.ways or L.way[set * L.ways + way].sd == 0:
            raise IndexError(f"no valid way {way} in set {set}")
        L.mru_valid = 0
        touch(L, set, way)

    def _test_set_stamps(self, int level, uint64_t set):
        """One set's stamps (``sd``: stamp << 1 | dirty, 0 where invalid), in way order."""
        cdef level_t *L = self._test_set(level, set)
        return [L.way[set * L.ways + w].sd for w in range(L.ways)]

    def _test_simd_tags(self, int level):
        """Whether a lookup at ``level`` compares its 16 tags with AVX-512 (``simd_tags``, and
        the host has it, and the hook has not switched it off)."""
        return bool(self._test_level(level).simd_tags and memwall_simd16)

    def _test_set_order(self, int level, uint64_t set):
        """An ``ordered`` level's recency order of one set: its ways from rank 0 (most
        recent) to rank ways-1 (the victim); None at a level that keeps no order."""
        cdef level_t *L = self._test_set(level, set)
        if L.order == NULL:
            return None
        return [(L.order[set] >> (4 * r)) & 15 for r in range(L.ways)]

    def _test_set_snapshot(self, int level, uint64_t set):
        """One set's ways: ``[(line or None, dirty), ...]`` in way order."""
        cdef level_t *L = self._test_set(level, set)
        cdef uint64_t w, idx
        out = []
        for w in range(L.ways):
            idx = set * L.ways + w
            out.append((L.way[idx].tag if L.way[idx].sd != 0 else None, bool(L.way[idx].sd & 1)))
        return out


def _test_typedefs():
    """The numpy dtype each C typedef must match (the array contract)."""
    return {"addr_t": sizeof(addr_t), "size_t32": sizeof(size_t32), "flag_t": sizeof(flag_t),
            "index_t": sizeof(index_t)}

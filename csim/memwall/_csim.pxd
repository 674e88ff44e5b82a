# The contract of memwall._csim: the Engine class's C layout and every cdef function,
# with its exception spec. None can raise: each is `noexcept nogil`. The one failure
# they can meet, out of memory growing a 3C shadow, is a return code (-1 from the
# *_init/_grow functions) or ERR_NOMEM in engine_t.err, raised by the caller holding
# the GIL (Engine._check).
from _types cimport addr_t, flag_t, index_t, size_t32
from _structs cimport engine_t, fa_lru_t, level_t, lineset_t, nest_t, stack_t
from libc.stdint cimport int64_t, uint64_t

# ---- random and hashing
cdef uint64_t splitmix64(uint64_t *state) noexcept nogil    # advances state; the random policy
cdef uint64_t hash64(uint64_t x) noexcept nogil

# ---- 3C: the set of lines seen (-1: out of memory, the old table still owned)
cdef int lineset_init(lineset_t *s) noexcept nogil
cdef int lineset_grow(lineset_t *s) noexcept nogil
cdef bint lineset_add(lineset_t *s, uint64_t key, int *err) noexcept nogil   # was it there?

# ---- 3C: the fully associative LRU shadow (fa_init: -1 out of memory)
cdef int fa_init(fa_lru_t *f, int64_t lines) noexcept nogil
cdef void fa_unlink(fa_lru_t *f, int64_t node) noexcept nogil
cdef void fa_push_head(fa_lru_t *f, int64_t node) noexcept nogil
cdef void fa_slot_delete(fa_lru_t *f, uint64_t i) noexcept nogil
cdef bint fa_access(fa_lru_t *f, uint64_t line, bint allocate) noexcept nogil  # hit?

# ---- one level: the replacement policy's verbs (touch, victim, install, invalidate)
cdef uint64_t set_of(level_t *L, uint64_t line) noexcept nogil
cdef int64_t find_way(level_t *L, uint64_t base, uint64_t line) noexcept nogil  # way or -1
cdef void plru_touch(level_t *L, uint64_t set, uint64_t way) noexcept nogil
cdef void touch(level_t *L, uint64_t set, uint64_t way) noexcept nogil          # a hit
cdef uint64_t choose_victim(level_t *L, uint64_t set) noexcept nogil            # a way
cdef void install(level_t *L, uint64_t set, uint64_t way, uint64_t line, bint dirty) noexcept nogil
cdef void invalidate(level_t *L, uint64_t idx) noexcept nogil                   # flat index
cdef void classify_ref(level_t *L, uint64_t line, bint hit, bint allocate, int *err) noexcept nogil

# ---- a level in capacity-sweep mode (stack_init: -1 out of memory)
cdef int stack_init(stack_t *st, uint64_t sets, uint64_t depth) noexcept nogil
cdef void stack_free(stack_t *st, uint64_t sets) noexcept nogil
cdef void stack_clear(stack_t *st, uint64_t sets) noexcept nogil
cdef void stack_writebacks(stack_t *st, uint64_t above, uint64_t upto) noexcept nogil
cdef void stack_ref(level_t *L, uint64_t line, uint64_t nbytes, bint is_write) noexcept nogil
cdef void stack_flush(level_t *L) noexcept nogil

# ---- references through the hierarchy (level lv; lv == e.n is main memory)
cdef void ref(engine_t *e, int lv, addr_t addr, uint64_t size, bint is_write) noexcept nogil
cdef bint back_invalidate(engine_t *e, int j, addr_t addr, uint64_t nbytes) noexcept nogil
cdef void evict(engine_t *e, int lv, uint64_t vline, bint vdirty) noexcept nogil
cdef uint64_t replace_victim(engine_t *e, int lv, uint64_t set, uint64_t line, bint dirty) noexcept nogil
cdef void victim_install(engine_t *e, int lv, uint64_t line, bint dirty) noexcept nogil
cdef bint fetch_exclusive(engine_t *e, int lv, uint64_t line) noexcept nogil     # was it dirty?
cdef void line_ref_general(engine_t *e, int lv, addr_t line, addr_t lo, uint64_t nbytes,
                           bint is_write) noexcept nogil
cdef void next_line_ref(engine_t *e, int lv, uint64_t line, bint is_write) noexcept nogil
cdef void line_ref_fast(engine_t *e, int lv, addr_t line, uint64_t nbytes, bint is_write) noexcept nogil
cdef void line_ref_through(engine_t *e, int lv, addr_t line, addr_t lo, uint64_t nbytes,
                           bint is_write) noexcept nogil
cdef void line_ref(engine_t *e, int lv, addr_t line, addr_t lo, uint64_t nbytes,
                   bint is_write) noexcept nogil
cdef void access(engine_t *e, addr_t addr, uint64_t size, bint is_write) noexcept nogil
cdef void access_lines(engine_t *e, addr_t addr, uint64_t size, bint is_write) noexcept nogil
cdef void flush_all(engine_t *e) noexcept nogil

# ---- explicit arrays (replay_first_fast: replay_range when the first level is `fast`)
cdef void prefetch_bytes(const void *p, uint64_t nbytes) noexcept nogil
cdef void prefetch_sets(engine_t *e, addr_t addr) noexcept nogil
cdef void replay_range(engine_t *e, const addr_t *addr, const size_t32 *size, const flag_t *is_write,
                       index_t i0, index_t i1, index_t n, bint prefetch) noexcept nogil
cdef void replay_first_fast(engine_t *e, const addr_t *addr, const size_t32 *size,
                            const flag_t *is_write, index_t i0, index_t i1, index_t n,
                            bint prefetch) noexcept nogil
cdef void replay_one_fast(engine_t *e, addr_t addr, uint64_t size, bint is_write) noexcept nogil

# ---- loop nests expanded in place
cdef void issue_one(engine_t *e, nest_t *ns, int64_t k) noexcept nogil
cdef void issue_range(engine_t *e, nest_t *ns, int64_t a, int64_t b) noexcept nogil
cdef uint64_t stream(engine_t *e, uint64_t addr, uint64_t stride, int64_t count, uint64_t size,
                     bint is_write) noexcept nogil   # returns the address after the last
cdef bint streams(engine_t *e, nest_t *ns, int d, int64_t b0, int64_t b1, int64_t c) noexcept nogil
cdef void nest_body(engine_t *e, nest_t *ns, int d) noexcept nogil

cdef int log2_exact(uint64_t x) noexcept nogil


cdef class Engine:
    """The C state of one hierarchy; owns every malloc of engine_t (freed in __dealloc__)."""
    cdef engine_t e                # levels[0..e.n), main memory's counters, the error flag
    cdef list names                # str per level, first first

    cdef void _clear(self, bint arrays) noexcept   # empty the levels (arrays: zero the ways too)
    cdef level_t *_test_level(self, int level) except NULL   # IndexError when out of range
    cdef level_t *_test_set(self, int level, uint64_t set) except NULL   # and a set of its ways

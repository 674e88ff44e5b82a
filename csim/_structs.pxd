# The engine's state, declared once: enums and structs with units and invariants.
# The functions over them and the Engine class are declared in _csim.pxd.
from _types cimport addr_t, flag_t, index_t, size_t32
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

cdef enum Policy:
    POLICY_LRU = 0
    POLICY_FIFO = 1
    POLICY_RANDOM = 2
    POLICY_PLRU = 3

cdef enum Inclusion:
    INCL_NONE = 0
    INCL_INCLUSIVE = 1    # evicting here back-invalidates the line in every level above
    INCL_EXCLUSIVE = 2    # victim cache of the level directly above

cdef enum Error:
    ERR_NONE = 0
    ERR_NOMEM = 1         # a 3C shadow could not grow

ctypedef struct counters_t:
    uint64_t reads                 # line lookups by reads
    uint64_t writes                # line lookups by writes
    uint64_t read_misses           # lookups
    uint64_t write_misses          # lookups
    uint64_t compulsory            # misses (3C, when classifying)
    uint64_t capacity              # misses
    uint64_t conflict              # misses
    uint64_t writebacks            # dirty lines written to the next level
    uint64_t bytes_in              # bytes fetched from the next level
    uint64_t bytes_out             # bytes written to the next level
    uint64_t back_invalidations    # lines removed because a lower inclusive level evicted them

ctypedef struct memory_t:
    uint64_t reads                 # references reaching main memory
    uint64_t writes                # references
    uint64_t bytes_read            # bytes
    uint64_t bytes_written         # bytes

# An open-addressing set of line numbers: the "seen" half of the 3C model.
# keys[i] == EMPTY marks a free slot; the key EMPTY itself is kept in has_empty_key.
ctypedef struct lineset_t:
    uint64_t *keys                 # line numbers, capacity entries
    uint64_t capacity              # slots, a power of two
    uint64_t count                 # keys stored (excluding has_empty_key)
    bint has_empty_key

# A fully associative LRU cache of `lines` lines: the "capacity" half of the 3C model.
# Nodes 0..used-1 are live; a doubly linked list runs from head (MRU) to tail (LRU);
# slots maps hash(line) -> node index, -1 free (linear probing, backward-shift delete).
ctypedef struct fa_lru_t:
    uint64_t *key                  # line number per node
    int64_t *prev                  # node index, -1 at head
    int64_t *next                  # node index, -1 at tail
    int64_t *slots                 # node index per hash slot, -1 free
    uint64_t slot_mask             # hash slots - 1
    int64_t lines                  # capacity in lines
    int64_t used                   # live nodes
    int64_t head                   # MRU node
    int64_t tail                   # LRU node

# One way of a set, 16 bytes: tag and stamp-with-dirty-bit together, so that a lookup, a
# victim choice and an install touch the same host cache line (a 32 MiB simulated level's
# ways do not fit in the host's caches; separate arrays cost separate misses).
ctypedef struct way_t:
    uint64_t tag                   # line number; 0 where invalid (itself a legal line: see sd)
    uint64_t sd                    # (stamp << 1) | dirty. stamp: LRU last touch, FIFO install
                                   #   time (per-level clock, from 1); sd == 0 <=> the way is
                                   #   invalid, for every policy. Stamps are distinct within a
                                   #   level, so comparing sd orders ways by stamp alone.

# A level in capacity-sweep mode: its LRU stack (Mattson, Gecsei, Slutz and Traiger 1970).
# Per set, the `depth` most recently used distinct lines, most recent first: a W-way LRU
# set holds exactly the top W entries of its stack, so one pass counts the misses of every
# associativity 1..depth. Stack distance d of a reference: its line's position before the
# reference (d = depth: deeper, or never seen); it hits in every cache of more than d ways.
# Write-backs: an entry is dirty in exactly the caches of more than dirty_from[i] ways;
# the caches of dirty_from < W <= d evicted it dirty while it sank to d.
ctypedef struct stack_t:
    uint64_t depth                 # ways of the largest capacity swept
    uint64_t *tag                  # sets*depth line numbers, set by set, most recent first
    uint64_t *dirty_from           # ways, per entry (depth: clean in every cache swept)
    uint64_t *count                # valid entries per set
    uint64_t *read_hist            # depth+1 counts of reads by stack distance
    uint64_t *write_hist           # depth+1, writes
    uint64_t *full_write_hist      # depth+1, whole-line writes (a miss of one fetches nothing)
    int64_t *wb_diff               # depth+2: write-backs per ways W, as differences (W >= 1)

ctypedef struct level_t:
    uint64_t sets                  # sets
    uint64_t ways                  # lines per set
    uint64_t line_bytes            # bytes, a power of two
    int line_shift                 # log2(line_bytes)
    bint sets_pow2                 # set = line & set_mask, else line % sets
    uint64_t set_mask              # sets - 1 when sets_pow2
    uint64_t set_magic             # else, with sets < 2^32: ceil(2^64 / sets), for a line < 2^32
                                   #   (memwall_mod32; 0: always divide)
    int policy                     # Policy
    bint write_through             # write-through + no-write-allocate, else write-back + allocate
    int inclusion                  # Inclusion, relative to the level(s) above
    bint next_exclusive            # derived: the level below is an exclusive (victim) level
    bint inclusive_below           # derived: some level below is inclusive, so a fetch or a
                                   #   write-back from here may back-invalidate ways here
    bint next_same_line            # derived: the level below has this level's line size
                                   #   (or is main memory), so a whole line is one reference
    bint prefetch                  # derived: below the first level, and its ways are too many
                                   #   for the host's caches: replay prefetches their sets ahead
    bint prefetch_rows             # derived: the first level, its ways too many for the host's
                                   #   caches: a block's rows prefetch their first sets two rows
                                   #   ahead
    bint fast                      # derived: LRU/FIFO, write-back, no 3C, not inclusive and
                                   #   neither of the two above: line_ref_fast applies
    bint through                   # derived: as fast, but write-through (no-write-allocate)
                                   #   and not a victim level: line_ref_through applies
    bint simd_tags                 # derived: ordered, 16 ways, and its ways too many for the
                                   #   host's caches: a lookup compares the tags with AVX-512
                                   #   where the host has it (memwall_find16_avx512)
    way_t *way                     # sets*ways, set by set
    uint64_t *order                # an ``ordered`` level (fast, no inclusion, 2..16 ways, below
                                   #   the first or a first of 1 MiB of ways or more): per
                                   #   set, its ways by recency, one 4-bit way number a rank
                                   #   (rank 0 most recent, rank ways-1 the victim), kept beside
                                   #   the stamps so a miss finds its victim without a scan.
                                   #   NULL at any other level
    uint64_t *dirty_sets           # levels below the first: one bit per set that may hold a
                                   #   dirty way (set wherever a way there can turn dirty:
                                   #   line_ref_fast, line_ref_general, below_pow2,
                                   #   victim_install), so the flush visits those sets only,
                                   #   not every way of a 32 MiB level. NULL at the first level
    uint8_t *plru                  # tree bits, sets*(ways-1) (at least one byte)
    uint64_t clock                 # ticks once per touch or install; holds stamp << 1
    uint64_t rng                   # splitmix64 state of the random policy
    uint64_t seed                  # the level's seed, for reset
    bint mru_valid                 # fast path: mru_line is resident at mru_idx and is the
    uint64_t mru_line              #   most recent lookup at this level (first level only)
    uint64_t mru_idx               # way index into the flat arrays
    bint classify                  # keep the 3C shadows
    lineset_t seen
    fa_lru_t shadow
    bint stack                     # capacity-sweep mode: st replaces way; nothing goes below
    stack_t st
    counters_t c

ctypedef struct engine_t:
    level_t *levels                # n levels, first first
    int n
    memory_t mem
    uint64_t accesses              # demand accesses replayed
    index_t prefetch_ahead         # accesses between a hint to the host and its use (arrays)
    int err                        # Error, set by nogil code, raised by the caller

# A loop nest as replay_nest walks it (built by memwall.engine._nest_program).
ctypedef struct nest_t:
    int n_loops
    const int64_t *counts          # iterations per loop, outermost first
    const uint32_t *size           # bytes per access
    const uint8_t *is_write        # per access
    const uint32_t *rows           # demand accesses per issue (a block of rows), >= 1
    const int64_t *row_stride      # bytes between the rows of a block
    const int64_t *strides         # bytes, n_access x stride_cols
    int64_t stride_cols
    uint64_t *cur                  # current address of each access (wrapping arithmetic)
    const int64_t *issue           # access ids grouped: before[d] then after[d], d = 0..n_loops
    const int64_t *issue_start     # issue[issue_start[2d] : issue_start[2d+1]] = before at depth d,
                                   # issue[issue_start[2d+1] : issue_start[2d+2]] = after at depth d
    const int64_t *inner           # access ids with depth > d, for each loop d
    const int64_t *inner_start     # inner[inner_start[d] : inner_start[d+1]]
    bint memo                      # the first level is ``fast``: memo_* may be used
    uint64_t *memo_line            # per access: the first-level line it last touched alone,
    uint64_t *memo_idx             #   and the way it was found in (NO_MEMO: none yet)

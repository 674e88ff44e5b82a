/* A hand-written C replay of /ENGINE_SEMANTICS.md's default mode, the yardstick of
 * benchmarks/bench_c.py (which compiles this file with -O3 and calls it through ctypes).
 *
 * LRU, write-back + write-allocate, no inclusion, every level the same line size, no
 * 3C, no flush: each access is split into lines; a line reference looks the line up
 * (one pass over the set's ways), a hit refreshes its stamp (and dirties it on a
 * write), a miss fetches the line from the next level (unless the write covers the
 * whole line), then evicts the smallest stamp (invalid ways have stamp 0) and writes
 * it back to the next level if dirty, then installs. Written plainly, the way one
 * would write it by hand: no same-line shortcut, no prefetching.
 *
 * Counters per level: reads, writes, read_misses, write_misses, writebacks, bytes_in,
 * bytes_out; then main memory's bytes_read, bytes_written.
 */
#include <stdint.h>
#include <stdlib.h>

#define MAX_LEVELS 8
#define NCOUNT 7

typedef struct {
    uint64_t tag;
    uint64_t sd; /* (stamp << 1) | dirty; 0: invalid. 16 bytes a way, as in the engine */
} way_t;

typedef struct {
    uint64_t sets, ways, set_mask, line_bytes;
    int shift;
    uint64_t clock;
    way_t *way;
    uint64_t c[NCOUNT];
} level_t;

typedef struct {
    int n;
    level_t lv[MAX_LEVELS];
    uint64_t mem_read, mem_written;
} hier_t;

enum { READS, WRITES, READ_MISSES, WRITE_MISSES, WRITEBACKS, BYTES_IN, BYTES_OUT };

static void line_ref(hier_t *h, int i, uint64_t line, int is_write, int full_line)
{
    if (i == h->n) {
        if (is_write)
            h->mem_written += h->lv[i - 1].line_bytes;
        else
            h->mem_read += h->lv[i - 1].line_bytes;
        return;
    }
    level_t *L = &h->lv[i];
    way_t *set = L->way + (line & L->set_mask) * L->ways;
    uint64_t victim = 0;
    L->c[is_write ? WRITES : READS]++;
    for (uint64_t w = 0; w < L->ways; w++) {
        if (set[w].sd && set[w].tag == line) {
            L->clock += 2;
            set[w].sd = L->clock | (set[w].sd & 1) | (uint64_t)is_write;
            return;
        }
        if (set[w].sd < set[victim].sd)
            victim = w;
    }
    L->c[is_write ? WRITE_MISSES : READ_MISSES]++;
    if (!(is_write && full_line)) {
        L->c[BYTES_IN] += L->line_bytes;
        line_ref(h, i + 1, line, 0, 1);
    }
    if (set[victim].sd & 1) { /* valid and dirty */
        L->c[WRITEBACKS]++;
        L->c[BYTES_OUT] += L->line_bytes;
        line_ref(h, i + 1, set[victim].tag, 1, 1);
    }
    set[victim].tag = line;
    L->clock += 2;
    set[victim].sd = L->clock | (uint64_t)is_write;
}

/* Build the hierarchy, replay n accesses, write the counters (n_levels * 7, then 2) to
 * out, free everything. Returns 0, or -1 if a level could not be allocated. */
int c_replay(int n_levels, const uint64_t *size, const uint64_t *ways, uint64_t line_bytes,
             const uint64_t *addr, const uint32_t *nbytes, const uint8_t *is_write, int64_t n,
             uint64_t *out)
{
    hier_t h = {0};
    int shift = 0, i, rc = 0;
    while ((1ULL << shift) < line_bytes)
        shift++;
    h.n = n_levels;
    for (i = 0; i < n_levels; i++) {
        level_t *L = &h.lv[i];
        L->ways = ways[i];
        L->sets = size[i] / (ways[i] * line_bytes);
        L->set_mask = L->sets - 1;
        L->line_bytes = line_bytes;
        L->shift = shift;
        L->way = calloc(L->sets * L->ways, sizeof(way_t));
        if (!L->way)
            rc = -1;
    }
    if (rc == 0) {
        for (int64_t k = 0; k < n; k++) {
            uint64_t first = addr[k] >> shift, last = (addr[k] + nbytes[k] - 1) >> shift;
            for (uint64_t line = first; line <= last; line++) {
                uint64_t lo = line << shift, hi = lo + line_bytes;
                int full = addr[k] <= lo && addr[k] + nbytes[k] >= hi;
                line_ref(&h, 0, line, is_write[k], full);
            }
        }
        for (i = 0; i < n_levels; i++)
            for (int j = 0; j < NCOUNT; j++)
                out[i * NCOUNT + j] = h.lv[i].c[j];
        out[n_levels * NCOUNT] = h.mem_read;
        out[n_levels * NCOUNT + 1] = h.mem_written;
    }
    for (i = 0; i < n_levels; i++)
        free(h.lv[i].way);
    return rc;
}

/* scan: inclusive and exclusive prefix sums of 32-bit integers (PMPP chapter 11).

     inclusive: out[i] = x[0] + x[1] + ... + x[i]
     exclusive: out[i] = x[0] + ... + x[i-1]   (out[0] = 0)

   The elements are unsigned int, and every sum wraps modulo 2^32: exact, and the same bits an int32
   scan with two's complement wrap-around gives (the Python side passes int32 arrays viewed as uint32).

   Every entry point returns a cudaError_t as int (0 = success). The host-pointer form copies in, runs
   and copies out (tests, notebooks); the `_dev` form takes device pointers, a workspace and a stream
   (NULL for the legacy default stream) and returns as soon as the work is queued (the bench, the
   profilers). x and out may be the same array (each tile is read before it is written).

   Variants, in the order a learner meets them, selected by name through one dispatcher:
     "01_kogge_stone"         one block scans a tile of 1024 in shared memory (double-buffered, log2 steps);
                              across blocks: scan the tiles, scan their totals, add them back (3+ launches)
     "02_brent_kung"          the work-efficient tree (up-sweep, down-sweep) over tiles of 2048, same passes
     "03_decoupled_lookback"  one pass: each block publishes its tile's total, looks back at its
                              predecessors for the sum before it, and publishes its inclusive prefix
   An unknown name returns cudaErrorInvalidValue. */
#ifndef CUDALAB_SCAN_H
#define CUDALAB_SCAN_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant table: the Python side reads the names from here and never types them again. */
int scan_variant_count(void);
const char *scan_variant_name(int i); /* NULL when i is out of range */

/* The largest n any entry point takes (INT_MAX: CUB's item count is an int). */
long long scan_max_n(void);

/* Bytes of device workspace scan_u32_dev needs for `variant` at n elements (the tile totals of 01 and
   02, the tile status words and counter of 03); -1 for an unknown variant or n outside 0..scan_max_n(). */
long long scan_workspace_bytes(const char *variant, long long n);

/* out = scan(x), n elements; exclusive != 0 for the exclusive scan. */
cudalab_status scan_u32(const char *variant, const unsigned int *x, unsigned int *out, long long n, int exclusive);
/* d_work: at least scan_workspace_bytes(variant, n) bytes, 8-byte aligned; its contents need not be
   anything (the launcher initialises what it needs, in stream order). */
cudalab_status scan_u32_dev(const char *variant, const unsigned int *d_x, unsigned int *d_out, long long n,
                            int exclusive, void *d_work, long long work_bytes, void *stream);

/* The ceiling: CUB's cub::DeviceScan::InclusiveSum (ExclusiveSum when exclusive != 0). Its temporary
   storage is asked for once (scan_cub_workspace_bytes) and passed in, as CUB's users do. */
cudalab_status scan_cub_workspace_bytes(long long n, int exclusive, long long *bytes);
cudalab_status scan_cub_dev(const unsigned int *d_x, unsigned int *d_out, long long n, int exclusive, void *d_work,
                            long long work_bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif

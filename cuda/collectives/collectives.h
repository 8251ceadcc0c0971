/* collectives: moving and reducing data across GPUs -- a peer copy, a ring all-reduce, a one-shot
   all-reduce, NCCL's collectives as the ceiling, and a tensor-parallel MLP block built on them.

   Ranks. A "communicator" (a handle, an int) holds `world` ranks, each with an input buffer, an
   output buffer, a receive buffer and device flags. Its ranks are either
     - one rank per GPU (use_devices = 1: rank r on device r, peer access enabled), or
     - virtual ranks on one GPU (use_devices = 0): every rank's buffers on the current device, and
       every collective kernel launched ONCE for all ranks with cudaLaunchCooperativeKernel, so that
       every block is resident and no flag spin can wait on a block that never started.
   The kernels are the same in both cases: they take the ranks' buffer and flag pointers as arguments.

   No hang. Every spin on a flag is bounded by the global timer (timeout_ms); on expiry the kernel
   records which rank waited at which step and returns, and the entry point returns cudaErrorTimeout
   (909); collectives_last_failure says where. NCCL runs with non-blocking communicators under a host
   deadline (ncclCommGetAsyncError, ncclCommAbort). NVLink multicast (NVLS) is never used.

   dtype: 0 float32, 1 bfloat16, 2 int32 (sums; int32 wraps). Status returns are cudaError_t codes. */
#ifndef CUDALAB_COLLECTIVES_H
#define CUDALAB_COLLECTIVES_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant table: 01_p2p_copy, 01_memcpy_peer, 02_ring_allreduce, 03_oneshot_allreduce,
   nccl_allreduce, nccl_allgather, nccl_reducescatter, tp_mlp, tp_mlp_overlap, 04_oneshot_signal,
   05_twoshot_allreduce, 06_oneshot_ll, auto_allreduce.
   04 and 05 (at most 8 ranks) push into the peers' scratch and raise one flag per peer; 06 pushes
   04's traffic with the epoch inside every 16-byte line (NCCL's LL shape: no flag, no fence); their
   epoch is a counter on the device, so a CUDA graph can replay them. 04 takes at most 2 MiB per rank,
   05 64 MiB, 06 1 MiB (and at most in_bytes); auto_allreduce picks 04, the ring, 05 or NCCL (the ring
   without NCCL or on virtual ranks) by size: collectives_auto_variant says which. */
int collectives_variant_count(void);
const char *collectives_variant_name(int i);
/* 1 when the variant needs NCCL (the nccl_* ones), 0 otherwise, -1 for an unknown index. */
int collectives_variant_needs_nccl(int variant);
/* The variant's kinds, space-separated: "allreduce" (an all-reduce: 02-06, nccl_allreduce, auto),
   "graph" (a CUDA graph can replay it: 04, 05, 06 and the nccl_* ones), "nccl", "small" (04, 05, 06: at
   most collectives_small_max_world() ranks and collectives_max_bytes per rank); NULL for an unknown
   index. */
const char *collectives_variant_tags(int variant);
/* The largest message in bytes per rank the variant takes on a communicator made for `in_bytes`
   (04: 2 MiB, 05: 64 MiB, 06: 1 MiB, the others in_bytes); -1 for an unknown index. */
long long collectives_max_bytes(int variant, long long in_bytes);
/* The most ranks the "small" variants (04, 05, 06) run. */
int collectives_small_max_world(void);
/* NULL when the variant runs here, else why not ("needs sm_80: this GPU is sm_75": tp_mlp and
   tp_mlp_overlap need at least gemm_tc's sm_80 GEMM); their entry points then return
   cudaErrorNotSupported before any launch. */
const char *collectives_unsupported_reason(int variant);

/* 1 when this library was built against NCCL, else 0; NCCL's version code (e.g. 22809), else 0. */
int collectives_have_nccl(void);
int collectives_nccl_version(void);
/* 1 when device a can read and write device b's memory (cudaDeviceCanAccessPeer), 0 when not,
   negative (-cudaError_t) when the query failed. */
int collectives_peer_access(int a, int b);
/* The largest virtual world one cooperative launch holds on the current device with
   `blocks_per_rank` blocks per rank (every block resident at once); negative (-cudaError_t) on error. */
int collectives_max_virtual_world(int blocks_per_rank);

/* A communicator of `world` ranks. in_bytes / out_bytes: each rank's input and output capacity.
   blocks_per_rank 0 picks a default. handle[0] receives the handle. */
cudalab_status collectives_comm_create(int world, int use_devices, long long in_bytes, long long out_bytes,
                                       int blocks_per_rank, long long timeout_ms, int *handle);
/* One process per rank (mpirun, srun, torchrun, `invoke run --ranks`): this process's rank `rank` of
   `world`, on device local_rank. Its buffers are allocated once, their CUDA IPC handles exchanged once
   through an NCCL all-gather (NCCL's unique id from NCCL_COMM_ID, MASTER_ADDR/MASTER_PORT + 1, or
   id_file), every peer's opened and checked (same run, same sizes, its canary); a refusal anywhere
   fails every rank, naming the rank refused. Then every variant but tp_* runs here as in one process;
   upload, download and poison reach this rank's buffers only. Destroy waits for every rank first. */
cudalab_status collectives_comm_create_rank(int rank, int world, int local_rank, const char *id_file,
                                            long long in_bytes, long long out_bytes, int blocks_per_rank,
                                            long long timeout_ms, int *handle);
/* This process's rank on the communicator (one process per rank), -1 for one process of every rank,
   -2 for no such handle. */
int collectives_comm_rank(int handle);
/* The variant auto_allreduce runs for n elements of dtype; -1 for bad arguments. */
int collectives_auto_variant(int handle, int dtype, long long n);
/* Milliseconds per call of `iters` back-to-back calls (after 3 warm-up calls), eager (graph = 0) or
   replayed as one captured CUDA graph of `iters` calls (graph = 1: 04, 05, NCCL and auto where it
   picks one of those; cudaErrorNotSupported for the rungs with a host epoch). One process per rank:
   every rank starts its timed calls after a barrier. */
cudalab_status collectives_time(int handle, int variant, int dtype, long long n, int iters, int graph, float *ms);
cudalab_status collectives_comm_destroy(int handle);
/* Host <-> a rank's input / output buffer, and every output set to `byte` (poison). Each is done on the
   communicator's own stream, after what was run there, and is complete on return; after
   collectives_enqueue on another stream, call collectives_check first. */
cudalab_status collectives_upload(int handle, int rank, const uint8_t *src, long long bytes);
cudalab_status collectives_download(int handle, int rank, uint8_t *dst, long long bytes);
cudalab_status collectives_poison(int handle, int byte);
/* Run `variant` on n elements of every rank's input into its output, wait for it, and check each
   rank's error record. */
cudalab_status collectives_run(int handle, int variant, int dtype, long long n);
#ifdef CUDALAB_FAULTS
/* The fault build only (`make FAULTS=1 build/faults/lib/libcollectives.so`, for the tests): while
   rank >= 0, collectives_run's lab all-reduces run without that rank's part, so the others time out
   (the tests show the timeout works); -1 restores normal runs. cudaErrorInvalidValue below -1, and
   from collectives_run for a rank the communicator lacks. */
cudalab_status collectives_set_fault_stall_rank(int rank);
#endif
/* The bench's form: enqueue only, ordered after `stream` (the current device's) and before whatever
   follows on it; no synchronisation, no error-record check (collectives_check does both). */
/* collectives_run for 01_p2p_copy / 01_memcpy_peer with a direction: 1 = rank 0 -> rank 1,
   2 = rank 1 -> rank 0, 3 = both at once. */
cudalab_status collectives_run_direction(int handle, int variant, int dtype, long long n, int direction);
cudalab_status collectives_enqueue(int handle, int variant, int dtype, long long n, void *stream);
cudalab_status collectives_check(int handle);
/* After cudaErrorTimeout: info[0] = rank, info[1] = step, info[2] = chunk, info[3] = phase
   (0 reduce-scatter, 1 all-gather, 2 start barrier, 3 end barrier, 4 NCCL, 5 signal, 6 gather),
   info[4] = the rank whose flag never came (-1: not known). info holds 5 ints. */
cudalab_status collectives_last_failure(int handle, int *info);
/* The name of a failure's phase (info[3] of collectives_last_failure): "reduce-scatter", "all-gather",
   ...; NULL for a number that names none. */
const char *collectives_phase_name(int phase);
/* The last failure in words (which rank, which step, or NCCL's own message); "" when none. */
const char *collectives_last_message(void);

/* The tensor-parallel block's GEMMs, by index: "auto" (the fastest that takes each product: gemm_tc's
   wgmma rung on a Hopper with an sm_90a build, its 02_mma_sync elsewhere), "mma_sync", "wgmma".
   The refusal: NULL when GEMM `gemm` runs the block of hidden H and ffn F over `world` ranks here,
   else why not, in one sentence (the entry points below then return an error before any launch). */
int collectives_tp_gemm_count(void);
const char *collectives_tp_gemm_name(int i);
const char *collectives_tp_gemm_refusal(int gemm, int world, int H, int F);
/* The block's all-reduces, by index: "02_ring_allreduce", "03_oneshot_allreduce" (the lab's kernels of
   those names) and "copy_engine" (the copy engines carry the bytes between GPUs, a few blocks a rank add). */
int collectives_tp_allreduce_count(void);
const char *collectives_tp_allreduce_name(int i);
/* The tensor-parallel MLP block, y = gelu(x . W1^T) . W2^T, over the communicator's ranks:
   x is T x H, W1 is F x H (rank r holds rows r*F/world ..), W2 is H x F (rank r holds the same
   columns); each rank computes its partial y (T x H, float32) with GEMM `gemm` (above) and the
   all-reduce `ar` (an index of the table above) sums them. overlap = 1 splits T into `chunks` row blocks and
   runs the all-reduce of block i beside the GEMMs of block i+1 (a second stream). y is world x T x H:
   every rank's result. The communicator needs in_bytes = out_bytes >= T*H*4. */
cudalab_status collectives_tp_mlp(int handle, int ar, int gemm, int overlap, int chunks, int T, int H, int F,
                                  const cudalab_bf16 *x, const cudalab_bf16 *w1, const cudalab_bf16 *w2, float *y);
/* How the block splits each GPU between the GEMMs and the all-reduce (overlap = 1: beside them):
   split[0] = the SMs the wgmma GEMMs' persistent grids may use (0: every SM; 02 takes no cap),
   split[1] = the all-reduce's blocks per rank. Nothing is launched. */
cudalab_status collectives_tp_split(int handle, int ar, int gemm, int overlap, int chunks, int T, int H, int F,
                                    int *split);
/* The same block on device-resident random weights, timed: ms[0] = median milliseconds of `iters`
   forwards (each one synchronised across the ranks), for the executable and the 2-GPU run. */
cudalab_status collectives_tp_mlp_time(int handle, int ar, int gemm, int overlap, int chunks, int T, int H,
                                       int F, int iters, float *ms);

#ifdef __cplusplus
}
#endif
#endif

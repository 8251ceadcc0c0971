// build/bin/collectives: run and time one rung.
//
//   collectives [--variant V] [--n N] [--dtype f32|bf16|i32] [--world W] [--virtual] [--iters K]
//               [--blocks B] [--timeout-ms T] [--direction 0to1|1to0|both]
//               [--tokens T --hidden H --ffn F --chunks C --gemm G --allreduce A]  (tp_mlp, tp_mlp_overlap)
//               [--id-file PATH]          (one process per rank; default $CUDALAB_ID_FILE)
//
// One process, W ranks: one rank per GPU when W GPUs are visible with peer access (and no
// --virtual), else W virtual ranks on GPU 0 (the lab's kernels only; NCCL needs one GPU per rank).
// Ends with one line per run:
//   result program=collectives variant=V dtype=D n=N bytes=B world=W ranks=virtual|devices ms=...
//          algbw_gbs=... busbw_gbs=... mismatches=M check=pass|fail
//
// One process per rank, when the environment names a rank: RANK/WORLD_SIZE/LOCAL_RANK (torchrun and
// `invoke run collectives --ranks N`), OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK (mpirun) or
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun). Each process drives GPU LOCAL_RANK. Without
// --variant it runs NCCL's all-reduce, all-gather and reduce-scatter (the shape that crosses nodes);
// with --variant it runs that variant on a communicator whose peers' buffers are mapped through CUDA
// IPC (one node: the lab's kernels load and store into them exactly as in one process). The unique
// id comes from NCCL_COMM_ID, from MASTER_ADDR/MASTER_PORT (torchrun: NCCL's root at MASTER_PORT+1),
// or from --id-file (rank 0 writes it atomically; the file must be new for each run). So
//   mpirun -np 16 -x NCCL_NVLS_ENABLE=0 build/bin/collectives --id-file /shared/run42.id --n 268435456
//   torchrun --nproc-per-node 4 --no-python build/bin/collectives --variant auto_allreduce --n 8192
// run with no MPI in the lab. Each rank prints its own result lines, tagged rank=R.
// Across nodes (node_layout below: CUDALAB_NODES, LOCAL_WORLD_SIZE < WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE <
// OMPI_COMM_WORLD_SIZE, SLURM_NNODES > 1) only NCCL's path runs: --variant is refused, since every variant
// runs on a communicator that maps its peers' buffers through CUDA IPC, which stops at the node.
// `invoke run collectives --ranks 4 --nodes 2` rehearses two nodes on one host (harness/calling/launch.py).
// Timing: --iters back-to-back calls after 3 warm-ups (ms=), and for the variants a CUDA graph can
// replay (04, 05, NCCL, auto when it picks one of them) the same calls captured as one graph (graph_ms=).
// Exit status: 0 pass, 1 a CUDA/NCCL failure, a timeout or a wrong result, 2 bad arguments.
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.cuh"
#include "collectives.h"

extern "C" int collectives_rank_run(int rank, int world, int local_rank, const char *id_file, long long n, int dtype,
                                    int iters, long long timeout_ms, double *results);

static const char *kUsageHead =
    "usage: collectives [--variant V] [--n N] [--dtype f32|bf16|i32] [--world W] [--virtual] [--iters K]\n"
    "                   [--blocks B] [--timeout-ms T] [--direction 0to1|1to0|both]\n"
    "                   [--tokens T --hidden H --ffn F --chunks C --gemm auto|mma_sync|wgmma]\n"
    "                   [--allreduce 02_ring_allreduce|03_oneshot_allreduce|copy_engine] [--id-file PATH]\n"
    "one process per rank when RANK/WORLD_SIZE, OMPI_COMM_WORLD_* or SLURM_PROCID/SLURM_NTASKS are set\n"
    "(NCCL's three collectives; with --variant, that variant over CUDA IPC, on one node only)";

static const char *kDtypes[] = {"f32", "bf16", "i32"};

// A rank variable: the first of `names` that is set, parsed whole; -1 when none is set.
static long long env_int(const char *const *names, int count, const char **which) {
    for (int i = 0; i < count; ++i) {
        const char *v = getenv(names[i]);
        if (v && *v) {
            *which = names[i];
            return cudalab_parse_range(v, names[i], 0, INT_MAX);
        }
    }
    return -1;
}

// Which node this rank is on and how many nodes the ranks span: the rule of node_layout in
// cuda/collectives/collectives.py (the tests hold both to the same answers). CUDALAB_NODES=K first (the
// rehearsal of K nodes on one host: the ranks fill the nodes in order, world/K each; CUDALAB_NODE must
// agree), else the rank's own launcher's: LOCAL_WORLD_SIZE of WORLD_SIZE (GROUP_RANK the node),
// OMPI_COMM_WORLD_LOCAL_SIZE of OMPI_COMM_WORLD_SIZE, SLURM_NNODES (SLURM_NODEID); else one node.
// family: 0 torchrun / the lab's launcher, 1 mpirun, 2 srun. local: the launcher's local rank, -1 if none.
struct NodeLayout {
    long long nodes, node, local;
    std::string said_by;
};
static long long env_one(const char *name, long long lo) {
    const char *v = getenv(name);
    return v && *v ? cudalab_parse_range(v, name, lo, INT_MAX) : -1;
}
static NodeLayout node_layout(int family, long long rank, long long world, long long local) {
    const long long k = env_one("CUDALAB_NODES", 1);
    if (k > 0) {
        if (world % k) CUDALAB_USAGE_ERROR("CUDALAB_NODES=%lld must divide the world size %lld: every node runs as many ranks", k, world);
        const long long per = world / k, node = rank / per, given = env_one("CUDALAB_NODE", 0);
        if (given >= 0 && given != node)
            CUDALAB_USAGE_ERROR("CUDALAB_NODE=%lld, but rank %lld of %lld on %lld nodes is on node %lld (the ranks fill the "
                                "nodes in order, %lld each)", given, rank, world, k, node, per);
        return {k, node, rank % per, "CUDALAB_NODES=" + std::to_string(k)};
    }
    if (local < 0) local = rank;  // one node: the local rank is the rank
    if (family == 2) {
        long long n = env_one("SLURM_NNODES", 1);
        if (n < 1) n = 1;
        if (n > world) CUDALAB_USAGE_ERROR("SLURM_NNODES=%lld exceeds the world size %lld: a node without a rank", n, world);
        const long long id = env_one("SLURM_NODEID", 0);
        return {n, id < 0 ? 0 : id, local, n > 1 ? "SLURM_NNODES=" + std::to_string(n) : "one node"};
    }
    const char *size_name = family == 0 ? "LOCAL_WORLD_SIZE" : "OMPI_COMM_WORLD_LOCAL_SIZE";
    const long long per = env_one(size_name, 1);
    if (per < 0 || per == world) return {1, 0, local, "one node"};
    if (per > world)
        CUDALAB_USAGE_ERROR("%s=%lld exceeds the world size %lld: a node cannot hold more ranks than the world", size_name,
                            per, world);
    const long long group = family == 0 ? env_one("GROUP_RANK", 0) : -1;
    return {(world + per - 1) / per, group < 0 ? rank / per : group, local,
            std::string(size_name) + "=" + std::to_string(per) + " of " + std::to_string(world) + " ranks"};
}

// Whether the table tags variant v with `word` (collectives_variant_tags: "graph", "allreduce", ...).
static bool tagged(int v, const char *word) {
    const char *tags = collectives_variant_tags(v);
    const size_t len = strlen(word);
    for (const char *t = tags; t && *t;) {
        const char *end = strchr(t, ' ');
        const size_t k = end ? (size_t)(end - t) : strlen(t);
        if (k == len && strncmp(t, word, len) == 0) return true;
        t = end ? end + 1 : t + k;
    }
    return false;
}
// The variants a CUDA graph can replay: those with their epoch on the device, and NCCL's.
static bool graphable(int v) { return tagged(v, "graph"); }

static int variant_index(const char *name) {
    for (int i = 0; i < collectives_variant_count(); ++i)
        if (strcmp(collectives_variant_name(i), name) == 0) return i;
    return -1;
}

// Integer-valued inputs (exact in every dtype for small worlds): rank q's element i is (q+1)*(i%7+1).
static void fill(std::vector<unsigned char> &buf, int dtype, long long n, int q) {
    for (long long i = 0; i < n; ++i) {
        const float v = (float)((q + 1) * (i % 7 + 1));
        if (dtype == 0) memcpy(&buf[i * 4], &v, 4);
        else if (dtype == 2) { const int k = (int)v; memcpy(&buf[i * 4], &k, 4); }
        else { uint32_t u; memcpy(&u, &v, 4); const uint16_t h = (uint16_t)(u >> 16); memcpy(&buf[i * 2], &h, 2); }
    }
}
static double value_at(const std::vector<unsigned char> &buf, int dtype, long long i) {
    if (dtype == 0) { float f; memcpy(&f, &buf[i * 4], 4); return f; }
    if (dtype == 2) { int k; memcpy(&k, &buf[i * 4], 4); return k; }
    uint16_t h; memcpy(&h, &buf[i * 2], 2); const uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}

// A status from the library: a timeout or an NCCL failure says where, then exit 1.
static void check_status(int code, const char *what) {
    if (code == 0) return;
    const char *msg = collectives_last_message();
    fprintf(stderr, "%s failed: %s (%s)%s%s\n", what, cudaGetErrorName((cudaError_t)code),
            cudaGetErrorString((cudaError_t)code), msg && *msg ? ": " : "", msg ? msg : "");
    exit(1);
}

static int run_per_rank(int rank, int world, int local_rank, const char *id_file, long long n, int dtype, int iters,
                        long long timeout_ms) {
    double res[9] = {0};
    const int code = collectives_rank_run(rank, world, local_rank, id_file, n, dtype, iters, timeout_ms, res);
    if (code != 0) {
        const char *msg = collectives_last_message();
        fprintf(stderr, "rank %d: %s (%s)%s%s\n", rank, cudaGetErrorName((cudaError_t)code),
                cudaGetErrorString((cudaError_t)code), msg && *msg ? ": " : "", msg ? msg : "");
        return 1;
    }
    const char *ops[] = {"nccl_allreduce", "nccl_allgather", "nccl_reducescatter"};
    const int es = dtype == 1 ? 2 : 4;
    bool ok = true;
    for (int op = 0; op < 3; ++op) {
        const double ms = res[3 * op], bad = res[3 * op + 1], cnt = res[3 * op + 2];
        // nccl-tests' sizes and factors: all-reduce counts its buffer and 2(n-1)/n; all-gather and
        // reduce-scatter count the whole gathered (or scattered) buffer and (n-1)/n.
        const double bytes = op == 0 ? cnt * es : op == 1 ? cnt * es * world : cnt * es;
        const double factor = op == 0 ? 2.0 * (world - 1) / world : (double)(world - 1) / world;
        const double algbw = ms > 0 ? bytes / (ms * 1e6) : 0.0;
        printf("result program=collectives variant=%s dtype=%s n=%lld bytes=%.0f world=%d ranks=processes rank=%d "
               "ms=%.6f algbw_gbs=%.3f busbw_gbs=%.3f mismatches=%.0f check=%s\n",
               ops[op], kDtypes[dtype], (long long)cnt, bytes, world, rank, ms, algbw, algbw * factor, bad,
               bad == 0 ? "pass" : "fail");
        ok = ok && bad == 0;
    }
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    // The variants are the library's table, never a list typed here.
    const std::string usage = std::string(kUsageHead) + "\nvariants: " +
                              cudalab_name_list(collectives_variant_count, collectives_variant_name);
    const char *kUsage = usage.c_str();
    const int kAuto = variant_index("auto_allreduce");
    const char *variant = "02_ring_allreduce", *id_file = nullptr;
    long long n = 1 << 20, world = 2, iters = 20, blocks = 0, timeout_ms = 10000;
    // 8 token blocks by default: with the wgmma GEMM the all-reduce is a larger share of the block, and
    // only the last block's all-reduce is left in the open (collectives.cu, tp_split says more).
    long long tokens = 256, hidden = 512, ffn = 2048, chunks = 8;
    const char *gemm_name = "auto";  // tp_*: the GEMM (collectives_tp_gemm_name's table)
    const char *ar_name = "02_ring_allreduce";  // tp_*: the all-reduce (collectives_tp_allreduce_name's table)
    int dtype = 0, direction = 3;
    bool force_virtual = false, variant_given = false;
    const char *tp_option = nullptr;  // the first tensor-parallel option given: refused for any other variant
    int self = -1, local_rank = 0;  // one process per rank: this one's rank and GPU
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        auto val = [&]() { return cudalab_option_value(argc, argv, &i, kUsage); };
        if (strcmp(a, "--variant") == 0) variant = val(), variant_given = true;
        else if (strcmp(a, "--n") == 0) n = cudalab_parse_range(val(), "--n", 1, LLONG_MAX / 8);
        else if (strcmp(a, "--world") == 0) world = cudalab_parse_range(val(), "--world", 1, 4096);
        else if (strcmp(a, "--iters") == 0) iters = cudalab_parse_range(val(), "--iters", 1, 1000000);
        else if (strcmp(a, "--blocks") == 0) blocks = cudalab_parse_range(val(), "--blocks", 1, 64);
        else if (strcmp(a, "--timeout-ms") == 0) timeout_ms = cudalab_parse_range(val(), "--timeout-ms", 1, 86400000);
        else if (strcmp(a, "--tokens") == 0) tokens = cudalab_parse_range(val(), "--tokens", 1, INT_MAX), tp_option = a;
        else if (strcmp(a, "--hidden") == 0) hidden = cudalab_parse_range(val(), "--hidden", 1, INT_MAX), tp_option = a;
        else if (strcmp(a, "--ffn") == 0) ffn = cudalab_parse_range(val(), "--ffn", 1, INT_MAX), tp_option = a;
        else if (strcmp(a, "--chunks") == 0) chunks = cudalab_parse_range(val(), "--chunks", 1, 1024), tp_option = a;
        else if (strcmp(a, "--gemm") == 0) gemm_name = val(), tp_option = a;
        else if (strcmp(a, "--allreduce") == 0) ar_name = val(), tp_option = a;
        else if (strcmp(a, "--id-file") == 0) id_file = val();
        else if (strcmp(a, "--virtual") == 0) force_virtual = true;
        else if (strcmp(a, "--dtype") == 0) {
            const char *d = val();
            dtype = -1;
            for (int k = 0; k < 3; ++k)
                if (strcmp(d, kDtypes[k]) == 0) dtype = k;
            if (dtype < 0) CUDALAB_USAGE_ERROR("--dtype must be f32, bf16 or i32, got '%s'", d);
        } else if (strcmp(a, "--direction") == 0) {
            const char *d = val();
            direction = strcmp(d, "0to1") == 0 ? 1 : strcmp(d, "1to0") == 0 ? 2 : strcmp(d, "both") == 0 ? 3 : 0;
            if (!direction) CUDALAB_USAGE_ERROR("--direction must be 0to1, 1to0 or both, got '%s'", d);
        } else CUDALAB_USAGE_ERROR("unknown argument %s\n%s", a, kUsage);
    }
    if (!id_file) id_file = getenv("CUDALAB_ID_FILE");  // set by harness/calling/launch.py
    const int v = variant_index(variant);
    if (v < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s)\n%s", variant,
                            cudalab_name_list(collectives_variant_count, collectives_variant_name).c_str(), kUsage);
    // A name's place in one of the library's tables (-1: not there).
    auto table_index = [](const char *name, int (*count)(void), const char *(*name_at)(int)) {
        for (int k = 0; k < count(); ++k)
            if (strcmp(name, name_at(k)) == 0) return k;
        return -1;
    };
    auto gemm_index = [&](const char *name) {
        return table_index(name, collectives_tp_gemm_count, collectives_tp_gemm_name);
    };
    const int gemm = gemm_index(gemm_name);
    if (gemm < 0)
        CUDALAB_USAGE_ERROR("unknown --gemm '%s' (valid: %s)", gemm_name,
                            cudalab_name_list(collectives_tp_gemm_count, collectives_tp_gemm_name).c_str());
    const int ar = table_index(ar_name, collectives_tp_allreduce_count, collectives_tp_allreduce_name);
    if (ar < 0)
        CUDALAB_USAGE_ERROR("unknown --allreduce '%s' (valid: %s)", ar_name,
                            cudalab_name_list(collectives_tp_allreduce_count, collectives_tp_allreduce_name).c_str());
    if (tp_option && v != 7 && v != 8)
        CUDALAB_USAGE_ERROR("%s is an option of tp_mlp and tp_mlp_overlap; variant %s does not take it", tp_option,
                            variant);

    // ---- one process per rank ----
    const char *which = nullptr;
    const char *const rank_vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
    const char *const size_vars[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"};
    const char *const local_vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
    const long long env_rank = env_int(rank_vars, 3, &which);
    if (env_rank >= 0) {
        const char *wsrc = nullptr;
        const long long env_world = env_int(size_vars, 3, &wsrc);
        if (env_world < 1) CUDALAB_USAGE_ERROR("%s is set but no world size is (WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS)", which);
        if (env_rank >= env_world) CUDALAB_USAGE_ERROR("%s=%lld must be below the world size %lld", which, env_rank, env_world);
        // The local rank (the GPU this rank drives) is its own launcher's, counted within the node.
        int family = 0;
        while (strcmp(rank_vars[family], which) != 0) ++family;
        const NodeLayout lay = node_layout(family, env_rank, env_world, env_one(local_vars[family], 0));
        const long long local = lay.local;
        if (v == 7 || v == 8)
            CUDALAB_USAGE_ERROR("%s runs in one process (every rank's GEMMs from one host thread); unset %s", variant, which);
        if (force_virtual) CUDALAB_USAGE_ERROR("--virtual runs every rank in one process; unset %s", which);
        // Every --variant runs on the per-rank communicator, which opens each peer's buffers by CUDA IPC: a
        // handle only a process on the same node can open. Across nodes only NCCL's own path runs.
        if (variant_given && lay.nodes > 1)
            CUDALAB_USAGE_ERROR("--variant %s runs on the lab's per-rank communicator, which maps every peer's buffers "
                                "through CUDA IPC, and peers on another node cannot be mapped: these %lld ranks span %lld "
                                "nodes (%s). Across nodes only NCCL runs: build/bin/collectives without --variant "
                                "(NCCL's all-reduce, all-gather and reduce-scatter)",
                                variant, env_world, lay.nodes, lay.said_by.c_str());
        if (!collectives_have_nccl())
            CUDALAB_USAGE_ERROR("one process per rank needs NCCL, and this build has none: pip install -e '.[nccl]', then rebuild");
        if (!variant_given)
            return run_per_rank((int)env_rank, (int)env_world, (int)local, id_file, n, dtype, (int)iters, timeout_ms);
        self = (int)env_rank;
        world = env_world;
        local_rank = (int)local;
    }

    // ---- one process, every rank (or this process's rank, its peers' buffers mapped) ----
    const bool tp = v == 7 || v == 8;
    const bool mine_only = self >= 0;
    if (const char *why = collectives_unsupported_reason(v)) CUDALAB_USAGE_ERROR("variant %s cannot run here: %s", variant, why);
    if ((v == 0 || v == 1) && !mine_only) world = 2;
    if (collectives_variant_needs_nccl(v) && !collectives_have_nccl())
        CUDALAB_USAGE_ERROR("%s needs NCCL, and this build has none: pip install -e '.[nccl]', then rebuild", variant);
    if (mine_only && (v == 0 || v == 1) && world != 2)
        CUDALAB_USAGE_ERROR("%s runs two ranks; the environment names %lld", variant, world);
    int ndev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    bool devices = mine_only || (!force_virtual && world > 1 && world <= ndev);
    for (int a = 0; devices && !mine_only && a < world; ++a)
        for (int b = 0; b < world; ++b)
            if (a != b && collectives_peer_access(a, b) != 1) devices = false;
    if (world == 1) devices = true;
    if (collectives_variant_needs_nccl(v) && !devices)
        CUDALAB_USAGE_ERROR("%s needs %lld GPUs with peer access, one per rank (%d visible): NCCL 2.28 refuses two ranks "
                            "on one GPU; the lab's kernels run virtual ranks", variant, world, ndev);
    if (!devices) {
        const int most = collectives_max_virtual_world(blocks ? (int)blocks : 1);
        if (most < 0) check_status(-most, "collectives_max_virtual_world");
        if (world > most)
            CUDALAB_USAGE_ERROR("--world %lld virtual ranks do not fit one cooperative launch here: at most %d%s", world,
                                most, blocks ? " with this --blocks" : "");
    }
    const int es = dtype == 1 ? 2 : 4;
    if (tp) {
        if (ffn % world) CUDALAB_USAGE_ERROR("--ffn %lld must be a multiple of --world %lld (each rank takes F/world)", ffn, world);
        if (const char *why = collectives_tp_gemm_refusal(gemm, (int)world, (int)hidden, (int)ffn))
            CUDALAB_USAGE_ERROR("--gemm %s cannot run this block here: %s", gemm_name, why);
        // The result line names the GEMM that ran: auto's choice for these shapes on this GPU.
        const char *ran = gemm_name;
        if (gemm == gemm_index("auto"))
            ran = collectives_tp_gemm_refusal(gemm_index("wgmma"), (int)world, (int)hidden, (int)ffn) ? "mma_sync" : "wgmma";
        const long long y_bytes = tokens * hidden * 4;
        int h = -1;
        check_status(collectives_comm_create((int)world, devices, y_bytes, y_bytes, (int)blocks, timeout_ms, &h),
                     "collectives_comm_create");
        int split[2] = {0, 0};  // the GEMMs' SMs and the all-reduce's blocks, for the result line
        check_status(collectives_tp_split(h, ar, gemm, v == 8, (int)chunks, (int)tokens, (int)hidden, (int)ffn, split),
                     "collectives_tp_split");
        float ms = 0.f;
        check_status(collectives_tp_mlp_time(h, ar, gemm, v == 8, (int)chunks, (int)tokens, (int)hidden, (int)ffn,
                                             (int)iters, &ms),
                     variant);
        const double flops = 2.0 * 2.0 * (double)tokens * hidden * ffn;  // two GEMMs of the whole block
        printf("result program=collectives variant=%s dtype=bf16 tokens=%lld hidden=%lld ffn=%lld chunks=%lld world=%lld "
               "ranks=%s ms=%.6f tflops=%.3f check=skip gemm=%s allreduce=%s gemm_sms=%d comm_blocks=%d\n",
               variant, tokens, hidden, ffn, v == 8 ? chunks : 1, world, devices ? "devices" : "virtual", ms,
               flops / (ms * 1e9), ran, ar_name, split[0], split[1]);
        check_status(collectives_comm_destroy(h), "collectives_comm_destroy");
        return 0;
    }
    if (v == 6 && n % world) CUDALAB_USAGE_ERROR("nccl_reducescatter needs --n a multiple of --world (%lld)", world);
    const long long in_bytes = n * es, out_bytes = v == 5 ? in_bytes * world : in_bytes;
    int h = -1;
    if (mine_only)
        check_status(collectives_comm_create_rank(self, (int)world, local_rank, id_file, in_bytes, out_bytes, (int)blocks,
                                                  timeout_ms, &h),
                     "collectives_comm_create_rank");
    else
        check_status(collectives_comm_create((int)world, devices, in_bytes, out_bytes, (int)blocks, timeout_ms, &h),
                     "collectives_comm_create");
    auto owned = [&](int q) { return !mine_only || q == self; };
    std::vector<unsigned char> buf((size_t)out_bytes);
    for (int q = 0; q < world; ++q) {
        if (!owned(q)) continue;
        fill(buf, dtype, n, q);
        check_status(collectives_upload(h, q, buf.data(), in_bytes), "collectives_upload");
    }
    check_status(collectives_poison(h, 0xAB), "collectives_poison");
    auto once = [&]() {
        check_status(v <= 1 ? collectives_run_direction(h, v, dtype, n, direction) : collectives_run(h, v, dtype, n),
                     variant);
    };
    once();
    // The check: every rank's output against the closed form.
    long long bad = 0;
    const double tri = (double)world * (world + 1) / 2;
    for (int q = 0; q < world; ++q) {
        if (!owned(q) || (v <= 1 && !(direction & (q == 1 ? 1 : 2)))) continue;
        const long long outn = v == 5 ? n * world : v == 6 ? n / world : n;
        check_status(collectives_download(h, q, buf.data(), outn * es), "collectives_download");
        for (long long i = 0; i < outn; ++i) {
            const double want = v <= 1 ? (double)((2 - q) * (i % 7 + 1))  // the other rank's input
                                : v == 5 ? (double)((i / n + 1) * (i % n % 7 + 1))
                                : v == 6 ? tri * (double)((q * (n / world) + i) % 7 + 1)
                                         : tri * (double)(i % 7 + 1);
            if (value_at(buf, dtype, i) != want) ++bad;
        }
    }
    // The timing: back-to-back calls (collectives_time), eager, and as one CUDA graph where it replays.
    float eager_ms = 0.f, graph_ms = -1.f;
    check_status(collectives_time(h, v, dtype, n, (int)iters, 0, &eager_ms), variant);
    const int chosen = v == kAuto ? collectives_auto_variant(h, dtype, n) : v;
    if (graphable(chosen)) check_status(collectives_time(h, v, dtype, n, (int)iters, 1, &graph_ms), variant);
    const double ms = eager_ms;
    const int dirs = v <= 1 ? (direction == 3 ? 2 : 1) : 1;
    const double bytes = v <= 1 ? (double)in_bytes * dirs : v == 5 ? (double)in_bytes * world : (double)in_bytes;
    const double factor = v <= 1 ? 1.0 : (v == 5 || v == 6) ? (double)(world - 1) / world : 2.0 * (world - 1) / world;
    const double algbw = bytes / (ms * 1e6);
    char extra[160] = "";
    if (mine_only) snprintf(extra, sizeof extra, " rank=%d", self);
    if (graph_ms >= 0.f) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " graph_ms=%.6f", graph_ms);
    if (v == kAuto) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " chosen=%s", collectives_variant_name(chosen));
    printf("result program=collectives variant=%s dtype=%s n=%lld bytes=%.0f world=%lld ranks=%s%s ms=%.6f "
           "algbw_gbs=%.3f busbw_gbs=%.3f mismatches=%lld check=%s\n",
           variant, kDtypes[dtype], n, bytes, world, mine_only ? "processes" : devices ? "devices" : "virtual", extra,
           ms, algbw, algbw * factor, bad, bad == 0 ? "pass" : "fail");
    check_status(collectives_comm_destroy(h), "collectives_comm_destroy");
    return bad == 0 ? 0 : 1;
}

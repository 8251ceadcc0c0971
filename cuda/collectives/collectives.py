"""collectives: all-reduce and friends across GPUs -- a peer copy, a ring and a one-shot all-reduce,
NCCL's collectives as the ceiling, and a tensor-parallel MLP block (cuda/collectives/).

Public API (numpy in, numpy out; every argument is checked before anything is launched):
    allreduce(arrays, variant="02_ring_allreduce")    one array per rank -> CollectiveResult
    allgather(arrays), reduce_scatter(arrays)           NCCL (one GPU per rank)
    p2p_copy(arrays, direction="both", method="kernel") two ranks: each gets the other's array
    tp_mlp(x, w1, w2, world, overlap=False, gemm="auto", ar_variant="02_ring_allreduce")
                                                        y = gelu(x W1^T) W2^T over `world` ranks; the
                                                        all-reduce one of tp_allreduce_names()
    Communicator(world, nbytes, ...)                    the handle the above open and close; keep one
                                                        open for back-to-back calls (its flags persist)
    reference_allreduce(arrays), tp_reference(x, w1, w2)   numpy, float64 where rounding matters

Ranks. With as many GPUs as ranks (and peer access between them) each rank gets its own GPU;
otherwise the lab's kernels run *virtual ranks*: every rank's buffers on one GPU, all ranks in one
cooperative launch. That proves the protocol (chunks, flags, tails, back-to-back calls), not link
bandwidth; the result says which it was (`result.ranks`, `result.note`). NCCL needs one GPU per rank
(2.28 refuses two ranks on one device), so NCCL with several ranks needs several GPUs.

One process per rank: `invoke run collectives --ranks N` (harness/calling/launch.py), or `mpirun` /
`srun` / `torchrun` on build/bin/collectives, which reads its rank from the environment
(cuda/collectives/main.cu): NCCL's collectives, or with --variant any all-reduce over CUDA IPC. From
Python, each process opens `Communicator.from_environment(nbytes)` (rank_environment() reads the
same variables) and calls `run_rank` / `time`; every kernel runs as in one process, the peers'
buffers mapped through CUDA IPC.

Nodes. CUDA IPC stops at the node, so when the ranks span nodes (node_layout: the one rule, which the
executable keeps too) only NCCL's collectives run, and the lab's kernels are refused in one line.
`invoke run collectives --ranks 4 --nodes 2` rehearses two nodes on one host, NCCL held to its socket
transport over loopback; latency_sweep_processes(world, nodes=2) times that path beside the one-node one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harness.base.errors import CudaError
from harness.calling import library
from harness.programs.record import Program

PROGRAM = "collectives"


# VARIANTS is the library's one table (cuda/collectives/collectives.cu), read when first asked for: never typed
# here. So are its kinds, which the table tags (collectives_variant_tags): ALLREDUCE_VARIANTS, the all-reduces;
# GRAPH_VARIANTS, the rungs whose epoch lives on the device, which a CUDA graph can replay (and NCCL's);
# NCCL_VARIANTS, those that need NCCL; BENCH_VARIANTS, the lab's own all-reduces (NCCL is their ceiling).
__getattr__ = library.table_attributes(
    __name__, PROGRAM, ALLREDUCE_VARIANTS=lambda: _tagged("allreduce"), GRAPH_VARIANTS=lambda: _tagged("graph"),
    NCCL_VARIANTS=lambda: _tagged("nccl"), BENCH_VARIANTS=lambda: _bench_variants())


def _tagged(tag: str) -> tuple[str, ...]:
    return library.tagged(PROGRAM, tag)


def _bench_variants() -> tuple[str, ...]:
    return tuple(v for v in _tagged("allreduce") if v not in _tagged("nccl"))


PROFILE_VARIANTS = ("02_ring_allreduce", "03_oneshot_allreduce")
DEFAULT_TIMEOUT_MS = 10_000
TIMEOUT = 909  # cudaErrorTimeout: a bounded wait expired
POISON_BYTE = 0xFF  # NaN in float32 and bfloat16, -1 in int32


def _dtypes() -> dict:
    import ml_dtypes

    return {np.dtype(np.float32): 0, np.dtype(ml_dtypes.bfloat16): 1, np.dtype(np.int32): 2}


def lib() -> library.Library:
    return library.load(PROGRAM)


def variant_index(variant: str) -> int:
    return library.table_index(PROGRAM, "variant", variant)


def unsupported_reason(variant: str) -> str | None:
    """None when `variant` runs on this build and GPU, else why not: tp_mlp and tp_mlp_overlap need at
    least gemm_tc's sm_80 GEMM ("needs sm_80: this GPU is sm_75"). Asks the library; nothing is launched."""
    lb = lib()
    why = lb.collectives_unsupported_reason(variant_index(variant))
    return None if why == lb.ffi.NULL else lb.ffi.string(why).decode()


def phase_name(phase: int) -> str:
    """Where a rank gave up waiting ("reduce-scatter", "start barrier", ...), as the library names its
    phases; the number itself for one it does not name."""
    lb = lib()
    name = lb.collectives_phase_name(int(phase))
    return str(phase) if name == lb.ffi.NULL else lb.ffi.string(name).decode()


def have_nccl() -> bool:
    """Whether build/lib/libcollectives.so was built against NCCL (cuda/collectives/build.mk)."""
    return bool(lib().collectives_have_nccl())


def nccl_version() -> str | None:
    """NCCL's version as "2.28.9" (from the library it was built against), or None without NCCL."""
    code = int(lib().collectives_nccl_version())
    if code <= 0:
        return None
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def no_nccl() -> str:
    """What a variant that needs NCCL says on a build without it."""
    return ("NCCL absent: build/lib/libcollectives.so was built without NCCL (pip install -e '.[nccl]' or a "
            "system NCCL, then `invoke build --programs collectives`); variants that need it: "
            + ", ".join(_tagged("nccl")))


def gpu_count() -> int:
    from harness.calling import cudart

    return cudart.device_count()


def peer_access(world: int) -> bool:
    """Every pair of devices 0..world-1 can reach each other's memory."""
    L = lib()
    return all(L.collectives_peer_access(a, b) == 1 for a in range(world) for b in range(world) if a != b)


def max_virtual_world(blocks_per_rank: int = 1) -> int:
    """The most virtual ranks one cooperative launch holds on this GPU (every block resident)."""
    v = int(lib().collectives_max_virtual_world(int(blocks_per_rank)))
    if v < 0:
        from harness.calling import cudart

        cudart.check(-v, "collectives_max_virtual_world")
    return v


# --- argument checks (before any launch) ------------------------------------------------------------

def check_arrays(arrays, name: str = "arrays") -> list[np.ndarray]:
    """One 1-D array per rank, all of the same size and dtype (float32, bfloat16 or int32), at least
    one element: the rule broken is named."""
    if isinstance(arrays, np.ndarray) or not isinstance(arrays, (list, tuple)):
        raise TypeError(f"{name} must be a list with one numpy array per rank, got {type(arrays).__name__}")
    if not arrays:
        raise ValueError(f"{name} is empty: give one array per rank")
    dts = _dtypes()
    out = []
    for r, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name}[{r}] must be a numpy array, got {type(a).__name__}")
        if a.dtype not in dts:
            raise TypeError(f"{name}[{r}] is {a.dtype}: the collectives take float32, bfloat16 (ml_dtypes) or int32")
        if a.ndim != 1:
            raise ValueError(f"{name}[{r}] must be 1-D, got shape {a.shape}")
        if a.size == 0:
            raise ValueError(f"{name}[{r}] is empty: a collective needs at least one element")
        out.append(np.ascontiguousarray(a))
    first = out[0]
    for r, a in enumerate(out[1:], 1):
        if a.dtype != first.dtype:
            raise TypeError(f"every rank's array must have the same dtype: {name}[0] is {first.dtype}, "
                            f"{name}[{r}] is {a.dtype}")
        if a.size != first.size:
            raise ValueError(f"every rank's array must have the same size: {name}[0] has {first.size} elements, "
                             f"{name}[{r}] has {a.size}")
    return out


# --- one process per rank: where the rank comes from ----------------------------------------------------

# (rank, world, local rank) variables of each launcher, in the order the executable reads them.
RANK_VARIABLES = (("RANK", "WORLD_SIZE", "LOCAL_RANK"),  # torchrun, `invoke run --ranks`
                  ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),  # mpirun
                  ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))  # srun


@dataclass
class RankEnvironment:
    rank: int
    world: int
    local_rank: int  # the rank's place on its node, which is the GPU it drives among the node's visible ones
    source: str  # the rank variable read: RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID
    id_file: str  # CUDALAB_ID_FILE, "" when the unique id comes from NCCL_COMM_ID or MASTER_ADDR/PORT
    nodes: int = 1  # how many nodes the ranks span (node_layout)
    node: int = 0  # this rank's node
    layout: str = "one node"  # what said so, for messages: "CUDALAB_NODES=2", "SLURM_NNODES=2", ...


@dataclass(frozen=True)
class NodeLayout:
    nodes: int
    node: int
    local_rank: int
    said_by: str


def node_layout(rank: int, world: int, source: str, env) -> NodeLayout:
    """Which node this rank is on, and how many nodes the ranks span: the one rule for "the ranks span
    nodes", which decides whether the lab's CUDA IPC kernels may run (cuda/collectives/main.cu's
    node_layout keeps the same rule). In this order:
      CUDALAB_NODES=K (the rehearsal of K nodes on one host: the lab's launcher with --nodes, or mpirun -x):
          the ranks fill the K nodes in order, world/K each; CUDALAB_NODE, when set, must agree;
      else the rank's own launcher: torchrun / the lab's (LOCAL_WORLD_SIZE of WORLD_SIZE; GROUP_RANK is the
          node), mpirun (OMPI_COMM_WORLD_LOCAL_SIZE of OMPI_COMM_WORLD_SIZE), srun (SLURM_NNODES, SLURM_NODEID);
      else one node. The local rank comes from the launcher, or from the layout under CUDALAB_NODES."""
    def whole(name: str, lo: int = 0) -> int | None:
        text = env.get(name, "")
        if not text:
            return None
        if not text.strip().isdigit() or int(text) < lo:
            raise ValueError(f"{name} must be a whole number >= {lo}, got {text!r}")
        return int(text)

    family = {"RANK": ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"),
              "OMPI_COMM_WORLD_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", None),
              "SLURM_PROCID": ("SLURM_LOCALID", None, "SLURM_NODEID")}[source]
    local = whole(family[0])
    k = whole("CUDALAB_NODES", 1)
    if k is not None:
        if world % k:
            raise ValueError(f"CUDALAB_NODES={k} must divide the world size {world}: every node runs as many ranks")
        per = world // k
        node = rank // per
        given = whole("CUDALAB_NODE")
        if given is not None and given != node:
            raise ValueError(f"CUDALAB_NODE={given}, but rank {rank} of {world} on {k} nodes is on node {node} "
                             f"(the ranks fill the nodes in order, {per} each)")
        return NodeLayout(k, node, rank % per, f"CUDALAB_NODES={k}")
    local = rank if local is None else local  # one node: the local rank is the rank
    if source == "SLURM_PROCID":
        n = whole("SLURM_NNODES", 1) or 1
        if n > world:
            raise ValueError(f"SLURM_NNODES={n} exceeds the world size {world}: a node without a rank")
        return NodeLayout(n, whole("SLURM_NODEID") or 0, local, f"SLURM_NNODES={n}" if n > 1 else "one node")
    size_name = family[1]
    per = whole(size_name, 1)
    if per is None or per == world:
        return NodeLayout(1, 0, local, "one node")
    if per > world:
        raise ValueError(f"{size_name}={per} exceeds the world size {world}: a node cannot hold more ranks than "
                         f"the world")
    nodes = -(-world // per)
    node = whole(family[2]) if family[2] else None
    return NodeLayout(nodes, rank // per if node is None else node, local, f"{size_name}={per} of {world} ranks")


def ipc_refusal(what: str, env: RankEnvironment) -> str:
    """Why `what` ("--variant 02_ring_allreduce runs on", "Communicator.from_environment opens") cannot run
    when the ranks span nodes, in one line; the executable says the same."""
    return (f"{what} the lab's per-rank communicator, which maps every peer's buffers through CUDA IPC, and peers "
            f"on another node cannot be mapped: these "
            f"{env.world} ranks span {env.nodes} nodes ({env.layout}). Across nodes only NCCL runs: "
            f"build/bin/collectives without --variant (NCCL's all-reduce, all-gather and reduce-scatter)")


def rank_environment(env=None) -> RankEnvironment | None:
    """This process's rank as its launcher set it (torchrun, mpirun, srun or the lab's launcher), None
    when no rank variable is set; ValueError naming the variable for a value that is not a whole
    number, a rank beyond the world, or a world size missing. The same rules as the executable's."""
    import os

    env = os.environ if env is None else env

    def first(k: int) -> tuple[str, str] | None:
        for names in RANK_VARIABLES:
            if env.get(names[k], ""):
                return names[k], env[names[k]]
        return None

    def whole(name: str, text: str) -> int:
        if not text.strip().isdigit():
            raise ValueError(f"{name} must be a whole number >= 0, got {text!r}")
        return int(text)

    found = first(0)
    if found is None:
        return None
    source, rank = found[0], whole(*found)
    w = first(1)
    if w is None:
        raise ValueError(f"{source} is set but no world size is (WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS)")
    world = whole(*w)
    if world < 1 or rank >= world:
        raise ValueError(f"{source}={rank} must be below the world size {world}")
    lay = node_layout(rank, world, source, env)
    id_file = env.get("CUDALAB_ID_FILE", "")
    if world > 1 and not id_file and not env.get("NCCL_COMM_ID") and not (env.get("MASTER_ADDR") and env.get("MASTER_PORT")):
        raise ValueError("with several ranks the NCCL unique id needs CUDALAB_ID_FILE (a file every rank sees), "
                         "NCCL_COMM_ID, or torchrun's MASTER_ADDR and MASTER_PORT")
    return RankEnvironment(rank, world, lay.local_rank, source, id_file, lay.nodes, lay.node, lay.said_by)


def check_world_fits(world: int, largest: int) -> None:
    if world > largest:
        raise ValueError(f"{world} virtual ranks do not fit one cooperative launch on this GPU (every block must be "
                         f"resident at once): the largest world that fits is {largest}")


def plan(world: int, variant: str, virtual: bool | None, gpus: int | None = None,
         peers: Callable[[int], bool] | None = None, nccl: bool | None = None) -> bool:
    """True for virtual ranks, False for one rank per GPU; ValueError naming the rule otherwise.
    `gpus`, `peers` and `nccl` default to this machine's (tests hand in others)."""
    variant_index(variant)
    if variant in _tagged("nccl") and not (have_nccl() if nccl is None else nccl):
        raise ValueError(no_nccl())
    gpus = gpu_count() if gpus is None else gpus
    peers = peers or peer_access
    if world == 1:
        return False
    real_ok = world <= gpus and peers(world)
    if variant in _tagged("nccl"):
        if virtual:
            raise ValueError(f"{variant} cannot run virtual ranks: NCCL 2.28 refuses two ranks on one GPU; "
                             "the lab's kernels (02_ring_allreduce, 03_oneshot_allreduce) can")
        if not real_ok:
            raise ValueError(f"{variant} needs {world} GPUs with peer access, one per rank; {gpus} visible"
                             + ("" if world <= gpus else " (NCCL 2.28 refuses two ranks on one GPU)"))
        return False
    if virtual is False and not real_ok:
        raise ValueError(f"{variant} with virtual=False needs {world} GPUs with peer access, one per rank; "
                         f"{gpus} visible (leave virtual=None to run virtual ranks on one GPU)")
    if virtual is None:
        return not real_ok
    return bool(virtual)


@dataclass
class CollectiveResult:
    outputs: list  # one array per rank
    variant: str
    world: int
    ranks: str  # "virtual" (all ranks on one GPU) or "devices" (one rank per GPU)
    note: str = ""


def _note(virtual: bool, world: int) -> str:
    if virtual and world > 1:
        return (f"{world} virtual ranks on one GPU in one cooperative launch: the protocol is exercised, "
                "no data crossed a link")
    return f"{world} rank(s), one per GPU"


class Communicator:
    """`world` ranks with `nbytes` of input each (`out_nbytes` of output; default the same), virtual
    or one per GPU (see `plan`). A context manager; `close()` frees it. Calls on one communicator
    reuse its flags, with a new epoch each time, which is what back-to-back calls test."""

    def __init__(self, world: int, nbytes: int, virtual: bool = False, out_nbytes: int | None = None,
                 blocks_per_rank: int = 0, timeout_ms: int = DEFAULT_TIMEOUT_MS, rank: int | None = None,
                 local_rank: int | None = None, id_file: str = ""):
        for name, v, lo in (("world", world, 1), ("nbytes", nbytes, 1), ("timeout_ms", timeout_ms, 1),
                            ("blocks_per_rank", blocks_per_rank, 0)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if blocks_per_rank > 64:
            raise ValueError(f"blocks_per_rank must be at most 64, got {blocks_per_rank}")
        if rank is not None and not (isinstance(rank, (int, np.integer)) and 0 <= rank < world):
            raise ValueError(f"rank must be an integer in [0, {world}), got {rank!r}")
        if rank is not None and virtual:
            raise ValueError("one process per rank has one GPU per rank: virtual ranks run in one process")
        self.world, self.virtual = int(world), bool(virtual)
        self.rank = None if rank is None else int(rank)
        self.nbytes, self.out_nbytes = int(nbytes), int(out_nbytes or nbytes)
        if self.virtual and self.world > 1:
            check_world_fits(self.world, max_virtual_world(blocks_per_rank or 1))
        h = np.full(1, -1, dtype=np.int32)
        if self.rank is None:
            self._call("collectives_comm_create", self.world, 0 if self.virtual else 1, self.nbytes, self.out_nbytes,
                       int(blocks_per_rank), int(timeout_ms), h)
        else:
            if not have_nccl():
                raise ValueError(no_nccl() + "; one process per rank exchanges its IPC handles through NCCL")
            local = self.rank if local_rank is None else int(local_rank)
            self._call("collectives_comm_create_rank", self.rank, self.world, local, str(id_file).encode(),
                       self.nbytes, self.out_nbytes, int(blocks_per_rank), int(timeout_ms), h)
        self.handle = int(h[0])

    @classmethod
    def from_environment(cls, nbytes: int, env=None, **kw) -> Communicator:
        """This process's rank of a communicator of one process per GPU, as its launcher (torchrun,
        mpirun, srun, `invoke run --ranks`) named it; every rank opens it with the same nbytes."""
        re_ = rank_environment(env)
        if re_ is None:
            raise ValueError("no rank in the environment: set RANK and WORLD_SIZE (torchrun), run under mpirun or "
                             "srun, or use Communicator(world, nbytes) for every rank in one process")
        if re_.nodes > 1:
            raise ValueError(ipc_refusal("Communicator.from_environment opens", re_))
        return cls(re_.world, nbytes, rank=re_.rank, local_rank=re_.local_rank, id_file=re_.id_file, **kw)

    @property
    def ranks(self) -> str:
        if self.rank is not None:
            return "processes"
        return "virtual" if self.virtual and self.world > 1 else "devices"

    def _call(self, fname: str, *args):
        """A library call whose failure says where: a timeout names the rank and the step."""
        try:
            return getattr(lib(), fname)(*args)
        except CudaError as e:
            msg = library.load(PROGRAM).ffi.string(lib().raw("collectives_last_message")()).decode()
            if e.code == TIMEOUT or msg:
                text = f"{e.message}: {msg}" if msg else e.message
                raise CudaError(e.code, e.name, text, e.where) from None
            raise

    def last_failure(self) -> dict:
        info = np.zeros(5, dtype=np.int32)
        lib().collectives_last_failure(self.handle, info)
        return {"rank": int(info[0]), "step": int(info[1]), "chunk": int(info[2]),
                "phase": phase_name(int(info[3])),
                "peer": int(info[4])}

    def _mine(self) -> list[int]:
        return list(range(self.world)) if self.rank is None else [self.rank]

    def upload(self, arrays: list[np.ndarray]) -> None:
        """One array per rank of this process (every rank; one process per rank: its own)."""
        for r, a in zip(self._mine(), arrays):
            self._call("collectives_upload", self.handle, r, a.view(np.uint8), a.nbytes)

    def download(self, count: int, dtype) -> list[np.ndarray]:
        outs = []
        for r in self._mine():
            o = np.empty(count, dtype=dtype)
            self._call("collectives_download", self.handle, r, o.view(np.uint8), o.nbytes)
            outs.append(o)
        return outs

    def poison(self) -> None:
        self._call("collectives_poison", self.handle, POISON_BYTE)

    def run(self, variant: str, arrays: list[np.ndarray], direction: int = 3,
            out_count: int | None = None) -> list[np.ndarray]:
        """Upload, poison the outputs, run, download."""
        arrays = check_arrays(arrays)
        if len(arrays) != len(self._mine()):
            raise ValueError(f"this communicator has {len(self._mine())} rank(s) in this process, got {len(arrays)} arrays")
        if arrays[0].nbytes > self.nbytes:
            raise ValueError(f"{arrays[0].nbytes} bytes per rank exceed the communicator's {self.nbytes}")
        self.upload(arrays)
        self.poison()
        self.launch(variant, arrays[0].dtype, arrays[0].size, direction)
        return self.download(out_count or arrays[0].size, arrays[0].dtype)

    def run_rank(self, variant: str, array: np.ndarray) -> np.ndarray:
        """One process per rank: this rank's array in, this rank's output out (every rank calls it)."""
        if self.rank is None:
            raise ValueError("run_rank is for one process per rank (Communicator.from_environment); "
                             "this communicator holds every rank: use run(variant, arrays)")
        return self.run(variant, [array])[0]

    def time(self, variant: str, dtype, n: int, iters: int = 100, graph: bool = False) -> float:
        """Milliseconds per call of `iters` back-to-back calls on the uploaded inputs, eager or replayed
        as one CUDA graph (GRAPH_VARIANTS, and auto_allreduce where it picks one of them)."""
        check_call(self, variant, dtype, n, graph)
        ms = np.zeros(1, dtype=np.float32)
        self._call("collectives_time", self.handle, variant_index(variant), _dtypes()[np.dtype(dtype)], int(n),
                   int(iters), int(bool(graph)), ms)
        return float(ms[0])

    def auto_choice(self, dtype, n: int) -> str:
        """The variant auto_allreduce runs for n elements of dtype on this communicator."""
        i = int(lib().collectives_auto_variant(self.handle, _dtypes()[np.dtype(dtype)], int(n)))
        if i < 0:
            raise ValueError(f"no auto choice for n={n!r}")
        return library.read_table(PROGRAM)[i]

    def launch(self, variant: str, dtype, n: int, direction: int = 3) -> None:
        """Run `variant` on the uploaded inputs (n elements of `dtype` per rank), wait for it and raise
        if a rank gave up; the outputs stay on the device (download reads them)."""
        check_call(self, variant, dtype, n)
        v, dt = variant_index(variant), _dtypes()[np.dtype(dtype)]
        if variant in ("01_p2p_copy", "01_memcpy_peer"):
            self._call("collectives_run_direction", self.handle, v, dt, int(n), direction)
        else:
            self._call("collectives_run", self.handle, v, dt, int(n))

    def enqueue(self, variant: str, dtype, n: int, stream=None) -> None:
        """Enqueue one run on `stream` (a cudart.Stream or cffi pointer; None: the default stream), no wait."""
        s = getattr(stream, "handle", stream)
        self._call("collectives_enqueue", self.handle, variant_index(variant), _dtypes()[np.dtype(dtype)], int(n), s)

    def check(self) -> None:
        """Wait for everything enqueued and raise if a rank gave up."""
        self._call("collectives_check", self.handle)

    def close(self) -> None:
        if getattr(self, "handle", -1) >= 0:
            h, self.handle = self.handle, -1
            lib().collectives_comm_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def max_bytes(variant: str, nbytes: int) -> int:
    """The largest message (bytes per rank) `variant` takes on a communicator made for `nbytes`, as the
    library caps it (04: 2 MiB, 05: 64 MiB, 06: 1 MiB; the others: nbytes)."""
    return int(lib().collectives_max_bytes(variant_index(variant), int(nbytes)))


def small_max_world() -> int:
    """The most ranks the "small" variants (a device-side epoch: 04, 05, 06) run."""
    return int(lib().collectives_small_max_world())


def check_call(comm, variant: str, dtype, n: int, graph: bool = False) -> None:
    """The rules of the small variants and of graphs, named before any launch (the library refuses them too)."""
    variant_index(variant)
    nbytes = int(n) * np.dtype(dtype).itemsize
    if variant in _tagged("small"):
        if comm.world > small_max_world():
            raise ValueError(f"{variant} runs at most {small_max_world()} ranks, this communicator has {comm.world}")
        cap = max_bytes(variant, comm.nbytes)
        if nbytes > cap:
            raise ValueError(f"{variant} takes at most {cap} bytes per rank on this communicator, got {nbytes}")
    if graph:
        chosen = comm.auto_choice(dtype, n) if variant == "auto_allreduce" else variant
        if chosen not in _tagged("graph"):
            raise ValueError(f"{chosen} takes its epoch from the host at each launch, which a CUDA graph would replay "
                             f"unchanged: graphs run {', '.join(_tagged('graph'))} (and auto_allreduce where it picks one)")


# --- the public calls ---------------------------------------------------------------------------------

def allreduce(arrays, variant: str = "02_ring_allreduce", virtual: bool | None = None, blocks_per_rank: int = 0,
              timeout_ms: int = DEFAULT_TIMEOUT_MS) -> CollectiveResult:
    """Every rank's output = the elementwise sum of all ranks' arrays (int32 wraps). `virtual`: None
    picks one rank per GPU where there are enough GPUs, else virtual ranks on one GPU."""
    if variant not in _tagged("allreduce"):
        raise ValueError(f"allreduce variants: {', '.join(_tagged('allreduce'))}; got {variant!r}")
    arrays = check_arrays(arrays)
    if variant in _tagged("small") and len(arrays) > small_max_world():
        raise ValueError(f"{variant} runs at most {small_max_world()} ranks, got {len(arrays)} arrays")
    v = plan(len(arrays), variant, virtual)
    with Communicator(len(arrays), arrays[0].nbytes, v, blocks_per_rank=blocks_per_rank, timeout_ms=timeout_ms) as c:
        outs = c.run(variant, arrays)
        return CollectiveResult(outs, variant, c.world, c.ranks, _note(v, c.world))


def allgather(arrays, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> CollectiveResult:
    """NCCL all-gather: every rank's output is the ranks' arrays end to end."""
    arrays = check_arrays(arrays)
    v = plan(len(arrays), "nccl_allgather", None)
    w = len(arrays)
    with Communicator(w, arrays[0].nbytes, v, out_nbytes=arrays[0].nbytes * w, timeout_ms=timeout_ms) as c:
        outs = c.run("nccl_allgather", arrays, out_count=arrays[0].size * w)
        return CollectiveResult(outs, "nccl_allgather", w, c.ranks, _note(v, w))


def reduce_scatter(arrays, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> CollectiveResult:
    """NCCL reduce-scatter: rank r gets the r-th of `world` equal parts of the sum (size % world == 0)."""
    arrays = check_arrays(arrays)
    w = len(arrays)
    if arrays[0].size % w:
        raise ValueError(f"reduce_scatter: the size ({arrays[0].size}) must be a multiple of the world ({w})")
    v = plan(w, "nccl_reducescatter", None)
    with Communicator(w, arrays[0].nbytes, v, timeout_ms=timeout_ms) as c:
        outs = c.run("nccl_reducescatter", arrays, out_count=arrays[0].size // w)
        return CollectiveResult(outs, "nccl_reducescatter", w, c.ranks, _note(v, w))


DIRECTIONS = {"0to1": 1, "1to0": 2, "both": 3}


def p2p_copy(arrays, direction: str = "both", method: str = "kernel", virtual: bool | None = None) -> CollectiveResult:
    """Two ranks: rank 1's output receives rank 0's array ("0to1"), rank 0's receives rank 1's
    ("1to0"), or both at once. method "kernel" (01_p2p_copy: loads from the peer's memory) or
    "memcpy" (01_memcpy_peer: cudaMemcpyPeerAsync). An output not written stays poisoned (NaN / -1)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    if method not in ("kernel", "memcpy"):
        raise ValueError(f"method must be 'kernel' or 'memcpy', got {method!r}")
    arrays = check_arrays(arrays)
    if len(arrays) != 2:
        raise ValueError(f"p2p_copy takes two ranks' arrays, got {len(arrays)}")
    variant = "01_p2p_copy" if method == "kernel" else "01_memcpy_peer"
    v = plan(2, variant, virtual)
    with Communicator(2, arrays[0].nbytes, v) as c:
        outs = c.run(variant, arrays, direction=DIRECTIONS[direction])
        return CollectiveResult(outs, variant, 2, c.ranks, _note(v, 2))


def reference_allreduce(arrays) -> np.ndarray:
    """numpy's sum over ranks: float64 then rounded once (exact for integer-valued inputs), int32 wrapping."""
    arrays = check_arrays(arrays)
    if arrays[0].dtype == np.int32:
        return np.sum(np.stack(arrays).astype(np.int64), axis=0).astype(np.int32)  # modulo 2^32, like the kernels
    return np.sum(np.stack(arrays).astype(np.float64), axis=0).astype(arrays[0].dtype)


# --- the tensor-parallel MLP block ---------------------------------------------------------------------

def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def tp_reference(x, w1, w2, round_hidden: bool = True) -> np.ndarray:
    """The unsharded block in float64: gelu(x W1^T) W2^T, the hidden activation rounded to bf16 as
    the kernels store it (round_hidden)."""
    import ml_dtypes

    h = gelu_tanh(np.asarray(x, np.float64) @ np.asarray(w1, np.float64).T)
    if round_hidden:
        h = h.astype(ml_dtypes.bfloat16).astype(np.float64)
    return h @ np.asarray(w2, np.float64).T


def tp_gemm_names() -> tuple[str, ...]:
    """The GEMMs the tensor-parallel block can run, as the library names them: "auto" (the fastest that
    takes each product: gemm_tc's wgmma rung on a Hopper with an sm_90a build, its 02_mma_sync
    elsewhere), then each by name."""
    return library.read_table(PROGRAM, "tp_gemm")


def tp_allreduce_names() -> tuple[str, ...]:
    """The all-reduces the tensor-parallel block can run, as the library names them: the lab's
    02_ring_allreduce and 03_oneshot_allreduce, and "copy_engine" (the copy engines carry the bytes
    between GPUs, a few blocks a rank add: no SM moves a byte over the link)."""
    return library.read_table(PROGRAM, "tp_allreduce")


def tp_gemm_refusal(gemm: str, world: int, hidden: int, ffn: int) -> str | None:
    """None when GEMM `gemm` runs the block of `hidden` and `ffn` over `world` ranks on this build and
    GPU, else why not, in the library's words. Nothing is launched."""
    lb = lib()
    why = lb.collectives_tp_gemm_refusal(library.table_index(PROGRAM, "tp_gemm", gemm), int(world), int(hidden),
                                         int(ffn))
    return None if why == lb.ffi.NULL else lb.ffi.string(why).decode()


def tp_mlp(x, w1, w2, world: int, overlap: bool = False, chunks: int = 4, ar_variant: str = "02_ring_allreduce",
           virtual: bool | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS, gemm: str = "auto") -> CollectiveResult:
    """y = gelu(x W1^T) W2^T with W1 (F x H) split by rows and W2 (H x F) by columns over `world`
    ranks, each partial y all-reduced (`ar_variant`, one of tp_allreduce_names()); bf16 inputs, float32 y
    on every rank. `gemm` names the GEMM (tp_gemm_names()); a GEMM that cannot run the block here is refused before any launch."""
    import ml_dtypes

    bf = np.dtype(ml_dtypes.bfloat16)
    x = library.check_array(x, "x", bf, ndim=2)
    w1 = library.check_array(w1, "w1", bf, ndim=2)
    w2 = library.check_array(w2, "w2", bf, ndim=2)
    T, H = x.shape
    F = w1.shape[0]
    if w1.shape != (F, H):
        raise ValueError(f"w1 must be F x H = ? x {H}, got {w1.shape}")
    if w2.shape != (H, F):
        raise ValueError(f"w2 must be H x F = {H} x {F}, got {w2.shape}")
    if not isinstance(world, (int, np.integer)) or world < 1:
        raise ValueError(f"world must be a positive integer, got {world!r}")
    if F % world:
        raise ValueError(f"F ({F}) must be a multiple of the world ({world}): each rank takes F/world rows of w1")
    if not isinstance(chunks, (int, np.integer)) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
    gemm_index = library.table_index(PROGRAM, "tp_gemm", gemm)
    ar_index = library.table_index(PROGRAM, "tp_allreduce", ar_variant)
    variant = "tp_mlp_overlap" if overlap else "tp_mlp"
    why = unsupported_reason(variant)
    if why:
        raise ValueError(f"variant {variant!r} cannot run here: {why}")
    why = tp_gemm_refusal(gemm, int(world), H, F)
    if why:
        raise ValueError(f"gemm {gemm!r} cannot run this block here: {why}")
    v = plan(int(world), variant, virtual)
    y = np.full((world, T, H), np.nan, dtype=np.float32)
    with Communicator(int(world), T * H * 4, v, timeout_ms=timeout_ms) as c:
        c._call("collectives_tp_mlp", c.handle, ar_index, gemm_index, int(bool(overlap)), int(chunks),
                T, H, F, x, w1, w2, y)
        return CollectiveResult(list(y), variant, int(world), c.ranks, _note(v, int(world)))


# --- bandwidth the nccl-tests way -------------------------------------------------------------------

def bus_factor(op: str, world: int) -> float:
    """nccl-tests' busbw / algbw: 2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter,
    1 for a copy. busbw is what each link carried, comparable across world sizes."""
    if op in ("allreduce", "02_ring_allreduce", "03_oneshot_allreduce", "nccl_allreduce"):
        return 2.0 * (world - 1) / world
    if op in ("allgather", "reducescatter", "nccl_allgather", "nccl_reducescatter"):
        return (world - 1) / world
    return 1.0


def busbw_gbs(op: str, nbytes: float, world: int, seconds: float) -> float:
    """algbw = bytes / time (nbytes: the buffer size nccl-tests counts), times bus_factor, in GB/s."""
    return nbytes / seconds * bus_factor(op, world) / 1e9


# --- executable, bench, profile and sanitize hooks ---------------------------------------------------

def run(*args, timeout: float = 300):
    from harness.calling import results

    return results.run(PROGRAM, *args, timeout=timeout)


def parse_output(text: str):
    from harness.calling import results

    return results.parse_output(text, PROGRAM)


BENCH_SIZES = [("4KiB", 4 << 10, True), ("32KiB", 32 << 10, False), ("64KiB", 64 << 10, False),
               ("1MiB", 1 << 20, True), ("16MiB", 16 << 20, True), ("256MiB", 256 << 20, False),
               ("1GiB", 1 << 30, False)]
ONESHOT_MAX_BYTES = 16 << 20  # one step that reads every rank's buffer: a small-message algorithm
# Where each stops in the bench: 03 and 04 move W times the buffer, 05 holds its scratch.
BENCH_MAX_BYTES = {"03_oneshot_allreduce": ONESHOT_MAX_BYTES, "04_oneshot_signal": 1 << 20,
                   "05_twoshot_allreduce": 16 << 20, "06_oneshot_ll": 1 << 20}


def _bench_world() -> tuple[int, bool]:
    """(world, virtual) for the bench: every visible GPU (at most 8) when there are two or more, else
    two virtual ranks on the one GPU. Counted without starting CUDA (nvidia-smi)."""
    from harness.measuring import gpus

    n = min(8, len(gpus.physical_gpus()))
    return (n, False) if n >= 2 else (2, True)


def comm_setup(variant: str, nbytes: int, world: int, virtual: bool):
    """harness.measuring.timing's target: a communicator with filled inputs and the enqueue marshalled once."""
    from harness.measuring import bench

    n = nbytes // 4
    c = Communicator(world, nbytes, virtual)
    rng = np.random.default_rng(0)
    c.upload([rng.integers(-8, 8, n).astype(np.float32) for _ in range(world)])
    launch = lib().prepare("collectives_enqueue", c.handle, variant_index(variant), 0, n, library.STREAM)

    def close():
        c.check()
        c.close()

    return bench.Prepared(launch, close, note=f"ranks={c.ranks}")


def ceilings() -> dict:
    """NCCL's all-reduce at each bench size, timed beside the lab's kernels: only where the bench runs
    one rank per GPU (two or more GPUs) and NCCL is built in."""
    from harness.measuring import bench

    def make(label, nbytes):
        def measure(quick: bool):
            world, virtual = _bench_world()
            if virtual or not have_nccl():
                return None
            return bench.TimedCeiling(f"nccl_allreduce_{label}", "GB/s", nbytes * bus_factor("allreduce", world),
                                      "harness.programs.collectives:comm_setup",
                                      {"variant": "nccl_allreduce", "nbytes": nbytes, "world": world, "virtual": False},
                                      f"ncclAllReduce float32 busbw, {world} GPUs")
        return measure

    return {f"nccl_allreduce_{label}": make(label, nb) for label, nb, _ in BENCH_SIZES}


def bench_cases(quick: bool = False) -> list:
    """busbw of the lab's all-reduces against message size, float32, the nccl-tests definitions
    (algbw = bytes / time, busbw = algbw x 2(n-1)/n). With two or more GPUs each size's ceiling is
    NCCL's all-reduce at that size, in the same run; on one GPU the cases run two virtual ranks and
    are the protocol's cost on one GPU (beside the memcpy ceiling), not link bandwidth."""
    from harness.measuring import bench

    world, virtual = _bench_world()
    cases = []
    for label, nbytes, is_quick in BENCH_SIZES:
        for variant in _bench_variants():
            if nbytes > BENCH_MAX_BYTES.get(variant, nbytes):
                continue
            note = (f"busbw, float32, {world} GPUs" if not virtual else
                    "one-GPU protocol cost, not link bandwidth: 2 virtual ranks on one GPU, busbw = algbw x 2(n-1)/n")
            cases.append(bench.BenchCase(
                program=PROGRAM, variant=variant, size=label, setup="harness.programs.collectives:comm_setup",
                kwargs={"variant": variant, "nbytes": nbytes, "world": world, "virtual": virtual},
                unit="GB/s", amount=nbytes * bus_factor("allreduce", world),
                ceiling="memcpy" if virtual else f"nccl_allreduce_{label}", quick=is_quick,
                bytes=float(nbytes), note=note))
    return cases


def profile_args(variant: str | None = None) -> list[str]:
    v = variant or "02_ring_allreduce"
    return ["--variant", v, "--virtual", "--world", "2", "--n", str(1 << 20), "--iters", "3"]


def sanitize_args() -> dict[str, list[str]]:
    """Virtual-rank runs (every rank in one cooperative launch on one GPU): each lab kernel, each
    dtype, ragged sizes; long deadlines, since the sanitizer slows every spin."""
    common = ["--virtual", "--iters", "2", "--timeout-ms", "60000", "--blocks", "2"]
    cases = {
        "ring_f32_w3": ["--variant", "02_ring_allreduce", "--world", "3", "--n", "1037", "--dtype", "f32", *common],
        "ring_bf16_w2": ["--variant", "02_ring_allreduce", "--world", "2", "--n", "333", "--dtype", "bf16", *common],
        "oneshot_i32_w4": ["--variant", "03_oneshot_allreduce", "--world", "4", "--n", "517", "--dtype", "i32",
                           *common],
        "p2p_w2": ["--variant", "01_p2p_copy", "--n", "1001", *common],
        "oneshot_signal_bf16_w3": ["--variant", "04_oneshot_signal", "--world", "3", "--n", "1037", "--dtype", "bf16",
                                   *common],
        "twoshot_f32_w4": ["--variant", "05_twoshot_allreduce", "--world", "4", "--n", "2053", "--dtype", "f32",
                           *common],
        # 06's last line is a partial one twice over: 1037 bf16 are 2074 bytes, a 4-byte word of 2 bytes.
        "oneshot_ll_bf16_w3": ["--variant", "06_oneshot_ll", "--world", "3", "--n", "1037", "--dtype", "bf16",
                               *common],
        "oneshot_ll_i32_w2": ["--variant", "06_oneshot_ll", "--world", "2", "--n", "4099", "--dtype", "i32", *common],
        "tp_overlap_w2": ["--variant", "tp_mlp_overlap", "--world", "2", "--tokens", "40", "--hidden", "64",
                          "--ffn", "128", "--chunks", "3", *common],
        # copy_engine's parts end off a 16-byte pack: blocks of 8, 16 and 17 rows of 62 values
        "tp_copy_engine_w3": ["--variant", "tp_mlp_overlap", "--world", "3", "--tokens", "41", "--hidden", "62",
                              "--ffn", "126", "--chunks", "3", "--allreduce", "copy_engine", *common],
    }
    # A variant this GPU or build cannot run would only exit with its refusal, which checks nothing.
    # Without a built library (sanitize_args is also asked there) every case is kept.
    try:
        refused = {v for v in ("tp_mlp_overlap",) if unsupported_reason(v) is not None}
    except Exception:
        refused = set()
    return {label: argv for label, argv in cases.items() if argv[1] not in refused}


# --- latency: eager and CUDA-graph calls against NCCL, the executable's own timing ------------------------

LATENCY_SIZES = [4 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
LATENCY_VARIANTS = ("nccl_allreduce", "04_oneshot_signal", "06_oneshot_ll", "05_twoshot_allreduce", "02_ring_allreduce",
                    "auto_allreduce")


def _iters_at(iters: int, nbytes: int) -> int:
    """`iters` calls up to 1 MiB, fewer above (as many bytes in all), at least 5."""
    return max(5, min(iters, int(iters * (1 << 20) / max(nbytes, 1 << 20))))


def latency_sweep(sizes=None, variants=LATENCY_VARIANTS, iters: int = 200, check_max_bytes: int = 64 << 20):
    """Microseconds per all-reduce (float32) of each variant at each size, eager and (GRAPH_VARIANTS,
    auto where it picks one) as one captured CUDA graph of `iters` calls, NCCL's on the same
    communicator: the rows behind the NOTES' latency table. Run in each rank's process (one process
    per GPU: the ranks' environment, see latency_sweep_processes), else one process for every GPU.
    Each size is first checked against numpy (to check_max_bytes; a wrong sum raises)."""
    import pandas as pd

    sizes = LATENCY_SIZES if sizes is None else sizes
    top = max(sizes)
    graphable = _tagged("graph")
    env = rank_environment()
    c = Communicator.from_environment(top) if env else Communicator(min(8, gpu_count()), top, virtual=False)
    rows = []
    with c:
        for nbytes in sizes:
            n = nbytes // 4
            if nbytes <= check_max_bytes:
                rng = np.random.default_rng(nbytes)
                arrays = [rng.integers(-8, 9, n).astype(np.float32) for _ in range(c.world)]
                want = reference_allreduce(arrays).tobytes()
                mine = [arrays[r] for r in c._mine()]
            for variant in variants:
                if nbytes > max_bytes(variant, nbytes) or (variant == "nccl_allreduce" and not have_nccl()):
                    continue
                if nbytes <= check_max_bytes and any(o.tobytes() != want for o in c.run(variant, mine)):
                    raise AssertionError(f"{variant} at {nbytes} bytes: a rank's sum differs from numpy's")
                k = _iters_at(iters, nbytes)
                chosen = c.auto_choice(np.float32, n) if variant == "auto_allreduce" else variant
                eager = c.time(variant, np.float32, n, k) * 1e3
                graph = c.time(variant, np.float32, n, k, graph=True) * 1e3 if chosen in graphable else float("nan")
                rows.append({"variant": variant, "chosen": chosen, "bytes": nbytes, "world": c.world, "ranks": c.ranks,
                             "rank": -1 if c.rank is None else c.rank, "iters": k, "eager_us": eager,
                             "graph_us": graph, "busbw_gbs": busbw_gbs("allreduce", nbytes, c.world, eager * 1e-6)})
    df = pd.DataFrame(rows)
    nccl = df[df.variant == "nccl_allreduce"].set_index("bytes")
    for col in ("eager_us", "graph_us"):
        base = df["bytes"].map(nccl[col]) if len(nccl) else float("nan")
        df[f"speedup_{col[:-3]}"] = base / df[col]  # NCCL's time / ours: above 1, faster than NCCL
    return df


SWEEP_RANK = """
import sys
sys.path.insert(0, {root!r})
from harness.programs import collectives as co
df = co.latency_sweep({sizes!r}, iters={iters!r})
print(df.to_csv(index=False))
"""


# The transports a sweep names in its `path` column: NCCL's own choice with every rank on one node (NVLink
# where the GPUs have it, else peer-to-peer over PCIe), and the rehearsal's sockets over loopback.
PATH_ONE_NODE, PATH_SOCKET = "nvlink", "socket"
SOCKET_TIMEOUT_MS = 120_000  # a 1 GiB all-gather through host memory takes seconds per call, not milliseconds


def latency_sweep_processes(world: int, sizes=None, iters: int = 200, deadline_s: float = 600.0, nodes: int = 1):
    """latency_sweep with one process per GPU (the lab's launcher, `world` ranks): every rank's rows, with
    `path` (nvlink) and `nodes` (1) columns.

    nodes > 1 measures the socket path beside the one-node path: NCCL's all-reduce only (the lab's kernels
    cannot cross nodes), timed alike on both, by build/bin/collectives' own NCCL run (no --variant, float32,
    its check against the closed form first), size by size, once with the ranks on one node (path "nvlink")
    and once rehearsed on `nodes` nodes (path "socket": harness/calling/launch.py's rehearsal, NCCL's socket
    transport over loopback). Same columns; graph_us is NaN there (that path times eager calls)."""
    import io
    import sys

    import pandas as pd

    from harness.base import paths
    from harness.calling import launch

    sizes = LATENCY_SIZES if sizes is None else list(sizes)
    if nodes == 1:
        code = SWEEP_RANK.format(root=str(paths.ROOT), sizes=sizes, iters=iters)
        res = launch.launch([sys.executable, "-c", code], world, deadline_s)
        df = pd.concat([pd.read_csv(io.StringIO(r.stdout)) for r in res.ranks], ignore_index=True)
        return df.assign(path=PATH_ONE_NODE, nodes=1)
    from harness.measuring import gpus

    launch.check_layout(world, nodes)  # before anything runs: a layout that cannot be is one line
    visible = gpus.physical_gpus()
    rows = []
    for nbytes in sizes:
        k = _iters_at(iters, nbytes)
        argv = ["--n", str(nbytes // 4), "--iters", str(k), "--dtype", "f32", "--timeout-ms", str(SOCKET_TIMEOUT_MS)]
        for path, nn in ((PATH_ONE_NODE, 1), (PATH_SOCKET, nodes)):
            res = launch.run_program(PROGRAM, world, argv, deadline_s=deadline_s, nodes=nn, gpus=visible)
            out = parse_output(res.stdout)
            ar = out[out["variant"] == "nccl_allreduce"]
            if len(ar) != world or (ar["check"] != "pass").any():
                raise AssertionError(f"nccl_allreduce at {nbytes} bytes on the {path} path: {len(ar)} rank line(s) "
                                     f"for {world} ranks, checks {sorted(set(ar['check']))}")
            for _, r in ar.iterrows():
                us = float(r["ms"]) * 1e3
                rows.append({"variant": "nccl_allreduce", "chosen": "nccl_allreduce", "bytes": nbytes, "world": world,
                             "ranks": "processes", "rank": int(r["rank"]), "iters": k, "eager_us": us,
                             "graph_us": float("nan"), "busbw_gbs": busbw_gbs("allreduce", nbytes, world, us * 1e-6),
                             "speedup_eager": 1.0, "speedup_graph": float("nan"), "path": path, "nodes": nn})
    return pd.DataFrame(rows)


# --- the tensor-parallel block's scaling: one GPU against several, interleaved ----------------------------

# The forms a scaling run times at each world size: (variant, all-reduce). The plain block all-reduces
# after its GEMMs; the overlapped one beside the next token block's GEMMs, with the SM ring or the
# copy engines.
TP_FORMS = (("tp_mlp", "02_ring_allreduce"), ("tp_mlp_overlap", "02_ring_allreduce"),
            ("tp_mlp_overlap", "copy_engine"))
TP_SCALING_COLUMNS = ["repeat", "order", "world", "variant", "allreduce", "chunks", "ms", "tflops", "gemm",
                      "gemm_sms", "comm_blocks", "tokens", "hidden", "ffn"]


def tp_scaling(worlds=None, repeats: int = 3, tokens: int = 8192, hidden: int = 8192, ffn: int = 32768,
               gemm: str = "wgmma", iters: int = 8, chunks: int = 8, timeout: float = 300, progress=None):
    """The tensor-parallel block timed by the executable (median of `iters` forwards a run) on one GPU and
    on each world size in `worlds` (default: 2, 4 and 8 where that many GPUs are visible), each form of
    TP_FORMS, `repeats` times over. The one-GPU run and the multi-GPU ones alternate within each repeat,
    so that a machine whose clocks drift (power capping) moves both sides of every speedup alike.
    One row per run (TP_SCALING_COLUMNS, `order` the run's place in the sequence). Everything is checked
    before the first run: a world size with too few GPUs, an unknown GEMM, a shape the block refuses.
    `progress(done, total, label)` is called before each run (None: a line on stderr)."""
    import sys

    import pandas as pd

    from harness.measuring import gpus

    visible = len(gpus.physical_gpus())
    worlds = [w for w in (2, 4, 8) if w <= visible] if worlds is None else list(worlds)
    if not worlds:
        raise ValueError(f"the block's scaling needs 2 or more GPUs, one per rank; {visible} visible")
    for w in worlds:
        library.check_int(w, "each world size (one GPU is always timed)", 2)
        if w > visible:
            raise ValueError(f"world {w} needs {w} GPUs, one per rank; {visible} visible")
    library.check_int(repeats, "repeats", 1)
    library.check_int(iters, "iters", 1)
    library.check_int(chunks, "chunks", 1)
    library.table_index(PROGRAM, "tp_gemm", gemm)
    for w in worlds:
        if ffn % w:
            raise ValueError(f"ffn ({ffn}) must be a multiple of every world size, not of {w}")
    for w in [1, *worlds]:
        why = unsupported_reason("tp_mlp") or tp_gemm_refusal(gemm, w, hidden, ffn)
        if why:
            raise ValueError(f"the block cannot run with gemm {gemm!r} here: {why}")
    plan_ = [(1, "tp_mlp", "02_ring_allreduce")] + [(w, v, ar) for w in worlds for v, ar in TP_FORMS]
    runs = [(k, *p) for k in range(repeats) for p in plan_]
    rows = []
    for i, (k, w, variant, ar) in enumerate(runs):
        label = f"world {w} {variant} {ar}"
        if progress is None:
            print(f"tp_scaling [{i + 1}/{len(runs)}] {label}", file=sys.stderr, flush=True)
        else:
            progress(i, len(runs), label)
        out = run("--variant", variant, "--world", w, "--tokens", tokens, "--hidden", hidden, "--ffn", ffn,
                  "--gemm", gemm, "--allreduce", ar, "--chunks", chunks, "--iters", iters, timeout=timeout)
        if len(out) != 1 or (w > 1 and out["ranks"].iloc[0] != "devices"):
            raise AssertionError(f"{label}: expected one result line on {w} GPUs, got {out.to_dict('records')}")
        r = out.iloc[0]
        rows.append({"repeat": k, "order": i, "world": w, "variant": variant, "allreduce": ar,
                     "chunks": int(r["chunks"]), "ms": float(r["ms"]), "tflops": float(r["tflops"]),
                     "gemm": r["gemm"], "gemm_sms": int(r["gemm_sms"]), "comm_blocks": int(r["comm_blocks"]),
                     "tokens": tokens, "hidden": hidden, "ffn": ffn})
    return pd.DataFrame(rows, columns=TP_SCALING_COLUMNS)


def multi_gpu_sweeps(outdir, repeats: int = 3, socket: bool = True):
    """Every multi-GPU measurement of this program on the GPUs in view, each CSV written as soon as it is
    taken (a run stopped at its deadline keeps what it had), into a new folder `outdir`/<time stamp>:
    the latency sweep one process per GPU at each world size of 2, 4 and 8 that fits
    (collectives_latency_wW-STAMP.csv, for `invoke plot latency`), the tensor-parallel block's scaling
    over those world sizes (collectives_tp_scaling-STAMP.csv, for `invoke plot scaling`), and with
    `socket` NCCL's socket path rehearsed as two nodes beside NVLink at the largest world size up to 4
    (collectives_socket_wW-STAMP.csv). Returns the folder. ValueError before anything runs on fewer than
    two GPUs."""
    import sys
    import time
    from pathlib import Path

    from harness.measuring import gpus

    visible = len(gpus.physical_gpus())
    worlds = [w for w in (2, 4, 8) if w <= visible]
    if not worlds:
        raise ValueError(f"the multi-GPU sweeps need 2 or more GPUs, one per rank; {visible} visible")
    library.check_int(repeats, "repeats", 1)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    folder = Path(outdir) / stamp
    folder.mkdir(parents=True, exist_ok=False)

    def save(df, name):
        path = folder / name
        df.to_csv(path, index=False)
        print(f"multi_gpu_sweeps: wrote {path}", file=sys.stderr, flush=True)

    for w in worlds:
        print(f"multi_gpu_sweeps: latency, {w} ranks", file=sys.stderr, flush=True)
        save(latency_sweep_processes(w), f"collectives_latency_w{w}-{stamp}.csv")
    save(tp_scaling(worlds=worlds, repeats=repeats), f"collectives_tp_scaling-{stamp}.csv")
    if socket:
        w = [x for x in worlds if x <= 4][-1]
        print(f"multi_gpu_sweeps: NCCL over sockets, {w} ranks on 2 rehearsed nodes", file=sys.stderr, flush=True)
        save(latency_sweep_processes(w, nodes=2), f"collectives_socket_w{w}-{stamp}.csv")
    return folder


# --- `invoke doctor` ---------------------------------------------------------------------------------

def doctor_status() -> tuple[bool, str, str]:
    """(ok, what was found, the fix): NCCL's version in the built library, and peer access between
    the visible GPUs. Never raises."""
    from harness.compile import build as _build

    if not _build.lib_path(PROGRAM).exists():
        return False, "not checked: build/lib/libcollectives.so is not built", "invoke build --programs collectives"
    try:
        ver = nccl_version()
    except Exception as e:  # a library that does not load is reported, not raised
        return False, f"libcollectives.so does not load: {e}", "invoke build --programs collectives"
    parts = [f"NCCL {ver}" if ver else "built without NCCL (nccl_* variants and --ranks need it)"]
    try:
        n = gpu_count()
        pairs = [(a, b, int(lib().collectives_peer_access(a, b))) for a in range(n) for b in range(n) if a != b]
        if n < 2:
            parts.append(f"{n} GPU: no peers (several ranks run as virtual ranks)")
        else:
            bad = [f"{a}->{b}" for a, b, ok in pairs if ok != 1]
            parts.append(f"peer access between all {n} GPUs" if not bad else f"no peer access {', '.join(bad)}")
    except Exception as e:
        parts.append(f"peer access not checked: {str(e).split(' -- ')[0].splitlines()[0]}")
    fix = "" if ver else "pip install -e '.[nccl]' (NVIDIA's nvidia-nccl-cu13 wheel), then invoke build --programs collectives"
    return bool(ver), "; ".join(parts), fix


def environment_for_ranks() -> dict[str, str]:
    """What every rank process's environment gets: NVLink multicast off (never used here)."""
    return {"NCCL_NVLS_ENABLE": "0"}


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='collectives',
    summary='several GPUs: peer copies, ring and one-shot all-reduce, NCCL, a tensor-parallel layer',
    follows='beyond the courses',
    order=110,
    readme_picture='[vs NCCL](bench/results/h100/collectives_ratios-20261125T214623.png)',
    variants=True,
    profile_variants=PROFILE_VARIANTS,
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    unsupported_reason=unsupported_reason,
    bench_cases=bench_cases,
    ceilings=ceilings,
    run=run,
    parse_output=parse_output,
    doctor=doctor_status,
)

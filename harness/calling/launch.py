"""Start N rank processes of one program and watch them: `invoke run collectives --ranks N`.

No MPI: each rank is a plain child process whose environment names it, the way torchrun does
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), which is also what build/bin/collectives reads
besides mpirun's OMPI_COMM_WORLD_* and srun's SLURM_*. NCCL's unique id goes through a file in a fresh
folder (CUDALAB_ID_FILE): rank 0 writes it under a temporary name and renames it, the others wait for it.
`style` sets the variables another launcher would, so that a program is tested in that shape without
it: "mpirun" (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE, the id file) or "torchrun" (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, no id file).

Each rank runs in its own process group (a new session), so that stopping it also stops anything it
started. The run ends when every rank has exited 0, or at the first rank that fails -- exits non-zero
or is killed by a signal -- or at the deadline: then every rank still running is stopped, each by its
own process group (SIGTERM, then SIGKILL after a grace period), and RankFailure names the rank and why.
Every rank's output goes to a file (a pipe that nobody reads could block a rank) and is handed back.

A rank count the machine cannot hold (the launcher's open-file limit, the user's process limit, or more
ranks than one host sensibly runs) is refused before anything starts, naming the count and the limit.
Each rank is started through harness/base/procs.py's `start`, so a rank's group also dies with the
launcher when the launcher is killed outright, and a hang-up stops the ranks as Ctrl-C does. On every
path out, the rank files are closed and the temporary folder is removed.

Two nodes rehearsed on one host (`nodes` > 1, `invoke run collectives --ranks 4 --nodes 2`): the ranks
fill the nodes in order (ranks 0-1 on node 0, 2-3 on node 1), each rank's local variables count within
its node as a launcher on a real node sets them, each node sees only its own GPUs (CUDA_VISIBLE_DEVICES)
and has its own NCCL host id, CUDALAB_NODES / CUDALAB_NODE say the layout, and NCCL is held on its
network path: the socket transport over loopback (REHEARSAL_NCCL). `mpirun_argv` writes the same
rehearsal as an Open MPI command line (one app context per node, each with its own -x variables).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import procs as _procs
from harness.base.errors import ProgramError
from harness.base.procs import sigterm_as_interrupt

POLL_S = 0.02
GRACE_S = 2.0  # between SIGTERM and SIGKILL
TAIL_LINES = 20
# More ranks than any one host has GPUs for (each rank drives the GPU LOCAL_RANK), and all of them started
# on this host: a count beyond this is a typo, not a run.
MAX_RANKS = 256
FILES_PER_RANK = 2  # the launcher holds each rank's stdout and stderr file open while it runs
PROCS_PER_RANK = 2  # the rank and its group's supervisor
FD_RESERVE = 16  # what starting a process takes besides (its status and error pipes)


class RanksRefused(ValueError):
    """The machine cannot hold this many ranks, or one could not be started; nothing is left running."""


class RankFailure(ProgramError):
    """A rank exited non-zero, was killed, or the run passed its deadline. `rank` is the one that
    failed first (for a deadline: the lowest rank still running), `reason` says how."""

    def __init__(self, argv, rank: int, reason: str, returncode: int, stderr_tail: str = "", stdout: str = "",
                 timed_out: bool = False, stopped: list[int] | None = None):
        self.rank, self.reason, self.stopped = rank, reason, list(stopped or [])
        super().__init__(argv, returncode, stderr_tail, stdout, timed_out)
        stop = f"; stopped rank(s) {', '.join(map(str, self.stopped))}" if self.stopped else ""
        first = stderr_tail.strip().splitlines()[-1] if stderr_tail.strip() else ""
        self.args = (f"rank {rank} {reason}{stop}" + (f": {first}" if first else ""),)


@dataclass
class RankRun:
    rank: int
    returncode: int | None
    stdout: str
    stderr: str


@dataclass
class LaunchResult:
    argv: list[str]
    ranks: list[RankRun] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def stdout(self) -> str:
        return "".join(r.stdout for r in self.ranks)


STYLES = ("lab", "mpirun", "torchrun")
# Every launcher's rank variables: a rank's environment holds only its own launcher's (an inherited
# RANK would otherwise win over OMPI_COMM_WORLD_RANK in the program's reading order).
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                  "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                  "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NNODES",
                  "SLURM_NODEID", "CUDALAB_ID_FILE", "CUDALAB_NODES", "CUDALAB_NODE")

# The rehearsal's NCCL: no peer-to-peer and no shared-memory transport, so every byte between ranks goes
# the way it goes between two machines, through NCCL's network transport; the socket one (no InfiniBand,
# whatever the host has), on the loopback interface and its IPv4 address only, so nothing leaves the host;
# no NVLink multicast. Applied last, over anything inherited or passed in.
REHEARSAL_NCCL = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket",
                  "NCCL_SOCKET_IFNAME": "lo", "NCCL_SOCKET_FAMILY": "AF_INET", "NCCL_NVLS_ENABLE": "0"}
LOOPBACK = "127.0.0.1"
# Inherited variables a rehearsal drops: a bootstrap address set for some other run could point off the host.
REHEARSAL_DROPS = ("NCCL_COMM_ID",)


def free_port_pair() -> int:
    """A loopback port p with p + 1 also free at the time of asking: torchrun's MASTER_PORT, where the
    program puts NCCL's bootstrap root on MASTER_PORT + 1."""
    import socket

    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            p = a.getsockname()[1]
            if p >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", p + 1))
                except OSError:
                    continue
            return p
    raise OSError("no two neighbouring free loopback ports")


def check_layout(ranks: int, nodes: int = 1, gpus: list[str] | None = None) -> None:
    """Refuse, in one line, a rehearsal that cannot be laid out: a node count that is not a positive
    integer or does not divide the ranks (every node runs as many), or more ranks than GPUs (`gpus`: the
    GPUs this host lets the ranks use; None: not counted)."""
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise ValueError(f"--nodes must be a positive integer, got {nodes!r}")
    if ranks % nodes:
        fits = [str(d) for d in range(1, ranks + 1) if ranks % d == 0]
        raise RanksRefused(f"--ranks {ranks} --nodes {nodes}: the nodes must divide the ranks (every node runs as "
                           f"many); {ranks} rank(s) fill {', '.join(fits[:-1]) + ' or ' if len(fits) > 1 else ''}"
                           f"{fits[-1]} node(s)")
    if gpus is not None and ranks > len(gpus):
        raise RanksRefused(f"--ranks {ranks}: one GPU per rank, and {len(gpus)} GPU(s) are visible here"
                           + (f" ({', '.join(gpus)})" if gpus else ""))


def node_of(rank: int, world: int, nodes: int) -> tuple[int, int, int]:
    """(node, local rank, ranks per node) of `rank` when `world` ranks fill `nodes` nodes in order, as a
    block-by-node launcher places them (Slurm's block distribution, Open MPI's --map-by node order)."""
    per = world // nodes
    return rank // per, rank % per, per


def rehearsal_env(node: int, nodes: int, per_node: int, gpus: list[str] | None) -> dict[str, str]:
    """What every rank on rehearsed node `node` gets, whatever its launcher: the layout (CUDALAB_NODES,
    CUDALAB_NODE), the node's own GPUs (rank `node * per_node + i` drives the node's GPU i), a host id of
    its own for NCCL (NCCL_HOSTID: NCCL counts the nodes by it), and REHEARSAL_NCCL."""
    env = {"CUDALAB_NODES": str(nodes), "CUDALAB_NODE": str(node), "NCCL_HOSTID": f"cudalab-node{node}"}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[node * per_node:(node + 1) * per_node])
    return {**env, **REHEARSAL_NCCL}


def rank_env(rank: int, world: int, id_file: Path, base: dict | None = None, extra: dict | None = None,
             style: str = "lab", master_port: int | None = None, nodes: int = 1,
             gpus: list[str] | None = None) -> dict:
    """Rank `rank`'s environment: `base` (this process's) without any launcher's rank variables, then the
    variables `style`'s launcher sets, `extra`, and the rules no caller overrides. nodes > 1: the
    rehearsal (rehearsal_env), local variables counted within the rank's node."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
    check_layout(world, nodes)
    node, local, per = node_of(rank, world, nodes)
    drop = RANK_VARIABLES + (REHEARSAL_DROPS if nodes > 1 else ())
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in drop}
    if style == "mpirun":
        env.update({"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(world),
                    "OMPI_COMM_WORLD_LOCAL_RANK": str(local), "OMPI_COMM_WORLD_LOCAL_SIZE": str(per),
                    "CUDALAB_ID_FILE": str(id_file)})
    else:
        env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                    "LOCAL_WORLD_SIZE": str(per)})
        if style == "torchrun":
            env.update({"MASTER_ADDR": LOOPBACK, "MASTER_PORT": str(master_port or 29500)})
            if nodes > 1:
                env["GROUP_RANK"] = str(node)  # torchrun's name for the node's index
        else:
            env["CUDALAB_ID_FILE"] = str(id_file)
    env.update(extra or {})
    if nodes > 1:
        env.update(rehearsal_env(node, nodes, per, gpus))
    # Never NVLink multicast, whatever the caller's environment says (on shared multi-GPU hosts a
    # program that uses it can take the GPUs out of service).
    env["NCCL_NVLS_ENABLE"] = "0"
    return env


def mpirun_argv(argv: list[str], ranks: int, nodes: int, gpus: list[str] | None = None, port: int = 29600,
                mpirun: str = "mpirun", options: tuple[str, ...] = (), extra_env: dict | None = None) -> list[str]:
    """The rehearsal as one Open MPI command: one app context per node (`-np K ... : -np K ...`, ranks
    in node order), each passing `extra_env` and its node's rehearsal_env by -x, NCCL's bootstrap on
    LOOPBACK:port (NCCL_COMM_ID; rank 0 listens there). `options` go before the first context
    (--allow-run-as-root)."""
    check_layout(ranks, nodes, gpus)
    per = ranks // nodes
    out = [mpirun, *options]
    for node in range(nodes):
        if node:
            out.append(":")
        out += ["-np", str(per)]
        env = {**(extra_env or {}), **rehearsal_env(node, nodes, per, gpus), "NCCL_COMM_ID": f"{LOOPBACK}:{port}"}
        for k, v in env.items():
            out += ["-x", f"{k}={v}"]
        out += [str(a) for a in argv]
    return out


_describe = _procs.describe_status


def _open_files() -> int:
    for d in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(d))
    return 0


def _user_tasks() -> int:
    """Processes and threads of this user now: what RLIMIT_NPROC counts."""
    uid, n = os.getuid(), 0
    with contextlib.suppress(OSError):
        for e in os.listdir("/proc"):
            if not e.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError):
                if os.stat(f"/proc/{e}").st_uid != uid:
                    continue
                with open(f"/proc/{e}/status") as f:
                    n += next((int(line.split()[1]) for line in f if line.startswith("Threads:")), 1)
    return n


def check_capacity(ranks: int) -> None:
    """Refuse, in one line naming the rank count and the limit, a world this machine cannot hold:
    before any file is written or any process started."""
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise ValueError(f"--ranks must be a positive integer, got {ranks!r}")
    if ranks > MAX_RANKS:
        raise RanksRefused(f"--ranks {ranks}: more than the {MAX_RANKS} ranks one host runs (one process per "
                           f"rank, each driving one GPU); use at most {MAX_RANKS}")
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    need = _open_files() + FILES_PER_RANK * ranks + FD_RESERVE
    if soft != resource.RLIM_INFINITY and need > soft:
        most = max(0, (soft - _open_files() - FD_RESERVE) // FILES_PER_RANK)
        raise RanksRefused(f"--ranks {ranks}: needs about {need} open files ({FILES_PER_RANK} per rank for its "
                           f"output), more than this process's limit of {soft} (ulimit -n); raise the limit or use "
                           f"at most {most} ranks")
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:
        have = _user_tasks()
        if have + PROCS_PER_RANK * ranks > soft:
            raise RanksRefused(f"--ranks {ranks}: needs {PROCS_PER_RANK * ranks} more processes, and this user runs "
                               f"{have} of its limit of {soft} (ulimit -u); raise the limit or use fewer ranks")


def _stop(procs: dict[int, subprocess.Popen]) -> list[int]:
    """Stop every rank still running, each by its own process group; wait for them. The ranks stopped."""
    alive = [r for r, p in procs.items() if p.poll() is None]
    for r in alive:
        try:
            os.killpg(procs[r].pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + GRACE_S
    for r in alive:
        try:
            procs[r].wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs.values():
        # The leader may be gone while its group still has members (a child it started): SIGKILL the
        # group in any case; a group with nobody left raises ProcessLookupError.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.wait()
    return alive


def launch(argv: list[str], ranks: int, deadline_s: float = 600.0, extra_env: dict | None = None,
           folder: Path | None = None, style: str = "lab", nodes: int = 1,
           gpus: list[str] | None = None) -> LaunchResult:
    """Run `argv` as `ranks` processes; return when all exit 0, else raise RankFailure (see above).
    nodes > 1 rehearses that many nodes on this host over `gpus` (the visible GPUs, in order)."""
    check_capacity(ranks)
    check_layout(ranks, nodes, gpus)
    if nodes > 1 and gpus is None:
        raise ValueError("a rehearsal of several nodes needs the GPUs to share out among them (gpus=[...])")
    if not deadline_s > 0:
        raise ValueError(f"the deadline must be positive, got {deadline_s!r}")
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
    argv = [str(a) for a in argv]
    port = free_port_pair() if style == "torchrun" else None
    d = Path(tempfile.mkdtemp(prefix="cudalab-ranks-", dir=folder))
    id_file = d / "nccl.id"
    procs: dict[int, subprocess.Popen] = {}
    files = {}
    t0 = time.monotonic()
    failure = None
    runs = []
    try:
        try:
            # A SIGTERM or SIGHUP to the launcher unwinds like Ctrl-C, through the finally below: each
            # rank runs in a session of its own and would otherwise run on alone.
            with sigterm_as_interrupt():
                for r in range(ranks):
                    try:
                        files[r] = (open(d / f"rank{r}.out", "w+b"), open(d / f"rank{r}.err", "w+b"))
                        procs[r] = _procs.start(argv, stdout=files[r][0], stderr=files[r][1], stdin=subprocess.DEVNULL,
                                                env=rank_env(r, ranks, id_file, extra=extra_env, style=style,
                                                             master_port=port, nodes=nodes, gpus=gpus))
                    except OSError as e:
                        if r == 0 and isinstance(e, (FileNotFoundError, PermissionError)):
                            raise  # the program itself cannot run: the caller says so
                        raise RanksRefused(f"--ranks {ranks}: could not start rank {r}: {e.strerror or e}; this "
                                           f"machine cannot hold {ranks} ranks now") from None
                while True:
                    codes = {r: p.poll() for r, p in procs.items()}
                    bad = [r for r, c in codes.items() if c not in (None, 0)]
                    if bad:
                        first = bad[0]
                        failure = (first, _describe(codes[first]), codes[first], False)
                        break
                    if all(c == 0 for c in codes.values()):
                        break
                    if time.monotonic() - t0 > deadline_s:
                        late = [r for r, c in codes.items() if c is None]
                        failure = (late[0], f"did not finish within the deadline of {deadline_s:g} s", -1, True)
                        break
                    time.sleep(POLL_S)
        finally:
            stopped = _stop(procs)  # nothing is left behind, whatever happened above
        for r in range(len(procs)):
            out, err = files[r]
            out.seek(0)
            err.seek(0)
            runs.append(RankRun(r, procs[r].returncode, out.read().decode(errors="replace"),
                                err.read().decode(errors="replace")))
    finally:
        # Closed before the folder goes: with every descriptor in use, removing it would fail.
        for pair in files.values():
            for f in pair:
                f.close()
        shutil.rmtree(d, ignore_errors=True)
    res = LaunchResult(argv, runs, time.monotonic() - t0)
    if failure is not None:
        rank, reason, code, timed_out = failure
        others = [s for s in stopped if s != rank]
        tail = "\n".join(runs[rank].stderr.rstrip().splitlines()[-TAIL_LINES:])
        raise RankFailure(argv, rank, reason, code, tail, res.stdout, timed_out, others)
    return res


def run_program(prog: str, ranks: int, args: list[str], deadline_s: float = 600.0, style: str = "lab",
                faults: bool = False, extra_env: dict | None = None, nodes: int = 1,
                gpus: list[str] | None = None) -> LaunchResult:
    """build/bin/<prog> (the fault build's twin with faults=True) as `ranks` processes, in the
    environment `style` gives them (the executable must be built); nodes > 1: the rehearsal over `gpus`."""
    from harness.compile import build

    check_capacity(ranks)  # before the executable is even looked for: the count is the first thing wrong
    check_layout(ranks, nodes, gpus)
    exe = build.bin_path(prog, faults) if faults else None
    if exe is None:
        from harness.calling import runner

        exe = runner.executable(prog)
    return launch([str(exe), *args], ranks, deadline_s, extra_env=extra_env, style=style, nodes=nodes, gpus=gpus)

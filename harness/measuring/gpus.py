"""pytest-xdist workers: how many (`invoke test --jobs`), and which GPU each takes
(`invoke test --gpus all`, `invoke bench --gpus all`).

The parent decides which GPUs take part (`select`) and passes them to the workers in
$CUDALAB_GPUS ("0,1"). Each worker pins itself to one of them by setting $CUDA_VISIBLE_DEVICES
before anything touches CUDA (`pin_worker`, called where conftest.py and the bench runner
are imported): worker gwK takes GPU number K modulo the count, so inside a worker the GPU is
always device 0. Nothing here initialises CUDA in the parent.
"""

from __future__ import annotations

import importlib.util
import os
import re

from harness.compile import toolchain

ENV = "CUDALAB_GPUS"
# `--jobs auto` stops here. The default suite on a 16-core H100 host (bench/results/h100/NOTES-tests.md):
# 188 s in one process, 53 s with 8 workers, 43 s with 16; every worker holds a CUDA context (about
# half a GiB of GPU memory) and a Python with numpy, and more than 16 was not measured.
MAX_AUTO_JOBS = 16


def physical_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES spells them: the entries of
    $CUDA_VISIBLE_DEVICES when it is set, else the driver's indices from nvidia-smi ([] without one)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    return [g["index"] for g in toolchain.gpu_query("index")]


def select(spec: str, available: list[str] | None = None) -> list[str]:
    """`all` -> every available GPU; `0,2` -> those positions among the available ones.
    ValueError, with the valid choices, for anything else."""
    available = physical_gpus() if available is None else list(available)
    spec = str(spec).strip()
    if not available:
        raise ValueError("--gpus: no GPU is visible here (nvidia-smi lists none); run `invoke doctor`")
    if spec == "all":
        return available
    if not re.fullmatch(r"\d+(,\d+)*", spec):
        raise ValueError(f"--gpus takes `all` or comma-separated GPU numbers such as 0,1; got {spec!r}")
    picks = [int(x) for x in spec.split(",")]
    bad = [p for p in picks if p >= len(available)]
    if bad:
        raise ValueError(f"--gpus {spec}: GPU {bad[0]} does not exist; {len(available)} visible "
                         f"(0..{len(available) - 1})")
    if len(set(picks)) != len(picks):
        raise ValueError(f"--gpus {spec}: a GPU is named twice")
    return [available[p] for p in picks]


def worker_index(worker: str) -> int | None:
    """gw3 -> 3; None for anything that is not an xdist worker id."""
    m = re.fullmatch(r"gw(\d+)", worker or "")
    return int(m.group(1)) if m else None


def assign(worker: str, gpus: str) -> str | None:
    """The CUDA_VISIBLE_DEVICES value for xdist worker `worker` given $CUDALAB_GPUS `gpus`."""
    idx = worker_index(worker)
    pool = [g for g in gpus.split(",") if g]
    if idx is None or not pool:
        return None
    return pool[idx % len(pool)]


def pin_worker(environ=os.environ) -> str | None:
    """In an xdist worker started with $CUDALAB_GPUS, set $CUDA_VISIBLE_DEVICES to this worker's
    GPU and return it; elsewhere do nothing. Must run before the first CUDA call of the process."""
    gpu = assign(environ.get("PYTEST_XDIST_WORKER", ""), environ.get(ENV, ""))
    if gpu is not None:
        environ["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu


def too_few_gpus(k: int, environ=os.environ, visible: list[str] | None = None) -> str | None:
    """Why a test that needs `k` GPUs in one process cannot run here, or None when it can. In a worker
    that `invoke test --gpus` pinned to one GPU the others are hidden from it, whatever the machine
    has: the reason says so and how to run such tests (without --gpus, every worker sees every GPU)."""
    visible = physical_gpus() if visible is None else list(visible)
    if len(visible) >= k:
        return None
    why = f"needs {k} GPUs (one rank per GPU); {len(visible)} visible"
    pool = [g for g in environ.get(ENV, "").split(",") if g]
    if assign(environ.get("PYTEST_XDIST_WORKER", ""), environ.get(ENV, "")) is not None and len(pool) >= k:
        why += (f" to this worker, which --gpus pinned to one of the {len(pool)} GPUs: "
                "run the multi-GPU tests without --gpus")
    return why


def worker_env(gpus: list[str], environ=None) -> dict:
    """The environment for a pytest run whose workers spread over `gpus`."""
    env = dict(os.environ if environ is None else environ)
    env[ENV] = ",".join(gpus)
    return env


def have_xdist() -> bool:
    return importlib.util.find_spec("xdist") is not None


def test_workers(jobs: str, n_gpus: int = 0, cpus: int | None = None, xdist: bool | None = None) -> int:
    """How many pytest-xdist workers `invoke test --jobs JOBS` runs (1: no xdist, all in one process).
    `auto`: one per CPU core, at most MAX_AUTO_JOBS, or 1 where pytest-xdist is not installed; a number
    as given. With --gpus the workers take the GPUs in turn, so there is at least one per GPU.
    ValueError, saying what to do, for anything else."""
    xdist = have_xdist() if xdist is None else xdist
    cpus = (os.cpu_count() or 1) if cpus is None else cpus
    spec = str(jobs).strip()
    if spec == "auto":
        n = min(cpus, MAX_AUTO_JOBS) if xdist else 1
    elif re.fullmatch(r"\d+", spec) and int(spec) >= 1:
        n = int(spec)
    else:
        raise ValueError(f"--jobs takes `auto` or a number of workers (1 or more); got {jobs!r}")
    n = max(n, n_gpus)
    if n > 1 and not xdist:
        raise ValueError(f"{n} workers need pytest-xdist, which is not installed: pip install -e '.[dev]' "
                         "(or --jobs 1)")
    return n


BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def share_cores(n_workers: int, environ: dict, cpus: int | None = None) -> dict:
    """`environ` with the BLAS thread counts set so that n_workers processes share the cores: each
    numpy reference would otherwise start one thread per core, n_workers times over. A count the user
    set is kept."""
    cpus = (os.cpu_count() or 1) if cpus is None else cpus
    env = dict(environ)
    if n_workers > 1:
        for var in BLAS_THREAD_VARS:
            env.setdefault(var, str(max(1, cpus // n_workers)))
    return env

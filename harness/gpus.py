"""Several GPUs: one pytest-xdist worker per GPU (`invoke test --gpus all`, `invoke bench --gpus all`).

The parent decides which GPUs take part (`select`) and passes them to the workers in
$CUDALAB_GPUS ("0,1"). Each worker pins itself to one of them by setting $CUDA_VISIBLE_DEVICES
before anything touches CUDA (`pin_worker`, called where tests/conftest.py and the bench runner
are imported): worker gwK takes GPU number K modulo the count, so inside a worker the GPU is
always device 0. Nothing here initialises CUDA in the parent.
"""

from __future__ import annotations

import os
import re
import subprocess

ENV = "CUDALAB_GPUS"


def physical_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES spells them: the entries of
    $CUDA_VISIBLE_DEVICES when it is set, else 0..N-1 from `nvidia-smi -L` ([] without one)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(n)]


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


def worker_env(gpus: list[str], environ=None) -> dict:
    """The environment for a pytest run whose workers spread over `gpus`."""
    env = dict(os.environ if environ is None else environ)
    env[ENV] = ",".join(gpus)
    return env

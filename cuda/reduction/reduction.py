"""reduction: out = a * x + y over float32 arrays with a grid-stride loop (written by `invoke new reduction`).

The program's Python side: the typed API on numpy arrays, the numpy reference, the Python twin on the
lectures' simulator, the bench case against the memcpy ceiling, the profiler's and the sanitizer's
runs, and the record (at the end) that tells the lab what this program offers. Change the kernel in
reduction.cu, then this file's reference, and the tests beside it say whether the two agree.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.base import sim
from harness.calling import library
from harness.calling import results as _results
from harness.programs.record import Program, Tour

PROGRAM = "reduction"


def lib() -> library.Library:
    return library.load(PROGRAM)


def check_variant(variant: str) -> str:
    """The variant's name, or ValueError naming those in the library's one table."""
    library.table_index(PROGRAM, "variant", variant)
    return variant


def _check_a(a) -> float:
    if isinstance(a, bool) or not isinstance(a, (int, float, np.integer, np.floating)):
        raise TypeError(f"a must be a number, got {type(a).__name__}")
    if not np.isfinite(a):
        raise ValueError(f"a must be finite, got {a}")
    return float(a)


# --- the API ------------------------------------------------------------------------------------------

def run_f32(x: np.ndarray, y: np.ndarray, a: float = 2.0, variant: str = "01_grid_stride") -> np.ndarray:
    """out = a * x + y for two 1-D C-contiguous float32 arrays of one length, on the GPU."""
    a = _check_a(a)
    x = library.check_array(x, "x", np.float32, ndim=1)
    y = library.check_array(y, "y", np.float32, ndim=1, shape=x.shape)
    check_variant(variant)
    out = np.full(x.shape, np.nan, dtype=np.float32)
    if x.size:
        lib().reduction_f32(variant, a, x, y, out, x.size)
    return out


def reference(x: np.ndarray, y: np.ndarray, a: float = 2.0) -> np.ndarray:
    """numpy, in float64: what run_f32 computes, without its rounding."""
    return _check_a(a) * np.asarray(x, dtype=np.float64) + np.asarray(y, dtype=np.float64)


def twin(x: np.ndarray, y: np.ndarray, a: float = 2.0, blocks: int = 4, threads: int = 32) -> np.ndarray:
    """The kernel written in Python on the lectures' simulator (harness/base/sim.py): the same
    grid-stride loop, run block by block on the CPU."""
    a = _check_a(a)
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    out = np.full(x.shape, np.nan, dtype=np.float32)
    n = x.size

    def kernel(ctx):
        i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
        stride = ctx.gridDim.x * ctx.blockDim.x
        while i < n:
            out[i] = np.float32(a) * x[i] + y[i]
            i += stride

    sim.launch(kernel, blocks, threads)
    return out


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """Without a GPU: the Python twin against the numpy reference on ragged sizes."""
    rng = np.random.default_rng(0)
    rows = []
    for n in (1, 31, 97, 1000):
        x, y = rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)
        err = _results.relative_error(twin(x, y), reference(x, y))
        rows.append({"n": n, "relative_error": err, "check": "pass" if err <= 1e-6 else "fail"})
    return pd.DataFrame(rows), "the kernel's Python twin on the simulator against numpy"


def run(*args, timeout: float = 300) -> pd.DataFrame:
    """Run build/bin/reduction and parse its result lines (a failed check raises ProgramError)."""
    return _results.run(PROGRAM, *args, timeout=timeout)


def parse_output(text: str) -> pd.DataFrame:
    return _results.parse_output(text, PROGRAM)


# --- the bench, the profiler and the sanitizer --------------------------------------------------------

def bench_setup(variant: str, n: int):
    """The timing child's target: n float32 per array on the device, the launch marshalled once."""
    from harness.calling import cudart
    from harness.measuring import bench

    x, y, out = cudart.DeviceBuffer(4 * n), cudart.DeviceBuffer(4 * n), cudart.DeviceBuffer(4 * n)
    x.fill_bytes(0x3F)  # 0x3F3F3F3F = 0.747f: a normal float, no NaN or denormal slow paths
    y.fill_bytes(0x3F)
    launch = lib().prepare("reduction_f32_dev", variant, 2.0, x, y, out, n, 0, 0, library.STREAM)

    def close():
        for b in (x, y, out):
            b.close()

    return bench.Prepared(launch, close)


def bench_cases(quick: bool = False) -> list:
    """Each variant at 2^24 elements (--quick) and 2^27, against cudaMemcpy's bandwidth timed in the
    same run: 12 bytes an element (x and y read, out written), counted as the memcpy ceiling counts."""
    from harness.measuring import bench

    sizes = [("2^24", 1 << 24, True)] + ([] if quick else [("2^27", 1 << 27, False)])
    return [bench.BenchCase(program=PROGRAM, variant=v, size=label, setup=f"harness.programs.{PROGRAM}:bench_setup",
                            kwargs={"variant": v, "n": n}, unit="GB/s", amount=12.0 * n, ceiling="memcpy",
                            quick=is_quick, bytes=12.0 * n, flops=2.0 * n, note="float32; bytes = read + written")
            for label, n, is_quick in sizes for v in library.read_table(PROGRAM)]


def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", variant or "01_grid_stride", "--reps", "1", "1000003"]


def sanitize_args() -> dict[str, list[str]]:
    return {f"{v} ragged": ["--variant", v, "--reps", "1", "4099"] for v in library.read_table(PROGRAM)}


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name=PROGRAM,
    summary="a new program: out = a * x + y with a grid-stride loop",
    follows="your own",
    variants=True,
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    bench_cases=bench_cases,
    run=run,
    parse_output=parse_output,
    reference=reference,
    on_cpu=on_cpu,
    tour=Tour("out = a * x + y (text: `invoke run reduction`)"),
)

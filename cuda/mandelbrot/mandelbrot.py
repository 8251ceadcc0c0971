"""mandelbrot: the Stringer course's Mandelbrot image (section 3.1), in CUDA C.

Pixel (row, col) of a width x height image maps to
    c = (x0 + (x1 - x0) * col / width,  y0 + (y1 - y0) * row / height)
and holds the number of steps z = z^2 + c actually computed from z = 0 while |z|^2 <= 4, at most
max_iters: a count in 1..max_iters. Row 0 is y0 (the bottom of the region when drawn).

Variants: "01_naive" (the course's kernel; float32 or float64; every operation IEEE-rounded, so
`reference` reproduces it exactly) and "02_fast" (float32; fused multiply-adds and an escape test
once per FAST_UNROLL steps; `reference_fast` reproduces it exactly).
"""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.base import sim
from harness.calling import library
from harness.calling.cudart import INT_MAX, MAX_GRID_YZ
from harness.compile import build as _build
from harness.compile import sass

# The SASS parser is harness.compile.sass's (one per format); tests reach it through this module too.
from harness.compile.sass import FP32_OPS, SassLoop, find_cuobjdump, sass_functions, sass_loops  # noqa: F401
from harness.programs import mandelbrot_exercises as _ex
from harness.programs.record import Exercise, Picture, Program, Tour

if TYPE_CHECKING:  # the CPU paths return DataFrames; pandas is imported where they run
    import pandas as pd

PROGRAM = "mandelbrot"


# VARIANTS is the library's one table (cuda/mandelbrot/mandelbrot.cu), read when first asked for: never typed here.
__getattr__ = library.table_attributes(__name__, PROGRAM)

DTYPES = {np.dtype(np.float32): 32, np.dtype(np.float64): 64}
DEFAULT_REGION = (-2.0, 1.0, -1.5, 1.5)
# EXERCISE mandelbrot_zoom: copy
# A region (x0, x1, y0, y1) of the plane whose picture is interesting (the course's puzzle): a spiral in
# the valley between the main cardioid and the period-2 bulb.
# EXERCISE mandelbrot_zoom: begin set ZOOM_REGION to (x0, x1, y0, y1), at most 0.1 wide and high, where at least half of
# EXERCISE mandelbrot_zoom: todo the pixels neither escape at once nor stay to the last of 256 iterations.
ZOOM_REGION = (-0.7469, -0.7449, 0.1049, 0.1069)
# EXERCISE mandelbrot_zoom: stub ZOOM_REGION = (-2.0, 1.0, -1.5, 1.5)
# EXERCISE mandelbrot_zoom: end
# EXERCISE mandelbrot_zoom: end copy
MAX_EDGE = MAX_GRID_YZ * 8  # mandelbrot_max_edge() in the library: the grid's y limit x 8 (a margin)
# The edges alone allow 524280^2 pixels: a terabyte of counts. One image is held whole in host memory
# (and on the GPU), so its pixels are bounded before anything is allocated: 1 GiB of uint32 counts.
MAX_PIXELS = 2**28
# The numpy twins keep about 60 bytes a pixel while they iterate (coordinates, x, y, their squares,
# the indices still running, masks), so on the CPU the bound is 16x lower: about 1 GiB again.
MAX_TWIN_PIXELS = 2**24
# The picture: matplotlib makes float and colour copies of the counts, several times their size.
MAX_PICTURE_PIXELS = 2**26
FAST_UNROLL = 16  # cuda/mandelbrot/mandelbrot.cu FAST_UNROLL; the library reports it too
FAST_PIXELS = 1  # pixels per 02_fast thread stepped together in its main loop (2 was tried: slower)
BLOCK = (16, 16)  # 01_naive's block, as in the course

# Instructions per iteration in the SASS loops (sm_90, nvcc 13.0; NOTES-mandelbrot.md shows them).
# "fp32" counts FADD/FMUL/FFMA, the work the fp32_inst ceiling is made of; "total" counts every
# instruction of the loop. `sass_counts()` recounts them from the built library when cuobjdump is
# there; the tests check these numbers against it.
SASS_COUNTS = {
    ("01_naive", "float32"): {"fp32": 8.0, "total": 13.0},
    ("02_fast", "float32"): {"fp32": 66 / FAST_UNROLL, "total": 73 / FAST_UNROLL},
}


# --- validation -------------------------------------------------------------------------------

def parse_region(region) -> tuple[float, float, float, float]:
    """(x0, x1, y0, y1) from a 4-sequence or a string "x0 x1 y0 y1" (commas allowed); None -> default.

    Raises ValueError for anything else, for non-finite numbers and for an empty region."""
    if region is None:
        return DEFAULT_REGION
    if isinstance(region, str):
        parts = [p for p in re.split(r"[\s,]+", region.strip()) if p]
        try:
            vals = tuple(float(p) for p in parts)
        except ValueError:
            raise ValueError(f"region must be four numbers 'x0 x1 y0 y1', got {region!r}") from None
    else:
        try:
            vals = tuple(float(v) for v in region)
        except (TypeError, ValueError):
            raise ValueError(f"region must be four numbers (x0, x1, y0, y1), got {region!r}") from None
    if len(vals) != 4:
        raise ValueError(f"region must have 4 numbers (x0, x1, y0, y1), got {len(vals)}: {region!r}")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"region must be finite, got {vals}")
    x0, x1, y0, y1 = vals
    if not (x1 > x0 and y1 > y0):
        raise ValueError(f"empty region {vals}: need x0 < x1 and y0 < y1")
    return vals




def _check_size(v, name: str, at_most: int = INT_MAX) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
    if v <= 0:
        raise ValueError(f"{name} must be positive, got {v}")
    if v > at_most:
        raise ValueError(f"{name} must be at most {at_most}, got {v}")
    return int(v)


def check_pixels(width: int, height: int, at_most: int, what: str) -> None:
    """ValueError naming the limit when width x height is more pixels than `what` may hold."""
    if width * height > at_most:
        side = math.isqrt(at_most)
        raise ValueError(f"{width}x{height} is {width * height} pixels, more than the {at_most} ({side}x{side}) "
                         f"{what} may have: it is held whole in memory")


def validate(width, height, max_iters, region=None, dtype=np.float32, variant="01_naive",
             max_pixels: int = MAX_PIXELS, what: str = "an image"):
    """Check every argument before anything is launched or allocated; returns the normalised values.
    variant=None: no variant to check (numpy's reference, which must run without the built library)."""
    width = _check_size(width, "width", MAX_EDGE)
    height = _check_size(height, "height", MAX_EDGE)
    max_iters = _check_size(max_iters, "max_iters")
    if width > MAX_EDGE or height > MAX_EDGE:
        raise ValueError(f"width and height must be at most {MAX_EDGE}, got {width}x{height}")
    check_pixels(width, height, max_pixels, what)
    reg = parse_region(region)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from None
    if dt not in DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    if variant is not None:
        library.table_index(PROGRAM, "variant", variant)
    if variant == "02_fast" and dt != np.float32:
        raise ValueError("02_fast is float32 only; use 01_naive for float64")
    return width, height, max_iters, reg, dt, variant


# --- the GPU ----------------------------------------------------------------------------------

def mandelbrot(width: int, height: int, max_iters: int, region=DEFAULT_REGION, dtype=np.float32,
               variant: str = "01_naive", out: np.ndarray | None = None) -> np.ndarray:
    """The height x width uint32 array of escape counts, computed on the GPU (written into `out`
    when given: a C-contiguous uint32 array of that shape)."""
    width, height, max_iters, reg, dt, variant = validate(width, height, max_iters, region, dtype, variant)
    if out is None:
        out = np.empty((height, width), dtype=np.uint32)
    else:
        out = library.check_array(out, "out", np.uint32, shape=(height, width))
    lib = library.load("mandelbrot")
    lib.mandelbrot_render(variant, DTYPES[dt], width, height, max_iters, *reg, out)
    return out


def render_device(d_out, width: int, height: int, max_iters: int, region=DEFAULT_REGION, dtype=np.float32,
                  variant: str = "01_naive", stream=None) -> None:
    """Enqueue one render into device memory `d_out` (DeviceBuffer of height*width*4 bytes) on `stream`."""
    width, height, max_iters, reg, dt, variant = validate(width, height, max_iters, region, dtype, variant)
    if getattr(d_out, "nbytes", None) is not None and d_out.nbytes < width * height * 4:
        raise ValueError(f"d_out holds {d_out.nbytes} bytes, the image needs {width * height * 4}")
    lib = library.load("mandelbrot")
    lib.mandelbrot_render_device(variant, DTYPES[dt], width, height, max_iters, *reg, d_out, stream)


# --- numpy reference --------------------------------------------------------------------------

def coordinates(width: int, height: int, region, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(cr[width], ci[height]) in `dtype`, rounded exactly as the kernels round them:
    ((x1 - x0) * col) / width + x0, every operation in `dtype`."""
    dt = np.dtype(dtype).type
    x0, x1, y0, y1 = (dt(v) for v in parse_region(region))
    cr = (dt(x1 - x0) * np.arange(width, dtype=dt)) / dt(width) + x0
    ci = (dt(y1 - y0) * np.arange(height, dtype=dt)) / dt(height) + y0
    return cr.astype(dt), ci.astype(dt)


def reference(width: int, height: int, max_iters: int, region=DEFAULT_REGION, dtype=np.float64) -> np.ndarray:
    """The counts in numpy with 01_naive's arithmetic: each of xx = x*x, yy = y*y, xx + yy,
    xy = x*y, (xy + xy) + ci, (xx - yy) + cr rounded to `dtype` on its own (numpy never fuses).
    Vectorised over the pixels still iterating."""
    width, height, max_iters, reg, dt, _ = validate(width, height, max_iters, region, dtype, None,
                                                    max_pixels=MAX_TWIN_PIXELS, what="the numpy twin")
    cr1, ci1 = coordinates(width, height, reg, dt)
    cr = np.broadcast_to(cr1[None, :], (height, width)).ravel()
    ci = np.broadcast_to(ci1[:, None], (height, width)).ravel()
    return escape_counts(cr, ci, max_iters, dt.type).reshape(height, width)


def escape_counts(cr: np.ndarray, ci: np.ndarray, max_iters: int, dt, strict: bool = True) -> np.ndarray:
    """The escape loop over flat arrays of points, 01_naive's arithmetic in `dt` (each operation rounded
    on its own), escaping at |z|^2 > 4 (`strict`; >= 4 otherwise, a mistake the exercise check names)."""
    counts = np.zeros(cr.size, dtype=np.uint32)
    idx = np.arange(cr.size)
    x = np.zeros(idx.size, dtype=dt)
    y = np.zeros(idx.size, dtype=dt)
    four = dt(4)
    for _ in range(max_iters):
        xx, yy = x * x, y * y
        keep = (xx + yy) <= four if strict else (xx + yy) < four
        if not keep.all():
            idx, x, y, xx, yy, cr, ci = (a[keep] for a in (idx, x, y, xx, yy, cr, ci))
        if idx.size == 0:
            break
        xy = x * y
        y = (xy + xy) + ci
        x = (xx - yy) + cr
        counts[idx] += 1
    return counts


def fma32(a, b, c) -> np.ndarray:
    """float32 fused multiply-add, a*b + c with one rounding, exactly as the GPU's FFMA.

    a*b of two float32 is exact in float64 (48 significant bits); the sum is then rounded to odd
    in float64 (TwoSum gives its error; an inexact sum with an even last bit moves one ulp towards
    the exact value), and rounding that to float32 is correctly rounded: rounding to odd with at
    least two extra bits makes the second rounding innocent (Boldo & Melquiond)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    c = np.asarray(c, dtype=np.float32)
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        fix = np.isfinite(s) & np.isfinite(err) & (err != 0) & ((s.view(np.int64) & 1) == 0)
        if np.any(fix):
            s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)


def _fast_inside(x, y) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return fma32(x, x, y * y) <= np.float32(4)


def _fast_step(x, y, cr, ci):
    with np.errstate(invalid="ignore", over="ignore"):
        t = fma32(-y, y, cr)
        return fma32(x, x, t), fma32(x + x, y, ci)


def reference_fast(width: int, height: int, max_iters: int, region=DEFAULT_REGION,
                   unroll: int = FAST_UNROLL) -> np.ndarray:
    """The counts with 02_fast's arithmetic and control flow, in numpy (float32):
    step: t = fma(-y, y, cr); y' = fma(x + x, y, ci); x' = fma(x, x, t);  test: fma(x, x, y*y) <= 4.
    Blocks of `unroll` steps are tested at their end; a block that ends outside is replayed from its
    start one step at a time. Same result as the kernel, bit for bit."""
    width, height, max_iters, reg, _, _ = validate(width, height, max_iters, region, np.float32, "02_fast",
                                                   max_pixels=MAX_TWIN_PIXELS, what="the numpy twin")
    cr1, ci1 = coordinates(width, height, reg, np.float32)
    cr = np.broadcast_to(cr1[None, :], (height, width)).ravel().copy()
    ci = np.broadcast_to(ci1[:, None], (height, width)).ravel().copy()
    npx = width * height
    counts = np.zeros(npx, dtype=np.int64)
    x = np.zeros(npx, dtype=np.float32)
    y = np.zeros(npx, dtype=np.float32)
    # Block mode, all pixels still in it share n.
    blk = np.arange(npx)
    n = 0
    while n <= max_iters - unroll and blk.size:
        bx, by = x[blk], y[blk]
        sx, sy = bx, by
        for _ in range(unroll):
            bx, by = _fast_step(bx, by, cr[blk], ci[blk])
        ok = _fast_inside(bx, by)
        x[blk] = np.where(ok, bx, sx)
        y[blk] = np.where(ok, by, sy)
        counts[blk] = np.where(ok, n + unroll, n)
        blk = blk[ok]
        n += unroll
    # Single steps for every pixel, from where block mode left it.
    act = np.arange(npx)
    while act.size:
        go = (counts[act] < max_iters) & _fast_inside(x[act], y[act])
        act = act[go]
        if not act.size:
            break
        x[act], y[act] = _fast_step(x[act], y[act], cr[act], ci[act])
        counts[act] += 1
    return counts.astype(np.uint32).reshape(height, width)


def mismatches(out: np.ndarray, ref: np.ndarray) -> int:
    """The checker: how many pixels differ (every pixel when the shapes differ)."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return max(out.size, ref.size)
    return int(np.count_nonzero(out != ref))


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of pixels with the same count."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    return float(np.mean(a == b)) if a.size else 1.0


# --- Python twin (GPU MODE lecture 3 style) ----------------------------------------------------

# EXERCISE mandelbrot: copy
def mandelbrot_bk(blockidx, threadidx, blockdim, out, width, height, max_iters, x0, span_x, y0, span_y):
    """01_naive, one thread: numpy scalars of the kernel's dtype round each operation like the GPU."""
    col = blockidx.x * blockdim.x + threadidx.x
    row = blockidx.y * blockdim.y + threadidx.y
    if col >= width or row >= height:
        return
    dt = type(x0)
    cr = (span_x * dt(col)) / dt(width) + x0
    ci = (span_y * dt(row)) / dt(height) + y0
    x = y = dt(0)
    n = 0
    # EXERCISE mandelbrot: begin the escape-time loop: while n < max_iters, stop as soon as |z|^2 = x*x + y*y > 4
    # EXERCISE mandelbrot: todo (compare with dt(4)); otherwise step z = z^2 + c, i.e. y = 2xy + ci and x = x*x - y*y + cr
    # EXERCISE mandelbrot: todo (both from the old x and y), and count the step in n. x, y, cr, ci are numpy scalars of
    # EXERCISE mandelbrot: todo the kernel's dtype, so each operation rounds as on the GPU.
    while n < max_iters:
        xx, yy = x * x, y * y
        if xx + yy > dt(4):
            break
        xy = x * y
        y = (xy + xy) + ci
        x = (xx - yy) + cr
        n += 1
    # EXERCISE mandelbrot: end
    out[row * width + col] = n
# EXERCISE mandelbrot: end copy


def twin(width: int, height: int, max_iters: int, region=DEFAULT_REGION, dtype=np.float32) -> np.ndarray:
    """Run mandelbrot_bk over a 16x16-block grid with harness.base.sim.blk_kernel2d (tiny images only)."""
    width, height, max_iters, reg, dt, _ = validate(width, height, max_iters, region, dtype,
                                                    max_pixels=MAX_TWIN_PIXELS, what="the Python twin")
    t = dt.type
    x0, x1, y0, y1 = (t(v) for v in reg)
    out = np.zeros(width * height, dtype=np.uint32)
    blocks = sim.dim3(-(-width // BLOCK[0]), -(-height // BLOCK[1]))
    sim.blk_kernel2d(mandelbrot_bk, blocks, sim.dim3(*BLOCK), out, width, height, max_iters, x0, t(x1 - x0), y0,
                     t(y1 - y0))
    return out.reshape(height, width)


# --- SASS instruction counts ------------------------------------------------------------------

def sass_counts(lib_path: Path | None = None) -> dict[tuple[str, str], dict]:
    """Instructions per iteration of each float32 variant's hot loop, counted in the built library's
    SASS: the largest loop of the kernel, divided by the pixel-steps it makes (FAST_UNROLL steps of
    FAST_PIXELS pixels for 02_fast)."""
    path = lib_path or _build.lib_path("mandelbrot")
    funcs = sass_functions(sass.dump(path))
    names = {("01_naive", "float32"): "_Z19mandelbrot_01_naiveIfEvPjiiiT_S1_S1_S1_",
             ("02_fast", "float32"): "_Z18mandelbrot_02_fastPjiiiffff"}
    out = {}
    for key, fname in names.items():
        if fname not in funcs:
            raise ValueError(f"{fname} not in the SASS of {path}")
        loop = max(sass_loops(funcs[fname]), key=lambda lp: lp.total)
        steps = FAST_UNROLL * FAST_PIXELS if key[0] == "02_fast" else 1
        out[key] = {"fp32": loop.fp32 / steps, "total": loop.total / steps, "loop": loop}
    return out


def instructions_per_iteration(variant: str, kind: str = "fp32") -> float:
    """From the built library's SASS when cuobjdump is available, else the recorded SASS_COUNTS."""
    try:
        return sass_counts()[(variant, "float32")][kind]
    except (FileNotFoundError, subprocess.CalledProcessError, ValueError):
        return SASS_COUNTS[(variant, "float32")][kind]


# --- viz (invoke viz mandelbrot) --------------------------------------------------------------

def viz_data(width: int = 1024, height: int = 1024, iters: int = 256, region=None, variant: str = "01_naive",
             cpu: bool | None = None):
    """The image for analysis.mandelbrot.plot: counts plus the region they cover.

    cpu=None computes on the GPU when there is one, else on the CPU; cpu=True always on the CPU.
    On the CPU the counts are the numpy twin of the variant's arithmetic (`reference` in float32 for
    01_naive, `reference_fast` for 02_fast: the GPU's counts, pixel for pixel), and the data says
    so under "computed_on", which the picture's title shows."""
    from . import cpu_label, gpu_here

    reg = parse_region(region)
    if cpu is None:
        cpu = not gpu_here()[0]
    # Checked here, before the counts or the picture's own copies exist (the figure converts them
    # to floats and colours): a picture at most MAX_PICTURE_PIXELS, on the CPU the twin's bound.
    validate(width, height, iters, reg, np.float32, variant,
             max_pixels=MAX_TWIN_PIXELS if cpu else MAX_PICTURE_PIXELS,
             what="a picture computed on the CPU" if cpu else "a picture")
    if not cpu:
        img = mandelbrot(width, height, iters, reg, np.float32, variant)
        return {"counts": img, "region": reg, "max_iters": iters, "variant": variant}
    width, height, iters, reg, _, variant = validate(width, height, iters, reg, np.float32, variant,
                                                     max_pixels=MAX_TWIN_PIXELS, what="the numpy twin")
    if variant == "02_fast":
        img = reference_fast(width, height, iters, reg)
    else:
        img = reference(width, height, iters, reg, np.float32)
    return {"counts": img, "region": reg, "max_iters": iters, "variant": variant,
            "computed_on": cpu_label(f"numpy twin of {variant}'s float32 arithmetic")}


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run mandelbrot` without a GPU: 01_naive's Python twin (harness.base.sim, 16x16 blocks)
    and 02_fast's numpy twin on a small image, each checked pixel for pixel against the numpy
    reference of its arithmetic."""
    import pandas as pd

    if args:
        raise ValueError(f"on the CPU, mandelbrot takes no arguments (a fixed small image), got: {' '.join(args)}; "
                         "`invoke viz mandelbrot` draws a picture of any size")
    w, h, it = 48, 36, 64
    ref = reference(w, h, it, DEFAULT_REGION, np.float32)
    rows = []
    for what, out, want in (("01_naive (Python twin, harness.base.sim)", twin(w, h, it), ref),
                            ("02_fast (numpy twin)", reference_fast(w, h, it), ref)):
        bad = mismatches(out, want)
        rows.append({"variant": what, "size": f"{w}x{h}x{it}", "mismatches": bad,
                     "agreement": round(agreement(out, want), 4),
                     # 02_fast tests escape every FAST_UNROLL steps and replays, so it matches the float32
                     # reference exactly; its FMAs may move a pixel at the set's edge, which is allowed.
                     "check": "pass" if (bad == 0 or (what.startswith("02") and agreement(out, want) >= 0.99))
                     else "fail"})
    return pd.DataFrame(rows), (f"01_naive on the simulator and 02_fast's numpy twin, {w}x{h} pixels, "
                                f"{it} iterations, against the float32 numpy reference")


# --- bench ------------------------------------------------------------------------------------

def bench_setup(variant: str, edge: int, iters: int):
    """harness.measuring.timing's target for a bench case: one render to count the work, the launch marshalled."""
    from harness.calling import cudart
    from harness.measuring import bench

    buf = cudart.DeviceBuffer(edge * edge * 4)
    render_device(buf, edge, edge, iters, DEFAULT_REGION, np.float32, variant)
    host = np.empty((edge, edge), dtype=np.uint32)
    buf.to_host(host)
    work = float(host.sum(dtype=np.uint64))

    # Marshalled once here: the timed launch is the cffi call alone (library.prepare).
    w, h, it, reg, dt, v = validate(edge, edge, iters, DEFAULT_REGION, np.float32, variant)
    launch = library.load("mandelbrot").prepare("mandelbrot_render_device", v, DTYPES[dt], w, h, it, *reg,
                                                buf, library.STREAM)
    return bench.Prepared(launch=launch, close=buf.close, work=work)


def _bench_case(variant: str, edge: int, iters: int, quick: bool):
    from harness.measuring import bench

    fp32 = instructions_per_iteration(variant, "fp32")
    total = instructions_per_iteration(variant, "total")
    return bench.BenchCase(
        program="mandelbrot", variant=variant, size=f"{edge}x{edge}x{iters}",
        setup="harness.programs.mandelbrot:bench_setup", kwargs={"variant": variant, "edge": edge, "iters": iters},
        unit="Giter/s",
        amount=0.0, ceiling="fp32_inst", ceiling_divisor=fp32,
        target=0.6 if variant == "02_fast" and edge == 8192 else None, quick=quick,  # the size the goal was set at
        note=f"float32; ceiling = fp32_inst / {fp32:g} FP32 instructions per iteration "
             f"({total:g} SASS instructions in all)")


def bench_cases(quick: bool = False):
    cases = []
    for v in library.read_table(PROGRAM):
        cases.append(_bench_case(v, 2048, 1000, quick=True))
        cases.append(_bench_case(v, 8192, 1000, quick=False))
    return cases


# --- hooks for `invoke profile` and `invoke sanitize` (small, ragged sizes; see harness/profiling/profile.py) ---
def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", variant or library.read_table(PROGRAM)[-1], "--reps", "1", "97", "61", "64"]


# --- the exercises this program offers (their problems: mandelbrot_exercises.py) ----------------------------

EXERCISES = (
    Exercise(
        "mandelbrot", origin="CUDA course, section 3.1 (the Mandelbrot set)",
        writes="the escape-time loop of one pixel",
        tracks=("python", "cuda"), problem=_ex.Mandelbrot(), py_entry="mandelbrot_bk",
        cu_source="cuda/mandelbrot/mandelbrot.cu", cu_kernels=("mandelbrot_01_naive",), glue="exercise_mandelbrot.cu",
        cu_includes="#include <cstdint>\n#include <cmath>\n",
        hints=("z starts at 0; each step is z = z^2 + c: x' = x*x - y*y + cr, y' = 2*x*y + ci, both from the old x, y.",
             "Test |z|^2 = x*x + y*y > 4 before each step, and count only the steps taken: a pixel that never "
             "escapes gets max_iters.",
             "CUDA: write each operation with A::mul/A::add/A::sub; the compiler fuses plain a*b + c into one FMA, "
             "which rounds differently from the reference and changes a few counts."),
        block="16x16 blocks over (width, height)",
    ),
    Exercise(
        "mandelbrot_zoom", origin="CUDA course, section 3.1's puzzle (zoom into an interesting region)",
        writes="a region (x0, x1, y0, y1) whose picture is interesting",
        tracks=("python",), problem=_ex.Zoom(), py_entry="ZOOM_REGION",
        hints=("The interesting pixels sit on the boundary of the set: where some points escape after a few steps "
             "and their neighbours after many.",
             "Look at `invoke viz mandelbrot` (or the picture in the README): the cusp at the left of the main "
             "cardioid (x near -0.75, y near 0.1) and the small bulbs around it are good places to start.",
             "Zoom in until the region is at most 0.1 wide and high; most of its pixels must neither escape at once "
             "nor stay to the last iteration."),
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='mandelbrot',
    summary='a compute-bound kernel: one thread per pixel, a loop per thread',
    follows='intro course §3.1',
    order=70,
    readme_picture='[set](cuda/mandelbrot/mandelbrot_cpu.png)',
    variants=True,
    profile_args=profile_args,
    bench_cases=bench_cases,
    reference=reference,
    on_cpu=on_cpu,
    picture=Picture('mandelbrot', viz_data, options=('width', 'height', 'iters', 'region', 'variant', 'cpu')),
    tour=Tour('escape counts of z -> z^2 + c over the complex plane, one thread per pixel', drawn=('plots/mandelbrot.png',), committed=('cuda/mandelbrot/mandelbrot_cpu.png',)),
    exercises=EXERCISES,
)

"""grayscale: planar RGB to grey (GPU MODE lecture 3; the grayscale part of the CUDA set-up tutorial).

Layout. The input is planar uint8 CHW with 3 channels: for n = h*w pixels, pixel i reads
`x[i]` (R), `x[i+n]` (G) and `x[i+2n]` (B), as in the lectures. The output is h x w uint8.

The formula and its rounding (the same in every CUDA variant, the C reference in main.cu, the
numpy `reference` and the Python twins):

    y    = (0.2989*R + 0.5870*G) + 0.1140*B     float32; each product and each sum rounded to the
                                                nearest float32, in this order, never fused
    grey = trunc(y)                             the lectures' cast to unsigned char (y >= 0)

Why pinned: the lectures let nvcc fuse the expression into FMAs. A fused multiply-add rounds once
instead of twice, and where y lands within an ulp of an integer that moves the truncated byte by one.
The CUDA code uses __fmul_rn/__fadd_rn, which are never contracted, so the GPU bytes equal numpy's
float32 bytes exactly and the tests ask for equality (no +-1 allowance is needed anywhere).
A consequence of truncation with coefficients summing to 0.9999: white (255, 255, 255) gives 254.
`reference_f64` (the same formula in float64) differs from the float32 result by at most one level,
on the pixels where float32 rounding crosses an integer; `rounding_report` counts them.

Variants: 01_1d (256 threads a block, cdiv(n, 256) blocks), 02_2d (16x16 blocks over (w, h)),
03_vectorized (16 pixels a thread, 16-byte loads and stores, byte path for misaligned planes and the tail).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from harness.base import files, paths
from harness.base.paths import PLOTS
from harness.base.sim import blk_kernel, blk_kernel2d, dim3, run_kernel
from harness.calling import library, results
from harness.programs import grayscale_exercises as _ex
from harness.programs.record import Exercise, Program, Tour

PROGRAM = "grayscale"


# VARIANTS is the library's one table (cuda/grayscale/grayscale.cu), read when first asked for: never typed here.
__getattr__ = library.table_attributes(__name__, PROGRAM)

DEFAULT_VARIANT = "03_vectorized"
# EXERCISE grayscale: copy
# EXERCISE grayscale_2d: copy
CR, CG, CB = np.float32(0.2989), np.float32(0.5870), np.float32(0.1140)
# EXERCISE grayscale_2d: end copy
# EXERCISE grayscale: end copy

TEST_H, TEST_W = 1066, 1600  # the lectures' puppy image
DEFAULT_OUT = PLOTS / "grayscale.png"


# --- validation and the reference ---------------------------------------------------------------

def check_variant(variant: str) -> str:
    library.table_index(PROGRAM, "variant", variant)
    return variant


def check_planar(x, name: str = "x") -> np.ndarray:
    """A (3, H, W) uint8 array; a non-contiguous one is copied to C order."""
    x = library.check_array(x, name, np.uint8, ndim=3, contiguous="copy")
    if x.shape[0] != 3:
        raise ValueError(f"{name} must be planar RGB of shape (3, H, W), got {x.shape}"
                         + (" (looks like H, W, 3: use planar(x))" if x.shape[-1] == 3 else ""))
    if x.shape[1] * x.shape[2] > 2**31 - 1:
        raise ValueError(f"{name}: {x.shape[1]}x{x.shape[2]} is more than 2^31-1 pixels")
    return x


def planar(hwc: np.ndarray) -> np.ndarray:
    """(H, W, 3) interleaved RGB, as Pillow gives it, to contiguous planar (3, H, W)."""
    hwc = library.check_array(hwc, "image", np.uint8, ndim=3, contiguous="copy")
    if hwc.shape[2] != 3:
        raise ValueError(f"image must be (H, W, 3) RGB, got {hwc.shape}")
    return np.ascontiguousarray(hwc.transpose(2, 0, 1))


def reference(x: np.ndarray) -> np.ndarray:
    """The defined result: float32 arithmetic rounded at every step, then truncation."""
    x = check_planar(x)
    r, g, b = (x[c].astype(np.float32) for c in range(3))
    y = (CR * r + CG * g) + CB * b  # numpy rounds each float32 operation; it never fuses
    return y.astype(np.uint8)  # y in [0, 254.98]: the cast truncates, like the lectures' (unsigned char)


def reference_f64(x: np.ndarray) -> np.ndarray:
    """The same coefficients in float64, truncated: what the formula means without float32 rounding."""
    x = check_planar(x)
    r, g, b = (x[c].astype(np.float64) for c in range(3))
    return np.floor(0.2989 * r + 0.5870 * g + 0.1140 * b).astype(np.uint8)


def rounding_report(x: np.ndarray) -> dict:
    """How many pixels float32 rounding moves by one level against float64 (never more than one)."""
    a, b = reference(x).astype(np.int16), reference_f64(x).astype(np.int16)
    d = a - b
    return {"pixels": int(d.size), "differ": int(np.count_nonzero(d)), "max_abs": int(np.abs(d).max(initial=0))}


def check(out: np.ndarray, ref: np.ndarray) -> tuple[bool, int]:
    """The checker: exact equality. Returns (ok, number of mismatching pixels)."""
    if out.shape != ref.shape:
        return False, int(ref.size)
    bad = int(np.count_nonzero(out != ref))
    return bad == 0, bad


# --- the GPU ------------------------------------------------------------------------------------

def _lib():
    return library.load("grayscale")


def rgb2grey(x: np.ndarray, variant: str = DEFAULT_VARIANT, align_planes: bool = True) -> np.ndarray:
    """Grey image (H, W) uint8 of planar x (3, H, W) uint8 on the GPU (host arrays in and out).

    A non-contiguous x is copied to C order first. align_planes=False keeps the planes packed on the
    device (G at byte n, B at 2n), which for n % 16 != 0 sends 03_vectorized down its byte path.
    """
    check_variant(variant)
    x = check_planar(x)
    _, h, w = x.shape
    out = np.empty((h, w), dtype=np.uint8)
    if out.size == 0:
        return out
    lib = _lib()
    lib.grayscale_host(variant, h, w, x, out, int(bool(align_planes)))
    return out


def rgb2grey_device(variant: str, h: int, w: int, plane_stride: int, x_ptr, out_ptr, stream=None) -> None:
    """Device pointers (DeviceBuffer or cffi pointers), enqueued on `stream` without a sync: for timing."""
    check_variant(variant)
    if h < 0 or w < 0 or plane_stride < h * w:
        raise ValueError(f"need h, w >= 0 and plane_stride >= h*w, got h={h} w={w} plane_stride={plane_stride}")
    lib = _lib()
    lib.grayscale_device(variant, h, w, plane_stride, x_ptr, out_ptr, stream)


def aligned_stride(h: int, w: int) -> int:
    """The device plane pitch rgb2grey uses: h*w rounded up to 16 bytes."""
    return -(-h * w // 16) * 16


# --- Python twins (lecture 3) -------------------------------------------------------------------
# The arithmetic on np.float32 scalars rounds each step to float32, exactly as the CUDA code does.

# EXERCISE grayscale: copy
# EXERCISE grayscale_2d: copy
def _grey(r, g, b) -> int:
    return int((CR * np.float32(r) + CG * np.float32(g)) + CB * np.float32(b))
# EXERCISE grayscale_2d: end copy
# EXERCISE grayscale: end copy


def rgb2grey_py(x: np.ndarray) -> np.ndarray:
    """The lecture's pixel loop over the flattened planes."""
    c, h, w = x.shape
    n = h * w
    x = x.flatten()
    res = np.empty(n, dtype=np.uint8)
    for i in range(n):
        res[i] = _grey(x[i], x[i + n], x[i + 2 * n])
    return res.reshape(h, w)


def rgb2grey_k(i, x, out, n):
    """Kernel for run_kernel: one "thread" per pixel i."""
    out[i] = _grey(x[i], x[i + n], x[i + 2 * n])


def rgb2grey_pyk(x: np.ndarray) -> np.ndarray:
    c, h, w = x.shape
    n = h * w
    x = x.flatten()
    res = np.empty(n, dtype=np.uint8)
    run_kernel(rgb2grey_k, h * w, x, res, n)
    return res.reshape(h, w)


# EXERCISE grayscale: copy
def rgb2grey_bk(blockidx, threadidx, blockdim, x, out, n):
    """Kernel for blk_kernel: 01_1d's index, with its guard for the last, partial block."""
    # EXERCISE grayscale: begin i = this thread's pixel (global index); only when i < n (the last block is partial),
    # EXERCISE grayscale: todo out[i] = _grey of pixel i's red, green and blue values, which sit in the three planes of
    # EXERCISE grayscale: todo the flattened x, n apart (x[i], x[i + n], x[i + 2 * n]).
    i = blockidx * blockdim + threadidx
    if i < n:
        out[i] = _grey(x[i], x[i + n], x[i + 2 * n])
    # EXERCISE grayscale: end
# EXERCISE grayscale: end copy


def rgb2grey_pybk(x: np.ndarray, threads: int = 256) -> np.ndarray:
    c, h, w = x.shape
    n = h * w
    x = x.flatten()
    res = np.full(n, 0xAB, dtype=np.uint8)
    blocks = int(math.ceil(h * w / threads))
    blk_kernel(rgb2grey_bk, blocks, threads, x, res, n)
    return res.reshape(h, w)


# EXERCISE grayscale_2d: copy
def rgb2grey_bk2d(blockidx: dim3, threadidx: dim3, blockdim: dim3, x, out, h, w):
    """Kernel for blk_kernel2d: 02_2d's (column, row) mapping with guards on both edges."""
    # EXERCISE grayscale_2d: begin c = this thread's column (the .x of blockidx, blockdim, threadidx), r = its row
    # EXERCISE grayscale_2d: todo (.y); return when the pixel is outside the image on either edge.
    c = blockidx.x * blockdim.x + threadidx.x
    r = blockidx.y * blockdim.y + threadidx.y
    if c >= w or r >= h:
        return
    # EXERCISE grayscale_2d: stub c = r = 0
    # EXERCISE grayscale_2d: end
    i = r * w + c
    n = h * w
    out[i] = _grey(x[i], x[i + n], x[i + 2 * n])
# EXERCISE grayscale_2d: end copy


def rgb2grey_pybk2d(x: np.ndarray, tw: int = 16) -> np.ndarray:
    c, h, w = x.shape
    x = x.flatten()
    res = np.full(h * w, 0xAB, dtype=np.uint8)
    blocks = dim3(math.ceil(w / tw), math.ceil(h / tw))
    blk_kernel2d(rgb2grey_bk2d, blocks, dim3(tw, tw), x, res, h, w)
    return res.reshape(h, w)


# --- images -------------------------------------------------------------------------------------

# Where the test image's shapes sit, and the colour of each: (row, col) of a point inside it.
TEST_SHAPES = {
    "red_disc": ((290, 330), (255, 0, 0)),
    "green_square": ((290, 800), (0, 255, 0)),
    "blue_triangle": ((330, 1270), (0, 0, 255)),
    "white_bar": ((600, 800), (255, 255, 255)),
    "black_bar": ((700, 800), (0, 0, 0)),
    "yellow_disc": ((900, 330), (255, 255, 0)),
    "cyan_disc": ((900, 800), (0, 255, 255)),
    "magenta_disc": ((900, 1270), (255, 0, 255)),
}


def test_image(h: int = TEST_H, w: int = TEST_W) -> np.ndarray:
    """The project's own test picture, (h, w, 3) uint8 RGB (default 1066 x 1600, the puppy's size).

    Background: R rises left to right, G rises top to bottom, B falls along the diagonal. On it,
    pure primaries in distinct shapes -- a red disc, a green square, a blue triangle -- then a white
    and a black bar, and yellow, cyan and magenta discs. In grey the red disc is 76, the green square
    149 and the blue triangle 29; a swapped channel order moves those levels and the gradients'
    directions, which is easy to see. Deterministic, made with numpy only (no downloads, no fonts).
    Shapes are placed for the default size and scale with h and w.
    """
    if h < 1 or w < 1:
        raise ValueError(f"test image size must be positive, got {h}x{w}")
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    fy, fx = yy / max(h - 1, 1), xx / max(w - 1, 1)
    img = np.empty((h, w, 3), dtype=np.uint8)
    img[..., 0] = np.round(255 * fx)
    img[..., 1] = np.round(255 * fy)
    img[..., 2] = np.round(255 * (1 - (fx + fy) / 2))
    sy, sx = h / TEST_H, w / TEST_W
    s = min(sy, sx)

    def paint(mask, rgb):
        img[mask] = rgb

    def disc(cy, cx, r):
        return (yy - cy * sy) ** 2 + (xx - cx * sx) ** 2 <= (r * s) ** 2

    paint(disc(290, 330, 170), TEST_SHAPES["red_disc"][1])
    paint((np.abs(yy - 290 * sy) <= 160 * s) & (np.abs(xx - 800 * sx) <= 160 * s), TEST_SHAPES["green_square"][1])
    # Triangle with its apex up: inside when below the apex row-line and within the widening sides.
    top, base, cx = 120 * sy, 460 * sy, 1270 * sx
    half = (yy - top) / max(base - top, 1) * 190 * s
    paint((yy >= top) & (yy <= base) & (np.abs(xx - cx) <= half), TEST_SHAPES["blue_triangle"][1])
    paint((np.abs(yy - 600 * sy) <= 35 * s) & (np.abs(xx - 800 * sx) <= 650 * s), TEST_SHAPES["white_bar"][1])
    paint((np.abs(yy - 700 * sy) <= 35 * s) & (np.abs(xx - 800 * sx) <= 650 * s), TEST_SHAPES["black_bar"][1])
    for name, cx0 in (("yellow_disc", 330), ("cyan_disc", 800), ("magenta_disc", 1270)):
        paint(disc(900, cx0, 110), TEST_SHAPES[name][1])
    return img


def load_image(path) -> tuple[np.ndarray, str]:
    """Read an image file with Pillow as (H, W, 3) uint8 RGB, converting other modes.

    Returns (pixels, note): the note says what was converted ("" for a plain RGB file).
    RGB is taken as is; RGBA and LA drop their alpha; palette (P) images are expanded; grey (L)
    is replicated into R, G and B; other 8-bit modes (1, CMYK, YCbCr, ...) go through Pillow's
    convert("RGB"). A missing file raises FileNotFoundError, an unreadable one ValueError.
    """
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"image file not found: {p}")
    if not p.is_file():
        raise ValueError(f"not a file: {p}")
    try:
        with Image.open(p) as im:
            im.load()
            mode = im.mode
            if mode in ("I", "I;16", "I;16B", "I;16L", "F"):
                raise ValueError(f"{p}: {mode} images (16/32-bit) are not supported; save it as 8-bit RGB or L")
            notes = {
                "RGB": "",
                "RGBA": "RGBA image: alpha channel dropped",
                "LA": "LA (grey + alpha) image: alpha dropped, grey copied to R, G and B",
                "L": "L (grey) image: grey copied to R, G and B",
                "P": "palette (P) image: expanded to RGB through its palette",
            }
            note = notes.get(mode, f"{mode} image: converted to RGB by Pillow")
            if mode == "P" and "transparency" in im.info:
                note += " (transparency dropped)"
                im = im.convert("RGBA")
            rgb = im.convert("RGB") if im.mode != "RGB" else im
            arr = np.asarray(rgb, dtype=np.uint8).copy()
    except UnidentifiedImageError as e:
        raise ValueError(f"cannot read {p} as an image: {e}") from None
    except OSError as e:
        raise ValueError(f"cannot read {p}: {e}") from None
    return arr, note


def output_path(out) -> tuple[Path, str]:
    """Where the grey image goes, checked before anything is computed or written: (path, Pillow format).
    The folder follows harness.base.paths.output_folder, the rule `invoke viz -o` keeps too: under the
    lab's build/ (build/plots, the default's) it is made when the image is written; any other must
    exist and be writable. The name must be one Pillow can write. ValueError naming the rule otherwise."""
    from PIL import Image

    if out is None:
        return DEFAULT_OUT, "PNG"
    p = Path(out)
    if p.is_dir():
        raise ValueError(f"--out {p} is a folder; name the file, e.g. {p / 'grey.png'}")
    fmt = Image.registered_extensions().get(p.suffix.lower())
    if fmt is None or fmt not in Image.SAVE:
        raise ValueError(f"--out {p}: Pillow cannot write a {p.suffix or 'suffix-less'} file; use a .png or .jpg name")
    paths.output_folder(p.parent, f"--out {p}")  # the rule `invoke viz -o` keeps too
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"--out {p} exists and is read-only (nothing was written)")
    return p, fmt


def _same_file(a, b) -> bool:
    """Whether two paths name one file: through a symbolic link, a hard link or `..` alike."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare where each would be
        return Path(a).resolve() == Path(b).resolve()


def save_image(pixels: np.ndarray, path, fmt: str | None = None) -> Path:
    """Write an (H, W) grey or (H, W, 3) RGB image whole (harness.base.files.replace: a temporary name in
    the same folder, then renamed over `path`), so that a failed or interrupted write never leaves half
    a file under the real name. A file replaced keeps its mode; a new one gets a plain open()'s."""
    from PIL import Image

    p = Path(path)
    if fmt is None:
        fmt = Image.registered_extensions().get(p.suffix.lower())
        if fmt is None:
            raise ValueError(f"cannot write {p}: use a .png or .jpg name")
    try:
        image = Image.fromarray(pixels, mode="L" if pixels.ndim == 2 else "RGB")
        p.parent.mkdir(parents=True, exist_ok=True)
        def write(tmp):
            with open(tmp, "wb") as f:
                image.save(f, format=fmt)

        files.replace(p, write, mode=p.stat().st_mode & 0o7777 if p.exists() else None)
    except (ValueError, KeyError, OSError) as e:
        raise ValueError(f"cannot write {p}: {e}") from None
    return p


def cli(args: list[str], variant: str | None = None, image: str | None = None, out: str | None = None,
        cpu: bool | None = None) -> int:
    """`invoke run grayscale [--image in.png] [--out out.png] [--variant V]`.

    Without --image the generated test picture is used, and saved beside the output as *_input.png so
    the two can be compared, unless a file of that name exists (a file the command did not name is
    never replaced). Everything that can be refused is refused before anything is computed or written;
    replacing the named --out is said. Prints what was converted, then a result line; returns 0 when
    the GPU's bytes equal the reference, 1 otherwise.
    """
    if args:
        raise ValueError(f"grayscale takes --image/--out/--variant, not extra arguments: {' '.join(args)}")
    variant_given = variant is not None
    variant = check_variant(variant or DEFAULT_VARIANT)
    out_path, fmt = output_path(out)
    if image is not None and _same_file(image, out_path):
        raise ValueError(f"--out {out_path} is the input image {image} (the same file); the grey image would "
                         "replace it: name another --out (nothing was written)")
    if image is None:
        hwc = test_image()
    else:
        hwc, note = load_image(image)
        if note:
            print(f"{image}: {note}")
    x = planar(hwc)
    from . import gpu_here

    if cpu is None:
        cpu = not gpu_here()[0]
    if cpu:
        return _cli_on_cpu(x, out_path, variant_given, None if image is not None else hwc)
    grey = rgb2grey(x, variant)
    ok, bad = check(grey, reference(x))
    replaced = out_path.exists()
    saved = save_image(grey, out_path, fmt)
    if replaced:
        print(f"replaced the existing {saved}")
    if image is None:
        _save_test_picture(hwc, out_path)
    print(f"result program=grayscale variant={variant} h={grey.shape[0]} w={grey.shape[1]} "
          f"mismatches={bad} check={'pass' if ok else 'fail'} out={saved}")
    return 0 if ok else 1


def _save_test_picture(hwc: np.ndarray, out_path: Path) -> None:
    """The generated test picture beside the grey one (<out>_input.png), so that the two can be compared,
    unless a file of that name exists: a file the command did not name is never replaced."""
    src = out_path.with_name(out_path.stem + "_input.png")
    if src.exists():
        print(f"no --image given: used the generated {TEST_H}x{TEST_W} test picture (not saved: {src} exists, "
              "and a file the command did not name is not replaced)")
    else:
        save_image(hwc, src, "PNG")
        print(f"no --image given: used the generated {TEST_H}x{TEST_W} test picture (saved as {src})")


# --- without a GPU ------------------------------------------------------------------------------

CPU_SAMPLE = 4096  # pixels the lecture's pixel loop recomputes to check the numpy result on the CPU


def grey_on_cpu(x: np.ndarray, sample: int = CPU_SAMPLE, seed: int = 0) -> tuple[np.ndarray, int, int]:
    """The grey image computed on the CPU by `reference` (numpy, float32 rounded at every step: the
    GPU's bytes), checked against the lecture's pixel loop (`_grey`) on `sample` random pixels.
    Returns (grey, pixels checked, mismatches)."""
    x = check_planar(x)
    grey = reference(x)
    n = grey.size
    if n == 0:
        return grey, 0, 0
    idx = np.random.default_rng(seed).choice(n, size=min(sample, n), replace=False)
    flat, r, g, b = grey.ravel(), x[0].ravel(), x[1].ravel(), x[2].ravel()
    bad = sum(int(flat[i]) != _grey(r[i], g[i], b[i]) for i in idx)
    return grey, len(idx), bad


def _cli_on_cpu(x: np.ndarray, out_path: Path, variant_given: bool, test_picture: np.ndarray | None = None) -> int:
    from . import cpu_label

    grey, checked, bad = grey_on_cpu(x)
    saved = save_image(grey, out_path)
    if test_picture is not None:  # as on the GPU: the colour picture beside its grey image
        _save_test_picture(test_picture, out_path)
    print(cpu_label("the numpy reference (the same float32 bytes the kernels write)")
          + ("; the --variant kernels need a GPU" if variant_given else ""))
    print(f"result program=grayscale variant=cpu_reference h={grey.shape[0]} w={grey.shape[1]} device=cpu "
          f"sampled={checked} mismatches={bad} check={'pass' if bad == 0 else 'fail'} out={saved}")
    return 0 if bad == 0 else 1


# --- the executable -----------------------------------------------------------------------------

def parse_output(text: str):
    """build/bin/grayscale's result lines as a DataFrame (numbers converted)."""
    return results.parse_output(text, "grayscale")


def run(*args, timeout: float = 300):
    """Run build/bin/grayscale with args (e.g. "--variant", "all", ...) and parse its result lines.
    A failed check is exit status 1 and raises ProgramError."""
    return results.run("grayscale", *args, timeout=timeout)


# --- benchmarks ---------------------------------------------------------------------------------

def bench_cases(quick: bool = False):
    """16384 x 16384 for every variant against the cudaMemcpy D2D ceiling, 4 bytes a pixel
    (3 read, 1 written). The target, 0.90 of memcpy, is for 03_vectorized: one pass over the bytes at copy speed."""
    from harness.measuring import bench

    h = w = 4096 if quick else 16384
    n = h * w
    return [bench.BenchCase("grayscale", v, f"{h}x{w}", "harness.programs.grayscale:bench_setup", "GB/s", 4.0 * n,
                            "memcpy", target=0.90 if v == "03_vectorized" and not quick else None, quick=True,
                            bytes=4.0 * n, flops=5.0 * n,  # 3 multiplies + 2 adds a pixel
                            note="4 bytes/pixel (3 read + 1 written)", kwargs={"variant": v, "h": h, "w": w})
            for v in library.read_table(PROGRAM)]


def bench_setup(variant: str, h: int, w: int):
    """harness.measuring.timing's target for a bench case: random planes on the device, the launch marshalled."""
    from harness.calling import cudart
    from harness.measuring import bench

    n = h * w
    stride = aligned_stride(h, w)
    x = cudart.DeviceBuffer(3 * stride)
    o = cudart.DeviceBuffer(n)
    try:
        rng = np.random.default_rng(0)
        for p in range(3):  # random bytes, plane by plane to bound host memory
            plane = rng.integers(0, 256, size=n, dtype=np.uint8)
            cudart.memcpy_htod(cudart.ffi.cast("char *", x.ptr) + p * stride, plane)
    except BaseException:
        x.close()
        o.close()
        raise

    def close():
        x.close()
        o.close()

    check_variant(variant)
    # Marshalled once here: the timed launch is the cffi call alone (library.prepare).
    launch = _lib().prepare("grayscale_device", variant, h, w, stride, x.ptr, o.ptr, library.STREAM)
    return bench.Prepared(launch, close)


# --- hooks for `invoke profile` and `invoke sanitize` (small, ragged sizes; see harness/profiling/profile.py) ---
def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", variant or library.read_table(PROGRAM)[-1], "--reps", "1", "67", "93"]


# --- the exercises this program offers (their problems: grayscale_exercises.py) -----------------------------

EXERCISES = (
    Exercise(
        "grayscale", origin="GPU MODE lecture 3, exercise 1 (RGB to grayscale)",
        writes="the 1-D kernel body: the pixel index, the bounds check, the weighted sum of the three planes",
        tracks=("python", "cuda"), problem=_ex.Grayscale(), py_entry="rgb2grey_bk",
        cu_source="cuda/grayscale/grayscale.cu", cu_kernels=("grayscale_01_1d",), glue="exercise_grayscale.cu",
        cu_includes="#include <cstdint>\n",
        hints=("The planes are stored one after the other: red at x[i], green at x[i + n] (Python) or "
             "x[i + stride] (CUDA), blue two planes on.",
             "There are more threads than pixels in the last block: guard with i < n.",
             "The weights are in _grey / grey_u8 already, rounded exactly as numpy rounds them: call them."),
        block="256 threads a block, cdiv(n, 256) blocks",
    ),
    Exercise(
        "grayscale_2d", origin="GPU MODE lecture 3 (the 2-D grid of the grayscale kernel)",
        writes="the 2-D mapping: row and column from block and thread, the bounds on both edges",
        tracks=("python", "cuda"), problem=_ex.Grayscale2D(), py_entry="rgb2grey_bk2d",
        cu_source="cuda/grayscale/grayscale.cu", cu_kernels=("grayscale_02_2d",), glue="exercise_grayscale_2d.cu",
        cu_includes="#include <cstdint>\n",
        hints=("x runs along the width (columns), y along the height (rows).",
             "Both edges overhang: blocks on the right have columns >= w, blocks at the bottom rows >= h.",
             "Column c and row r: c = blockIdx.x * blockDim.x + threadIdx.x, r from the .y parts; "
             "return when c >= w or r >= h."),
        block="16x16 blocks over (w, h)",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='grayscale',
    summary='a kernel on an image: 1-D and 2-D grids',
    follows='[GPU MODE lecture 3](https://github.com/gpu-mode/lectures/blob/main/lecture_003/pmpp.ipynb)',
    order=50,
    readme_picture='[grey](cuda/grayscale/grey_cpu.png)',
    variants=True,
    profile_args=profile_args,
    bench_cases=bench_cases,
    run=run,
    parse_output=parse_output,
    reference=reference,
    cli=cli,
    cli_options=('variant', 'image', 'out', 'cpu'),
    tour=Tour('RGB to grey, one thread per pixel', drawn=('plots/grayscale_input.png', 'plots/grayscale.png'), committed=('cuda/grayscale/grey_cpu.png',), labels=('the test picture', 'its grey image')),
    exercises=EXERCISES,
)

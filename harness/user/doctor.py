"""`invoke doctor`: one line per item, OK or missing, and the fix for each missing item."""

from __future__ import annotations

import importlib
import re
import textwrap
from dataclasses import dataclass

from harness.base import console, errors
from harness.compile import toolchain
from harness.measuring import timing
from harness.profiling import profile


@dataclass
class Check:
    item: str
    ok: bool
    detail: str
    fix: str = ""
    optional: bool = False  # missing optional items warn; missing required ones fail


PACKAGES = ["invoke", "pytest", "numpy", "pandas", "seaborn", "cffi", "PIL", "rich"]


def lines(rows: list[Check], width: int | None = None) -> list[str]:
    """One entry per item, `OK`/`WARN`/`MISSING`, the item, what was found, and `-> fix`, wrapped
    under the detail column so that an 80-column terminal or a pipe shows every word."""

    width = width or console.width()
    pad = 8 + 20
    out = []
    for r in rows:
        mark = "OK" if r.ok else ("WARN" if r.optional else "MISSING")
        text = r.detail + ("" if r.ok or not r.fix else f"  -> {r.fix}")
        body = textwrap.wrap(text, width=max(30, width - pad), break_long_words=False, break_on_hyphens=False) or [""]
        out.append(f"{mark:<8}{r.item:<20}{body[0]}")
        out += [" " * pad + b for b in body[1:]]
    return out


def check_tools() -> list[Check]:
    out = []
    nvcc = toolchain.find("nvcc")
    out.append(Check("nvcc", nvcc.found, f"{nvcc.path} ({nvcc.version}, via {nvcc.how})" if nvcc.found else "not found",
                     errors.TOOL_FIXES["nvcc"]))
    home = toolchain.cuda_home() if nvcc.found else None
    if home is not None and any(c.isspace() for c in str(home)):
        # The build quotes nvcc itself, but make splits the file lists it looks for under the install folder
        # at spaces: the pip wheel's link folder and cuBLAS are then not found.
        out.append(Check("CUDA folder", False, f"{home} has a space in its path: make finds neither cuBLAS nor a pip "
                         "wheel's libraries under it", "install the toolkit (or the virtual environment holding its "
                         "wheels) in a folder whose path has no space, or link it there (ln -s) and put that on PATH",
                         optional=True))
    gcc = toolchain.find("gcc")
    out.append(Check("gcc", gcc.found, f"{gcc.path} ({gcc.version}; nvcc's host compiler)" if gcc.found else
                     "not on PATH, where nvcc looks for its host compiler",
                     "install gcc (e.g. `apt install build-essential`) or put its folder on PATH"))
    cublas = toolchain.have_cublas()
    out.append(Check("cuBLAS", cublas, f"found under {toolchain.cuda_home()}" if cublas else "not found beside nvcc",
                     "install the CUDA toolkit's cuBLAS (libcublas-dev): the matmul baseline and its tests are skipped",
                     optional=True))
    for name, fix in [
        ("ncu", "install Nsight Compute (part of the CUDA toolkit) or set $NCU"),
        ("nsys", "install Nsight Systems or set $NSYS"),
        ("compute-sanitizer", errors.TOOL_FIXES["compute-sanitizer"]),
    ]:
        t = toolchain.find(name)
        detail = f"{t.path} ({t.version}, via {t.how})" if t.found else "not found"
        if name == "nsys" and t.note and profile.find_libdw() is not None:
            t = toolchain.Tool(t.name, t.path, t.version, t.how)  # invoke profile puts this libdw on the path
            detail += f"; libdw.so.1 from {profile.find_libdw()}"
        ok = t.found and not t.note
        if t.note:
            detail += f"; {t.note}"
            fix = ("put libdw.so.1 on LD_LIBRARY_PATH (Debian: `apt install libdw1`; or unpack libdw1 and "
                   "libelf1 .debs and export LD_LIBRARY_PATH to their lib folder)")
        out.append(Check(name, ok, detail, fix, optional=True))
    access, why = profile.counter_access()
    have_ncu = toolchain.find("ncu").found
    if not have_ncu:
        access, why = False, "not checked: ncu is not installed (see ncu above)"
    out.append(Check("GPU counters (ncu)", bool(access), why,
                     "install Nsight Compute first" if not have_ncu else
                     "run as root, or set the driver option NVreg_RestrictProfilingToAdminUsers=0 (`options nvidia "
                     "NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d/, then reload the driver)",
                     optional=True))
    out.append(Check("nvprof", False, "removed in CUDA 13, and never supported compute capability >= 7.5",
                     "use `invoke profile <prog> --tool nsys` (or `nsys nvprof`)", optional=True))
    return out


# --- the driver against the toolkit ----------------------------------------------------------------
# nvcc 13.0's programs need a driver that supports CUDA 13.0 (580 or newer); an older one makes every
# program fail with "CUDA driver version is insufficient". doctor says so in one line with the two ways
# out, `invoke build` refuses with the same line, and so do NoGPUError and the executables
# (harness/base/errors.py DRIVER_TOO_OLD is the sentence).

def _version_number(text: str | None) -> int:
    """'13.0.88' or '12.2' -> 13000 / 12020 (cudaDriverGetVersion's form); 0 when unreadable."""
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return int(m.group(1)) * 1000 + int(m.group(2)) * 10 if m else 0


def nvidia_smi_cuda_version(text: str) -> int:
    """The 'CUDA Version: 12.2' of nvidia-smi's header as 12020; 0 when absent."""
    m = re.search(r"CUDA Version:\s*(\d+\.\d+)", text)
    return _version_number(m.group(1)) if m else 0


def _nvidia_smi_text() -> str:
    return toolchain.nvidia_smi()


def driver_cuda_version() -> tuple[int, str]:
    """(the CUDA version the driver supports, as 12020, and where it was read): cudaDriverGetVersion
    through harness/calling/cudart.py, else nvidia-smi's header. (0, why) when neither knows (no driver)."""
    from harness.calling import cudart  # deferred: cffi, which the doctor reports missing rather than fail on

    try:
        v = cudart.driver_version()
        if v > 0:
            return v, "cudaDriverGetVersion"
    except Exception:  # no libcudart here: nvidia-smi may still know
        pass
    v = nvidia_smi_cuda_version(_nvidia_smi_text())
    return (v, "nvidia-smi") if v else (0, "no NVIDIA driver found")


def toolkit_cuda_version() -> int:
    """The CUDA version programs are built with: nvcc's, else the CUDA runtime's; 0 when neither is here."""
    nvcc = toolchain.find("nvcc")
    v = _version_number(nvcc.version) if nvcc.found else 0
    if v:
        return v
    try:
        from harness.calling import cudart  # deferred: cffi, reported missing rather than failed on

        return cudart.runtime_version()
    except Exception:
        return 0


def driver_problem() -> str | None:
    """DRIVER_TOO_OLD's sentence when a driver is here and older than the toolkit, else None (no
    driver at all is not this problem: building needs none)."""
    drv, _ = driver_cuda_version()
    return errors.driver_too_old_line(drv, toolkit_cuda_version())


def require_driver() -> None:
    """`invoke build`'s first step: refuse, with doctor's line, to build programs that cannot start."""
    why = driver_problem()
    if why:
        raise errors.DriverTooOldError(why)


def check_driver() -> Check:
    drv, source = driver_cuda_version()
    tk = toolkit_cuda_version()
    why = errors.driver_too_old_line(drv, tk)
    vs = lambda v: f"{v // 1000}.{(v % 1000) // 10}" if v else "none"  # noqa: E731
    if why:
        return Check("driver", False, why)
    if drv == 0:
        return Check("driver", False, f"{source}; the toolkit is CUDA {vs(tk)}",
                     "install an NVIDIA driver that supports the toolkit's CUDA (GPU programs need one; building "
                     "does not)", optional=True)
    return Check("driver", True, f"supports CUDA {vs(drv)} (via {source}); the toolkit is CUDA {vs(tk)}")


def check_gpu() -> list[Check]:
    from harness.calling import cudart  # deferred: cffi, which the doctor reports missing rather than fail on

    out = [check_driver()]
    try:
        lib = cudart.lib()
    except errors.ToolMissing as e:
        return out + [Check("libcudart", False, "libcudart.so not found", e.fix)]
    except Exception as e:
        return out + [Check("libcudart", False, str(e), errors.TOOL_FIXES["libcudart"])]
    del lib
    ok, why = cudart.gpu_available()
    if ok:
        s = cudart.summary()
        out.append(Check("GPU", True, f"{s.name}, compute capability {s.cc}, {s.sm_count} SMs, {s.memory_gib:.0f} GiB"))
        out += tensor_core_checks(s.cc)
    else:
        out.append(Check("GPU", False, why, "GPU tests and benchmarks need a CUDA device; everything else works",
                         optional=True))
    return out


def tensor_core_checks(cc: str) -> list[Check]:
    """Which tensor-core rungs this GPU can run: mma.sync bf16 needs sm_80, wgmma + TMA need sm_90a
    (compute capability 9.0 exactly, and a build with ARCH=90, which compiles gemm_tc, attention and
    transformer_block for sm_90a)."""
    try:
        major, minor = (int(x) for x in str(cc).split(".")[:2])
    except ValueError:
        return []
    return [
        Check("tensor cores: mma.sync bf16 (gemm_tc 01, 02)", (major, minor) >= (8, 0),
              f"compute capability {cc}" + ("" if (major, minor) >= (8, 0) else ": needs sm_80 or newer"),
              "01_wmma and 02_mma_sync need an Ampere or newer GPU; their tests skip", optional=True),
        Check("tensor cores: wgmma + TMA (gemm_tc 03-08, attention 05)", (major, minor) == (9, 0),
              f"compute capability {cc}" + ("" if (major, minor) == (9, 0) else ": needs sm_90a (Hopper, 9.0)"),
              "gemm_tc's 03_wgmma ... 08_wgmma_tma_store and attention's 05_flash_wgmma need a Hopper GPU "
              "(sm_90a code runs on 9.0 only); they report 'needs sm_90a', their tests skip, and bf16 "
              "attention runs 03_flash_bf16", optional=True),
    ]


def check_packages() -> list[Check]:
    out = []
    for name in PACKAGES:
        try:
            m = importlib.import_module(name)
            out.append(Check(f"python:{name}", True, getattr(m, "__version__", "installed")))
        except ImportError:
            out.append(Check(f"python:{name}", False, "not importable", "pip install -e '.[dev]'"))
    # The timing engine (NVBench) is looked up without importing it: its import loads the CUDA bindings.

    v = timing.engine_version()
    out.append(Check("python:cuda-bench", v is not None, f"{v} (NVBench, the timing engine)" if v else "not installed",
                     "" if v else errors.TOOL_FIXES["cuda-bench"]))
    try:
        import pynvml  # noqa: F401  (nvidia-ml-py: the clocks, power and temperature beside each bench row)

        out.append(Check("python:nvidia-ml-py", True, "installed"))
    except ImportError:
        out.append(Check("python:nvidia-ml-py", False, "not importable", "pip install -e '.[dev]'"))
    for name in ["hypothesis", "ruff", "IPython"]:
        try:
            m = importlib.import_module(name)
            out.append(Check(f"python:{name}", True, getattr(m, "__version__", "installed"), optional=True))
        except ImportError:
            out.append(Check(f"python:{name}", False, "not importable (optional)", "pip install -e '.[dev]'",
                             optional=True))
    return out


def check_programs() -> list[Check]:
    """Each program's own line, where its record offers one (collectives: NCCL's version in its library
    and peer access between the visible GPUs)."""
    from harness import programs  # deferred: cffi (cudart), reported missing rather than failed on

    out = []
    for prog in programs.names():
        fn = programs.hook(prog, "doctor")
        if fn is not None:
            ok, detail, fix = fn()
            out.append(Check(f"{prog} program", ok, detail, fix, optional=True))
    return out


def check_all() -> list[Check]:
    return check_tools() + check_gpu() + check_packages() + check_programs()

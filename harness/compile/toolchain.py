"""Find the tools cudalab drives: nvcc, gcc, ncu, nsys, compute-sanitizer, and libcudart.

Search order: PATH, then the tool's own environment variable ($NVCC, $NCU, $NSYS,
$COMPUTE_SANITIZER), then $CUDA_HOME/bin, then the usual install folders, and for nvcc the
NVIDIA pip wheel (nvidia-cuda-nvcc installs it as site-packages/nvidia/cu13/bin/nvcc). An nvcc found
through a symbolic link is used at the file the link points to. gcc is looked for on PATH only: it is
the host compiler nvcc runs.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.base.errors import ToolMissing


@dataclass(frozen=True)
class Tool:
    name: str
    path: str | None
    version: str | None = None
    how: str = ""  # where it was found ("PATH", "$CUDA_HOME", "pip wheel", ...)
    note: str = ""  # extra state, e.g. nsys's importer library is missing

    @property
    def found(self) -> bool:
        return self.path is not None


def _site_dirs() -> list[str]:
    dirs = list(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        dirs.append(user)
    dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return list(dict.fromkeys(dirs))


def _wheel_roots() -> list[Path]:
    """CUDA roots installed by NVIDIA's pip wheels (13.x: nvidia/cu13; 12.x: nvidia/cuda_nvcc)."""
    roots = []
    for d in _site_dirs():
        for sub in ("nvidia/cu13", "nvidia/cuda_nvcc"):
            p = Path(d) / sub
            if p.is_dir():
                roots.append(p)
    return roots


def cuda_home() -> Path | None:
    """The CUDA installation nvcc belongs to."""
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env and Path(env).is_dir():
        return Path(env)
    nvcc = find("nvcc")
    if nvcc.found:
        return _nvcc_top(nvcc.path)
    return None


@functools.cache
def _nvcc_top(nvcc: str) -> Path:
    """nvcc's own idea of its install root: `nvcc --dryrun` prints `TOP=<bin>/..`. This sees
    through wrapper scripts such as a /usr/local/bin/nvcc that execs the real one."""
    try:
        out = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=30)
        # `#$ TOP=<folder>` is a line of its own; the folder may hold spaces.
        m = re.search(r"^#\$ TOP=(.+?)\s*$", out.stdout + out.stderr, re.M) or re.search(r"TOP=(\S+)", out.stdout + out.stderr)
        if m:
            return Path(m.group(1)).resolve()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return Path(nvcc).resolve().parent.parent


_USUAL = {
    "nvcc": ["/usr/local/cuda/bin/nvcc", "/usr/local/cuda-*/bin/nvcc", "/opt/cuda/bin/nvcc"],
    "ncu": ["/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/NVIDIA-Nsight-Compute*/ncu"],
    "nsys": [
        "/usr/local/cuda/bin/nsys",
        "/opt/nvidia/nsight-systems/*/bin/nsys",
        "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
        # Nsight Compute installs carry an nsys of their own here.
        "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    ],
    "compute-sanitizer": [
        "/usr/local/cuda/bin/compute-sanitizer",
        "/usr/local/cuda/compute-sanitizer/compute-sanitizer",
        "/usr/local/cuda-*/bin/compute-sanitizer",
        "/opt/nvidia/compute-sanitizer/compute-sanitizer",
    ],
}

_ENV = {"nvcc": "NVCC", "ncu": "NCU", "nsys": "NSYS", "compute-sanitizer": "COMPUTE_SANITIZER"}


def _candidates(name: str):
    if name == "gcc":
        # The one the build uses, and only that: nvcc runs the host compiler `gcc` it finds on PATH (so does
        # make for the CPU twins, unless $CC names another). A gcc elsewhere on the disk is no help to it.
        p = shutil.which("gcc")
        if p:
            yield p, "PATH"
        return
    p = shutil.which(name)
    if p:
        yield p, "PATH"
    env = os.environ.get(_ENV.get(name, ""), "")
    if env:
        yield (shutil.which(env) or env), f"${_ENV[name]}"
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        yield str(Path(home) / "bin" / name), "$CUDA_HOME"
    if name == "nvcc":
        for root in _wheel_roots():
            yield str(root / "bin" / "nvcc"), "pip wheel"
    for pattern in _USUAL.get(name, []):
        # Newest version first when several are installed side by side.
        for hit in sorted(glob.glob(pattern), reverse=True):
            yield hit, "install folder"


def _version(path: str, name: str) -> str | None:
    flag = "--version"
    try:
        out = subprocess.run([path, flag], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout + out.stderr
    pats = {
        "nvcc": r"release ([\d.]+), V([\d.]+)",
        "gcc": r"\) ([\d.]+)",
        "ncu": r"Version ([\d.]+)",
        "nsys": r"version ([\d.]+)",
        "compute-sanitizer": r"Version ([\d.]+)",
    }
    m = re.search(pats.get(name, r"([\d]+\.[\d.]+)"), text)
    if not m:
        return text.strip().splitlines()[0] if text.strip() else None
    return m.group(m.lastindex or 1)


# Where each tool is looked for, in the words of ToolMissing's message.
_SEARCHED = {"nvcc": "PATH, $NVCC, $CUDA_HOME/bin, NVIDIA's pip wheel, /usr/local/cuda*",
             "compute-sanitizer": "PATH, $COMPUTE_SANITIZER, $CUDA_HOME/bin, /usr/local/cuda*, /opt/nvidia"}


def require(name: str) -> Tool:
    """The tool, found; else ToolMissing naming what was searched and the fix."""
    tool = find(name)
    if not tool.found:
        raise ToolMissing(name, "searched " + _SEARCHED[name] if name in _SEARCHED else "")
    return tool


@functools.cache
def find(name: str) -> Tool:
    """Locate one tool; `Tool.path` is None when it is nowhere to be found."""
    for path, how in _candidates(name):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            if name == "nvcc" and os.path.islink(path):
                # nvcc finds its headers and libraries (nvcc.profile) beside the file it was started as: through a
                # link it looks beside the link and every compile fails with "cuda_runtime.h: No such file".
                path, how = os.path.realpath(path), f"{how}: {path} links to it"
            return Tool(name, path, _version(path, name), how, _note(name, path))
    return Tool(name, None)


def _note(name: str, path: str) -> str:
    if name == "nsys":
        lib = nsys_importer_missing()
        if lib:
            return f"its report importer needs {lib} on LD_LIBRARY_PATH"
    return ""


def nsys_importer_missing() -> str | None:
    """nsys writes a .qdstrm and converts it with QdstrmImporter, which links libdw.so.1."""
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") + ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]:
        if d and (Path(d) / "libdw.so.1").exists():
            return None
    return "libdw.so.1"


def find_libcudart() -> str | None:
    """Path of libcudart.so for harness.calling.cudart (the same runtime nvcc links against)."""
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    roots = []
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        roots.append(Path(home))
    home = cuda_home()
    if home:
        roots.append(home)
    roots += _wheel_roots() + [Path("/usr/local/cuda")]
    for root in roots:
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            for n in names:
                p = root / sub / n
                if p.exists():
                    return str(p)
    for d in _site_dirs():
        hits = glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcudart.so*"))
        if hits:
            return sorted(hits)[0]
    return None


def have_cublas() -> bool:
    """cuBLAS is used when its header and library sit beside nvcc (what the Makefile checks too;
    the pip wheel nvidia-cublas has only the versioned libcublas.so.13)."""
    home = cuda_home()
    if home is None:
        return False
    header = (home / "include" / "cublas_v2.h").exists()
    lib = any(glob.glob(str(home / pat)) for pat in ("lib64/libcublas.so*", "lib/libcublas.so*",
                                                     "targets/*/lib/libcublas.so*"))
    return header and lib


def link_flags() -> list[str]:
    """Extra nvcc link flags for this toolkit: NVIDIA's pip wheels keep libcudadevrt.a and
    libcudart_static.a in <root>/lib, but their nvcc.profile searches only targets/x86_64-linux/lib,
    which the wheels lack (the Makefile does the same)."""
    home = cuda_home()
    if home is not None and (home / "lib" / "libcudadevrt.a").exists():
        return [f"-L{home / 'lib'}"]
    return []


@functools.cache
def gpu_archs(nvcc: str) -> tuple[str, ...] | None:
    """The compute capabilities this nvcc compiles for, both to SASS (`--list-gpu-code`: sm_90, ...)
    and to PTX (`--list-gpu-arch`: compute_90, ...), in numeric order: ("75", "80", ..., "90a", ...).
    None when nvcc cannot list them (older than CUDA 11)."""
    found = []
    for flag, prefix in (("--list-gpu-code", "sm_"), ("--list-gpu-arch", "compute_")):
        try:
            out = subprocess.run([nvcc, flag], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        names = {w[len(prefix):] for w in out.stdout.split() if w.startswith(prefix)}
        if out.returncode != 0 or not names:
            return None
        found.append(names)
    both = found[0] & found[1]
    return tuple(sorted(both, key=lambda a: (int(re.match(r"\d+", a).group()), a)))


def tools() -> dict[str, Tool]:
    return {n: find(n) for n in ("nvcc", "gcc", "ncu", "nsys", "compute-sanitizer")}


# --- the GPU as the driver lists it ----------------------------------------------------------------------
# nvidia-smi asks the driver without making a CUDA context, so a parent (the test runner, the bench, the
# build) can learn the GPUs without holding one beside its children's. Every question the lab asks it goes
# through these two functions.

def nvidia_smi(*args: str, timeout: float = 30) -> str:
    """nvidia-smi's standard output for `args`; "" when it is not installed, fails (no driver, no GPU)
    or hangs past `timeout` seconds: callers treat "" as "the driver lists no GPU"."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout if out.returncode == 0 else ""


def gpu_query(*fields: str, timeout: float = 30) -> list[dict[str, str]]:
    """One dict per GPU the driver lists, keyed by the `--query-gpu` fields asked for
    (gpu_query("name", "compute_cap") -> [{"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"}]);
    [] without nvidia-smi or a GPU."""
    if not fields:
        raise ValueError("gpu_query needs at least one --query-gpu field, e.g. 'name'")
    text = nvidia_smi(f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", timeout=timeout)
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(fields):  # a name never holds a comma; a line that does not split is not a GPU's
            rows.append(dict(zip(fields, values)))
    return rows

"""Where the lab's files are: the one definition of the repository root and of the folders under it
that more than one layer reads or writes. Every other module imports these names; none builds them
again from its own `__file__`."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CUDA_DIR = ROOT / "cuda"
BUILD = ROOT / "build"
BUILD_BENCH = BUILD / "bench"  # `invoke bench`'s CSVs, one per run (gitignored)
PLOTS = BUILD / "plots"
RESULTS_DIR = ROOT / "bench" / "results"  # the committed reference runs, notes and tuning caches, per GPU


def gpu_slug(name: str) -> str:
    """A device name as a file-name word: "NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3"."""
    s = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-") or "unknown-gpu"


def gpu_folder(device: str) -> str:
    """The folder under bench/results/ for a device: its model, the first word with a digit in it
    ("NVIDIA H100 80GB HBM3" -> "h100"), so that the reference runs, notes and tuning results of one
    GPU model sit together whatever its memory variant."""
    name = re.sub(r"^nvidia\s+", "", device.strip(), flags=re.I)
    for tok in name.split():
        if re.search(r"\d", tok):
            return re.sub(r"[^a-z0-9]+", "-", tok.lower()).strip("-")
    return gpu_slug(device)


def output_folder(folder, what: str) -> Path:
    """The one rule for a folder a command writes its outputs into (`invoke run grayscale --out`'s
    folder, `invoke viz -o`), checked before anything is computed: a folder under the lab's build/ is
    made when written; any other must already exist and be writable, so that a mistyped path never
    leaves a trail of new folders. ValueError in one line, starting with `what`, otherwise."""
    p = Path(folder)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{what}: {p} is a file, not a folder (nothing was written)")
    if p.resolve() == BUILD.resolve() or BUILD.resolve() in p.resolve().parents:
        return p
    if not p.is_dir():
        raise ValueError(f"{what}: the folder {p} does not exist (create it first; nothing was written)")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ValueError(f"{what}: the folder {p} is not writable (nothing was written)")
    return p

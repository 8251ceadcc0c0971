"""The fault build, for the tests that show a checker rejecting a wrong answer.

`make FAULTS=1 build/faults/...` compiles a program with -DCUDALAB_FAULTS (cuda/common/faults.cuh)
into build/faults/, beside the product build: only that twin has the deliberately wrong answers
(gemm_tc's dropped K tiles, attention's sabotaged variants, square's --skip-every and --oob and its
slowed 03_vectorized, collectives' stalled rank). The harness can load or run it (library.load(prog, faults=True),
runner.run(prog, ..., faults=True)) but never names a fault: the names and switches live here.
"""

from __future__ import annotations

import contextlib
import functools

from harness.calling import library
from harness.compile import build

# The variants only the fault build of attention (and of transformer_block, which compiles the same
# kernels) knows: 02_flash without its last key tile, 03_flash_bf16 without it, and 03_flash_bf16 with
# the diagonal tiles unmasked; the two backward rungs with dS = P ∘ dP (the rowsum(dO ∘ O) term dropped).
ATTENTION_FAULTS = ("flash_skip_last_tile", "flash_bf16_skip_last_tile", "flash_bf16_no_causal_mask",
                    "flash_bwd_no_di", "flash_bwd_bf16_no_di")
ATTENTION_BF16_FAULTS = ("flash_bf16_skip_last_tile", "flash_bf16_no_causal_mask")

# The symbol each program's fault build adds (the product has none of them), and where: "lib" in
# lib<prog>.so's dynamic symbols, "exe" in the executable's symbol table.
FAULT_SYMBOLS = {
    "gemm_tc": ("lib", "gemm_tc_set_fault_drop_k_tiles"),
    "collectives": ("lib", "collectives_set_fault_stall_rank"),
    "square": ("exe", "square_int32_test_dev"),
}


# The slowed kernel of the bench's regression gate: while set above 0, every thread of square's
# 03_vectorized (in the fault build's library) sleeps that many nanoseconds first; 01 and 02 are as ever.
SLOWED = {"square": ("lib", "square_set_fault_sleep_ns")}


def target(prog: str, kind: str = "lib") -> str:
    """The make target of the fault build's library ("lib") or executable ("exe") of `prog`."""
    path = build.lib_path(prog, True) if kind == "lib" else build.bin_path(prog, True)
    return str(path.relative_to(build.ROOT))


# Every twin some GPU test loads, with what it loads of it.
TWINS = {"attention": ("lib",), "gemm_tc": ("lib",), "collectives": ("lib",), "square": ("lib", "exe")}


def build_all() -> None:
    """All of TWINS in one make (its -j compiles them side by side, under one hold of the build lock)."""
    build.build([target(prog, k) for prog, kinds in TWINS.items() for k in kinds])


@functools.cache
def build_twin(prog: str, *kinds: str) -> None:
    """Build the fault twin's library and/or executable (default: the library), incrementally and
    under the build lock, as `invoke build` does the product (nvcc only, no GPU); once per process."""
    build.build([target(prog, k) for k in kinds or ("lib",)])


def use_fault_library(monkeypatch, prog: str) -> library.Library:
    """Build lib<prog>.so's fault twin and make library.load(prog) hand it out for the rest of the test:
    every harness.programs function loads its library through library.load when called, so the program
    module then runs the fault build. Returns that library."""
    build_twin(prog)
    real = library.load
    twin = real(prog, faults=True)

    def load(name: str, faults: bool = False) -> library.Library:
        return twin if name == prog else real(name, faults)

    monkeypatch.setattr(library, "load", load)
    return twin


@contextlib.contextmanager
def dropped_k_tiles(lib: library.Library, t: int = 1):
    """Inside the block the fault build of gemm_tc (`lib`) skips the last `t` K tiles of 02_mma_sync
    and 03-08."""
    lib.gemm_tc_set_fault_drop_k_tiles(int(t))
    try:
        yield
    finally:
        lib.gemm_tc_set_fault_drop_k_tiles(0)


@contextlib.contextmanager
def stalled_rank(lib: library.Library, rank: int = 0):
    """Inside the block the fault build of collectives (`lib`) runs its lab all-reduces without `rank`."""
    lib.collectives_set_fault_stall_rank(int(rank))
    try:
        yield
    finally:
        lib.collectives_set_fault_stall_rank(-1)


def slowed_square_setup(variant: str, n: int, sleep_ns: int):
    """A timing target (harness.measuring.timing's "module:function", reached with tests/ on the timing
    child's PYTHONPATH): square's own bench setup, run on the fault build's library with 03_vectorized
    slowed by `sleep_ns` per thread, so that a bench CSV of it holds the product's cases, one made slower."""
    from harness.programs import square

    twin = library.load("square", faults=True)
    twin.square_set_fault_sleep_ns(int(sleep_ns))
    real = library.load
    # square.bench_setup marshals its launch once, through library.load: the twin only for that call.
    library.load = lambda name, faults=False: twin if name == "square" else real(name, faults)
    try:
        return square.bench_setup(variant, n)
    finally:
        library.load = real

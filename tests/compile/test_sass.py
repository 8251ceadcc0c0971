"""harness.compile.sass, the one SASS parser, on real cuobjdump output (tests/fixtures: the main loop of 11_splitk_tail's
uneven twin from two builds that ran on an H100; NOTES-matmul has their timings), and on the built library when cuobjdump
is here. No GPU needed."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest

from conftest import ensure_built
from harness.compile import sass

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _loop(name: str) -> sass.SassLoop:
    text = gzip.open(FIXTURES / f"sass_11_uneven_{name}_h100.txt.gz", "rt").read()
    (fname, instrs), = sass.sass_functions(text).items()
    assert fname.startswith("_Z16sgemm_10_regtile")
    return max(sass.sass_loops(instrs), key=lambda lp: lp.total)


def test_the_two_builds_have_the_same_loop_and_different_banks():
    """Same instructions (4096 FFMA per 128x256x32 k-tile of 16x8 per thread), different colouring: the build
    that ran every tile 8% slower has 3337 FFMAs reading two sources from one bank, the other 616."""
    clean, banked = _loop("clean"), _loop("banked")
    assert clean.fp32 == banked.fp32 == 4096
    assert abs(clean.total - banked.total) < 20
    assert sass.ffma_same_bank(clean.instrs) == (4096, 616)
    assert sass.ffma_same_bank(banked.instrs) == (4096, 3337)


@pytest.mark.parametrize("args,pair", [
    ("R0, R2, R4, R6", True),                 # three even registers
    ("R0, R2, R5, R7", True),                 # R5 and R7 share the odd bank
    ("R0, R2, R5, R8.reuse", False),          # one read from each bank
    ("R0, R2.reuse, R4, R6", True),           # R4, R6 still share the even bank
    ("R0, R2.reuse, R4.reuse, R6", False),    # one read from the file
    ("R0, R3, R4, RZ", False),                # RZ is not a register read
    ("R0, -R2, |R4|, R7", True),              # negated and absolute sources are reads too
    ("R0, R2, 0.5, R4", True),                # an immediate is not
    ("R0, R1, c[0x0][0x10], R3", True),       # nor is a constant
])
def test_bank_pairs_by_hand(args, pair):
    assert sass.ffma_same_bank([(0, "FFMA", args)]) == (1, int(pair))
    assert sass.ffma_same_bank([(0, "FADD", args)]) == (0, 0)


def test_loops_are_backward_branches():
    instrs = [(0x10, "MOV", "R1, R2"), (0x20, "FFMA", "R1, R2, R3, R1"), (0x30, "BRA", "0x20"),
              (0x40, "BRA", "0x60"), (0x50, "EXIT", "")]
    (loop,) = sass.sass_loops(instrs)
    assert (loop.start, loop.end, loop.opcodes, loop.fp32) == (0x20, 0x30, ("FFMA", "BRA"), 1)


# The three 11_splitk_tail instantiations the bench runs (128x256x32, 16x8 a thread, 3 stages, 16-byte path,
# conflict-free copies): SPLIT 0 (no cut), 1 (equal slices), 2 (the uneven cut).
KERNELS = {s: f"_Z16sgemm_10_regtileILi128ELi256ELi32ELi64ELi64ELi16ELi8ELi3ELi{s}ELb1ELb1EEv10LadderArgs" for s in (0, 1, 2)}


@pytest.mark.parametrize("split", sorted(KERNELS))
def test_the_built_ladder_kernels_keep_their_banks_apart(split):
    """A guard on ptxas's colouring of the built library's sm_90 code: these loops measured fast with 616-719
    same-bank FFMAs and 8% slow with 3337. An epilogue change can move it (NOTES-matmul saw it move): this says so
    before a GPU does."""
    lib = ensure_built("matmul")
    try:
        text = sass.dump(lib, KERNELS[split])
    except FileNotFoundError as e:  # cuobjdump and nvdisasm come with the CUDA toolkit, beside nvcc
        pytest.skip(str(e))
    except subprocess.CalledProcessError as e:  # the tool, not the kernel: say what it said
        pytest.skip(f"cuobjdump failed: {(e.stderr or '').strip().splitlines()[-1:]}")
    if "arch = sm_90" not in text:
        pytest.skip("the library was built for another architecture; the limit was measured on sm_90 code")
    instrs = sass.sass_functions(text).get(KERNELS[split])
    assert instrs, f"{KERNELS[split]} is not in {lib}"
    loop = max(sass.sass_loops(instrs), key=lambda lp: lp.total)
    total, pairs = sass.ffma_same_bank(loop.instrs)
    assert total == 4096
    assert pairs <= 1000, f"{pairs} of the main loop's FFMAs read two sources from one register bank"

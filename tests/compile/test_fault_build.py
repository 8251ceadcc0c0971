"""The fault build: `make FAULTS=1 build/faults/...` compiles a program with -DCUDALAB_FAULTS
(cuda/common/faults.cuh) beside the product build; only it has the deliberately wrong answers the
tests use (tests/fault_build.py). These run without a GPU: make's dry runs, the cheap programs built
for real (square), the product's symbols and options, and the source guards of the slow ones; on a
GPU machine one more builds every twin the GPU tests load, first."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import fault_build
from conftest import ensure_built
from harness.base.errors import BuildError, not_built_message
from harness.calling import library, runner
from harness.compile import build

ROOT = build.ROOT


def _make_dry(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """make -n -B (every step printed, whatever is built already): nothing is compiled."""
    cmd = build.make_command(list(args), dry_run=True)
    return subprocess.run(cmd + ["-B"], capture_output=True, text=True, env={**os.environ, **(env or {})})


def _nvcc_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if " -MMD " in line]  # the compile steps


def test_make_builds_the_fault_twin_only_when_asked_on_its_command_line():
    fault = _make_dry(fault_build.target("square", "lib"), fault_build.target("square", "exe"))
    assert fault.returncode == 0, fault.stderr
    assert "FAULTS=1" in build.make_command([fault_build.target("square")])
    compiles = _nvcc_lines(fault.stdout)
    assert compiles and all("-DCUDALAB_FAULTS" in line for line in compiles)
    # Its own objects, flag stamp and outputs: nothing of the product's is written.
    assert "build/faults/obj/square/square.o" in fault.stdout and "build/faults/.flags" in fault.stdout
    written = re.findall(r"(?:-o|>|mv -f \S+) (build/\S+)", fault.stdout)
    assert written and all(w.startswith(("build/faults/", "build/sums/build/faults/")) for w in written), written

    # The product: no fault flag, even with FAULTS in the environment (only make's command line counts).
    product = _make_dry("build/lib/libsquare.so", "build/bin/square", env={"FAULTS": "1"})
    assert product.returncode == 0, product.stderr
    compiles = _nvcc_lines(product.stdout)
    assert compiles and not any("CUDALAB_FAULTS" in line for line in compiles)
    assert "build/faults" not in product.stdout

    # Without FAULTS=1 make has no rule for the fault build's outputs, and `make all` never names them.
    # (hello's fault twin: one no test builds, so the question is make's rules, not a file already there)
    cmd = build.make_command(["build/faults/bin/hello"], dry_run=True)
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    r = subprocess.run([c for c in cmd if c != "FAULTS=1"], capture_output=True, text=True)
    assert r.returncode != 0 and "No rule to make target 'build/faults/bin/hello'" in r.stderr, r.stderr
    everything = _make_dry()
    assert everything.returncode == 0 and "build/faults" not in everything.stdout
    assert "CUDALAB_FAULTS" not in everything.stdout
    bad = subprocess.run(build.make_command(["list"]) + ["FAULTS=yes"], capture_output=True, text=True)
    assert bad.returncode != 0 and "FAULTS must be 1" in bad.stderr


def test_one_make_builds_one_of_the_two():
    with pytest.raises(BuildError, match="separate makes"):
        build.make_command(["build/lib/libsquare.so", "build/faults/lib/libsquare.so"])
    assert "FAULTS=1" not in build.make_command(["build/lib/libsquare.so"])


def test_a_missing_fault_output_names_the_make_that_builds_it():
    msg = not_built_message([build.lib_path("gemm_tc", True)], "gemm_tc")
    assert "run `make FAULTS=1 build/faults/lib/libgemm_tc.so`" in msg
    assert "invoke build --programs gemm_tc" in not_built_message([build.lib_path("gemm_tc")], "gemm_tc")


def test_the_cdef_holds_the_fault_declarations_only_for_the_fault_build():
    text = "#ifdef CUDALAB_FAULTS\nint f(void);\n#else\nint g(void);\n#endif\nint h(void);\n"
    assert library.header_to_cdef(text).split() == ["int", "g(void);", "int", "h(void);"]
    assert library.header_to_cdef(text, faults=True).split() == ["int", "f(void);", "int", "h(void);"]
    header = (build.CUDA_DIR / "gemm_tc" / "gemm_tc.h").read_text()
    assert "gemm_tc_set_fault_drop_k_tiles" not in library.header_to_cdef(header)
    assert "gemm_tc_set_fault_drop_k_tiles" in library.header_to_cdef(header, faults=True)


def _symbols(path: Path, dynamic: bool) -> set[str]:
    out = subprocess.run(["nm", *(["-D"] if dynamic else []), "--defined-only", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def square_both():
    """square's product build and its fault twin, for real (square is the cheap program: nvcc only, no GPU)."""
    build.build(build.targets("square"))
    fault_build.build_twin("square", "lib", "exe")


def test_the_fault_twin_of_square_builds_beside_the_product(square_both):
    _, symbol = fault_build.FAULT_SYMBOLS["square"]
    twin_exe, twin_lib = build.bin_path("square", True), build.lib_path("square", True)
    # Published like every output: renamed into place with a size+SHA-256 record, checked before use.
    for path in (twin_exe, twin_lib):
        assert build.stale_reason(path) is None
        assert build.record_path(path).is_file()
    assert runner.executable("square", faults=True) == twin_exe
    assert library.load("square", faults=True).path == twin_lib
    assert library.load("square").path == build.lib_path("square")
    # The symbol is in the twin and nowhere in the product.
    assert symbol in _symbols(twin_exe, dynamic=False) and symbol in _symbols(twin_lib, dynamic=True)
    assert symbol not in _symbols(build.bin_path("square"), dynamic=False)
    assert symbol not in _symbols(build.lib_path("square"), dynamic=True)
    _, slowed = fault_build.SLOWED["square"]  # the regression gate's slowed 03_vectorized: the twin's alone
    assert slowed in _symbols(twin_lib, dynamic=True) and slowed not in _symbols(build.lib_path("square"), dynamic=True)


@pytest.mark.parametrize("option", [["--oob"], ["--skip-every", "7"]])
def test_the_product_square_refuses_the_fault_options_as_unknown(square_both, option):
    """Parsed before any CUDA call, so this runs without a GPU: the product exits 2 naming the option;
    the fault build knows it (its own rule then refuses a bad value, still before any CUDA call)."""
    r = runner.run("square", "1000", *option, check=False)
    assert r.returncode == 2 and f"unknown option {option[0]}" in r.stderr, r.stderr
    assert "--oob" not in runner.run("square", "--help").stdout
    assert "--oob" in runner.run("square", "--help", faults=True).stdout
    r = runner.run("square", "--skip-every", "0", faults=True, check=False)
    assert r.returncode == 2 and "--skip-every must be positive" in r.stderr, r.stderr


@pytest.mark.parametrize("prog", ["gemm_tc", "collectives"])
def test_the_product_libraries_export_no_fault_entry_point(prog):
    """nm -D on the product library (built by `invoke build`, as in CI); its fault twin's symbol is
    checked in test_the_fault_twin_of_collectives_has_its_entry_point and by the GPU tests (gemm_tc
    takes minutes to compile twice)."""
    path = ensure_built(prog)  # up to date with the sources (CI has built it already)
    _, symbol = fault_build.FAULT_SYMBOLS[prog]
    symbols = _symbols(path, dynamic=True)
    assert f"{prog}_variant_count" in symbols and symbol not in symbols
    with pytest.raises(AttributeError, match=f"has no entry point '{symbol}'"):
        getattr(library.load(prog), symbol)


@pytest.mark.long
@pytest.mark.gpu
def test_every_twin_the_gpu_tests_load_builds_in_one_make():
    """Collected first (long): the twins are built side by side at the start of a GPU run, so that the
    tests which load them find them built, not each waiting on the build lock while one compiles.
    Marked gpu because only the GPU tests load them: a run without a GPU does not pay the compile."""
    fault_build.build_all()
    # Built, they stay built: each GPU test asks for its twin again, and a make that found something to
    # redo (a flag stamp misread) recompiled the twin under the build lock, one worker after another.
    twins = [fault_build.target(prog, k) for prog, kinds in fault_build.TWINS.items() for k in kinds]
    assert build.pending_steps(twins) == []
    assert build.build(twins).steps == []
    for prog, (kind, symbol) in fault_build.FAULT_SYMBOLS.items():
        path = build.lib_path(prog, True) if kind == "lib" else build.bin_path(prog, True)
        assert build.stale_reason(path) is None and symbol in _symbols(path, dynamic=kind == "lib"), prog
    twin = library.load("attention", faults=True)
    assert all(twin.attention_variant_is_bf16(name) != -1 for name in fault_build.ATTENTION_FAULTS)


def test_the_fault_twin_of_collectives_has_its_entry_point():
    fault_build.build_twin("collectives")
    _, symbol = fault_build.FAULT_SYMBOLS["collectives"]
    assert symbol in _symbols(build.lib_path("collectives", True), dynamic=True)


def test_the_product_attention_calls_the_fault_variants_unknown():
    from harness.programs import attention as att

    ensure_built("attention")  # up to date with the sources (CI has built it already)
    lib = library.load("attention")
    for name in fault_build.ATTENTION_FAULTS:
        assert lib.attention_variant_is_bf16(name) == -1
        with pytest.raises(ValueError, match=f"unknown variant '{name}'; valid variants: 01_naive"):
            att.canonical_variant(name)
        assert lib.ffi.string(lib.attention_unsupported_reason(name)).decode() == "unknown variant"
        # The executable checks the name before any CUDA call, so this runs without a GPU too.
        r = runner.run("attention", "--variant", name, "1", "1", "8", "64", check=False)
        assert r.returncode == 2 and f"unknown variant '{name}'" in r.stderr, r.stderr


def test_the_harness_names_no_fault():
    """The product's Python side never names a fault: the names and switches live in tests/fault_build.py."""
    names = fault_build.ATTENTION_FAULTS + tuple(s for _, s in fault_build.FAULT_SYMBOLS.values()) + tuple(
        s for _, s in fault_build.SLOWED.values()) + (
        "--oob", "--skip-every", "stall_rank", "dropped_k_tiles")
    found = [(str(p.relative_to(ROOT)), n) for p in sorted((ROOT / "harness").rglob("*.py"))
             for n in names if n in p.read_text()]
    assert found == []


# --- the source guards: the product compiles every fault out -----------------------------------------
# gemm_tc and attention take minutes to compile, so their fault code is checked in the source: each
# line that names a fault sits inside `#ifdef CUDALAB_FAULTS`, or wraps it in CUDALAB_FAULT(...) (0 in
# the product, cuda/common/faults.cuh).

def unguarded(text: str, pattern: str) -> list[int]:
    """The lines (1-based) that match `pattern`, outside a comment, neither inside an `#ifdef
    CUDALAB_FAULTS` block (its #else part is the product's) nor passing through CUDALAB_FAULT(...)."""
    stack: list[bool] = []  # per open #if: whether the lines here are the fault build's alone
    bad = []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("#if"):
            stack.append(bool(re.match(r"#ifdef\s+CUDALAB_FAULTS\b|#if\s+defined\(CUDALAB_FAULTS\)", s)))
            continue
        if s.startswith("#else") or s.startswith("#elif"):
            if stack:
                stack[-1] = False
            continue
        if s.startswith("#endif"):
            if stack:
                stack.pop()
            continue
        code = re.sub(r"//.*|/\*.*?\*/", "", line)
        if s.startswith(("*", "/*")) or not re.search(pattern, code):
            continue
        if any(stack) or "CUDALAB_FAULT(" in code:
            continue
        bad.append(i)
    return bad


def test_the_guard_check_finds_an_unguarded_fault():
    text = "int a = drop;\n#ifdef CUDALAB_FAULTS\nint b = drop;\n#else\nint c = drop;\n#endif\nint d = CUDALAB_FAULT(drop);\n"
    assert unguarded(text, r"\bdrop\b") == [1, 5]


GUARDED = [
    ("cuda/gemm_tc/gemm_tc.cu", r"gemm_tc_set_fault_drop_k_tiles|\bg_drop_k_tiles\b"),
    ("cuda/gemm_tc/gemm_tc.h", r"gemm_tc_set_fault_drop_k_tiles"),
    ("cuda/shared/gemm_tc/k02_mma_sync.cuh", r"cdiv\(K, S_BK\) - "),
    ("cuda/shared/gemm_tc/k03_wgmma.cuh", r"cdiv\(K, H_BK\) - "),
    ("cuda/shared/gemm_tc/k07_wgmma_pingpong.cuh", r"cdiv\(K, P_BK\) - "),
    ("cuda/shared/attention/attention_kernels.cuh",
     r'"flash_skip_last_tile"|"flash_bf16_skip_last_tile"|"flash_bf16_no_causal_mask"|cdiv\(kv_end, FA_BC\) - '),
    ("cuda/shared/attention/flash_bf16.cuh", r"flags & FB_FLAG_"),
    ("cuda/collectives/collectives.cu", r"a\.stall_rank\)|collectives_set_fault_stall_rank|g_fault_stall_rank"),
    ("cuda/collectives/collectives.h", r"collectives_set_fault_stall_rank"),
    ("cuda/square/square.cu", r"square_int32_test_dev|skip_every - 1|square_set_fault_sleep_ns|unsigned g_fault_sleep_ns"),
    ("cuda/square/square.h", r"square_set_fault_sleep_ns"),
    ("cuda/square/main.cu", r'square_int32_test_dev|"--oob"|"--skip-every"|skip_every\s*='),
]


@pytest.mark.parametrize("path, pattern", GUARDED, ids=[p for p, _ in GUARDED])
def test_every_fault_is_compiled_out_of_the_product(path, pattern):
    text = (ROOT / path).read_text()
    assert re.search(pattern, text), f"{path} no longer has {pattern!r}: update this list"
    assert unguarded(text, pattern) == [], f"{path}: fault code outside #ifdef CUDALAB_FAULTS / CUDALAB_FAULT()"

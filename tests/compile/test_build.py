"""The build: every program compiles, exports its header's symbols, and rebuilds incrementally."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import cffi
import pytest

from harness.base.errors import BuildError
from harness.calling import library
from harness.compile import build

pytestmark = pytest.mark.skipif(not build.toolchain.find("nvcc").found, reason="needs nvcc")


@pytest.fixture(scope="module")
def built():
    build.build()
    return build.programs()


def test_programs_are_discovered():
    progs = build.programs()
    assert {"hello", "device_info"} <= set(progs)
    assert "common" not in progs


def test_every_program_builds(built):
    for prog in built:
        assert build.lib_path(prog).exists(), prog
        assert build.bin_path(prog).exists(), prog
        assert (build.BUILD / "ptxas" / f"{prog}.txt").exists(), prog


def test_every_library_exports_its_header(built):
    for prog in built:
        ffi = cffi.FFI()
        ffi.cdef(library.header_to_cdef(library.COMMON_HEADER.read_text()))
        ffi.cdef(library.header_to_cdef((build.CUDA_DIR / prog / f"{prog}.h").read_text()))
        decls = [name.split(" ", 1)[1] for name in ffi._parser._declarations
                 if name.startswith("function ") and not name.startswith("function cudalab_")]
        assert decls, f"{prog}.h declares no functions"
        nm = subprocess.run(["nm", "-D", "--defined-only", str(build.lib_path(prog))], capture_output=True,
                            text=True, check=True).stdout
        exported = {line.split()[-1] for line in nm.splitlines() if line.strip()}
        missing = [d for d in decls if d not in exported]
        assert not missing, f"lib{prog}.so lacks {missing}"
        assert {"cudalab_error_name", "cudalab_error_string"} <= exported


def test_ptxas_resource_usage_is_parsed(built):
    if os.environ.get("PTX_ONLY") == "1":
        pytest.skip("PTX_ONLY=1: a PTX-only build runs no ptxas, so it reports no resource usage")
    df = build.resource_usage("hello")
    assert set(df["kernel"]) >= {"_Z4loopv", "_Z7kernelAv"}
    assert (df["registers"] > 0).all()


# Never at the same time as each other under `invoke test --jobs N` (conftest.py): the second
# moves a source's mtime, which the first would see as a pending change.
@pytest.mark.serial
def test_no_change_build_runs_no_compiler(built):
    assert build.pending_steps() == []
    res = build.build()
    assert res.steps == []


@pytest.mark.serial
def test_one_changed_file_rebuilds_only_its_targets(built):
    src = build.CUDA_DIR / "hello" / "hello.cu"
    st = src.stat()
    try:
        future = time.time() + 5
        os.utime(src, (future, future))
        steps = build.pending_steps()
        assert "NVCC cuda/hello/hello.cu" in steps
        assert all("hello" in s for s in steps), steps
    finally:
        os.utime(src, (st.st_atime, st.st_mtime))


BROKEN = """#include "check.cuh"
__global__ void k(float *x) {
    x[threadIdx.x] = undefined_name;
}
extern "C" int broken_run(void) { return 0; }
"""


def test_compile_error_is_a_build_error_with_file_line(tmp_path):
    # A tiny tree with the real Makefile and a program that does not compile.
    shutil.copy(build.ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copytree(build.CUDA_DIR / "common", tmp_path / "cuda" / "common")
    prog = tmp_path / "cuda" / "broken"
    prog.mkdir()
    (prog / "broken.cu").write_text(BROKEN)
    (prog / "broken.h").write_text("int broken_run(void);\n")
    (prog / "main.cu").write_text("int main() { return 0; }\n")
    with pytest.raises(BuildError) as ei:
        build.build(["build/lib/libbroken.so"], root=tmp_path)
    diags = ei.value.diagnostics
    assert any(d.file.endswith("cuda/broken/broken.cu") and d.line == 3 and "undefined_name" in d.message
               for d in diags), diags
    assert "make" not in str(ei.value).splitlines()[0].lower() or diags


def test_a_broken_program_does_not_stop_the_others(tmp_path):
    """make -k: the broken program is named with file:line and its quoted source line, a folder
    without main.cu says so, and the programs that did build are listed (and really built)."""
    shutil.copy(build.ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copytree(build.CUDA_DIR / "common", tmp_path / "cuda" / "common")
    for name, body, main in [("good", 'extern "C" int good_run(void) { return 0; }\n', True),
                             ("broken", BROKEN, True),
                             ("nomain", 'extern "C" int nomain_run(void) { return 0; }\n', False)]:
        d = tmp_path / "cuda" / name
        d.mkdir()
        (d / f"{name}.cu").write_text(body)
        (d / f"{name}.h").write_text(f"int {name}_run(void);\n")
        if main:
            (d / "main.cu").write_text("int main() { return 0; }\n")
    with pytest.raises(build.ProgramsFailed) as ei:
        build.build_programs(root=tmp_path)
    e = ei.value
    assert list(e.failed) == ["broken", "nomain"] and e.built == ["good"]
    text = str(e)
    assert "cuda/broken/broken.cu:3: error:" in text and "undefined_name" in text
    assert "    3 | " in text  # the source line, quoted under its diagnostic
    assert "cuda/nomain/main.cu: error: missing" in text
    assert text.splitlines()[-1] == "built: good"
    assert (tmp_path / "build" / "bin" / "good").exists() and (tmp_path / "build" / "lib" / "libgood.so").exists()


def test_host_warnings_are_errors(tmp_path):
    shutil.copy(build.ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copytree(build.CUDA_DIR / "common", tmp_path / "cuda" / "common")
    prog = tmp_path / "cuda" / "warny"
    prog.mkdir()
    # g++ (not nvcc's front end) flags this one: it must stop the build.
    (prog / "warny.cu").write_text('extern "C" int warny_run(void) { int x; return x; }\n')
    (prog / "warny.h").write_text("int warny_run(void);\n")
    (prog / "main.cu").write_text("int main() { return 0; }\n")
    with pytest.raises(BuildError) as ei:
        build.build(["build/lib/libwarny.so"], root=tmp_path)
    assert any("uninitialized" in d.message and d.line == 1 for d in ei.value.diagnostics), ei.value.diagnostics


def test_parse_diagnostics_formats():
    text = """cuda/x/x.cu(12): error: identifier "foo" is undefined
cuda/x/x.cu:29:8: error: 'char* strncpy' output may be truncated [-Werror=stringop-truncation]
cuda/x/x.cu(40): warning #177-D: variable "y" was declared but never referenced
ptxas info    : Used 24 registers
make: *** [Makefile:93: build/obj/x/x.o] Error 1
"""
    d = build.parse_diagnostics(text)
    assert [(x.file, x.line, x.severity) for x in d] == [
        ("cuda/x/x.cu", 12, "error"), ("cuda/x/x.cu", 29, "error"), ("cuda/x/x.cu", 40, "warning")]
    assert d[1].column == 8


def test_arch_defaults_and_override():
    # The default is what this test checks, so an ARCH or PTX_ONLY exported for the suite stays out.
    env = {k: v for k, v in os.environ.items() if k not in ("ARCH", "PTX_ONLY")}

    def arch(*extra):
        return subprocess.run(["make", "-s", "-C", str(build.ROOT), "arch", *extra], capture_output=True,
                              text=True, check=True, env=env).stdout.strip()

    stamp = build.ROOT / "build" / ".flags"
    before = stamp.stat().st_mtime_ns if stamp.exists() else None
    assert arch("ARCH=sm_80") == "80"
    assert arch("ARCH=86") == "86"
    # Asking is not building: the flags stamp is untouched, so the next build has nothing to redo
    # (it used to be rewritten to sm_80 and back, and every later build recompiled everything).
    assert (stamp.stat().st_mtime_ns if stamp.exists() else None) == before
    visible = subprocess.run("nvidia-smi --query-gpu=compute_cap --format=csv,noheader", shell=True,
                             capture_output=True, text=True).stdout.strip().replace(".", "")
    assert arch() == (visible.splitlines()[0] if visible else "90")

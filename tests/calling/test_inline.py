"""harness.calling.inline: CUDA C from a Python string.

Without a GPU: the cdef extraction on real-looking sources, unsupported types, the cache (hit, key,
rename protocol, two processes at once), compile errors mapped to the user's lines, host-only
functions called through the library marshalling, argument checks, and NoGPUError.
With a GPU: kernels against numpy (host-pointer form and launchers with device arrays), printf
captured, launch errors.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cffi
import numpy as np
import pytest

from conftest import GPU_OK, poison
from harness.base.errors import BuildError, CudaError, NoGPUError
from harness.calling import cudart, inline
from harness.calling.results import relative_error
from harness.compile import jit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    """One cache folder for this module's tests (compiles are shared between tests), never ~/.cache."""
    folder = tmp_path_factory.getbasetemp() / "inline-cache"
    monkeypatch.setenv("CUDALAB_CACHE", str(folder))
    return folder


rel_err = relative_error  # the one checker (harness.calling.results)


# --- cdef extraction ------------------------------------------------------------------------------

LECTURE = r'''
#include <cstdio>
#include "check.cuh"
#define BLOCK 256
#define API extern "C"
/* Comments must not fool the parser:
   extern "C" int commented_out(float *x);  */
// extern "C" int also_commented(void);

__global__ void rgb_to_grayscale_kernel(unsigned char *x, unsigned char *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // "extern \"C\" int in_string(void);"
    if (i < n) out[i] = 0.2989 * x[i] + 0.5870 * x[i + n] + 0.1140 * x[i + 2 * n];
}

extern "C" {
typedef struct image { int h; int w; unsigned char *data; } image;

int rgb_to_grayscale(const unsigned char * __restrict__ x,   /* planar */
                     unsigned char *out, int h, int w);
__host__ __device__ float twice(float v) { return 2 * v; }
__global__ void block_kernel(float *x) { x[threadIdx.x] = 0; }
static int not_exported(void) { return 0; }
int gather(const float *const *rows, int nrows, float **out);
}

API long long count_nonzero(const unsigned char *v, size_t n, int stride = 1) { return 0; }
extern "C" __launch_bounds__(BLOCK) __global__ void bounded(float *x) {}
extern "C" cudaError_t run_on(cudaStream_t stream, const image *img);
extern "C" int scale_launch(const cudalab_launch *L, float *x, float a, int n) {
    return 0;
}
extern "C"
void no_args(void) {}
#if 0
extern "C" int disabled(float &x);
#endif
'''


def _decls(cdef: str) -> set[str]:
    return {" ".join(line.split()) for line in cdef.splitlines() if "(" in line and "typedef" not in line}


def test_extract_cdef_lecture_style_source():
    e = inline.extract_cdef(LECTURE)
    names = [f.name for f in e.functions]
    assert names == ["rgb_to_grayscale", "twice", "gather", "count_nonzero", "run_on", "scale_launch", "no_args"]
    assert _decls(e.cdef) == {
        "int rgb_to_grayscale(const unsigned char *x, unsigned char *out, int h, int w);",
        "float twice(float v);",
        "int gather(const float *const *rows, int nrows, float **out);",
        "long long count_nonzero(const unsigned char *v, size_t n, int stride);",
        "cudaError_t run_on(cudaStream_t stream, const image *img);",
        "int scale_launch(const cudalab_launch *L, float *x, float a, int n);",
        "void no_args(void);",
    }
    # __global__ kernels (in a block, or with launch bounds from a macro) are not host functions.
    assert set(e.kernels) == {"rgb_to_grayscale_kernel", "block_kernel", "bounded"}
    assert [f.name for f in e.functions if f.launcher] == ["scale_launch"]
    lines = {f.name: f.line for f in e.functions}
    assert LECTURE.splitlines()[lines["gather"] - 1].strip().startswith("int gather(")
    ffi = cffi.FFI()
    ffi.cdef(e.cdef)  # cffi accepts it as it is
    assert ffi.typeof("int(*)(const cudalab_launch *, float *, float, int)")


def test_extract_cdef_header_style_block_and_pointer_to_pointer():
    src = textwrap.dedent("""
        #ifdef __cplusplus
        extern "C" {
        #endif
        /* plain C, as the project's headers */
        int matmul(const float *a, const float *b, float *c, int m, int n, int k);
        int batched(float **ptrs, unsigned int count, void *stream);
        #ifdef __cplusplus
        }
        #endif
        """)
    e = inline.extract_cdef(src)
    assert _decls(e.cdef) == {"int matmul(const float *a, const float *b, float *c, int m, int n, int k);",
                              "int batched(float **ptrs, unsigned int count, void *stream);"}


def _fn_type(ffi, decl: str, name: str) -> str:
    return ffi.typeof(decl.rstrip(";").replace(f" {name}(", " (*)(", 1)).cname


def test_extract_cdef_agrees_with_the_projects_headers():
    """The project's own programs are real sources: what the parser reads from each <prog>.cu has
    the same C types as its hand-written <prog>.h (cffi's cdef), function by function."""
    compared = 0
    for cu in sorted((ROOT / "cuda").glob("*/*.cu")):
        header = cu.with_suffix(".h")
        if cu.stem != cu.parent.name or not header.exists():
            continue
        got = inline.extract_cdef(cu.read_text(), strict=False)
        want = inline._header_cdef(header.read_text())
        fa, fb = cffi.FFI(), cffi.FFI()
        fa.cdef(got.cdef)
        fb.cdef(want.cdef)
        want_decl = {f.name: f.decl for f in want.functions}
        for f in got.functions:
            if f.name in want_decl:
                assert _fn_type(fa, f.decl, f.name) == _fn_type(fb, want_decl[f.name], f.name), (cu.name, f.name)
                compared += 1
        for name, why in got.problems.items():  # a type from an included header: named, with the reason
            assert name in want_decl and "unknown type" in why, (cu.name, name, why)
    assert compared >= 4  # hello alone has four entry points


UNSUPPORTED = r'''
extern "C" int by_ref(float &x) { return 0; }
extern "C" int vec_value(float4 v) { return 0; }
extern "C" int vec_pointer(const float4 *v, int n) { return 0; }
extern "C" int templ(std::vector<float> v);
extern "C" int with_dim3(dim3 grid, float *x);
extern "C" int halves(__half *x, int n);
extern "C" int unknown(Matrix m);
extern "C" int fine(const float *x, int n);
'''


def test_unsupported_types_are_named():
    with pytest.raises(inline.UnsupportedSignature) as ei:
        inline.extract_cdef(UNSUPPORTED)
    e = ei.value
    assert isinstance(e, TypeError)
    assert e.functions == ["by_ref", "vec_value", "vec_pointer", "templ", "with_dim3", "halves", "unknown"]
    msg = str(e)
    assert "fine" not in e.functions
    assert "line 2" in e.problems["by_ref"] and "C++ reference" in msg
    assert "float4 by value" in e.problems["vec_value"]
    assert "pointer to the CUDA vector type float4" in e.problems["vec_pointer"]
    assert "template" in e.problems["templ"]
    assert "cudalab_launch" in e.problems["with_dim3"]
    assert "__half" in e.problems["halves"]
    assert "'Matrix'" in e.problems["unknown"]
    assert "header=" in msg
    # Non-strict: the unsupported ones are left out, the good one stays.
    loose = inline.extract_cdef(UNSUPPORTED, strict=False)
    assert [f.name for f in loose.functions] == ["fine"]
    assert set(loose.problems) == set(e.functions)


def test_unsupported_signature_raises_before_compiling(cache, monkeypatch):
    def no_nvcc(*a, **k):
        raise AssertionError("nvcc must not run for a source whose signatures are unsupported")
    monkeypatch.setattr(jit.subprocess, "run", no_nvcc)
    with pytest.raises(inline.UnsupportedSignature, match="by_ref"):
        inline.load(UNSUPPORTED)


# --- compiling, caching and calling host code (no GPU needed) ------------------------------------

HOST = r'''
#include <cstdio>
// Host-only functions: they run without a GPU, through the same cffi marshalling.
extern "C" double dot(const double *a, const double *b, int n) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}
extern "C" int fill(int *out, int n, int value) {
    for (int i = 0; i < n; ++i) out[i] = value + i;
    return 0;
}
extern "C" int fails(void) { return 1; /* cudaErrorInvalidValue */ }
extern "C" void say(const char *who, int n) { printf("hello %s %d\n", who, n); }
extern "C" void shout(char *text) { for (; *text; ++text) if (*text >= 'a' && *text <= 'z') *text -= 32; }
__global__ void k(float *x) { x[0] = 1; }
'''


def test_host_functions_through_library_marshalling():
    mod = inline.load(HOST, name="host")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(1001), rng.standard_normal(1001)
    assert mod.dot(a, b, a.size) == pytest.approx(float(a @ b), rel=1e-12)
    out = poison(17, np.int32)
    assert mod.fill(out, out.size, 5) == 0
    np.testing.assert_array_equal(out, np.arange(5, 22, dtype=np.int32))
    with pytest.raises(TypeError, match="float64"):
        mod.dot(a.astype(np.float32), b, a.size)
    with pytest.raises(ValueError, match="contiguous"):
        mod.dot(a[::2], b[::2], 500)
    ro = np.zeros(4, np.int32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        mod.fill(ro, 4, 0)
    ro_a = np.ones(3)
    ro_a.flags.writeable = False  # fine for a `const double *`
    assert mod.dot(ro_a, ro_a, 3) == 3.0
    ro_f32 = ro_a.astype(np.float32)
    ro_f32.flags.writeable = False
    with pytest.raises(TypeError, match="float64"):
        mod.dot(ro_f32, ro_a, 3)
    with pytest.raises(TypeError, match="only const char"):
        mod.shout("text")
    with pytest.raises(TypeError, match="takes 3"):
        mod.fill(out, 1)
    with pytest.raises(TypeError, match="only launchers"):
        mod.fill(out, 1, 2, grid=1)
    with pytest.raises(CudaError) as ei:  # an int return is a CUDA status
        mod.fails()
    assert ei.value.code == 1 and ei.value.name == "cudaErrorInvalidValue"
    with pytest.raises(AttributeError, match="launcher"):
        mod.k  # noqa: B018 -- a __global__ kernel: the error says how to expose it
    with pytest.raises(AttributeError, match="has no extern"):
        mod.nothing  # noqa: B018
    assert "dot" in dir(mod) and mod.functions == ["dot", "fill", "fails", "say", "shout"]


def test_host_printf_is_captured_at_fd_level():
    mod = inline.load(HOST, name="host")
    with inline.capture_stdout() as out:  # without a GPU its synchronise is skipped quietly
        mod.say("inline", 3)
        mod.say(b"bytes", 4)
    assert out.text.splitlines() == ["hello inline 3", "hello bytes 4"]


def test_second_load_compiles_nothing(cache, capsys, monkeypatch):
    src = HOST + "\n// second-load test\n"
    first = inline.load(src, name="twice", verbose=True)
    err = capsys.readouterr().err
    assert not first.cache_hit and "compiling" in err and "compiled in" in err

    def no_nvcc(*a, **k):
        raise AssertionError("a cache hit must not run nvcc")
    monkeypatch.setattr(jit.subprocess, "run", no_nvcc)
    second = inline.load(src, name="twice", verbose=True)
    err = capsys.readouterr().err
    assert second.cache_hit and "cache hit, nothing compiled" in err
    assert second.path == first.path and second.path.parent == cache
    assert second.dot(np.ones(3), np.ones(3), 3) == 3.0


def test_cache_key_covers_source_flags_and_arch(monkeypatch):
    src = 'extern "C" int zero(void) { return 0; }\n'
    base = inline.load(src, name="key")
    assert inline.load(src + "\n", name="key").path != base.path
    assert inline.load(src, name="key", flags=["-DSOMETHING=1"]).path != base.path
    # Another arch than the one this machine builds for (ARCH may be exported, e.g. ARCH=80).
    other = "75" if base.arch == "80" else "80"
    other_arch = inline.load(src, name="key", arch=f"sm_{other}")
    assert other_arch.path != base.path and other_arch.arch == other
    # nvcc's version is in the key too: another version, another file.
    real = jit.toolchain.find("nvcc")
    monkeypatch.setattr(jit.toolchain, "find", lambda name: real.__class__(real.name, real.path, "0.0.0"))
    key_before = base.key
    assert inline.load(src, name="key").key != key_before


def test_rename_protocol(cache, monkeypatch):
    """nvcc writes a temporary file in the cache folder; os.replace moves it into place."""
    calls = []
    real_replace = os.replace

    def spy(src, dst):
        calls.append((Path(src), Path(dst)))
        assert Path(src).exists() and Path(src).stat().st_size > 0
        return real_replace(src, dst)

    monkeypatch.setattr(jit.os, "replace", spy)
    mod = inline.load('extern "C" int renamed(void) { return 0; }\n', name="rename")
    libs = [(s, d) for s, d in calls if d == mod.path]
    assert len(libs) == 1
    tmp, final = libs[0]
    assert tmp.parent == final.parent == cache and tmp.name.endswith(".tmp") and tmp != final
    assert not tmp.exists() and final.exists()
    assert not list(cache.glob(".*.tmp")), "no temporary file is left behind"


def test_two_processes_compile_the_same_key(cache, tmp_path):
    src = 'extern "C" int raced(void) { return 42 - 42; }\n// ' + str(tmp_path) + "\n"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from harness.calling import inline
        m = inline.load({src!r}, name="raced")
        assert m.raced() == 0
        print(m.path)
    """)
    env = {**os.environ, "CUDALAB_CACHE": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1 and Path(paths.pop()).exists()
    assert not list(cache.glob(".*.tmp"))


def test_cache_folder_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDALAB_CACHE", str(tmp_path / "c"))
    assert inline.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("CUDALAB_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert inline.cache_dir() == tmp_path / "xdg" / "cudalab" / "inline"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert inline.cache_dir() == tmp_path / "home" / ".cache" / "cudalab" / "inline"


def test_arch_spellings_and_default(monkeypatch, tmp_path):
    """The default arch is the Makefile's (make print-nvcc): $ARCH, else the visible GPU's, else 90; a bad
    $ARCH is refused in the build's own line rather than compiled past."""
    import shutil

    for spelling, want in [(90, "90"), ("9.0", "90"), ("sm_90", "90"), ("compute_80", "80"), ("sm_90a", "90a")]:
        assert inline._normalize_arch(spelling) == want
    with pytest.raises(ValueError, match="compute capability"):
        inline._normalize_arch("hopper")
    inline.default_arch.cache_clear()
    try:
        monkeypatch.setenv("ARCH", "sm_86")
        assert inline.default_arch() == "86"
        inline.default_arch.cache_clear()
        monkeypatch.setenv("ARCH", "x86_64")  # not an arch: `invoke build` and make refuse it, and so does this
        with pytest.raises(BuildError, match=r"ARCH \(from the environment\): 'x86_64' is not a compute capability"):
            inline.default_arch()
        inline.default_arch.cache_clear()
        monkeypatch.delenv("ARCH")
        for tool in ("make", "printf"):  # what print-nvcc runs; no nvidia-smi: the Makefile's fallback
            (tmp_path / tool).symlink_to(shutil.which(tool))
        monkeypatch.setenv("PATH", str(tmp_path))
        assert inline.default_arch() == "90"
    finally:
        inline.default_arch.cache_clear()


def test_strings_compile_as_the_build_does_host_warnings_are_errors_and_shared_headers_found():
    """The Makefile's flags (make print-nvcc): a host warning fails the compile as it fails `invoke build`,
    and cuda/shared is on the include path."""
    warned = 'extern "C" int f(int n) {\n    return 0;\n}\n'  # -Wextra: an unused parameter
    with pytest.raises(BuildError, match="unused parameter") as ei:
        inline.load(warned, name="host_warning")
    assert "host warnings are errors here, as in `invoke build`" in str(ei.value)
    shared = '#include "attention/attention_limits.h"\nextern "C" double max_s(void) { return ATTN_MAX_S; }\n'
    assert inline.load(shared, name="shared_include").max_s() == 92680


# --- compile errors -----------------------------------------------------------------------------

BROKEN = """__global__ void k(float *x, int n) {
    int i = threadIdx.x;
    if (i < n) x[i] = y;
}
extern "C" int f(float *x) {
    k<<<1, 1>>>(x, 1);
    return undefined_call();
}
"""


def test_compile_error_maps_to_user_lines():
    with pytest.raises(BuildError) as ei:
        inline.load(BROKEN)
    e = ei.value
    errors = [(d.file, d.line) for d in e.diagnostics if d.severity == "error"]
    assert errors == [("<inline>", 3), ("<inline>", 7)]
    msg = str(e)
    assert '<inline>:3: error: identifier "y" is undefined' in msg
    assert "3 |     if (i < n) x[i] = y;" in msg  # the offending line, quoted
    assert "7 |     return undefined_call();" in msg
    assert str(inline.cache_dir()) not in msg  # the user's name, not the cache file's path


def test_compile_error_with_line_offset_and_host_compiler_errors():
    with pytest.raises(BuildError) as ei:
        inline.load(BROKEN, _display="cell", _line_offset=1)
    assert [d.line for d in ei.value.diagnostics if d.severity == "error"] == [4, 8]
    with pytest.raises(BuildError) as ei:
        inline.load('\n#include "no_such_header.h"\nextern "C" int f(void) { return 0; }\n')
    d = ei.value.diagnostics[0]
    assert (d.file, d.line) == ("<inline>", 2) and "no_such_header.h" in d.message
    assert '2 | #include "no_such_header.h"' in str(ei.value)


def test_bad_flag_reports_nvcc_output():
    with pytest.raises(BuildError, match="Unknown option"):
        inline.load('extern "C" int f(void) { return 0; }\n', flags=["--no-such-flag"])
    with pytest.raises(TypeError, match="list"):
        inline.load('extern "C" int f(void) { return 0; }\n', flags="-O3")


# --- launchers: checks made before any launch ----------------------------------------------------

LAUNCH = r'''
#include <cstdio>
#include "check.cuh"
__global__ void saxpy_k(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
// Host-pointer form.
extern "C" int saxpy(float a, const float *x, float *y, int n) {
    float *dx = nullptr, *dy = nullptr;
    size_t bytes = (size_t)n * sizeof(float);
    CUDA_TRY(cudaMalloc(&dx, bytes));
    CUDA_TRY(cudaMalloc(&dy, bytes));
    CUDA_TRY(cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
    saxpy_k<<<cdiv(n, 256), 256>>>(a, dx, dy, n);
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost));
    CUDA_TRY(cudaFree(dx));
    CUDA_TRY(cudaFree(dy));
    return 0;
}
// Launcher form: device pointers, grid and block from Python.
extern "C" int saxpy_launch(const cudalab_launch *L, float a, const float *x, float *y, int n) {
    saxpy_k CUDALAB_LAUNCH(L)(a, x, y, n);
    return (int)cudaGetLastError();
}

// 2-D grid over a (h, w) matrix: out = in^T.
__global__ void transpose_k(const float *in, float *out, int h, int w) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < h && c < w) out[c * h + r] = in[r * w + c];
}
extern "C" int transpose_launch(const cudalab_launch *L, const float *in, float *out, int h, int w) {
    transpose_k CUDALAB_LAUNCH(L)(in, out, h, w);
    return (int)cudaGetLastError();
}

// Dynamic shared memory: one partial sum per block.
__global__ void block_sum_k(const float *x, float *partial, int n) {
    extern __shared__ float buf[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();  // every element of the block is in shared memory before the tree reads it
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();  // this level's sums are complete before the next level reads them
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = buf[0];
}
extern "C" int block_sum_launch(const cudalab_launch *L, const float *x, float *partial, int n) {
    block_sum_k CUDALAB_LAUNCH(L)(x, partial, n);
    return (int)cudaGetLastError();
}

// Device printf: one tagged line per thread.
__global__ void say_k(int tag) {
    printf("inline tag=%d block=%d thread=%d\n", tag, blockIdx.x, threadIdx.x);
}
extern "C" int say_launch(const cudalab_launch *L, int tag) {
    say_k CUDALAB_LAUNCH(L)(tag);
    return (int)cudaGetLastError();
}
'''


def test_launcher_arguments_are_checked_before_the_call():
    mod = inline.load(LAUNCH, name="launch")
    assert mod.launchers == ["saxpy_launch", "transpose_launch", "block_sum_launch", "say_launch"]
    assert "grid, block" in mod.signature("saxpy_launch")
    x = np.ones(8, np.float32)
    with pytest.raises(TypeError, match="kernel launcher: call it as"):
        mod.saxpy_launch(2.0, x, x, 8)
    with pytest.raises(TypeError, match="device memory"):
        mod.saxpy_launch(2.0, x, x, 8, grid=1, block=8)
    with pytest.raises(ValueError, match="positive"):
        mod.say_launch(1, grid=(1, 0), block=1)
    with pytest.raises(TypeError, match="dim3"):
        mod.say_launch(1, grid="1", block=1)
    with pytest.raises(ValueError, match="shared"):
        mod.say_launch(1, grid=1, block=1, shared=-1)
    assert inline._dims(5, "grid") == (5, 1, 1)
    assert inline._dims((2, 3), "grid") == (2, 3, 1)
    from harness.base.sim import dim3
    assert inline._dims(dim3(4, 5, 6), "block") == (4, 5, 6)
    assert inline.cdiv(257, 256) == 2 and inline.cdiv(256, 256) == 1 and inline.cdiv(0, 256) == 0


def test_header_argument_replaces_the_parsed_cdef():
    src = r'''
    #define MAKE_SETTER(name, v) extern "C" int name(int *x) { *x = v; return 0; }
    MAKE_SETTER(set_seven, 7)
    '''
    header = '#ifdef __cplusplus\nextern "C" {\n#endif\nint set_seven(int *x);\n#ifdef __cplusplus\n}\n#endif\n'
    mod = inline.load(src, name="hdr", header=header)
    x = np.zeros(1, np.int32)
    mod.set_seven(x)
    assert x[0] == 7
    with pytest.raises(inline.InlineSourceError, match="header="):  # macro-made: invisible without header=
        inline.load(src, name="hdr")


def test_a_source_without_extern_c_functions_says_so():
    with pytest.raises(inline.InlineSourceError, match=r'no extern "C" function.*kernels seen: k.*compile_program'):
        inline.load("__global__ void k(float *x) { x[0] = 1; }")


def test_a_declared_but_undefined_function_is_named():
    src = 'extern "C" int helper(int n);\nextern "C" int twice(int n) { return 2 * helper(n); }\n'
    with pytest.raises(inline.InlineSourceError, match="`helper`, which nothing defines"):
        inline.load(src)


def test_an_undefined_host_symbol_is_a_sentence():
    src = 'int helper(int n);\nextern "C" int twice(int n) { return 2 * helper(n); }\n'  # C++ linkage, never defined
    with pytest.raises(inline.InlineSourceError, match="which nothing defines"):
        inline.load(src)


def test_a_header_that_does_not_match_the_source_is_caught():
    src = 'extern "C" int scale(float *x, float a, int n) { (void)x; (void)a; (void)n; return 0; }\n'
    with pytest.raises(inline.InlineSourceError, match=r"header= declares `int scale\(float \*x, int n\);`"):
        inline.load(src, header="int scale(float *x, int n);")
    with pytest.raises(inline.InlineSourceError, match="header= declares nosuch, which the compiled library"):
        inline.load(src, header="int nosuch(int n);")


def test_int_arguments_that_do_not_fit_name_the_parameter():
    mod = inline.load('extern "C" int count(int n) { return n; }\n', header="int count(int n);")
    with pytest.raises(OverflowError, match=r"count\(\) argument 1 \(n\): must be at most 2147483647"):
        mod.count(2**40)


def test_cudalab_status_marks_a_status_and_int_is_a_value():
    mod = inline.load('extern "C" cudalab_status fails(void) { return 1; }\n'
                      'extern "C" int answer(void) { return 42; }\n')
    assert mod.answer() == 42
    with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
        mod.fails()


@pytest.mark.skipif(GPU_OK, reason="checks the behaviour on a machine without a usable GPU")
def test_no_gpu_raises_nogpuerror():
    mod = inline.load(LAUNCH, name="launch")
    x = np.ones(8, np.float32)
    with pytest.raises(NoGPUError, match="saxpy"):
        mod.saxpy(2.0, x, x.copy(), 8)
    with pytest.raises(NoGPUError):
        inline.to_device(x)
    with pytest.raises(NoGPUError):
        inline.empty((4, 4), np.float32)


# --- on the GPU -------------------------------------------------------------------------------------

SIZES = [1, 2, 255, 257, 4099, 65537, 1_000_003]


def _saxpy_inputs(rng, n):
    """The module and two random vectors kept away from 0, so that a relative error means something."""
    x = rng.standard_normal(n).astype(np.float32) + 2.0
    y = rng.standard_normal(n).astype(np.float32) + 2.0
    return inline.load(LAUNCH, name="launch"), x, y


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
def test_host_pointer_kernel_matches_numpy(rng, n):
    mod, x, y = _saxpy_inputs(rng, n)
    a = np.float32(rng.uniform(0.5, 3.0))
    ref = float(a) * x.astype(np.float64) + y
    out = y.copy()
    mod.saxpy(a, x, out, n)
    # nvcc may fuse a*x+y into one FMA (one rounding instead of numpy's two): ~1 ulp, far inside 1e-5.
    assert rel_err(out, ref) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
def test_launcher_with_device_arrays_matches_numpy(rng, n):
    mod, x, y = _saxpy_inputs(rng, n)
    a = np.float32(1.5)
    xd, yd = inline.to_device(x), inline.to_device(y)
    assert (xd.shape, xd.dtype, xd.nbytes) == ((n,), np.float32, 4 * n)
    mod.saxpy_launch(a, xd, yd, n, grid=inline.cdiv(n, 128), block=128)
    out = yd.to_host()
    assert rel_err(out, 1.5 * x.astype(np.float64) + y) <= 1e-5
    with cudart.Stream() as s:  # on a stream of the caller's
        yd.copy_from(y)
        mod.saxpy_launch(a, xd, yd, n, grid=inline.cdiv(n, 64), block=64, stream=s)
        s.synchronize()
    assert rel_err(yd.to_host(), 1.5 * x.astype(np.float64) + y) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (17, 31), (64, 48), (257, 1000)])
def test_launcher_2d_grid(rng, shape):
    mod = inline.load(LAUNCH, name="launch")
    h, w = shape
    m = rng.standard_normal(shape).astype(np.float32)
    md = inline.to_device(m)
    out = inline.to_device(poison((w, h), np.float32))
    mod.transpose_launch(md, out, h, w, grid=(inline.cdiv(w, 16), inline.cdiv(h, 16)), block=(16, 16))
    np.testing.assert_array_equal(out.to_host(), m.T)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 255, 256, 257, 100_003])
def test_launcher_dynamic_shared_memory(rng, n):
    mod = inline.load(LAUNCH, name="launch")
    x = rng.standard_normal(n).astype(np.float32) + 1.0
    blocks = inline.cdiv(n, 256)
    part = inline.to_device(poison(blocks, np.float32))
    mod.block_sum_launch(inline.to_device(x), part, n, grid=blocks, block=256, shared=256 * 4)
    ref = np.array([x[i:i + 256].astype(np.float64).sum() for i in range(0, n, 256)])
    # a 256-way tree sum in float32 against float64: a few ulp per partial sum.
    assert rel_err(part.to_host(), ref) <= 1e-5


@pytest.mark.gpu
def test_device_array_checks():
    mod = inline.load(LAUNCH, name="launch")
    xd = inline.to_device(np.ones(4, np.float64))
    with pytest.raises(TypeError, match="float64"):
        mod.saxpy_launch(1.0, xd, xd, 4, grid=1, block=4)
    e = inline.empty((2, 3), np.int32)
    assert e.shape == (2, 3) and e.size == 6 and e.nbytes == 24 and len(e) == 2
    with pytest.raises(ValueError, match="shape"):
        e.copy_from(np.zeros(5, np.int32))
    z = inline.to_device(np.zeros((0, 3), np.float32))
    assert z.to_host().shape == (0, 3)
    t = inline.to_device(np.arange(12, dtype=np.float32).reshape(3, 4).T)  # made contiguous
    np.testing.assert_array_equal(t.to_host(), np.arange(12, dtype=np.float32).reshape(3, 4).T)


@pytest.mark.gpu
def test_device_printf_is_captured():
    mod = inline.load(LAUNCH, name="launch")
    with inline.capture_stdout() as out:
        mod.say_launch(7, grid=2, block=3)
    lines = sorted(out.text.splitlines())
    want = sorted(f"inline tag=7 block={b} thread={t}" for b in range(2) for t in range(3))
    assert lines == want


@pytest.mark.gpu
def test_printf_checker_fails_on_a_missing_line():
    """The capture test's check is shown to fail: a launch with one thread fewer misses a line."""
    mod = inline.load(LAUNCH, name="launch")
    with inline.capture_stdout() as out:
        mod.say_launch(8, grid=2, block=2)
    want = sorted(f"inline tag=8 block={b} thread={t}" for b in range(2) for t in range(3))
    assert sorted(out.text.splitlines()) != want


@pytest.mark.gpu
def test_checker_fails_on_a_wrong_answer(rng):
    mod = inline.load(LAUNCH, name="launch")
    n = 1000
    x = rng.standard_normal(n).astype(np.float32) + 2.0
    y = rng.standard_normal(n).astype(np.float32) + 2.0
    out = y.copy()
    mod.saxpy(np.float32(2.0), x, out, n)
    wrong_ref = 2.0 * x.astype(np.float64) - y  # the sign of y flipped
    assert rel_err(out, wrong_ref) > 1e-5


@pytest.mark.gpu
def test_launch_error_raises_and_the_next_call_works():
    mod = inline.load(LAUNCH, name="launch")
    with pytest.raises(CudaError, match="cudaErrorInvalid(Configuration|Value)"):  # CUDA 13 says Value
        mod.say_launch(0, grid=1, block=4096)  # more threads per block than any GPU allows
    xd = inline.to_device(np.ones(4, np.float32))
    yd = inline.to_device(np.ones(4, np.float32))
    mod.saxpy_launch(1.0, xd, yd, 4, grid=1, block=4)
    np.testing.assert_array_equal(yd.to_host(), np.full(4, 2.0, np.float32))


# --- a library whose load-time code fails: refused in one line, the loading process lives on ------------

LOAD_TIME = r"""#include <csignal>
#include <cstdio>
#include <cstdlib>
__attribute__((constructor)) static void at_load() {
    fprintf(stderr, "constructor runs\n");
    MISBEHAVE;
}
extern "C" long twice(long x) { return 2 * x; }
"""

LOADER = r"""
import sys
sys.path.insert(0, {root!r})
from harness.calling import inline
inline.PROBE_TIMEOUT_S = 5
try:
    inline.load({src!r}, name="ctor")
except inline.InlineLoadError as e:
    print("REFUSED", e._render_traceback_()[0])
    sys.exit(0)
print("LOADED")
"""


@pytest.mark.parametrize("misbehave, says", [
    ("raise(SIGSEGV)", "was killed by SIGSEGV while loading"),
    ("abort()", "was killed by SIGABRT while loading"),
    ('printf("passed\\n"); exit(0)', "exited with status 0 while loading, before the load was done"),
    ("for (volatile int spin = 1; spin;) {}", "did not finish loading within 5 s"),
], ids=["segfault", "abort", "exit0", "loop"])
def test_a_library_whose_load_time_code_fails_is_refused_in_one_line(cache, misbehave, says):
    """inline.load (and %%cuda_lib through it) loads a user's library into the caller's process: a
    constructor that crashes, aborts, exits or never returns used to take that process (a notebook's
    kernel) down with it, or hang it. The load is tried in a child with a deadline first."""
    root = str(Path(__file__).resolve().parents[2])
    src = LOAD_TIME.replace("MISBEHAVE", misbehave)
    p = subprocess.run([sys.executable, "-c", LOADER.format(root=root, src=src)], capture_output=True, text=True,
                       timeout=240, env={**os.environ, "CUDALAB_CACHE": str(cache)})
    assert p.returncode == 0, f"the loading process died: status {p.returncode}\n{p.stderr[-2000:]}"
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("REFUSED InlineLoadError: inline.load('ctor'): "), p.stdout
    assert says in lines[0] and "(its last line: constructor runs)" in lines[0]


def test_a_library_with_a_quiet_constructor_loads(cache):
    mod = inline.load(LOAD_TIME.replace("MISBEHAVE", "(void)0"), name="ctor")
    assert mod.twice(21) == 42

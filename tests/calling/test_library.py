"""The loader: cdef from the header, argument checks before any call, codes to exceptions."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from conftest import GPU_OK
from harness.base import context, errors
from harness.base.errors import CudaError, NoGPUError
from harness.calling import cudart, library
from harness.compile import build

# A plain-C stand-in for a program library, so the marshalling is exercised by real calls on any
# machine: it scales an array, and fails with a chosen code.
FAKE_C = r"""
#include <string.h>
int fake_scale(float *out, const float *in, int n, float s) {
    for (int i = 0; i < n; ++i) out[i] = in[i] * s;
    return 0;
}
int fake_fail(int code) { return code; }
static int sticky = 0;
int fake_fault(void) { sticky = 700; return 700; }
int fake_count(int n) { return n; }
int fake_strlen(const char *s, int *out) { *out = (int)strlen(s); return 0; }
static const char *kNames[] = {"02_b", "01_a", "03_c"};  /* not sorted: the table's order is kept */
int fake_variant_count(void) { return 3; }
const char *fake_variant_name(int i) { return i >= 0 && i < 3 ? kNames[i] : 0; }
static const char *kTags[] = {"fast", "", "fast exact"};
const char *fake_variant_tags(int i) { return i >= 0 && i < 3 ? kTags[i] : 0; }
const char *cudalab_error_name(int c) { return c == 1 ? "cudaErrorInvalidValue" : "cudaErrorNoDevice"; }
const char *cudalab_error_string(int c) { return c == 1 ? "invalid argument" : "no CUDA-capable device is detected"; }
int cudalab_clear_error(void) { return sticky; }
int cudalab_context_check(void) { return sticky; }  /* a sticky error outlives every call, as on a GPU */
"""
FAKE_H = """/* fake program */
#ifndef FAKE_H
#include "cudalab.h"
#define FAKE_H
#ifdef __cplusplus
extern "C" {
#endif
cudalab_status fake_scale(float *out, const float *in, int n, float s);
cudalab_status fake_fail(int code);
cudalab_status fake_strlen(const char *s, int *out);
cudalab_status fake_fault(void);
int fake_count(int n);
int fake_variant_count(void);
const char *fake_variant_name(int i);
const char *fake_variant_tags(int i);
#ifdef __cplusplus
}
#endif
#endif
"""


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    d = tmp_path_factory.mktemp("fake")
    (d / "fake.c").write_text(FAKE_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libfake.so"), str(d / "fake.c")], check=True)
    return library.Library("fake", d / "libfake.so", library.header_to_cdef(FAKE_H))


def test_header_to_cdef_drops_preprocessor_and_extern_c():
    cdef = library.header_to_cdef(FAKE_H)
    assert "#" not in cdef and "extern" not in cdef
    assert "cudalab_status fake_scale(float *out, const float *in, int n, float s);" in cdef


def test_arrays_pass_through(fake, rng):
    x = rng.standard_normal(37).astype(np.float32)
    out = np.full_like(x, np.nan)
    fake.fake_scale(out, x, x.size, 2.5)
    np.testing.assert_array_equal(out, x * np.float32(2.5))


def test_wrong_dtype_is_rejected_before_the_call(fake):
    out = np.full(4, np.nan, dtype=np.float32)
    with pytest.raises(TypeError, match="float32"):
        fake.fake_scale(out, np.ones(4, dtype=np.float64), 4, 1.0)
    assert np.isnan(out).all(), "nothing may run when an argument is rejected"


def test_non_contiguous_is_rejected(fake):
    x = np.ones(8, dtype=np.float32)[::2]
    with pytest.raises(ValueError, match="contiguous"):
        fake.fake_scale(np.empty(4, np.float32), x, 4, 1.0)


def test_read_only_output_is_rejected_but_const_input_is_fine(fake):
    out = np.empty(4, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        fake.fake_scale(out, np.ones(4, np.float32), 4, 1.0)
    x = np.arange(4, dtype=np.float32)
    x.flags.writeable = False
    res = np.full(4, np.nan, np.float32)
    fake.fake_scale(res, x, 4, 2.0)
    np.testing.assert_array_equal(res, 2 * x)


def test_const_params_from_header():
    assert library.const_params(library.header_to_cdef(FAKE_H))["fake_scale"] == [False, True, False, False]


def test_scalar_types_are_checked(fake):
    a = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="integer"):
        fake.fake_scale(a, a, 4.0, 1.0)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        fake.fake_scale(a, a, 4)
    with pytest.raises(TypeError, match="numpy array"):
        fake.fake_scale([1.0], a, 1, 1.0)


def test_strings_pass_as_const_char(fake):
    out = np.zeros(1, np.int32)
    fake.fake_strlen("02_tiled", out)
    assert out[0] == 8
    with pytest.raises(TypeError, match="const char"):
        fake.fake_scale("oops", np.ones(1, np.float32), 1, 1.0)


def test_nonzero_codes_raise_typed_errors(fake):
    with pytest.raises(CudaError) as ei:
        fake.fake_fail(1)
    assert (ei.value.code, ei.value.name) == (1, "cudaErrorInvalidValue")
    assert not isinstance(ei.value, NoGPUError)
    with pytest.raises(NoGPUError, match="no CUDA device"):
        fake.fake_fail(100)


def test_check_array_shapes():
    a = np.ones((3, 4), np.float32)
    assert library.check_array(a, "a", np.float32, ndim=2) is a
    with pytest.raises(ValueError, match=r"shape \(4, 3\)"):
        library.check_array(a, "a", np.float32, shape=(4, 3))
    with pytest.raises(ValueError, match="2-D"):
        library.check_array(a.ravel(), "a", np.float32, ndim=2)
    with pytest.raises(TypeError, match="float32"):
        library.check_array(a.astype(np.float64), "a", np.float32)
    t = library.check_array(a.T, "a", np.float32, contiguous="copy")
    assert t.flags.c_contiguous and np.array_equal(t, a.T)


@pytest.fixture
def fake_loaded(fake, monkeypatch):
    """library.load("fake") is the stand-in; read_table's per-process cache is emptied around the test."""
    monkeypatch.setattr(library, "load", lambda prog: fake if prog == "fake" else pytest.fail(prog))
    library.read_table.cache_clear()
    yield fake
    library.read_table.cache_clear()


def test_read_table_reads_the_c_table_in_its_order(fake_loaded):
    assert library.read_table("fake") == ("02_b", "01_a", "03_c")
    assert library.read_table("fake", "variant") is library.read_table("fake", "variant")  # read once a process
    # one read however it is asked for: the default kind and the named one share it
    library.read_table.cache_clear()
    calls = []
    real = library.load
    library.load = lambda prog: calls.append(prog) or real(prog)
    try:
        library.read_table("fake")
        library.read_table("fake", "variant")
        library.read_table("fake", kind="variant")
    finally:
        library.load = real
    assert calls == ["fake"]
    assert [library.table_index("fake", "variant", n) for n in ("01_a", "03_c")] == [1, 2]
    with pytest.raises(ValueError, match=r"^unknown fake variant 'nope'; valid: 02_b, 01_a, 03_c$"):
        library.table_index("fake", "variant", "nope")


def test_a_kind_of_variant_is_what_the_tables_tags_say(fake_loaded):
    assert library.read_table("fake", "tags") == ("fast", "", "fast exact")
    assert library.tagged("fake", "fast") == ("02_b", "03_c")  # the variant table's order
    assert library.tagged("fake", "exact") == ("03_c",)
    assert library.tagged("fake", "fas") == () and library.tagged("fake", "") == ()  # whole words only


def test_read_table_refuses_an_unknown_kind_and_a_missing_table(fake_loaded):
    with pytest.raises(ValueError, match="kind must be 'variant', 'config', 'tp_gemm', 'tp_allreduce' or 'tags'"):
        library.read_table("fake", "configs")
    with pytest.raises(AttributeError, match="fake_config_count"):  # the stand-in has no config table
        library.read_table("fake", "config")
    with pytest.raises(AttributeError):
        library.table_index("fake", "config", "x")


def test_missing_library_says_to_build(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "lib_path", lambda prog: tmp_path / f"lib{prog}.so")
    library.load.cache_clear()
    try:
        with pytest.raises(FileNotFoundError, match="invoke build"):
            library.load("hello")
    finally:
        library.load.cache_clear()
    with pytest.raises(ValueError, match="no program 'no_such_program'"):
        library.load("no_such_program")


@pytest.mark.skipif(GPU_OK, reason="checks the no-GPU path; this machine has a GPU")
def test_call_without_gpu_raises_no_gpu_error():
    build.build(build.targets("hello"))
    lib = library.load("hello")
    with pytest.raises(NoGPUError) as ei:
        lib.hello_gpu()
    assert ei.value.code in (35, 100)
    assert "driver" in str(ei.value) or "device" in str(ei.value)


@pytest.mark.skipif(GPU_OK, reason="checks the no-GPU path; this machine has a GPU")
def test_cudart_without_gpu_raises_no_gpu_error():
    with pytest.raises(NoGPUError):
        cudart.device_count()


@pytest.mark.gpu
def test_bad_launch_through_library_is_a_cuda_error():
    build.build(build.targets("hello"))
    lib = library.load("hello")
    too_many = cudart.attribute("max_threads_per_block") * 2
    with pytest.raises(CudaError) as ei:
        lib.hello_loop(1, too_many)
    # CUDA 13 reports an oversized block as InvalidValue; older runtimes said InvalidConfiguration.
    assert ei.value.name in ("cudaErrorInvalidConfiguration", "cudaErrorInvalidValue")
    lib.hello_gpu()  # the error was not sticky: the next call works


@pytest.mark.gpu
def test_device_buffers_round_trip(rng):
    x = rng.standard_normal(1001).astype(np.float32)
    with cudart.DeviceBuffer.from_array(x) as buf:
        out = np.full_like(x, np.nan)
        buf.to_host(out)
    np.testing.assert_array_equal(out, x)


def test_a_plain_int_return_is_a_value_and_cudalab_status_a_status(fake):
    assert fake.fake_count(3) == 3  # would raise CudaError(3) if every int were a status
    assert "fake_count" not in fake._status and "fake_fail" in fake._status


def test_ints_that_do_not_fit_name_the_parameter_and_the_limit(fake):
    a = np.ones(1, np.float32)
    with pytest.raises(ValueError, match=r"argument 3 \(n\): must be at most 2147483647 .*got 1099511627776"):
        fake.fake_scale(a, a, 2**40, 1.0)
    with pytest.raises(OverflowError, match=r"\(n\): must be at least -2147483648"):
        fake.fake_scale(a, a, -(2**40), 1.0)
    assert library.param_names("int f(const char *variant, int, float *out, int n);") == \
        {"f": ["variant", None, "out", "n"]}


def test_prepare_marshals_once_and_checks_the_status(fake):
    x, out = np.arange(4, dtype=np.float32) + 1, np.zeros(4, np.float32)
    launch = fake.prepare("fake_scale", out, x, 4, 2.0)
    x[:] = 10  # the prepared call holds the arrays themselves, not copies
    launch(None)
    np.testing.assert_array_equal(out, 20)
    with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
        fake.prepare("fake_fail", 1)(None)
    with pytest.raises(TypeError, match="float32"):  # checked once, at prepare time
        fake.prepare("fake_scale", out, np.ones(4), 4, 2.0)


def test_after_a_sticky_error_every_call_says_the_context_is_lost(fake, monkeypatch):
    monkeypatch.setattr(context, "_lost", None)
    with pytest.raises(errors.ContextLostError, match="restart"):
        fake.fake_fault()
    with pytest.raises(errors.ContextLostError, match="lost earlier"):
        fake.fake_scale(np.ones(1, np.float32), np.ones(1, np.float32), 1, 1.0)


def test_table_attributes_read_the_table_only_when_asked(monkeypatch):
    """A program module's VARIANTS (and its other table-read names) come from the library when first
    asked for, never at import; any other name is the module's usual AttributeError."""
    calls = []
    monkeypatch.setattr(library, "read_table", lambda prog, kind="variant": calls.append((prog, kind)) or ("a", "b"))
    getattr_ = library.table_attributes("harness.programs.x", "x", MORE=lambda: 7)
    assert calls == []
    assert getattr_("VARIANTS") == ("a", "b") and calls == [("x", "variant")]
    assert getattr_("MORE") == 7
    with pytest.raises(AttributeError, match="module 'harness.programs.x' has no attribute 'NOPE'"):
        getattr_("NOPE")
    from harness.programs import square

    assert not hasattr(square, "NOPE")  # hasattr relies on the AttributeError


def test_check_int_refuses_what_is_no_integer_and_what_is_out_of_range():
    assert library.check_int(np.int64(5), "n", 0, 9) == 5 and type(library.check_int(np.int64(5), "n")) is int
    for bad in (True, 2.0, "3", None):
        with pytest.raises(TypeError, match="n must be an integer"):
            library.check_int(bad, "n", 0, 9)
    with pytest.raises(ValueError, match="n must be at least 0, got -1"):
        library.check_int(-1, "n", 0, 9)
    with pytest.raises(ValueError, match=r"n must be at most 9 \(a C int\), got 10"):
        library.check_int(10, "n", 0, 9, " (a C int)")


def test_table_index_refuses_a_name_that_is_no_string(fake_loaded):
    for bad in (1, None, b"01_a"):
        with pytest.raises(TypeError, match="variant must be a string"):
            library.table_index("fake", "variant", bad)

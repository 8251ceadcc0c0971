"""histogram: the numpy reference, the Python twins and the contention counts on the CPU; on a GPU every
variant and CUB against numpy, exactly, on uniform and skewed bytes of ragged sizes with poisoned bins;
bad arguments refused before any launch, bad argv in one line."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from conftest import built_names, ensure_built, poison, refuse_loads_after_the_table
from harness.calling import cudart, library
from harness.programs import histogram as prog

# Ragged against everything the kernels tile by: 1, under and over a warp, a 16-byte chunk, a block of
# 256 and of 512 threads' chunks (8192 bytes), and a prime.
CPU_SIZES = [1, 15, 16, 17, 33, 255, 256, 257, 1000, 4099]
GPU_SIZES = [1, 17, 255, 256, 257, 4099, 8192, 1 << 20, 1000003, (1 << 24) + 5]


def _variants():
    ensure_built(prog.PROGRAM)
    return library.read_table(prog.PROGRAM)


# --- on the CPU ----------------------------------------------------------------------------------------

def test_the_variant_table_is_read_from_the_built_library():
    names = _variants()
    assert [v[:3] for v in names] == ["01_", "02_", "03_"]
    assert prog.DEFAULT_VARIANT in names and prog.VARIANTS == names
    lib = library.load(prog.PROGRAM)
    assert lib.histogram_variant_count() == len(names)
    assert lib.histogram_variant_name(len(names)) == lib.ffi.NULL and lib.histogram_variant_name(-1) == lib.ffi.NULL


@pytest.mark.parametrize("kind", prog.INPUTS)
@pytest.mark.parametrize("n", CPU_SIZES)
def test_every_twin_matches_numpy_on_ragged_sizes(kind, n):
    x = prog.make_input(kind, n, seed=n)
    ref = prog.reference(x)
    assert int(ref.sum()) == n
    for v in _variants():
        # (1, 1, 1) and (7, 1, 9): grids of fewer threads than 03's head and tail bytes
        for threads, blocks, misalign in ((32, 1, 0), (64, 3, 3), (96, 2, 15), (1, 1, 1), (7, 1, 9)):
            prog.check_counts(prog.twin(x, v, threads=threads, blocks=blocks, misalign=misalign), ref)


def test_the_twins_need_their_zeroing_and_barriers():
    """The simulator fills shared memory with a marker: a twin that skipped the zeroing would count
    from 2^32-1. Here the counts agree, so the zeroing ran before the first add."""
    x = prog.skewed_bytes(4099, seed=3)
    for v in _variants():
        got = prog.twin(x, v, threads=64, blocks=2)
        assert got.dtype == np.uint32 and int(got.max()) <= x.size


def test_the_checker_fails_a_wrong_answer():
    x = prog.uniform_bytes(5000, seed=1)
    good = prog.twin(x, prog.DEFAULT_VARIANT, threads=64, blocks=2)
    prog.check_counts(good, prog.reference(x))
    off_by_one = prog.reference(x)
    off_by_one[37] += 1
    with pytest.raises(AssertionError, match="1 bin\\(s\\) wrong, first bin 37"):
        prog.check_counts(good, off_by_one)
    moved = good.copy()  # same total, one count in the wrong bin: a sum check would miss it
    moved[3] -= 1
    moved[4] += 1
    with pytest.raises(AssertionError, match="2 bin\\(s\\) wrong, first bin 3"):
        prog.check_counts(moved, prog.reference(x))
    with pytest.raises(AssertionError, match="first bin 0"):
        prog.check_counts(poison((256,), np.uint32), prog.reference(x))
    with pytest.raises(AssertionError, match="256 bins"):
        prog.check_counts(good[:255], prog.reference(x)[:255])


def test_the_inputs_are_what_their_names_say():
    u = prog.uniform_bytes(1 << 20, seed=0)
    s = prog.skewed_bytes(1 << 20, seed=0)
    ru, rs = prog.reference(u), prog.reference(s)
    assert ru.min() > 0.8 * (1 << 12) and ru.max() < 1.2 * (1 << 12)  # 4096 a bin, give or take
    hot = rs[prog.HOT_VALUE] / s.size
    assert 0.89 < hot < 0.92  # 90% set to the hot value, plus its uniform share of the rest
    assert np.array_equal(prog.uniform_bytes(1000, seed=5), prog.uniform_bytes(1000, seed=5))
    with pytest.raises(ValueError, match="uniform, skewed"):
        prog.make_input("zipf", 10)
    with pytest.raises(ValueError, match="fraction"):
        prog.skewed_bytes(10, fraction=1.5)


def test_the_contention_counts():
    n = 1 << 16
    u = prog.contention(prog.uniform_bytes(n, seed=2)).set_index("variant")
    s = prog.contention(prog.skewed_bytes(n, seed=2)).set_index("variant")
    v1, v2, v3 = _variants()
    assert u.at[v1, "global_atomics"] == n and s.at[v1, "global_atomics"] == n
    # 02 flushes one atomic per bin its 256 bytes touched: about 256 * (1 - e^-1) = 162 of them for
    # uniform bytes, about 26 when 90% are one value.
    assert 0.55 < u.at[v2, "per_byte"] < 0.7 and 0.07 < s.at[v2, "per_byte"] < 0.13
    assert u.at[v3, "global_atomics"] <= 256 * 132 * 4
    # 90% one value: about 29 lanes of 32 on one counter; per-lane copies take it to exactly 1.
    assert s.at[v1, "lanes_serialised"] > 25 and s.at[v2, "lanes_serialised"] > 25
    assert u.at[v1, "lanes_serialised"] < 3 and 2.5 < u.at[v2, "lanes_serialised"] < 5
    assert u.at[v3, "lanes_serialised"] == 1.0 and s.at[v3, "lanes_serialised"] == 1.0
    with pytest.raises(ValueError, match="multiple of 512"):
        prog.contention(np.zeros(100, np.uint8))


def test_the_picture_is_drawn_on_the_cpu(tmp_path):
    from analysis import histogram as draw

    _variants()
    data = prog.viz_data(n=1 << 14)
    (path,) = draw.plot(data, tmp_path)
    assert path.name == "histogram_contention.png" and path.stat().st_size > 10_000
    with pytest.raises(ValueError, match="at least 512"):
        prog.viz_data(n=100)


def test_on_cpu_runs_every_twin_and_refuses_bad_args():
    _variants()
    df, how = prog.on_cpu(["700"])
    assert len(df) == 2 * len(prog.VARIANTS) and set(df["check"]) == {"pass"} and "simulator" in how
    for bad, says in ((["x"], "one argument N"), (["0"], "1..20000"), (["1", "2"], "one argument N")):
        with pytest.raises(ValueError, match=says):
            prog.on_cpu(bad)


def test_bad_arguments_are_refused_before_any_launch(monkeypatch):
    refuse_loads_after_the_table(monkeypatch, prog.PROGRAM)
    x = prog.uniform_bytes(100)
    with pytest.raises(TypeError, match="x must be uint8"):
        prog.histogram(x.astype(np.int8))
    with pytest.raises(TypeError, match="x must be a numpy array"):
        prog.histogram(list(x))
    with pytest.raises(ValueError, match="1-D"):
        prog.histogram(x.reshape(10, 10))
    with pytest.raises(ValueError, match="C-contiguous"):
        prog.histogram(x[::2])
    with pytest.raises(ValueError, match="unknown histogram variant 'nope'"):
        prog.histogram(x, "nope")
    with pytest.raises(TypeError, match="variant must be a string"):
        prog.histogram(x, 3)
    with pytest.raises(TypeError, match="out must be uint32"):
        prog.histogram(x, out=np.zeros(256, np.int32))
    with pytest.raises(ValueError, match="shape"):
        prog.histogram(x, out=np.zeros(255, np.uint32))
    with pytest.raises(TypeError, match="x must be uint8"):
        prog.histogram_cub(x.astype(np.float32))
    with pytest.raises(ValueError, match="at least 0"):
        prog.histogram_dev(prog.DEFAULT_VARIANT, None, -1, None)
    with pytest.raises(ValueError, match=r"at most 2147483647 bytes \(2\^31-1\)"):
        prog.histogram_dev(prog.DEFAULT_VARIANT, None, 2**31, None)
    with pytest.raises(TypeError, match="n must be an integer"):
        prog.histogram_dev(prog.DEFAULT_VARIANT, None, 5.0, None)
    with pytest.raises(ValueError, match="blocks must be at least 0"):
        prog.histogram_dev(prog.DEFAULT_VARIANT, None, 5, None, blocks=-1)
    with pytest.raises(ValueError, match="threads must be at most 1024"):
        prog.histogram_dev(prog.DEFAULT_VARIANT, None, 5, None, threads=2048)
    with pytest.raises(ValueError, match="one thread per byte"):
        prog.histogram_dev(prog.VARIANTS[0], None, 5, None, blocks=4)
    with pytest.raises(ValueError, match=r"at most 2147483647 bytes \(2\^31-1\)"):
        prog.cub_temp_bytes(2**31)
    with pytest.raises(ValueError, match="misalign"):
        prog.twin(x, misalign=16)


@pytest.mark.parametrize("args,says", [(["0"], "N must be a positive integer"), (["x"], "N must be an integer"),
                                       (["2147483648"], "N must be at most 2147483647"),
                                       (["--variant", "nope"], "unknown variant 'nope'"),
                                       (["--input", "zipf"], "--input must be uniform or skewed"),
                                       (["--reps", "0"], "--reps"), (["--bogus"], "unknown option --bogus"),
                                       (["1", "2"], "unexpected argument '2'")])
def test_the_executable_refuses_bad_argv_in_one_line(args, says):
    exe = ensure_built(prog.PROGRAM, "exe")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and r.stdout == "", r
    assert len(r.stderr.strip().splitlines()) <= 2  # the error, and the usage line where it helps


def test_the_bench_cases_name_ceilings_that_exist():
    from harness.measuring import bench

    names = _variants()
    ceilings = prog.ceilings()
    for quick in (True, False):
        cases = prog.bench_cases(quick)
        assert {c.ceiling for c in cases} <= set(ceilings) | {"memcpy"}
        for kind in prog.INPUTS:
            assert {c.variant for c in cases if c.size.endswith(kind) and c.ceiling.startswith("cub@")} == set(names)
        assert all(c.amount == c.bytes == c.kwargs["n"] for c in cases)
        held = [c for c in cases if c.target is not None]
        assert [(c.variant, c.size, c.ceiling, c.target) for c in held] == (
            [] if quick else [(prog.DEFAULT_VARIANT, "2^28 uniform", "cub@uniform-2^28", 0.9)])
        assert all(c.quick == quick for c in cases) or not quick
    for name, make in ceilings.items():
        c = make(False)
        assert isinstance(c, bench.TimedCeiling) and c.name == name
        assert c.target == "harness.programs.histogram:cub_setup" and c.unit == "GB/s" and c.amount == c.kwargs["n"]


def test_profile_and_sanitize_run_every_variant():
    names = _variants()
    runs = prog.sanitize_args()
    for v in names:
        assert prog.profile_args(v)[:2] == ["--variant", v]
        assert {f"{v} ragged", f"{v} skewed", f"{v} one byte"} <= set(runs)
    assert prog.profile_args()[1] == prog.DEFAULT_VARIANT


# --- on a GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: prog.VARIANTS, "histogram"))
@pytest.mark.parametrize("kind", prog.INPUTS)
@pytest.mark.parametrize("n", GPU_SIZES)
def test_every_variant_matches_numpy_exactly(variant, kind, n):
    for seed in (0, 1):
        x = prog.make_input(kind, n, seed)
        out = poison((256,), np.uint32)  # 0xABABABAB in every bin: a bin left unwritten shows
        assert prog.histogram(x, variant, out=out) is out
        prog.check_counts(out, prog.reference(x))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", prog.INPUTS)
@pytest.mark.parametrize("n", [0, 1, 4099, 1000003])
def test_cub_matches_numpy_exactly(kind, n):
    x = prog.make_input(kind, n, seed=4)
    out = poison((256,), np.uint32)
    prog.check_counts(prog.histogram_cub(x, out=out), prog.reference(x))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: prog.VARIANTS, "histogram"))
def test_an_empty_input_gives_zero_bins(variant):
    out = poison((256,), np.uint32)
    prog.histogram(np.zeros(0, np.uint8), variant, out=out)
    assert not out.any()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: prog.VARIANTS, "histogram"))
def test_one_value_everywhere_is_counted_exactly(variant):
    """The worst contention: every lane of every warp on one counter."""
    for value in (0, 255):
        x = np.full((1 << 22) + 3, value, dtype=np.uint8)
        prog.check_counts(prog.histogram(x, variant), prog.reference(x))


def _offset(buf, offset: int):
    """A device pointer `offset` bytes into buf, as the library's own cffi type."""
    lib = library.load(prog.PROGRAM)
    return lib.ffi.cast("unsigned char *", int(cudart.ffi.cast("uintptr_t", buf.ptr)) + offset)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: prog.VARIANTS, "histogram"))
def test_the_device_entry_point_zeroes_poisoned_bins_at_any_alignment(variant):
    """Device bins poisoned before each call, the input starting 0..15 bytes past a 16-byte boundary
    (03's head path), and a second call on the same bins (which must not add to the first)."""
    x = prog.skewed_bytes(100_003, seed=7)
    with cudart.DeviceBuffer(x.size + 16) as d_in, cudart.DeviceBuffer(4 * 256) as d_bins:
        for offset in range(16):
            n = x.size - offset
            cudart.memcpy_htod(_offset(d_in, offset), x[:n])
            d_bins.fill_bytes(0xAB)
            for _ in range(2):
                prog.histogram_dev(variant, _offset(d_in, offset), n, d_bins)
            cudart.synchronize()
            prog.check_counts(d_bins.to_host(np.empty(256, np.uint32)), prog.reference(x[:n]))


@pytest.mark.gpu
@pytest.mark.parametrize("blocks,threads", [(1, 32), (3, 96), (7, 1024), (1000, 128), (1, 1), (1, 7), (2, 5)])
@pytest.mark.parametrize("n,offset", [(3_000_017, 0), (47, 3), (15, 0)])
def test_the_coarsened_kernel_is_right_on_any_grid(blocks, threads, n, offset):
    """Any grid counts every byte: a misaligned head and a tail of up to 15 bytes each, even with fewer
    threads in the whole grid than those bytes."""
    x = prog.uniform_bytes(n + offset, seed=9)
    with cudart.DeviceBuffer.from_array(x) as d_in, cudart.DeviceBuffer(4 * 256) as d_bins:
        d_bins.fill_bytes(0xAB)
        prog.histogram_dev(prog.DEFAULT_VARIANT, _offset(d_in, offset), n, d_bins, blocks=blocks, threads=threads)
        cudart.synchronize()
        prog.check_counts(d_bins.to_host(np.empty(256, np.uint32)), prog.reference(x[offset:]))


@pytest.mark.gpu
def test_the_checker_fails_the_gpus_answer_against_a_perturbed_reference():
    x = prog.uniform_bytes(1 << 20, seed=11)
    got = prog.histogram(x)
    prog.check_counts(got, prog.reference(x))
    wrong = prog.reference(x)
    wrong[200] -= 1
    wrong[201] += 1
    with pytest.raises(AssertionError, match="first bin 200"):
        prog.check_counts(got, wrong)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", prog.INPUTS)
@pytest.mark.parametrize("n", [1, 4099, 1000003])
def test_the_executable_checks_itself(kind, n):
    for v in (*prog.VARIANTS, "cub"):  # cub: the ceiling, through the same check (for the profilers)
        df = prog.run(str(n), "--variant", v, "--input", kind, "--seed", "7", "--reps", "1")
        row = df.iloc[0]
        assert len(df) == 1 and row["check"] == "pass" and int(row["n"]) == n and int(row["mismatches"]) == 0
        assert row["variant"] == v and row["input"] == kind

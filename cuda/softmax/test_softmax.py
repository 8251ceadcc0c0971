"""softmax: the numpy reference, the Python twins and the checker on the CPU; on a GPU, every variant
against the float64 reference on random inputs of ragged shapes with poisoned outputs, scores spanning
+-1000, and the executable checking itself; arguments refused before any launch."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from conftest import built_names, ensure_built, poison, refuse_loads_after_the_table
from harness import programs
from harness.calling import library
from harness.calling.results import relative_error
from harness.measuring import bench
from harness.programs import softmax as prog

RAGGED_COLS = [1, 31, 33, 1000, 4097]


def _scores(rows, cols, seed, span=10.0):
    return np.random.default_rng(seed).uniform(-span, span, (rows, cols)).astype(np.float32)


def _variants():
    return built_names(lambda: library.read_table(prog.PROGRAM), prog.PROGRAM)


# --- the reference and what it guards against -------------------------------------------------------

def test_the_max_keeps_scores_of_1000_finite_and_the_formula_without_it_overflows():
    x = _scores(4, 257, 0, span=1000.0)
    assert x.max() > 900 and x.min() < -900
    ref = prog.reference(x)
    assert np.all(np.isfinite(ref)) and np.allclose(ref.sum(axis=1), 1.0, rtol=1e-12)
    bad = prog.unstable(x)
    assert np.isnan(bad).any(), "exp(x) of a score above ~88.7 is inf in float32, and inf / inf is NaN"
    assert relative_error(bad, ref) == float("inf")
    # The same formula on small scores is right: the fault is only the overflow.
    small = _scores(4, 257, 0, span=5.0)
    assert relative_error(prog.unstable(small), prog.reference(small)) <= 1e-6


def test_the_reference_is_shift_invariant_and_scales():
    x = _scores(3, 50, 1)
    assert np.allclose(prog.reference(x), prog.reference(x.astype(np.float64) + 123.0), rtol=1e-9, atol=0)
    assert np.allclose(prog.reference(x, scale=0.5), prog.reference(0.5 * x.astype(np.float64)), rtol=1e-12)
    assert np.allclose(prog.reference(x, scale=0.0), 1.0 / 50)


# --- the twins on the simulator -----------------------------------------------------------------------

@pytest.mark.parametrize("cols", RAGGED_COLS)
@pytest.mark.parametrize("variant,threads", [("01_naive", 2), ("02_block_row", 32), ("02_block_row", 4),
                                             ("04_online", 32), ("04_online", 8)])
def test_each_twin_matches_numpy_on_ragged_rows(variant, threads, cols):
    rows = 3 if cols < 4097 else 1
    x = _scores(rows, cols, cols)
    assert relative_error(prog.twin(x, variant, threads), prog.reference(x)) <= prog.tolerance(variant, cols)


@pytest.mark.parametrize("variant", prog.TWINS)
def test_each_twin_is_stable_on_scores_spanning_1000(variant):
    x = _scores(3, 300, 7, span=1000.0)
    out = prog.twin(x, variant, 16)
    assert np.all(np.isfinite(out)) and relative_error(out, prog.reference(x)) <= prog.TOL


@pytest.mark.parametrize("scale", [0.125, -0.5, 0.0, 3.0])
def test_the_online_twin_folds_the_scale(scale):
    x = _scores(2, 97, 3, span=100.0)
    assert relative_error(prog.twin(x, "04_online", 16, scale=scale), prog.reference(x, scale)) <= prog.TOL


def test_the_online_trace_rescales_when_the_max_rises():
    x = prog.picture_row()
    trace, p = prog.online_trace(x, 4)
    assert len(trace) == x.size and set(trace["thread"]) == {0, 1, 2, 3}
    merged_m, merged_d = np.float32(-np.inf), np.float32(0)
    for _, tr in trace.groupby("thread"):
        assert (tr["max"].diff().dropna() >= 0).all(), "a running max never falls"
        assert list(tr["column"]) == sorted(tr["column"]) and (tr["column"].diff().dropna() == 4).all()
        rises = tr["max"].diff().to_numpy()[1:] > 0
        drops = tr["sum"].diff().to_numpy()[1:] < 0
        assert not (drops & ~rises).any(), "the sum only shrinks when a new max rescales it"
        last = tr.iloc[-1]
        merged_m, merged_d = prog.merge(merged_m, merged_d, np.float32(last["max"]), np.float32(last["sum"]))
    x64 = x.astype(np.float64)
    assert merged_m == x.max()
    assert np.isclose(float(merged_d), np.exp(x64 - x64.max()).sum(), rtol=1e-6)
    assert relative_error(p, prog.reference(x)) <= prog.TOL


def test_merge_of_two_empty_pairs_stays_empty():
    m, d = prog.merge(np.float32(-np.inf), np.float32(0), np.float32(-np.inf), np.float32(0))
    assert m == -np.inf and d == 0


def test_a_twin_refuses_what_its_kernel_cannot_do():
    x = _scores(2, 10, 0)
    with pytest.raises(ValueError, match="no Python twin for '03_warp_row'"):
        prog.twin(x, "03_warp_row")
    with pytest.raises(ValueError, match="power of two"):
        prog.twin(x, "02_block_row", 24)
    with pytest.raises(ValueError, match="only the online twin takes a scale"):
        prog.twin(x, "02_block_row", 8, scale=2.0)


# --- the checker ------------------------------------------------------------------------------------

def test_the_checker_fails_a_wrong_answer():
    x = _scores(5, 1000, 2)
    good = prog.twin(x, "02_block_row", 32)
    ref = prog.reference(x)
    assert relative_error(good, ref) <= prog.TOL
    off = ref.copy()
    off[3] *= 1.0 + 3 * prog.TOL  # one row's sum off by 3e-5: every element of the row scaled
    assert relative_error(good, off) > prog.TOL
    swapped = good.copy()
    swapped[1, [10, 11]] = swapped[1, [11, 10]]
    assert relative_error(swapped, ref) > prog.TOL
    unwritten = good.copy()
    unwritten[4, 999] = np.nan
    assert relative_error(unwritten, ref) == float("inf")


def test_the_naive_tolerance_grows_with_the_row_only_past_1e_5():
    assert prog.tolerance("01_naive", 1000) == prog.TOL
    assert prog.tolerance("01_naive", 100003) == pytest.approx(2e-9 * 100003)
    assert prog.tolerance("05_fused_scale", 100003) == prog.TOL


# --- without a GPU --------------------------------------------------------------------------------

def test_on_cpu_passes_every_row_and_shows_the_overflow():
    df, how = prog.on_cpu([])
    assert (df["check"] == "pass").all(), df
    assert set(prog.TWINS) <= set(df["variant"]) and set(RAGGED_COLS[:4]) <= set(df["cols"])
    assert "+-1000" in set(df["span"]) and "twins" in how
    df, _ = prog.on_cpu(["2", "45"])
    assert set(df[df["variant"].isin(prog.TWINS)]["cols"]) == {45}


@pytest.mark.parametrize("args,says", [(["7"], "ROWS COLS"), (["a", "b"], "ROWS COLS"),
                                       (["1000", "1000"], "ROWS \\* COLS <= 20000"), (["0", "5"], "must be >= 1")])
def test_on_cpu_refuses_bad_arguments_in_one_line(args, says):
    with pytest.raises(ValueError, match=says):
        prog.on_cpu(args)


def test_the_picture_draws_from_the_simulator(tmp_path):
    from analysis import softmax as draw

    data = prog.viz_data(simulate=True)
    assert data["simulated"] and "Python twin" in data["computed_on"]
    assert relative_error(data["p"], data["ref"]) <= prog.TOL
    paths = draw.plot(data, tmp_path)
    assert [p.name for p in paths] == ["softmax_online.png"] and paths[0].stat().st_size > 10_000
    assert programs.picture_owner("softmax") == prog.PROGRAM and "softmax" in programs.pictures()


# --- the library's table and argument checks (a build, no launch) -----------------------------------

def test_the_variant_table_is_numbered_in_the_learners_order():
    ensure_built(prog.PROGRAM)
    names = library.read_table(prog.PROGRAM)
    assert [n[:3] for n in names] == [f"{i:02d}_" for i in range(1, len(names) + 1)]
    assert prog.SCALED in names and prog.DEFAULT_VARIANT in names and set(prog.TWINS) <= set(names)
    assert prog.VARIANTS == names
    # The rows kept in registers: 03 up to a warp of 32 values a lane, 05 up to 1024 threads of 16.
    assert prog.register_cols("03_warp_row") == 1024 and prog.register_cols(prog.SCALED) == 16384
    assert prog.register_cols("01_naive") == 0


def test_bad_arguments_are_refused_before_any_launch(monkeypatch):
    x = _scores(4, 8, 0)
    refuse_loads_after_the_table(monkeypatch, prog.PROGRAM)
    with pytest.raises(ValueError, match="unknown softmax variant 'nope'"):
        prog.softmax(x, "nope")
    with pytest.raises(TypeError, match="variant must be a string"):
        prog.softmax(x, 3)
    with pytest.raises(ValueError, match="scale is 05_fused_scale's"):
        prog.softmax(x, "04_online", scale=0.5)
    with pytest.raises(ValueError, match="finite"):
        prog.softmax(x, prog.SCALED, scale=float("inf"))
    with pytest.raises(ValueError, match="finite float32"):
        prog.softmax(x, prog.SCALED, scale=1e39)
    with pytest.raises(TypeError, match="scale must be a number"):
        prog.softmax(x, prog.SCALED, scale="2")
    with pytest.raises(TypeError, match="float32"):
        prog.softmax(x.astype(np.float64))
    with pytest.raises(ValueError, match="2-D"):
        prog.softmax(x.ravel())
    with pytest.raises(ValueError, match="C-contiguous"):
        prog.softmax(np.asfortranarray(x))
    with pytest.raises(ValueError, match="shape"):
        prog.softmax(x, out=np.empty((4, 9), np.float32))
    with pytest.raises(ValueError, match="overlap"):
        prog.softmax(x, out=x)
    with pytest.raises(ValueError, match="rows must be >= 0"):
        prog.softmax_dev("02_block_row", None, None, -1, 8)
    with pytest.raises(ValueError, match="cols must be at most 2147483647"):
        prog.softmax_dev("02_block_row", None, None, 1, 2**31)
    with pytest.raises(TypeError, match="rows must be an integer"):
        prog.softmax_dev("02_block_row", None, None, 2.0, 8)


@pytest.mark.parametrize("args,says", [(["0"], "ROWS must be"), (["x"], "ROWS must be an integer"),
                                       (["4", "0"], "COLS must be"), (["65536", "65536"], "ROWS * COLS must be at most"),
                                       (["--variant", "nope"], "unknown variant 'nope'"),
                                       (["--variant", "04_online", "--scale", "0.5"], "--scale is 05_fused_scale's"),
                                       (["--variant", "all", "--scale", "0.5"], "--scale is 05_fused_scale's"),
                                       (["--variant", "05_fused_scale", "--scale", "inf"], "--scale"),
                                       (["--span", "0"], "--span must be in"), (["1", "2", "3"], "unexpected argument"),
                                       (["--bogus"], "unknown option --bogus")])
def test_the_executable_refuses_bad_argv_in_one_line(args, says):
    exe = ensure_built(prog.PROGRAM, "exe")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and r.stdout == "" and len(r.stderr.strip().splitlines()) <= 2, r


# --- the bench, the profiler and the sanitizer (what they are handed; nothing timed) -----------------

def test_the_bench_cases_name_one_goal_and_their_ceilings(monkeypatch):
    ensure_built(prog.PROGRAM)
    cases = prog.bench_cases(quick=False)
    names = library.read_table(prog.PROGRAM)
    goals = [c for c in cases if c.target is not None]
    assert [(c.variant, c.size, c.ceiling, c.target) for c in goals] == [(prog.BEST, prog.HEADLINE, "memcpy@64MiB", 0.9)]
    own = prog.ceilings()
    for c in cases:
        assert c.ceiling in own or c.ceiling.startswith("memcpy@"), c
        if c.ceiling.startswith("memcpy@"):  # the copy of the same bytes, at the case's own size
            assert bench.built_in(c.ceiling)(False).amount == c.amount
        assert c.amount == c.bytes == 8.0 * c.kwargs["rows"] * c.kwargs["cols"]
        assert c.kwargs["scale"] == (prog.BENCH_SCALE if c.kwargs["variant"] == prog.SCALED else 1.0)
        json.dumps(c.kwargs)  # they cross into the timing child
    assert {c.variant for c in cases if c.ceiling.startswith("memcpy@")} == set(names)
    assert {c.size for c in cases} == {label for label, *_ in prog.BENCH_SIZES}
    quick = prog.bench_cases(quick=True)
    assert quick and all(c.quick and c.size == prog.HEADLINE for c in quick)
    assert any(c.ceiling == prog.torch_ceiling_name(prog.HEADLINE) for c in quick)


def test_the_torch_ceiling_is_left_out_without_torch_and_named_with_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert prog.ceilings()["torch_softmax"](False) is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "torch" else real(name, *a))
    c = prog.ceilings()["torch_softmax"](True)
    assert c.target == "harness.programs.softmax:torch_setup" and c.kwargs == {"rows": 4096, "cols": 4096}
    assert c.unit == "GB/s" and c.amount == 8.0 * 4096 * 4096


def test_sanitize_and_profile_runs_cover_every_variant():
    ensure_built(prog.PROGRAM)
    runs = prog.sanitize_args()
    for v in library.read_table(prog.PROGRAM):
        assert any(argv[argv.index("--variant") + 1] == v for argv in runs.values()), v
    assert prog.profile_args()[:2] == ["--variant", prog.DEFAULT_VARIANT]
    assert prog.profile_args("02_block_row")[1] == "02_block_row"


# --- on a GPU -----------------------------------------------------------------------------------------

GPU_SHAPES = [(1, 1), (3, 31), (2, 32), (5, 33), (37, 1000), (4, 1024), (3, 1025), (2, 4096), (3, 4097),
              (2, 16384), (2, 16385), (1000, 129)]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", _variants())
@pytest.mark.parametrize("rows,cols", GPU_SHAPES)
def test_every_variant_matches_numpy_on_ragged_shapes(variant, rows, cols, rng):
    x = rng.uniform(-10, 10, (rows, cols)).astype(np.float32)
    out = poison(x.shape, np.float32)
    prog.softmax(x, variant, out=out)
    assert relative_error(out, prog.reference(x)) <= prog.tolerance(variant, cols), (variant, rows, cols)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", _variants())
def test_every_variant_is_stable_on_scores_spanning_1000(variant):
    x = _scores(64, 4097, 11, span=1000.0)
    x[0, 17] = 1000.0  # the largest score an exp could not hold by far
    out = prog.softmax(x, variant)
    assert np.all(np.isfinite(out)) and not np.all(np.isfinite(prog.unstable(x)))
    assert relative_error(out, prog.reference(x)) <= prog.tolerance(variant, 4097)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", _variants())
def test_every_variant_on_one_large_matrix(variant):
    rows, cols = (64, 100003) if variant == "01_naive" else (2048, 4097)
    x = _scores(rows, cols, 5)
    assert relative_error(prog.softmax(x, variant), prog.reference(x)) <= prog.tolerance(variant, cols)


@pytest.mark.gpu
@pytest.mark.parametrize("scale", [0.125, -0.5, 0.0, 4.0])
@pytest.mark.parametrize("rows,cols", [(7, 64), (9, 1000), (3, 16384), (2, 20000)])
def test_the_fused_scale_is_softmax_of_scale_times_x(scale, rows, cols):
    x = _scores(rows, cols, 2, span=100.0)
    assert relative_error(prog.softmax(x, prog.SCALED, scale), prog.reference(x, scale)) <= prog.TOL


@pytest.mark.gpu
@pytest.mark.parametrize("byte", [0xFF, 0xAB])
def test_the_device_entry_point_writes_every_element_on_misaligned_rows(byte):
    from harness.calling import cudart

    # One float past a 16-byte boundary: 05 must take its scalar path; a byte pattern shows any gap.
    rows, cols = 33, 1024
    x = _scores(rows, cols, 9)
    with cudart.DeviceBuffer(4 * (x.size + 1)) as dx, cudart.DeviceBuffer(4 * (x.size + 1)) as dout:
        cudart.memcpy_htod(cudart.ffi.cast("float *", dx.ptr) + 1, x)
        for v in library.read_table(prog.PROGRAM):
            dout.fill_bytes(byte)
            prog.softmax_dev(v, cudart.ffi.cast("float *", dx.ptr) + 1, cudart.ffi.cast("float *", dout.ptr) + 1,
                             rows, cols)
            cudart.synchronize()
            got = np.empty(x.size + 1, np.float32)
            dout.to_host(got)
            assert relative_error(got[1:].reshape(rows, cols), prog.reference(x)) <= prog.TOL, v
            assert got[:1].view(np.uint8).tolist() == [byte] * 4, f"{v} wrote before its output"


@pytest.mark.gpu
def test_the_gpu_checker_fails_a_perturbed_reference():
    x = _scores(16, 4096, 4)
    out = prog.softmax(x, prog.SCALED)
    ref = prog.reference(x)
    assert relative_error(out, ref) <= prog.TOL
    wrong = ref.copy()
    wrong[:, ::2] *= 1.0 + 5 * prog.TOL
    assert relative_error(out, wrong) > prog.TOL


@pytest.mark.gpu
@pytest.mark.parametrize("args", [["37", "1000"], ["5", "4097"], ["3", "16385", "--span", "1000"], ["1", "1"]])
def test_the_executable_checks_itself(args):
    df = prog.run(*args, "--variant", "all", "--seed", "7", "--reps", "1")
    assert list(df["variant"]) == list(library.read_table(prog.PROGRAM)) and set(df["check"]) == {"pass"}
    assert int(df["rows"].iloc[0]) == int(args[0]) and int(df["cols"].iloc[0]) == int(args[1])


@pytest.mark.gpu
def test_the_executable_runs_the_fused_scale():
    df = prog.run("9", "1024", "--variant", prog.SCALED, "--scale", "0.125", "--span", "1000", "--reps", "1")
    assert list(df["check"]) == ["pass"] and float(df["scale"].iloc[0]) == 0.125

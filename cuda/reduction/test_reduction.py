"""reduction: the numpy reference, the error bound, the Python twins and, on a GPU, the library, CUB and
the executable against them, on random inputs of ragged sizes with poisoned outputs; bad arguments
refused before any launch, bad argv in one line.

Two kinds of check (reduction.py's docstring says why): random floats within gamma_D * sum|x| (D the
variant's longest chain of additions, from reduction_chain), and small integers, whose float32 sum is
exact in any order, compared bit for bit."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from conftest import built_names, ensure_built, poison, refuse_loads_after_the_table
from harness.calling import library
from harness.programs import reduction as prog

# Ragged sizes: 1, 2^k +- 1, primes, one and several 256-thread blocks exactly (256, 512: 02/03 take
# 512 a block), not a multiple of anything, and large ones.
GPU_SIZES = [1, 2, 3, 5, 31, 255, 256, 257, 511, 512, 513, 4099, 65537, 1000003, 1 << 24]
CPU_SIZES = [1, 2, 3, 5, 31, 63, 64, 65, 127, 128, 129, 300, 1031]


def _floats(n, seed, lo=-1.0):
    return np.random.default_rng(seed).uniform(lo, 1, n).astype(np.float32)


def _ints(n, seed):
    # |x| <= 15 and n <= 2^20: every partial sum, in any order, is an integer below 2^24, exact in float32.
    return np.random.default_rng(seed).integers(-15, 16, n).astype(np.float32)


def variants():
    return built_names(lambda: library.read_table(prog.PROGRAM), prog.PROGRAM)


# --- the reference and the bound (no library) -----------------------------------------------------

def test_the_reference_is_the_float64_sum():
    x = np.array([1e8, 1.0, -1e8, 0.5], dtype=np.float32)
    assert prog.reference(x) == 1.5  # float32 in order would give 0.5 (1e8 + 1 rounds to 1e8)
    assert prog.reference(np.zeros(0, np.float32)) == 0.0


def test_the_bound_grows_with_the_chain_and_is_infinite_past_one_over_u():
    x = _floats(1000, 0)
    mag = float(np.sum(np.abs(x.astype(np.float64))))
    assert prog.error_bound(x, 0) < 1e-12 * mag  # no additions: only the reference's own error
    b10, b1000 = prog.error_bound(x, 10), prog.error_bound(x, 1000)
    assert 9 * prog.U * mag < b10 < 11 * prog.U * mag and 90 * b10 < b1000 < 110 * b10
    assert prog.error_bound(x, 1 << 24) == float("inf")


def test_the_checker_fails_a_wrong_answer():
    """The same checker the GPU tests use: a correct float32 sum passes, the reference moved by a
    few times the bound fails, a NaN (a result never written) fails."""
    x = _floats(4099, 3)
    d = 12
    good = np.float32(np.sum(x.astype(np.float64)))  # the exact sum rounded once
    ok, err, bound = prog.check(good, x, d)
    assert ok and err <= bound
    assert not prog.check(np.float32(prog.reference(x) + 3 * bound), x, d)[0]
    assert not prog.check(np.float32(np.nan), x, d)[0]
    assert not prog.check(np.float32(np.inf), x, d)[0]
    # The integer inputs are compared exactly: one element dropped is a different sum.
    xi = _ints(4099, 3)
    xi[0] = 7.0
    assert np.float32(np.sum(xi[1:], dtype=np.float64)) != prog.reference(xi)


# --- the library, without a GPU: the table, the chain, argument errors ------------------------------

def test_the_variant_table_is_read_from_the_built_library():
    ensure_built(prog.PROGRAM)
    names = library.read_table(prog.PROGRAM)
    assert names == prog.VARIANTS and len(names) == 4
    assert [v[:3] for v in names] == ["01_", "02_", "03_", "04_"]  # numbered in the order a learner meets them
    assert prog.BEST == names[-1] and prog.DEFAULT_VARIANT in names


def test_the_chain_counts_the_kernels_additions():
    ensure_built(prog.PROGRAM)
    v1, v2, v3, v4 = library.read_table(prog.PROGRAM)
    n = 1 << 20
    assert prog.chain(v1, n, n // 256, 256) == n - 1  # one chain through everything
    assert prog.chain(v2, n, n // 512, 256) == 1 + 8 + n // 512
    assert prog.chain(v3, n, n // 512, 256) == 1 + 10 + n // 512
    # 04 on a full wave of an H100 (1056 blocks): each thread's float4s, then small trees
    assert prog.chain(v4, n, 1056, 256) < 40
    assert prog.chain(v4, 1 << 28, 1056, 256) < (1 << 28) // (4 * 1056 * 256) + 40
    for v in (v1, v2, v3, v4):
        assert prog.chain(v, 1, 1, 256) == 0 and prog.chain(v, 0, 1, 256) == 0
    with pytest.raises(ValueError):
        prog.chain(v2, 10, -1, 256)


def test_bad_arguments_are_refused_before_any_launch(monkeypatch):
    ensure_built(prog.PROGRAM)
    big = prog.max_n() + 1
    prog.scratch_floats()  # cached before loads are refused below
    refuse_loads_after_the_table(monkeypatch, prog.PROGRAM)
    x = _floats(8, 0)
    with pytest.raises(ValueError, match="unknown reduction variant 'nope'"):
        prog.sum_f32(x, "nope")
    with pytest.raises(TypeError, match="variant must be a string"):
        prog.sum_f32(x, 4)
    with pytest.raises(TypeError, match="float32"):
        prog.sum_f32(x.astype(np.float64))
    with pytest.raises(ValueError, match="1-D"):
        prog.sum_f32(x.reshape(2, 4))
    with pytest.raises(ValueError, match="C-contiguous"):
        prog.sum_f32(_floats(16, 0)[::2])
    with pytest.raises(TypeError, match="must be a numpy array"):
        prog.sum_f32([1.0, 2.0])
    with pytest.raises(ValueError, match="n must be at least 0"):
        prog.sum_dev(prog.BEST, None, -1, None, None)
    with pytest.raises(ValueError, match="at most"):
        prog.sum_dev(prog.BEST, None, big, None, None)
    with pytest.raises(TypeError, match="n must be an integer"):
        prog.sum_dev(prog.BEST, None, 3.0, None, None)
    with pytest.raises(ValueError, match="unknown reduction variant"):
        prog.sum_dev("05_nope", None, 8, None, None)
    with pytest.raises(ValueError, match="at most"):
        prog.plan(prog.BEST, big)
    with pytest.raises(ValueError, match="n must be at least 0"):
        prog.bench_setup(prog.BEST, -5)


# --- the twins on the simulator ------------------------------------------------------------------

def test_every_variant_in_the_table_has_a_twin():
    ensure_built(prog.PROGRAM)
    for v in library.read_table(prog.PROGRAM):
        got, _ = prog.twin(np.ones(5, np.float32), v)
        assert got == 5.0, v


@pytest.mark.parametrize("n", CPU_SIZES)
def test_the_twins_match_numpy_within_the_bound(n):
    ensure_built(prog.PROGRAM)
    for seed in (0, 1):
        x = _floats(n, seed)
        for v in library.read_table(prog.PROGRAM):
            got, blocks = prog.twin(x, v)
            ok, err, bound = prog.check(got, x, prog.chain(v, n, blocks, prog.TWIN_THREADS))
            assert ok, (v, n, seed, err, bound)


@pytest.mark.parametrize("n", CPU_SIZES)
def test_the_twins_are_exact_on_small_integers(n):
    ensure_built(prog.PROGRAM)
    x = _ints(n, n)
    for v in library.read_table(prog.PROGRAM):
        assert prog.twin(x, v)[0] == prog.reference(x), v


@pytest.mark.parametrize("misalign", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [1, 3, 4, 7, 1000, 1031])
def test_the_grid_stride_twin_takes_the_head_and_tail_at_any_alignment(n, misalign):
    """04's float4 body starts at the first 16-byte boundary: the head before it and the tail after the
    last whole float4 are added separately. Integers: any element missed or added twice shows."""
    ensure_built(prog.PROGRAM)
    x = _ints(n, 7)
    for blocks in (1, 2, 5):
        assert prog.twin(x, prog.BEST, blocks=blocks, misalign=misalign)[0] == prog.reference(x)


@pytest.mark.parametrize("n", [1, 31, 64, 129, 1031])
def test_the_block_sums_twin_is_the_tree_of_each_block(n):
    """02's per-block sums: each the float32 tree of its 2 * threads elements (tree_model pads with the
    same zeros the kernel loads past n), and their float64 sum is the reference on integers."""
    x = _floats(n, 5)
    got = prog.twin_block_sums(x, threads=32)
    want = [prog.tree_model(x[b * 64:(b + 1) * 64])[0] for b in range(-(-n // 64))]
    assert got.tobytes() == np.asarray(want, np.float32).tobytes()
    xi = _ints(n, 6)
    assert float(np.sum(prog.twin_block_sums(xi, threads=32), dtype=np.float64)) == prog.reference(xi)


def test_one_chain_loses_what_a_tree_keeps():
    """2^24 then 63 ones: in one float32 chain each 2^24 + 1 rounds back to 2^24 (ties to even), so 01's
    order loses every one; the trees add the ones together first and lose at most the one paired with
    2^24."""
    ensure_built(prog.PROGRAM)
    x = np.concatenate([[2.0**24], np.ones(63)]).astype(np.float32)
    first, *trees = library.read_table(prog.PROGRAM)
    assert prog.twin(x, first)[0] == 2.0**24
    for v in trees:
        assert prog.twin(x, v)[0] >= 2.0**24 + 62, v


def test_the_twin_refuses_a_block_that_is_no_whole_warp():
    ensure_built(prog.PROGRAM)
    with pytest.raises(ValueError, match="power of two"):
        prog.twin(np.ones(4, np.float32), prog.BEST, threads=48)
    with pytest.raises(ValueError, match="misalign"):
        prog.twin(np.ones(4, np.float32), prog.BEST, misalign=4)


def test_on_cpu_runs_every_twin():
    ensure_built(prog.PROGRAM)
    df, how = prog.on_cpu(["300"])
    assert list(df["variant"]) == list(library.read_table(prog.PROGRAM)) and set(df["check"]) == {"pass"}
    assert "simulator" in how
    with pytest.raises(ValueError):
        prog.on_cpu(["x"])
    with pytest.raises(ValueError):
        prog.on_cpu(["0"])


def test_the_picture_data_on_the_simulator():
    d = prog.viz_data(simulate=True)
    # the tree's last level holds the sum of 1..16 in partial[0]
    assert float(d["levels"][-1][0]) == 136.0 and float(d["levels"][0][0]) == 1.0 + 9.0
    err = d["errors"]
    chain, tree = (err[err["what"].str.contains(k)].set_index("n")["rel_error"] for k in ("chain", "tree"))
    assert (chain.iloc[-4:] > tree.iloc[-4:]).all()  # at large n the chain is the less accurate


def test_bench_cases_name_their_ceilings_and_the_goal():
    ensure_built(prog.PROGRAM)
    cases = prog.bench_cases()
    ceils = prog.ceilings()
    for c in cases:
        assert c.ceiling == "memcpy" or c.ceiling in ceils, c
        assert c.amount == 4.0 * c.kwargs["n"]
    goals = [c for c in cases if c.target is not None]
    assert [(c.variant, c.size, c.target, c.ceiling) for c in goals] == [
        (prog.BEST, "2^28", 0.9, prog.cub_ceiling_name("2^28"))]
    assert {c.size for c in prog.bench_cases(quick=True) if c.quick} == {"2^24"}
    t = ceils[prog.cub_ceiling_name("2^28")](False)
    assert t.target == "harness.programs.reduction:cub_setup" and t.amount == 4.0 * (1 << 28)


def test_sanitize_runs_cover_every_variant():
    ensure_built(prog.PROGRAM)
    runs = prog.sanitize_args()
    for v in library.read_table(prog.PROGRAM):
        assert any(argv[1] == v for argv in runs.values()), v


@pytest.mark.parametrize("args,says", [(["0"], "N must be a positive integer"), (["x"], "N must be an integer"),
                                       (["--variant", "nope"], "unknown variant 'nope'"),
                                       (["--reps", "0"], "--reps"), (["--bogus"], "unknown option --bogus"),
                                       (["3000000000"], "N must be at most")])
def test_the_executable_refuses_bad_argv_in_one_line(args, says):
    exe = ensure_built(prog.PROGRAM, "exe")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and r.stdout == "", r


def test_the_parser_reads_a_result_line():
    line = ("result program=reduction variant=04_grid_stride n=1000003 ms=0.0123 sum=-512.25 ref=-512.2501 "
            "err=1.2e-05 bound=0.0009 check=pass\n")
    df = prog.parse_output(line)
    assert df["variant"].iloc[0] == "04_grid_stride" and int(df["n"].iloc[0]) == 1000003
    assert df["check"].iloc[0] == "pass"


# --- on a GPU ----------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("variant", variants())
@pytest.mark.parametrize("n", GPU_SIZES)
def test_the_library_matches_numpy_within_the_bound(variant, n):
    for seed in (0, 1, 2):
        x = _floats(n, seed)
        got = prog.sum_f32(x, variant)
        blocks, threads = prog.plan(variant, n)
        ok, err, bound = prog.check(got, x, prog.chain(variant, n, blocks, threads))
        assert ok, (variant, n, seed, float(got), prog.reference(x), err, bound)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", variants())
@pytest.mark.parametrize("n", [1, 3, 257, 513, 4099, 65537, 1 << 20])
def test_the_library_is_exact_on_small_integers(variant, n):
    x = _ints(n, n)
    assert prog.sum_f32(x, variant) == prog.reference(x)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 511, 512, 513, 4099, 65537])
def test_the_block_sums_are_the_twins_bit_for_bit(n):
    """02's per-block sums have no atomics: the GPU's are the simulator's to the bit (256 threads a block)."""
    x = _floats(n, 11)
    got = prog.block_sums_f32(x)
    assert got.size == prog.plan("02_shared_tree", n)[0]
    assert got.tobytes() == prog.twin_block_sums(x, threads=256).tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", variants())
def test_the_empty_sum_is_zero(variant):
    assert prog.sum_f32(np.zeros(0, np.float32), variant) == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_the_grid_stride_variant_at_any_alignment(offset):
    """04 on a view that starts 1-3 floats past a 16-byte boundary (its own head and tail), on device
    pointers whose result and scratch are poisoned (NaN) first."""
    from harness.calling import cudart

    for n in (1, 2, 3, 4, 5, 8, 4099, 1000003):
        x = _ints(n + 3, n)
        with cudart.DeviceBuffer.from_array(x) as dx, cudart.DeviceBuffer(4) as dout, \
                cudart.DeviceBuffer(4 * prog.scratch_floats()) as scratch:
            dout.fill_bytes(0xFF)
            scratch.fill_bytes(0xFF)
            prog.sum_dev(prog.BEST, prog.lib().ffi.cast("float *", dx.ptr) + offset, n, dout, scratch)
            cudart.synchronize()
            got = dout.to_host(poison(1, np.float32))[0]
        assert got == prog.reference(x[offset:offset + n]), (n, offset)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", variants())
def test_the_device_entry_overwrites_a_poisoned_result(variant):
    from harness.calling import cudart

    x = _ints(4099, 5)
    with cudart.DeviceBuffer.from_array(x) as dx, cudart.DeviceBuffer(4) as dout, \
            cudart.DeviceBuffer(4 * prog.scratch_floats()) as scratch:
        for byte in (0xFF, 0xAB):  # NaN, then a finite float (0xABABABAB is -1.2e-12)
            dout.fill_bytes(byte)
            scratch.fill_bytes(byte)
            prog.sum_dev(variant, dx, x.size, dout, scratch)
            cudart.synchronize()
            assert dout.to_host(poison(1, np.float32))[0] == prog.reference(x), (variant, hex(byte))


@pytest.mark.gpu
def test_a_chain_of_atomics_stops_at_2_24_where_the_trees_do_not():
    """2^25 ones: every partial sum in 02-04 is an integer far below 2^24 until the last few additions,
    which add multiples of 512 (exact); 01's one chain stops growing at 2^24 (2^24 + 1 rounds back)."""
    n = 1 << 25
    x = np.ones(n, np.float32)
    first, *trees = prog.VARIANTS
    assert prog.sum_f32(x, first) == 2.0**24
    for v in trees:
        assert prog.sum_f32(x, v) == float(n), v


@pytest.mark.gpu
def test_the_grid_stride_variant_gives_the_same_bits_every_run():
    x = _floats(1000003, 9)
    first = prog.sum_f32(x, prog.BEST)
    assert all(prog.sum_f32(x, prog.BEST) == first for _ in range(5))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 257, 4099, 1000003, 1 << 24])
def test_cub_matches_numpy(n):
    """The yardstick must be right too. CUB's order is its own: bounded generously by a tree over blocks
    of its tile plus a chain over its tiles (n / 256 is more than it has)."""
    for seed in (0, 1):
        x = _floats(n, seed)
        got = prog.cub_sum_f32(x)
        ok, err, bound = prog.check(got, x, 64 + n // 256)
        assert ok, (n, float(got), err, bound)
    xi = _ints(min(n, 1 << 20), 4)
    assert prog.cub_sum_f32(xi) == prog.reference(xi)


@pytest.mark.gpu
def test_the_bench_setups_launch():
    """Each bench target builds its buffers and launches once at a small size (no timing here)."""
    from harness.calling import cudart

    for v in prog.VARIANTS:
        p = prog.bench_setup(v, 4099)
        try:
            p.launch(None)
            cudart.synchronize()
        finally:
            p.close()
    p = prog.cub_setup(4099)
    try:
        p.launch(None)
        cudart.synchronize()
    finally:
        p.close()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 4099, 1000003])
def test_the_executable_checks_itself(n):
    for v in prog.VARIANTS:
        df = prog.run(str(n), "--variant", v, "--seed", "7", "--reps", "1")
        assert list(df["check"]) == ["pass"] and int(df["n"].iloc[0]) == n and df["variant"].iloc[0] == v

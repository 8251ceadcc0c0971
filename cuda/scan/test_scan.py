"""scan: the numpy reference, the exact checker, the Python twins of all three kernels and, on a GPU, the
library, CUB's ceiling and the executable against them, on random 32-bit inputs (their sums wrap modulo
2^32 many times) of ragged sizes with poisoned outputs; bad arguments refused before any launch."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from conftest import built_names, ensure_built, refuse_loads_after_the_table
from harness.base import sim
from harness.programs import scan as prog

TWIN_SIZES = [1, 2, 7, 8, 9, 31, 32, 33, 97, 300]
# Ragged against every tile: 1024 (01), 2048 (02), 4096 (03); 2^20 + 5 makes 01 three levels deep.
GPU_SIZES = [1, 2, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097, 65537, 1000003, (1 << 20) + 5,
             (1 << 24) + 7]
VARIANTS = built_names(lambda: prog.VARIANTS, prog.PROGRAM)


def _inputs(n, seed, dtype=np.uint32):
    """Uniform over all 32-bit values: the running sum wraps about every other element."""
    return np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint32).view(dtype)


def _loop_scan(x, exclusive):
    """The plainest scan there is, in Python ints, for the reference's own test."""
    out, run = [], 0
    for v in x.view(np.uint32):
        if exclusive:
            out.append(run)
        run = (run + int(v)) & 0xFFFFFFFF
        if not exclusive:
            out.append(run)
    return np.array(out, dtype=np.uint32).view(x.dtype)


# --- the reference and the checker -------------------------------------------------------------------

@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("dtype", [np.uint32, np.int32])
def test_the_reference_is_a_running_sum_modulo_2_32(exclusive, dtype):
    x = _inputs(500, 3, dtype)
    ref = prog.reference(x, exclusive)
    assert ref.dtype == dtype
    assert np.array_equal(ref, _loop_scan(x, exclusive))


def test_int32_wraps_as_twos_complement():
    x = np.array([2**31 - 1, 1, -1], dtype=np.int32)
    assert prog.reference(x).tolist() == [2**31 - 1, -(2**31), 2**31 - 1]
    assert prog.reference(x, exclusive=True).tolist() == [0, 2**31 - 1, -(2**31)]


def test_the_checker_fails_a_wrong_answer():
    x = _inputs(1000, 1)
    good = prog.twin_decoupled_lookback(x)
    assert prog.mismatches(good, prog.reference(x)) == (0, -1)
    perturbed = prog.reference(x).copy()
    perturbed[637] += np.uint32(1)
    assert prog.mismatches(good, perturbed) == (1, 637)
    unwritten = good.copy()
    unwritten[999] = 0xABABABAB
    assert prog.mismatches(unwritten, prog.reference(x)) == (1, 999)
    # The inclusive answer is not the exclusive one: every element differs by x[i] (x has no zero here).
    assert prog.mismatches(good, prog.reference(x, exclusive=True))[0] == np.count_nonzero(x)
    assert prog.mismatches(good[:-1], prog.reference(x))[0] > 0


# --- the twins on the simulator ---------------------------------------------------------------------

@pytest.mark.parametrize("n", TWIN_SIZES)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("twin", [prog.twin_kogge_stone, prog.twin_brent_kung, prog.twin_decoupled_lookback],
                         ids=["kogge_stone", "brent_kung", "decoupled_lookback"])
def test_each_twin_matches_numpy(twin, exclusive, n):
    x = _inputs(n, n)
    assert prog.mismatches(twin(x, exclusive), prog.reference(x, exclusive)) == (0, -1)


@pytest.mark.parametrize("threads", [2, 4, 16])
def test_the_hierarchy_holds_at_any_depth(threads):
    # 300 elements in tiles of `threads` (01) or 2 * threads (02): up to 9 levels of tile totals.
    x = _inputs(300, threads, np.int32)
    for twin in (prog.twin_kogge_stone, prog.twin_brent_kung):
        for exclusive in (False, True):
            assert prog.mismatches(twin(x, exclusive, threads), prog.reference(x, exclusive))[0] == 0, twin


@pytest.mark.parametrize("threads,items", [(1, 1), (4, 3), (8, 4), (32, 2)])
def test_the_lookback_twin_publishes_every_tiles_inclusive_prefix(threads, items):
    n = 301
    x = _inputs(n, 5)
    out = np.zeros(n, np.uint32)
    status = prog.twin_lookback(x, out, n, False, threads, items)
    ref = prog.reference(x)
    assert np.array_equal(out, ref)
    tile = threads * items
    ends = [min((t + 1) * tile, n) - 1 for t in range(len(status))]
    assert [int(w) >> 32 for w in status] == [prog.PREFIX] * len(status)
    assert [int(w) & prog.MASK for w in status] == [int(ref[e]) for e in ends]


def test_look_back_adds_aggregates_until_a_prefix():
    w = prog.status_word
    status = [w(prog.PREFIX, 10), w(prog.AGGREGATE, 5), w(prog.PREFIX, 22), w(prog.AGGREGATE, 7),
              w(prog.AGGREGATE, 1)]
    assert prog.look_back(status, 0) == 0
    assert prog.look_back(status, 1) == 10
    assert prog.look_back(status, 3) == 22  # stops at tile 2's prefix: tiles 0 and 1 are in it
    assert prog.look_back(status, 5) == 22 + 7 + 1
    assert prog.look_back([w(prog.PREFIX, 0xFFFFFFFF), w(prog.AGGREGATE, 2)], 2) == 1  # wraps
    with pytest.raises(sim.SimError, match="tile 1 has published nothing"):
        prog.look_back([w(prog.PREFIX, 1), w(prog.NOT_READY, 0), w(prog.AGGREGATE, 1)], 3)


def test_kogge_stone_needs_its_second_buffer():
    """Updating in place, a thread would add a neighbour's value already updated in this step (the
    simulator runs a block's threads one after another between barriers): the double buffer is why the
    twin is right."""
    def in_place(ctx, x, out, n):
        t = ctx.threadIdx.x
        s = ctx.shared.s
        s[t] = x[t]
        yield
        stride = 1
        while stride < ctx.blockDim.x:
            if t >= stride:
                s[t] = (int(s[t]) + int(s[t - stride])) & prog.MASK
            yield
            stride *= 2
        out[t] = s[t]

    with pytest.raises(ValueError, match="never shrinks"):
        prog.twin_kogge_stone(np.ones(3, np.uint32), threads=1)
    x = np.ones(16, np.uint32)
    out = np.zeros(16, np.uint32)
    sim.launch(in_place, 1, 16, x, out, 16, shared={"s": ((16,), np.uint32)})
    assert prog.mismatches(out, prog.reference(x))[0] > 0
    assert prog.mismatches(prog.twin_kogge_stone(x, threads=16), prog.reference(x))[0] == 0


def test_the_twin_runs_the_variant_named_in_the_table():
    ensure_built(prog.PROGRAM)
    x = _inputs(77, 0)
    for v in prog.VARIANTS:
        assert prog.mismatches(prog.twin(x, v, True), prog.reference(x, True))[0] == 0, v
    assert len(prog.TWINS) == len(prog.VARIANTS)


def test_on_cpu_checks_every_variant():
    ensure_built(prog.PROGRAM)
    df, how = prog.on_cpu([])
    assert set(df["variant"]) == set(prog.VARIANTS) and (df["check"] == "pass").all() and "harness.base.sim" in how
    df, _ = prog.on_cpu(["129"])
    assert list(df["n"].unique()) == [129] and (df["check"] == "pass").all()
    for bad in (["0"], ["x"], ["1", "2"], [str(prog.CPU_MAX_N + 1)]):
        with pytest.raises(ValueError):
            prog.on_cpu(bad)


def test_the_picture_is_drawn_from_the_twins(tmp_path):
    from analysis import scan as draw

    data = prog.viz_data(16)
    ks, bk = data["traces"]["kogge_stone"], data["traces"]["brent_kung"]
    assert len(ks) == 16 * 4 - (1 + 2 + 4 + 8)  # n log n minus the elements with no left neighbour
    assert len(bk) == 2 * 16 - 2 - 4  # the up-sweep's n - 1 and the down-sweep's n - 1 - log2 n
    assert ks["step"].max() == 3 and bk["step"].max() == 6
    (png,) = draw.plot(data, tmp_path)
    assert png.name == "scan_steps.png" and png.stat().st_size > 10_000
    draw.plot(prog.viz_data(13), tmp_path)
    for bad in (1, 65, 2.0, True):
        with pytest.raises(ValueError):
            prog.viz_data(bad)


# --- the library's table and what is refused before any launch -------------------------------------

def test_the_variant_table_is_read_from_the_library():
    ensure_built(prog.PROGRAM)
    names = prog.VARIANTS
    assert [v[:3] for v in names] == [f"{i:02d}_" for i in range(1, len(names) + 1)]
    assert prog.best_variant() == names[-1] == prog.check_variant(None)
    assert prog.lib().scan_max_n() == prog.MAX_N
    assert prog.lib().scan_workspace_bytes(b"nope", 10) == -1
    assert prog.lib().scan_workspace_bytes(names[0], -1) == -1


def test_workspace_sizes():
    ensure_built(prog.PROGRAM)
    ks, bk, lb = prog.VARIANTS
    assert prog.workspace_bytes(ks, 1024) == 0  # one tile: no totals
    assert prog.workspace_bytes(ks, 1025) == 2 * 4
    assert prog.workspace_bytes(ks, 1024 * 1024 + 1) == (1025 + 2) * 4  # two levels of totals
    assert prog.workspace_bytes(bk, 4097) == 3 * 4
    assert prog.workspace_bytes(lb, 4096) == 8 + 8  # one status word and the counter
    assert prog.workspace_bytes(lb, 4097) == 2 * 8 + 8
    assert prog.workspace_bytes(lb, 0) == 0


def test_bad_arguments_are_refused_before_any_launch(monkeypatch):
    x = _inputs(8, 0)
    v = None
    refuse_loads_after_the_table(monkeypatch, prog.PROGRAM)
    with pytest.raises(TypeError, match="numpy array"):
        prog.scan([1, 2, 3], v)
    with pytest.raises(TypeError, match="int32 or uint32"):
        prog.scan(x.astype(np.float32), v)
    with pytest.raises(TypeError, match="int32 or uint32"):
        prog.scan(x.astype(np.int64), v)
    with pytest.raises(ValueError, match="1-D"):
        prog.scan(x.reshape(2, 4), v)
    with pytest.raises(ValueError, match="C-contiguous"):
        prog.scan(_inputs(16, 0)[::2], v)
    with pytest.raises(ValueError, match="unknown scan variant 'nope'"):
        prog.scan(x, "nope")
    with pytest.raises(TypeError, match="variant must be a string"):
        prog.scan(x, 3)
    with pytest.raises(TypeError, match="exclusive must be True or False"):
        prog.scan(x, v, exclusive=1)
    with pytest.raises(ValueError, match="n must be at least 0"):
        prog.scan_dev(v, None, None, -1, False, None, 0)
    with pytest.raises(ValueError, match="n must be at most 2147483647"):
        prog.scan_dev(v, None, None, 2**31, False, None, 0)
    with pytest.raises(TypeError, match="n must be an integer"):
        prog.scan_dev(v, None, None, 10.0, False, None, 0)
    with pytest.raises(ValueError, match="n must be at least 0"):
        prog.variant_setup(prog.VARIANTS[0], -5)
    with pytest.raises(ValueError, match="n must be at most"):
        prog.cub_setup(2**31)


def test_a_too_small_workspace_is_refused_before_any_launch():
    ensure_built(prog.PROGRAM)
    with pytest.raises(ValueError, match="needs 16 bytes of workspace, got 8"):
        prog.scan_dev(prog.best_variant(), None, None, 4096, False, None, 8)


def test_the_bench_holds_the_best_rung_to_cub_at_the_headline_size():
    ensure_built(prog.PROGRAM)
    cases = prog.bench_cases()
    ceilings = prog.ceilings()
    assert {c.ceiling for c in cases} <= set(ceilings) | {"memcpy"}
    targeted = [c for c in cases if c.target is not None]
    assert [(c.variant, c.size, c.target, c.ceiling) for c in targeted] == [
        (prog.best_variant(), "2^28", 0.9, "scan_cub@2^28")]
    for label in ("2^24", "2^28"):
        assert {c.variant for c in cases if c.size == label and c.ceiling == f"scan_cub@{label}"} == set(prog.VARIANTS)
        assert {c.variant for c in cases if c.size == label and c.ceiling == "memcpy"} == {
            f"{prog.best_variant()}-vs-memcpy", "cub"}
    for c in cases:
        n = c.kwargs["n"]
        assert c.amount == c.bytes == 8.0 * n and c.unit == "GB/s"
    quick = prog.bench_cases(quick=True)
    assert quick and all(c.quick and c.size == "2^24" for c in quick)
    ceil = ceilings["scan_cub@2^28"](False)
    assert ceil.target == "harness.programs.scan:cub_setup" and ceil.kwargs == {"n": 1 << 28}
    assert ceil.amount == 8.0 * (1 << 28)


def test_the_bench_setup_marshals_the_call_the_header_declares(monkeypatch):
    """The timing child's setup, up to the launch it hands over (not made): buffers of the right sizes,
    the arguments in the order scan.h declares them. Device memory is stood in for (no GPU here)."""
    from harness.calling import cudart

    ensure_built(prog.PROGRAM)
    made = []

    class Stand(cudart.DeviceBuffer):
        def __init__(self, nbytes):
            self.nbytes, self.ptr = nbytes, 0x1000 * (len(made) + 1)
            made.append(self)

        def fill_bytes(self, value, stream=None):
            self.filled = value

        def close(self):
            self.ptr = None

    monkeypatch.setattr(cudart, "DeviceBuffer", Stand)
    n = 5000
    prepared = prog.variant_setup(prog.best_variant(), n)
    assert [b.nbytes for b in made] == [4 * n, 4 * n, prog.workspace_bytes(prog.best_variant(), n)]
    assert made[0].filled == 0x01 and callable(prepared.launch)
    prepared.close()
    assert all(b.ptr is None for b in made)


def test_profile_and_sanitize_runs_cover_every_variant():
    ensure_built(prog.PROGRAM)
    runs = prog.sanitize_args()
    for v in prog.VARIANTS:
        assert runs[f"{v} ragged"][-1] == "4099" and "--exclusive" in runs[f"{v} exclusive"]
        assert prog.profile_args(v)[:2] == ["--variant", v]
    assert prog.profile_args()[1] == prog.best_variant()


@pytest.mark.parametrize("args,says", [(["0"], "N must be a positive integer"), (["x"], "N must be an integer"),
                                       (["2147483648"], "N must be at most 2147483647"),
                                       (["--variant", "nope"], "unknown variant 'nope'"),
                                       (["--reps", "0"], "--reps must be a positive integer"),
                                       (["--bogus"], "unknown option --bogus"), (["1", "2"], "unexpected argument '2'")])
def test_the_executable_refuses_bad_argv_in_one_line(args, says):
    exe = ensure_built(prog.PROGRAM, "exe")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and r.stdout == "", r


# --- on a GPU -----------------------------------------------------------------------------------------

def _scan_on_device(variant, x, exclusive, in_place=False):
    """The device-pointer path with the output and the workspace poisoned first (0xAB bytes): an
    element never written, or a workspace the launcher forgot to clear, shows."""
    from conftest import poison
    from harness.calling import cudart

    n = x.size
    wb = prog.workspace_bytes(variant, n)
    out = poison(n, np.uint32)
    with cudart.DeviceBuffer.from_array(x.view(np.uint32)) as dx, cudart.DeviceBuffer(4 * n) as dout, \
            cudart.DeviceBuffer(max(wb, 8)) as work:
        dout.fill_bytes(0xAB)
        work.fill_bytes(0xAB)
        target = dx if in_place else dout
        prog.scan_dev(variant, dx, target, n, exclusive, work, wb)
        cudart.synchronize()
        target.to_host(out)
    return out.view(x.dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", GPU_SIZES)
@pytest.mark.parametrize("exclusive", [False, True])
def test_the_library_matches_numpy(variant, n, exclusive):
    for seed in (0, 1):
        x = _inputs(n, seed)
        assert prog.mismatches(_scan_on_device(variant, x, exclusive), prog.reference(x, exclusive)) == (0, -1), seed


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_host_api_takes_int32_and_uint32(variant):
    for dtype in (np.int32, np.uint32):
        for exclusive in (False, True):
            x = _inputs(100003, 4, dtype)
            out = prog.scan(x, variant, exclusive)
            assert out.dtype == dtype and prog.mismatches(out, prog.reference(x, exclusive)) == (0, -1)
    assert prog.scan(np.zeros(0, np.int32), variant).shape == (0,)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_in_place_and_repeated_calls(variant):
    # In place: x and out the same array. Twice on one workspace: 03's counter and flags must be reset.
    x = _inputs(300007, 9)
    assert prog.mismatches(_scan_on_device(variant, x, False, in_place=True), prog.reference(x)) == (0, -1)
    from harness.calling import cudart

    n = x.size
    wb = prog.workspace_bytes(variant, n)
    out = np.zeros(n, np.uint32)
    with cudart.DeviceBuffer.from_array(x) as dx, cudart.DeviceBuffer(4 * n) as dout, \
            cudart.DeviceBuffer(max(wb, 8)) as work:
        for exclusive in (True, False):
            dout.fill_bytes(0xAB)
            prog.scan_dev(variant, dx, dout, n, exclusive, work, wb)
            cudart.synchronize()
            dout.to_host(out)
            assert prog.mismatches(out, prog.reference(x, exclusive)) == (0, -1), exclusive


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shift_x, shift_out", [(4, 0), (0, 8), (12, 4)])
def test_pointers_off_the_16_byte_grid_scan_right(variant, shift_x, shift_out):
    # 03 moves whole tiles in 16-byte pieces only when both pointers sit on the 16-byte grid; views that
    # start 4, 8 or 12 bytes in (a slice of a larger array) take the element-at-a-time path.
    from harness.calling import cudart

    x = _inputs(3 * 4096 + 77, 12)
    n = x.size
    wb = prog.workspace_bytes(variant, n)
    with cudart.DeviceBuffer(4 * n + 16) as dx, cudart.DeviceBuffer(4 * n + 32) as dout, \
            cudart.DeviceBuffer(max(wb, 8)) as work:
        dx.fill_bytes(0)
        dout.fill_bytes(0xAB)
        px = cudart.ffi.cast("char *", dx.ptr) + shift_x
        po = cudart.ffi.cast("char *", dout.ptr) + shift_out
        cudart.memcpy_htod(px, x.view(np.uint32))
        prog.scan_dev(variant, px, po, n, False, work, wb)
        cudart.synchronize()
        whole = np.empty((4 * n + 32) // 4, np.uint32)
        dout.to_host(whole)
    got = whole.view(np.uint8)[shift_out:shift_out + 4 * n].view(np.uint32)
    assert prog.mismatches(got, prog.reference(x)) == (0, -1)
    assert (whole.view(np.uint8)[:shift_out] == 0xAB).all() and (whole.view(np.uint8)[shift_out + 4 * n:] == 0xAB).all()


@pytest.mark.gpu
def test_the_checker_fails_a_wrong_gpu_answer():
    x = _inputs(5000, 2)
    out = prog.scan(x)
    assert prog.mismatches(out, prog.reference(x)) == (0, -1)
    wrong = prog.reference(x)
    wrong[4321] ^= np.uint32(1 << 7)
    assert prog.mismatches(out, wrong) == (1, 4321)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 4097, 1000003])
def test_the_cub_ceiling_computes_the_same_scan(n):
    x = _inputs(n, 6)
    for exclusive in (False, True):
        assert prog.mismatches(prog.cub_scan(x, exclusive), prog.reference(x, exclusive)) == (0, -1)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", [1, 4099, 1000003])
def test_the_executable_checks_itself(variant, n):
    for extra in ([], ["--exclusive"]):
        df = prog.run(str(n), "--variant", variant, "--seed", "7", "--reps", "1", *extra)
        assert list(df["check"]) == ["pass"] and int(df["n"].iloc[0]) == n
        assert int(df["exclusive"].iloc[0]) == (1 if extra else 0) and int(df["mismatches"].iloc[0]) == 0

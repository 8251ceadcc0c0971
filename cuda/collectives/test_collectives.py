"""collectives: exact sums against numpy on virtual ranks (one GPU proves the protocol), the
tensor-parallel block against the unsharded one in float64, NCCL with one rank, the process launcher
on the CPU (a stand-in rank program), refusals before any launch, compute-sanitizer, and the multi-GPU
paths (skipped, with the reason, where fewer GPUs are visible)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from conftest import pythonpath, sigint_as_from_a_terminal
from fault_build import build_twin, stalled_rank, use_fault_library
from harness import programs
from harness.base.errors import CudaError, ToolMissing
from harness.calling import launch, library
from harness.compile import build
from harness.measuring import gpus
from harness.programs import collectives as co

ROOT = Path(__file__).resolve().parents[2]
FAKE_RANK = ROOT / "tests" / "fixtures" / "fake_rank.py"
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), BF16, np.dtype(np.int32)]
LAB_ALLREDUCE = ["02_ring_allreduce", "03_oneshot_allreduce"]
TP_ALLREDUCE = [*LAB_ALLREDUCE, "copy_engine"]  # the tensor-parallel block's all-reduces
SIGNAL_ALLREDUCE = ["04_oneshot_signal", "05_twoshot_allreduce", "06_oneshot_ll", "auto_allreduce"]  # device epochs
N_GPUS = len(gpus.physical_gpus())  # nvidia-smi's count: no CUDA context in the collecting process


def needs_gpus(k: int):
    why = gpus.too_few_gpus(k)
    return pytest.mark.skipif(why is not None, reason=why or "")


def needs_nccl():
    return pytest.mark.skipif(not build.lib_path("collectives").exists() or not co.have_nccl(),
                              reason="libcollectives.so was built without NCCL (pip install -e '.[nccl]', rebuild)")


def rank_inputs(rng, world: int, n: int, dtype) -> list[np.ndarray]:
    """Integer-valued inputs: every summation order gives the same bits (|sum| <= 8 x world, exact
    in bf16 for world <= 16). int32 takes the whole range, so the sums wrap."""
    if np.dtype(dtype) == np.int32:
        return [rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32) for _ in range(world)]
    return [rng.integers(-8, 9, n).astype(np.float32).astype(dtype) for _ in range(world)]


def assert_exact(outs: list[np.ndarray], ref: np.ndarray) -> None:
    """Every rank's output equals ref bit for bit (a NaN left by the poison fails)."""
    want = ref.view(f"u{ref.itemsize}")
    for r, o in enumerate(outs):
        if o.shape != ref.shape or o.dtype != ref.dtype:
            raise AssertionError(f"rank {r}: {o.dtype}{o.shape} instead of {ref.dtype}{ref.shape}")
        bad = np.flatnonzero(o.view(f"u{o.itemsize}") != want)
        if bad.size:
            i = int(bad[0])
            raise AssertionError(f"rank {r}: {bad.size} element(s) differ, first at {i}: {o[i]!r} != {ref[i]!r}")


# --- the checkers fail on wrong answers -------------------------------------------------------------

def test_assert_exact_fails_on_a_wrong_element_or_a_nan():
    ref = np.arange(10, dtype=np.float32)
    assert_exact([ref.copy(), ref.copy()], ref)
    wrong = ref.copy()
    wrong[7] += 1
    with pytest.raises(AssertionError, match="rank 1: 1 element"):
        assert_exact([ref.copy(), wrong], ref)
    nan = ref.copy()
    nan[0] = np.nan
    with pytest.raises(AssertionError, match="rank 0"):
        assert_exact([nan], ref)
    # -0.0 and 0.0 differ in bits: the check is exact, not ==.
    with pytest.raises(AssertionError):
        assert_exact([np.zeros(1, np.float32)], np.array([-0.0], np.float32))


def test_reference_allreduce_wraps_int32_and_rounds_once():
    a = [np.array([2**31 - 1, 5], np.int32), np.array([1, -7], np.int32)]
    assert co.reference_allreduce(a).tolist() == [-2**31, -2]
    b = [np.array([1.5], np.float32).astype(BF16)] * 3
    assert co.reference_allreduce(b).dtype == BF16 and float(co.reference_allreduce(b)[0]) == 4.5


def test_tp_reference_is_the_unsharded_block():
    rng = np.random.default_rng(0)
    x, w1, w2 = rng.standard_normal((3, 4)), rng.standard_normal((6, 4)), rng.standard_normal((4, 6))
    want = np.array([[sum(w2[j, k] * co.gelu_tanh(sum(x[i, m] * w1[k, m] for m in range(4))) for k in range(6))
                      for j in range(4)] for i in range(3)])
    np.testing.assert_allclose(co.tp_reference(x, w1, w2, round_hidden=False), want, rtol=1e-12)
    # gelu(0) = 0, gelu(large) = large, gelu(-large) = 0 (the tanh form)
    assert co.gelu_tanh(np.array([0.0]))[0] == 0 and abs(co.gelu_tanh(np.array([10.0]))[0] - 10) < 1e-9


def test_busbw_is_nccl_tests_definition():
    assert co.bus_factor("allreduce", 2) == 1.0 and co.bus_factor("allreduce", 8) == 1.75
    assert co.bus_factor("nccl_allgather", 4) == 0.75 and co.bus_factor("nccl_reducescatter", 2) == 0.5
    assert co.bus_factor("01_p2p_copy", 2) == 1.0
    # 1 GB in 10 ms on 4 ranks: algbw 100 GB/s, busbw 150 GB/s
    assert co.busbw_gbs("allreduce", 1e9, 4, 0.01) == pytest.approx(150.0)


# --- bad input, refused before any launch -----------------------------------------------------------

def test_arrays_of_different_sizes_or_dtypes_are_refused_with_the_rule():
    a = np.ones(5, np.float32)
    with pytest.raises(ValueError, match="same size.*arrays\\[1\\] has 4"):
        co.check_arrays([a, np.ones(4, np.float32)])
    with pytest.raises(TypeError, match="same dtype.*arrays\\[2\\] is int32"):
        co.check_arrays([a, a, np.ones(5, np.int32)])
    with pytest.raises(TypeError, match="float32, bfloat16.*or int32"):
        co.check_arrays([np.ones(5, np.float64)])
    with pytest.raises(ValueError, match="empty"):
        co.check_arrays([])
    with pytest.raises(ValueError, match="at least one element"):
        co.check_arrays([np.ones(0, np.float32)])
    with pytest.raises(ValueError, match="1-D"):
        co.check_arrays([np.ones((2, 2), np.float32)])
    with pytest.raises(TypeError, match="list with one numpy array per rank"):
        co.check_arrays(np.ones((2, 3), np.float32))
    # the public call refuses before it loads or launches anything
    with pytest.raises(ValueError, match="same size"):
        co.allreduce([a, np.ones(4, np.float32)])
    with pytest.raises(ValueError, match="allreduce variants"):
        co.allreduce([a, a], variant="01_p2p_copy")


def test_plan_names_each_rule():
    yes = lambda w: True  # noqa: E731
    no = lambda w: False  # noqa: E731
    # fewer GPUs than ranks: virtual ranks for the lab's kernels, unless real ones were demanded
    assert co.plan(4, "02_ring_allreduce", None, gpus=1, peers=yes, nccl=True) is True
    assert co.plan(2, "02_ring_allreduce", None, gpus=2, peers=yes, nccl=True) is False
    assert co.plan(2, "03_oneshot_allreduce", None, gpus=2, peers=no, nccl=True) is True  # no peer access
    assert co.plan(1, "nccl_allreduce", None, gpus=1, peers=yes, nccl=True) is False
    with pytest.raises(ValueError, match="virtual=False needs 4 GPUs.*1 visible"):
        co.plan(4, "02_ring_allreduce", False, gpus=1, peers=yes, nccl=True)
    with pytest.raises(ValueError, match="needs 2 GPUs.*one per rank.*refuses two ranks on one GPU"):
        co.plan(2, "nccl_allreduce", None, gpus=1, peers=yes, nccl=True)
    with pytest.raises(ValueError, match="cannot run virtual ranks"):
        co.plan(2, "nccl_allgather", True, gpus=2, peers=yes, nccl=True)
    with pytest.raises(ValueError, match="NCCL absent.*nccl_allreduce, nccl_allgather, nccl_reducescatter"):
        co.plan(1, "nccl_reducescatter", None, gpus=1, peers=yes, nccl=False)
    with pytest.raises(ValueError, match="unknown collectives variant"):
        co.plan(2, "04_tree", None, gpus=2, peers=yes, nccl=True)


def test_nccl_absent_is_refused_before_any_launch(monkeypatch):
    monkeypatch.setattr(co, "have_nccl", lambda: False)
    monkeypatch.setattr(co, "Communicator", None)  # reaching it would raise TypeError, not this
    for call in (lambda: co.allreduce([np.ones(3, np.float32)], variant="nccl_allreduce"),
                 lambda: co.allgather([np.ones(3, np.float32)]),
                 lambda: co.reduce_scatter([np.ones(3, np.float32)])):
        with pytest.raises(ValueError, match="NCCL absent"):
            call()


def test_a_world_too_large_names_the_largest_that_fits():
    with pytest.raises(ValueError, match="9 virtual ranks do not fit.*largest world that fits is 8"):
        co.check_world_fits(9, 8)
    co.check_world_fits(8, 8)


def test_tp_mlp_refuses_bad_shapes_before_launch():
    x = np.ones((4, 8), BF16)
    w1, w2 = np.ones((12, 8), BF16), np.ones((8, 12), BF16)
    with pytest.raises(ValueError, match="multiple of the world"):
        co.tp_mlp(x, w1, w2, world=5)
    with pytest.raises(ValueError, match="w2 must be H x F"):
        co.tp_mlp(x, w1, np.ones((12, 8), BF16), world=2)
    with pytest.raises(TypeError, match="x must be bfloat16"):
        co.tp_mlp(np.ones((4, 8), np.float32), w1, w2, world=2)
    with pytest.raises(ValueError, match="unknown collectives tp_allreduce 'nccl_allreduce'; valid: 02_ring"):
        co.tp_mlp(x, w1, w2, world=2, ar_variant="nccl_allreduce")
    with pytest.raises(ValueError, match="unknown collectives tp_gemm 'cublas'; valid: auto, mma_sync, wgmma"):
        co.tp_mlp(x, w1, w2, world=2, gemm="cublas")


def test_p2p_copy_refuses_other_than_two_ranks():
    a = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="two ranks"):
        co.p2p_copy([a, a, a])
    with pytest.raises(ValueError, match="direction"):
        co.p2p_copy([a, a], direction="sideways")


# --- the library, the executable and the hooks (built in CI, no GPU needed) -----------------------------

def test_library_variant_table_matches_the_module():
    assert co.VARIANTS == tuple(programs.variants("collectives"))
    assert {"02_ring_allreduce", "nccl_allreduce"} <= set(co.VARIANTS) and co.variant_index(co.VARIANTS[-1]) == len(co.VARIANTS) - 1
    for i, v in enumerate(co.VARIANTS):
        assert co.lib().collectives_variant_needs_nccl(i) == (1 if v in co.NCCL_VARIANTS else 0)


def test_the_kinds_of_variant_are_the_tables_tags():
    """The kinds the module asks of the library (collectives_variant_tags), as the rungs are written."""
    assert co.ALLREDUCE_VARIANTS == ("02_ring_allreduce", "03_oneshot_allreduce", "nccl_allreduce",
                                     "04_oneshot_signal", "05_twoshot_allreduce", "06_oneshot_ll", "auto_allreduce")
    assert co.GRAPH_VARIANTS == ("nccl_allreduce", "nccl_allgather", "nccl_reducescatter", "04_oneshot_signal",
                                 "05_twoshot_allreduce", "06_oneshot_ll")
    assert library.tagged("collectives", "small") == ("04_oneshot_signal", "05_twoshot_allreduce", "06_oneshot_ll")
    assert co.NCCL_VARIANTS == ("nccl_allreduce", "nccl_allgather", "nccl_reducescatter")
    assert co.BENCH_VARIANTS == ("02_ring_allreduce", "03_oneshot_allreduce", "04_oneshot_signal",
                                 "05_twoshot_allreduce", "06_oneshot_ll", "auto_allreduce")
    # the caps, as the library sets them (the scratch is sized for the largest)
    assert [co.max_bytes(v, 1 << 30) for v in ("04_oneshot_signal", "05_twoshot_allreduce", "06_oneshot_ll",
                                                 "02_ring_allreduce")] == [2 << 20, 64 << 20, 1 << 20, 1 << 30]
    assert co.max_bytes("06_oneshot_ll", 4096) == 4096 and co.small_max_world() == 8
    assert co.lib().collectives_variant_tags(len(co.VARIANTS)) == co.lib().ffi.NULL
    assert co.lib().collectives_variant_tags(-1) == co.lib().ffi.NULL
    assert "nccl_allreduce" in co.no_nccl()


def test_the_tp_gemms_are_the_librarys_table_and_wgmma_refuses_rows_tma_cannot_read():
    assert co.tp_gemm_names() == ("auto", "mma_sync", "wgmma")
    # The wgmma GEMM reads its operands through TMA: rows of hidden (first GEMM) and ffn/world (second)
    # bf16 must be a multiple of 16 bytes. Where this GPU or build has no sm_90a it says that instead.
    odd_hidden, odd_share = co.tp_gemm_refusal("wgmma", 2, 60, 256), co.tp_gemm_refusal("wgmma", 2, 64, 2 * 12)
    assert odd_hidden and odd_share
    if co.tp_gemm_refusal("wgmma", 2, 64, 256) is None:
        assert "hidden a multiple of 8" in odd_hidden and "ffn/world a multiple of 8" in odd_share
    else:
        assert odd_hidden.startswith("needs sm_90a") and odd_hidden == co.tp_gemm_refusal("wgmma", 2, 64, 256)
    # auto and mma_sync take any shape (02 reads any K in place): only the variants' sm_80 need refuses them
    for gemm in ("auto", "mma_sync"):
        assert co.tp_gemm_refusal(gemm, 2, 60, 2 * 12) == co.unsupported_reason("tp_mlp")
    with pytest.raises(ValueError, match="unknown collectives tp_gemm 'cublas'"):
        co.tp_gemm_refusal("cublas", 2, 64, 256)


def test_a_refused_tp_gemm_raises_with_the_reason_before_any_launch(monkeypatch):
    def no_launch(*a, **k):
        raise AssertionError("a refused GEMM reached the communicator")

    monkeypatch.setattr(co, "unsupported_reason", lambda v: None)
    monkeypatch.setattr(co, "Communicator", no_launch)
    monkeypatch.setattr(co, "plan", no_launch)
    x, w1, w2 = _tp_inputs(H=60)
    why = co.tp_gemm_refusal("wgmma", 2, 60, 256)
    with pytest.raises(ValueError, match=re.escape(f"gemm 'wgmma' cannot run this block here: {why}")):
        co.tp_mlp(x, w1, w2, 2, gemm="wgmma")


def test_failure_phases_are_named_by_the_library():
    assert [co.phase_name(p) for p in range(7)] == ["reduce-scatter", "all-gather", "start barrier", "end barrier",
                                                    "NCCL", "signal", "gather"]
    assert co.phase_name(7) == "7" and co.phase_name(-1) == "-1"


def _exe(*args, env=None, timeout=60):
    exe = build.bin_path("collectives")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_executable_refuses_bad_arguments_with_status_2():
    for args, msg in [(["--dtype", "f16"], "--dtype must be f32, bf16 or i32"),
                      (["--variant", "04_tree"], "unknown variant '04_tree'"),
                      (["--n", "0"], "--n must be a positive integer"),
                      (["--direction", "up"], "--direction must be")]:
        r = _exe(*args)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    # a rank variable without a world size
    r = _exe(env={"RANK": "0", "WORLD_SIZE": "", "OMPI_COMM_WORLD_SIZE": "", "SLURM_NTASKS": ""})
    assert r.returncode == 2 and "no world size" in r.stderr
    r = _exe(env={"RANK": "3", "WORLD_SIZE": "2"})
    assert r.returncode == 2 and "below the world size" in r.stderr
    r = _exe("--variant", "tp_mlp", env={"RANK": "0", "WORLD_SIZE": "1"})
    assert r.returncode == 2 and "runs in one process" in r.stderr
    r = _exe("--variant", "tp_mlp_overlap", "--gemm", "cublas")
    assert r.returncode == 2 and "unknown --gemm 'cublas' (valid: auto, mma_sync, wgmma)" in r.stderr, r.stderr
    r = _exe("--variant", "06_oneshot_ll", "--allreduce", "copy_engine")  # a block option, never ignored
    assert r.returncode == 2 and ("--allreduce is an option of tp_mlp and tp_mlp_overlap; variant 06_oneshot_ll "
                                  "does not take it") in r.stderr, r.stderr
    r = _exe("--tokens", "64")  # the default variant, 02_ring_allreduce
    assert r.returncode == 2 and "--tokens is an option of tp_mlp" in r.stderr, r.stderr
    r = _exe("--variant", "tp_mlp_overlap", "--allreduce", "nccl_allreduce")
    assert r.returncode == 2 and ("unknown --allreduce 'nccl_allreduce' (valid: 02_ring_allreduce, "
                                  "03_oneshot_allreduce, copy_engine)") in r.stderr, r.stderr
    r = _exe("--variant", "03_oneshot_allreduce", "--virtual", env={"RANK": "0", "WORLD_SIZE": "1"})
    assert r.returncode == 2 and "--virtual runs every rank in one process" in r.stderr, r.stderr


def test_executable_reads_mpirun_and_srun_variables():
    # Without NCCL in the build the per-rank path stops at that with status 2, after reading the rank:
    # which proves the variables were taken. With NCCL the refusal is the one for a rank beyond the world.
    for env in ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "2"},
                {"SLURM_PROCID": "7", "SLURM_NTASKS": "4"}):
        r = _exe(env={"RANK": "", **env})
        assert r.returncode == 2 and "must be below the world size" in r.stderr, r.stderr


def _runs_here(variant: str) -> bool:
    try:
        return co.unsupported_reason(variant) is None
    except (OSError, AttributeError, ValueError):  # no library built yet: sanitize_args keeps every case
        return True


def test_sanitize_and_profile_hooks_cover_every_lab_kernel_on_virtual_ranks():
    runs = co.sanitize_args()
    flat = [" ".join(v) for v in runs.values()]
    for kernel in ("02_ring_allreduce", "03_oneshot_allreduce", "01_p2p_copy", "tp_mlp_overlap"):
        # A kernel this build or GPU cannot run (tp_mlp's sm_80 GEMM on sm_75) is left out, and only then.
        runs_here = kernel != "tp_mlp_overlap" or _runs_here(kernel)
        assert any(f"--variant {kernel}" in f for f in flat) == runs_here, kernel
    assert any("--allreduce copy_engine" in f for f in flat) == _runs_here("tp_mlp_overlap")  # its adds too
    for dt in ("f32", "bf16", "i32"):
        assert any(f"--dtype {dt}" in f for f in flat), dt
    assert all("--virtual" in v for v in runs.values())
    assert not any("nccl" in f for f in flat)  # NCCL's own kernels are not the lab's to sanitize
    assert co.profile_args(None)[:2] == ["--variant", "02_ring_allreduce"]


def test_bench_cases_span_4kib_to_1gib_and_say_one_gpu_protocol_cost(monkeypatch):
    monkeypatch.setattr(gpus, "physical_gpus", lambda: ["0"])
    cases = co.bench_cases(quick=False)
    sizes = {c.size for c in cases}
    assert sizes == {"4KiB", "32KiB", "64KiB", "1MiB", "16MiB", "256MiB", "1GiB"}
    by_variant = {v: {c.size for c in cases if c.variant == v} for v in co.BENCH_VARIANTS}
    assert by_variant["auto_allreduce"] == sizes and "1GiB" not in by_variant["04_oneshot_signal"]
    assert "16MiB" in by_variant["05_twoshot_allreduce"] and "256MiB" not in by_variant["05_twoshot_allreduce"]
    for c in cases:
        assert c.unit == "GB/s" and c.ceiling == "memcpy" and "one-GPU protocol cost" in c.note
        assert c.amount == c.bytes * 1.0  # two virtual ranks: busbw = algbw x 2(2-1)/2
    assert all(c.size in ("4KiB", "32KiB", "64KiB", "1MiB", "16MiB") for c in cases if c.variant == "03_oneshot_allreduce")
    assert {c.size for c in cases if c.quick} == {"4KiB", "1MiB", "16MiB"}
    assert all(fn(False) is None for fn in co.ceilings().values())  # no NCCL curve on one GPU
    monkeypatch.setattr(gpus, "physical_gpus", lambda: ["0", "1", "2", "3"])
    cases = co.bench_cases(quick=False)
    for c in cases:
        assert c.ceiling == f"nccl_allreduce_{c.size}" and c.amount == c.bytes * 1.5 and "4 GPUs" in c.note


def test_doctor_line_never_raises():
    ok, detail, fix = co.doctor_status()
    assert isinstance(ok, bool) and detail
    assert ok or fix


# --- one process per rank: the environment, the launcher's shapes, the rules of 04/05 and graphs ---------

def test_rank_environment_reads_torchrun_mpirun_and_srun():
    tr = co.rank_environment({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                              "MASTER_PORT": "29500"})
    assert (tr.rank, tr.world, tr.local_rank, tr.source, tr.id_file) == (1, 4, 1, "RANK", "")
    mp = co.rank_environment({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
                              "OMPI_COMM_WORLD_LOCAL_RANK": "1", "CUDALAB_ID_FILE": "/shared/x.id"})
    assert (mp.rank, mp.world, mp.local_rank, mp.source, mp.id_file) == (3, 4, 1, "OMPI_COMM_WORLD_RANK", "/shared/x.id")
    sl = co.rank_environment({"SLURM_PROCID": "2", "SLURM_NTASKS": "3", "NCCL_COMM_ID": "127.0.0.1:5000"})
    assert (sl.rank, sl.world, sl.local_rank) == (2, 3, 2)  # no local rank: one node, the rank
    assert co.rank_environment({"PATH": "/bin"}) is None
    # torchrun's variables come first, as in the executable
    both = co.rank_environment({"RANK": "0", "WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "5",
                                "OMPI_COMM_WORLD_SIZE": "8"})
    assert (both.rank, both.world, both.source) == (0, 1, "RANK")


@pytest.mark.parametrize("env, msg", [
    ({"RANK": "0"}, "RANK is set but no world size"),
    ({"RANK": "2", "WORLD_SIZE": "2", "CUDALAB_ID_FILE": "x"}, "RANK=2 must be below the world size 2"),
    ({"OMPI_COMM_WORLD_RANK": "one", "OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_RANK must be a whole number"),
    ({"RANK": "0", "WORLD_SIZE": "-2"}, "WORLD_SIZE must be a whole number"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "needs CUDALAB_ID_FILE.*NCCL_COMM_ID.*MASTER_ADDR and MASTER_PORT"),
])
def test_rank_environment_names_the_broken_rule(env, msg):
    with pytest.raises(ValueError, match=msg):
        co.rank_environment(env)


def test_communicator_from_environment_refuses_without_a_rank_before_any_library_call(monkeypatch):
    monkeypatch.setattr(co, "lib", None)  # reaching the library would raise TypeError, not this
    with pytest.raises(ValueError, match="no rank in the environment"):
        co.Communicator.from_environment(1024, env={})
    with pytest.raises(ValueError, match="rank must be an integer in \\[0, 2\\)"):
        co.Communicator(2, 1024, rank=2)
    with pytest.raises(ValueError, match="virtual ranks run in one process"):
        co.Communicator(2, 1024, rank=0, virtual=True)


@pytest.mark.parametrize("style", ["lab", "mpirun", "torchrun"])
def test_launcher_styles_set_only_their_launchers_variables(style, tmp_path):
    base = {"PATH": "/bin", "RANK": "7", "WORLD_SIZE": "9", "OMPI_COMM_WORLD_RANK": "7", "MASTER_PORT": "1",
            "NCCL_NVLS_ENABLE": "1"}
    env = launch.rank_env(1, 2, tmp_path / "nccl.id", base=base, style=style, master_port=4242)
    parsed = co.rank_environment(env)  # what the rank program reads back
    assert (parsed.rank, parsed.world, parsed.local_rank) == (1, 2, 1) and env["NCCL_NVLS_ENABLE"] == "0"
    if style == "mpirun":
        assert parsed.source == "OMPI_COMM_WORLD_RANK" and "RANK" not in env and env["CUDALAB_ID_FILE"]
    elif style == "torchrun":
        assert parsed.source == "RANK" and env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "4242"
        assert "CUDALAB_ID_FILE" not in env and "OMPI_COMM_WORLD_RANK" not in env
    else:
        assert parsed.source == "RANK" and parsed.id_file.endswith("nccl.id") and "MASTER_PORT" not in env
    with pytest.raises(ValueError, match="style must be one of lab, mpirun, torchrun"):
        launch.rank_env(0, 1, tmp_path / "x", style="srun")


def test_torchrun_style_picks_two_free_neighbouring_loopback_ports():
    import socket

    p = launch.free_port_pair()
    for port in (p, p + 1):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_signal_rungs_and_graphs_are_refused_with_the_rule_before_launch():
    from types import SimpleNamespace

    big = SimpleNamespace(world=9, nbytes=1 << 20)
    with pytest.raises(ValueError, match="04_oneshot_signal runs at most 8 ranks"):
        co.check_call(big, "04_oneshot_signal", np.float32, 16)
    small = SimpleNamespace(world=2, nbytes=64 << 20)
    with pytest.raises(ValueError, match="takes at most 2097152 bytes"):
        co.check_call(small, "04_oneshot_signal", np.float32, (2 << 20) // 4 + 1)
    co.check_call(small, "05_twoshot_allreduce", np.float32, (2 << 20) // 4 + 1)
    with pytest.raises(ValueError, match="at most 1024 bytes"):
        co.check_call(SimpleNamespace(world=2, nbytes=1024), "05_twoshot_allreduce", np.float32, 257)
    with pytest.raises(ValueError, match="02_ring_allreduce takes its epoch from the host.*CUDA graph"):
        co.check_call(small, "02_ring_allreduce", np.float32, 16, graph=True)
    co.check_call(small, "04_oneshot_signal", np.float32, 16, graph=True)
    with pytest.raises(ValueError, match="06_oneshot_ll takes at most 1048576 bytes"):
        co.check_call(small, "06_oneshot_ll", np.float32, (1 << 20) // 4 + 1)
    co.check_call(small, "06_oneshot_ll", np.float32, (1 << 20) // 4, graph=True)
    with pytest.raises(ValueError, match="runs at most 8 ranks, got 9 arrays"):
        co.allreduce([np.ones(4, np.float32)] * 9, variant="05_twoshot_allreduce")


# --- the launcher, on the CPU, with a stand-in rank program ----------------------------------------------

def _fake(mode: str, ranks: int, tmp_path, deadline=20.0):
    pids = tmp_path / "pids"
    pids.mkdir(exist_ok=True)
    t0 = time.monotonic()
    try:
        res = launch.launch([sys.executable, str(FAKE_RANK)], ranks, deadline,
                            extra_env={"FAKE_RANK_MODE": mode, "FAKE_RANK_PIDS": str(pids), "NCCL_NVLS_ENABLE": "1"})
        err = None
    except launch.RankFailure as e:
        res, err = None, e
    took = time.monotonic() - t0
    written = [int(p) for f in pids.glob("*.pids") for p in f.read_text().split()]
    return res, err, took, written


def _gone(pid: int) -> bool:
    """The process no longer runs: no such pid, or a zombie waiting for its new parent to reap it (a
    rank's own child, killed with the rank's process group). SIGKILL lands asynchronously: allow 2 s."""
    end = time.monotonic() + 2.0
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def test_launcher_runs_every_rank_with_its_environment(tmp_path):
    res, err, took, pids = _fake("ok", 3, tmp_path)
    assert err is None and [r.returncode for r in res.ranks] == [0, 0, 0]
    for r in range(3):
        line = res.ranks[r].stdout
        assert f"rank={r} world=3" in line and "nvls=0" in line  # multicast off, whatever the caller said
        assert "id_file=" in line and line.split("id_file=")[1].strip().endswith("nccl.id")
    assert all(_gone(p) for p in pids)


def test_launcher_names_a_rank_that_exits_non_zero_and_stops_the_others(tmp_path):
    res, err, took, pids = _fake("exit:1:3", 3, tmp_path)
    assert err is not None and err.rank == 1 and err.returncode == 3
    assert "rank 1 exited with status 3" in str(err) and "failing on purpose" in str(err)
    assert sorted(err.stopped) == [0, 2]
    assert took < 10  # not the others' minute of sleep
    assert len(pids) == 3 and all(_gone(p) for p in pids)


def test_launcher_stops_a_hanging_rank_and_its_children_at_the_deadline(tmp_path):
    res, err, took, pids = _fake("hang:2", 3, tmp_path, deadline=3.0)
    assert err is not None and err.rank == 2 and err.timed_out
    assert "rank 2 did not finish within the deadline of 3 s" in str(err)
    assert 3.0 <= took < 3.0 + launch.GRACE_S + 3
    assert len(pids) == 4 and all(_gone(p) for p in pids)  # the hanging rank's own child too


def test_launcher_names_a_rank_killed_by_a_signal(tmp_path):
    res, err, took, pids = _fake("kill:0", 2, tmp_path)
    assert err is not None and err.rank == 0 and "was killed by SIGKILL" in str(err)
    assert err.stopped == [1] and took < 10
    assert len(pids) == 2 and all(_gone(p) for p in pids)


LAUNCHER = """
import sys
sys.path.insert(0, {root!r})
from harness.calling import launch
try:
    launch.launch([sys.executable, {rank!r}], 3, 60.0, extra_env={{"FAKE_RANK_MODE": "exit:9:0",
                  "FAKE_RANK_PIDS": {pids!r}}})
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_launcher_interrupted_or_terminated_stops_every_rank(tmp_path, sig):
    """Ctrl-C, or a SIGTERM (a timeout, a job scheduler), to the process that launched the ranks: every
    rank is stopped before it exits. Each rank runs in a session of its own, so on SIGTERM the ranks
    used to run on after the launcher had died."""
    pids = tmp_path / "pids"
    pids.mkdir()
    code = LAUNCHER.format(root=str(ROOT), rank=str(FAKE_RANK), pids=str(pids))
    p = subprocess.Popen([sys.executable, "-c", code], preexec_fn=sigint_as_from_a_terminal)
    written = []
    try:
        deadline = time.monotonic() + 30
        while len(list(pids.glob("*.pids"))) < 3:  # every rank up (rank 9 does not exist: all wait)
            assert p.poll() is None and time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.05)
        written = [int(q) for f in pids.glob("*.pids") for q in f.read_text().split()]
        p.send_signal(sig)
        assert p.wait(timeout=20) == 130
        assert all(_gone(q) for q in written), "a rank runs on after its launcher stopped"
    finally:
        for q in written:
            with contextlib.suppress(OSError):
                os.kill(q, signal.SIGKILL)
        if p.poll() is None:
            p.kill()


def test_launcher_refuses_bad_rank_counts():
    with pytest.raises(ValueError, match="--ranks must be a positive integer"):
        launch.launch(["true"], 0)


def _inv(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout,
                          env={**os.environ, "PYTHONPATH": pythonpath(ROOT)})


def test_invoke_run_ranks_refuses_in_one_line():
    r = _inv("run", "collectives", "--ranks", "0")
    assert r.returncode != 0 and r.stderr.strip() == "--ranks must be at least 1, got 0"
    r = _inv("run", "hello", "--ranks", "2")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "collectives" in r.stderr


# --- GPU: exact sums on virtual ranks ---------------------------------------------------------------------

SIZES = [1, 7, 1001, 4099, (1 << 17) + 3]  # one element, odd, not a multiple of a pack, a chunk or 16 bytes


@pytest.mark.gpu
@pytest.mark.parametrize("variant", LAB_ALLREDUCE + SIGNAL_ALLREDUCE)
@pytest.mark.parametrize("world", [2, 3, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16", "i32"])
def test_allreduce_is_exact_on_virtual_ranks(variant, world, dtype):
    rng = np.random.default_rng(world * 10 + DTYPES.index(dtype))
    for n in SIZES:
        arrays = rank_inputs(rng, world, n, dtype)
        res = co.allreduce(arrays, variant=variant, virtual=True)
        assert res.ranks == "virtual" and res.world == world and "virtual ranks" in res.note
        assert_exact(res.outputs, co.reference_allreduce(arrays))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", LAB_ALLREDUCE + SIGNAL_ALLREDUCE)
def test_one_hundred_back_to_back_calls_on_one_communicator(variant):
    rng = np.random.default_rng(5)
    world, n = 3, 4099
    with co.Communicator(world, n * 4, virtual=True) as c:
        for _ in range(100):  # new inputs every call, outputs poisoned every call: a stale flag shows
            arrays = rank_inputs(rng, world, n, np.float32)
            assert_exact(c.run(variant, arrays), co.reference_allreduce(arrays))
        # and 100 enqueued without a host synchronisation in between
        arrays = rank_inputs(rng, world, n, np.float32)
        c.upload(arrays)
        c.poison()
        for _ in range(100):
            c.enqueue(variant, np.float32, n)
        c.check()
        assert_exact(c.download(n, np.float32), co.reference_allreduce(arrays))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["04_oneshot_signal", "05_twoshot_allreduce", "06_oneshot_ll"])
def test_a_cuda_graph_of_signal_rungs_replays_exact_sums(variant):
    """The epoch lives on the device: a graph of 50 captured calls, replayed, gives the sum every time
    (a host epoch, replayed unchanged, would wait for flags that already hold it and race)."""
    rng = np.random.default_rng(21)
    world, n = 3, 4099
    with co.Communicator(world, n * 4, virtual=True) as c:
        for graph in (True, False, True):  # eager calls in between: the counters stay in step
            arrays = rank_inputs(rng, world, n, np.float32)
            c.upload(arrays)
            c.poison()
            assert c.time(variant, np.float32, n, iters=50, graph=graph) > 0
            assert_exact(c.download(n, np.float32), co.reference_allreduce(arrays))
        with pytest.raises(ValueError, match="CUDA graph"):
            c.time("02_ring_allreduce", np.float32, n, graph=True)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["04_oneshot_signal", "05_twoshot_allreduce", "06_oneshot_ll"])
def test_a_signal_rung_names_the_rank_whose_flag_never_came(variant, monkeypatch):
    lib = use_fault_library(monkeypatch, "collectives")
    arrays = [np.ones(1000, np.float32)] * 3
    with co.Communicator(3, 4000, virtual=True, timeout_ms=200) as c:
        with pytest.raises(CudaError, match="rank 0's flag never came") as ei, stalled_rank(lib, 0):
            c.run(variant, arrays)
        assert ei.value.code == co.TIMEOUT
        fail = c.last_failure()
        assert fail["peer"] == 0 and fail["rank"] in (1, 2) and fail["phase"] == "signal"
        assert_exact(c.run(variant, arrays), co.reference_allreduce(arrays))  # epochs still in step


BUSY_ELEMENTS, BUSY_CALLS = 16 << 20, 48  # tens of milliseconds of all-reduces queued on the default stream


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [*LAB_ALLREDUCE, "01_p2p_copy", "01_memcpy_peer"])
def test_the_poison_never_lands_after_the_collective_while_the_default_stream_is_busy(variant):
    """The host's upload, poison and download are ordered with the collective's kernel however late
    the default stream runs. Work queued there (another communicator's all-reduces here; in a shared
    test run, other processes' kernels time-sliced on the GPU delay it the same way) must not let the
    poison land after the kernel wrote: that leaves NaN in the outputs and raises nothing."""
    rng = np.random.default_rng(8)
    copy = variant.startswith("01_")
    world, n = (2 if copy else 3), 4099
    with co.Communicator(world, n * 4, virtual=True) as c, \
            co.Communicator(2, BUSY_ELEMENTS * 4, virtual=True) as busy:
        arrays = rank_inputs(rng, world, n, np.float32)
        c.upload(arrays)
        for _ in range(BUSY_CALLS):
            busy.enqueue("02_ring_allreduce", np.float32, BUSY_ELEMENTS)  # no stream given: the default one
        c.poison()
        c.launch(variant, np.float32, n)
        outs = c.download(n, np.float32)
        busy.check()
    if copy:  # each rank received the other's array
        assert_exact([outs[0]], arrays[1])
        assert_exact([outs[1]], arrays[0])
    else:
        assert_exact(outs, co.reference_allreduce(arrays))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", LAB_ALLREDUCE)
def test_a_rank_that_never_arrives_times_out_with_rank_and_step(variant, monkeypatch):
    lib = use_fault_library(monkeypatch, "collectives")  # a stalled rank exists only in the fault build
    arrays = [np.ones(1000, np.float32)] * 2
    with co.Communicator(2, 4000, virtual=True, timeout_ms=200) as c:
        t0 = time.monotonic()
        with pytest.raises(CudaError, match="rank 1 gave up waiting at .* step") as ei, stalled_rank(lib, 0):
            c.run(variant, arrays)
        assert ei.value.code == co.TIMEOUT and time.monotonic() - t0 < 5
        fail = c.last_failure()
        assert fail["rank"] == 1
        assert fail["phase"] == ("reduce-scatter" if variant == "02_ring_allreduce" else "start barrier")
        # the communicator still works: the next call has a new epoch
        assert_exact(c.run(variant, arrays), co.reference_allreduce(arrays))


@pytest.mark.gpu
def test_a_world_the_cooperative_launch_cannot_fit_is_refused_before_launch():
    most = co.max_virtual_world(1)
    assert most >= 8
    with pytest.raises(ValueError, match=f"largest world that fits is {most}"):
        co.allreduce([np.ones(1, np.float32)] * (most + 1), virtual=True)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["kernel", "memcpy"])
def test_p2p_copy_on_virtual_ranks(method):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(1001).astype(np.float32), rng.standard_normal(1001).astype(np.float32)
    res = co.p2p_copy([a, b], "both", method, virtual=True)
    assert_exact([res.outputs[1]], a)
    assert_exact([res.outputs[0]], b)
    one = co.p2p_copy([a, b], "0to1", method, virtual=True)
    assert_exact([one.outputs[1]], a)
    assert np.isnan(one.outputs[0]).all()  # rank 0's output was not written: still poisoned


# --- GPU: the tensor-parallel block ------------------------------------------------------------------

def _tp_inputs(T=72, H=64, F=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, H)).astype(BF16)
    w1 = (rng.standard_normal((F, H)) / np.sqrt(H)).astype(BF16)
    w2 = (rng.standard_normal((H, F)) / np.sqrt(F)).astype(BF16)
    return x, w1, w2


@pytest.mark.gpu
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("overlap", [False, True], ids=["plain", "overlap"])
@pytest.mark.parametrize("ar", TP_ALLREDUCE)
def test_tp_mlp_on_virtual_ranks_matches_the_unsharded_block(world, overlap, ar):
    from harness.calling.results import relative_error

    x, w1, w2 = _tp_inputs()
    why = co.unsupported_reason("tp_mlp_overlap" if overlap else "tp_mlp")
    if why:  # gemm_tc's sm_80 GEMM: refused in one line before any launch, then skipped with that reason
        with pytest.raises(ValueError, match="cannot run here: " + re.escape(why)):
            co.tp_mlp(x, w1, w2, world, overlap=overlap, chunks=3, ar_variant=ar, virtual=True)
        pytest.skip(why)
    res = co.tp_mlp(x, w1, w2, world, overlap=overlap, chunks=3, ar_variant=ar, virtual=True)
    ref = co.tp_reference(x, w1, w2)
    for r in range(world):
        err = relative_error(res.outputs[r], ref)
        assert err < 5e-3, (r, err)
        assert res.outputs[r].tobytes() == res.outputs[0].tobytes()  # every rank the same bits
    # and the checker fails on a wrong block: the same products without the GELU
    no_gelu = (x.astype(np.float64) @ w1.astype(np.float64).T) @ w2.astype(np.float64).T
    assert relative_error(res.outputs[0], no_gelu) > 5e-2


def _check_tp_gemm(x, w1, w2, world, gemm, chunks, virtual, ar="02_ring_allreduce"):
    """The block with GEMM `gemm` and all-reduce `ar`, plain and overlapped, against the unsharded one;
    every rank the same bits. A GEMM this GPU or build cannot run is refused in one line before any
    launch, then skipped."""
    from harness.calling.results import relative_error

    H, F = x.shape[1], w1.shape[0]
    why = co.unsupported_reason("tp_mlp") or co.tp_gemm_refusal(gemm, world, H, F)
    if why:
        with pytest.raises(ValueError, match=re.escape(why)):
            co.tp_mlp(x, w1, w2, world, gemm=gemm, virtual=virtual)
        pytest.skip(why)
    ref = co.tp_reference(x, w1, w2)
    for overlap in (False, True):
        res = co.tp_mlp(x, w1, w2, world, overlap=overlap, chunks=chunks, gemm=gemm, virtual=virtual, ar_variant=ar)
        for r in range(world):
            err = relative_error(res.outputs[r], ref)
            assert err < 5e-3, (overlap, r, err)
            assert res.outputs[r].tobytes() == res.outputs[0].tobytes()
    no_gelu = (x.astype(np.float64) @ w1.astype(np.float64).T) @ w2.astype(np.float64).T
    assert relative_error(res.outputs[0], no_gelu) > 5e-2
    return res


# Token counts and blocks: one row; 203 in 3 blocks of 64, 64 and 75 rows (boundaries on multiples of 8);
# 1000 in 5 blocks of 128, 256, 128, 256 and 232 (multiples of 128 where every block can have one).
# hidden 192 and ffn 768: N of 192 and 384 (or 192) against the wgmma rung's 256-wide tiles, K of 3 or 6
# of its 64-deep steps. None of the block heights is a multiple of 128 but some.
TP_RAGGED = [(1, 1), (203, 3), (1000, 5)]


@pytest.mark.gpu
@pytest.mark.parametrize("gemm", ["mma_sync", "wgmma"])
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("T, chunks", TP_RAGGED, ids=[f"T{t}c{c}" for t, c in TP_RAGGED])
@pytest.mark.parametrize("ar", ["02_ring_allreduce", "copy_engine"])
def test_tp_mlp_each_gemm_on_virtual_ranks_on_ragged_token_blocks(gemm, world, T, chunks, ar):
    # copy_engine's parts at T = 1: 192 values in `world` parts of whole packs (48 or 96 each)
    x, w1, w2 = _tp_inputs(T=T, H=192, F=768, seed=T + world)
    _check_tp_gemm(x, w1, w2, world, gemm, chunks, virtual=True, ar=ar)


@pytest.mark.gpu
@pytest.mark.parametrize("world", [2, 3, 4])
def test_tp_mlp_copy_engine_on_parts_of_ragged_length(world):
    # copy_engine splits each token block's rows x H values into `world` parts of whole 16-byte packs;
    # hidden 62 over 41 tokens in blocks of 8, 16 and 17 rows (1054 values) leaves a last part that ends
    # 2 values past its last pack, and the plain form's one block (2542 values) the same.
    x, w1, w2 = _tp_inputs(T=41, H=62, F=120, seed=41 + world)
    _check_tp_gemm(x, w1, w2, world, "auto", 3, virtual=True, ar="copy_engine")


@pytest.mark.gpu
@pytest.mark.parametrize("H, F", [(60, 240), (62, 256), (64, 2 * 36)], ids=["h60", "h62", "share36"])
def test_tp_mlp_auto_takes_02_for_a_gemm_whose_rows_tma_cannot_read(H, F):
    """auto runs each product on the fastest GEMM that takes it: hidden 60 or 62 (the first GEMM's K)
    sends that GEMM to 02 and keeps the second on wgmma (K = F/2, a multiple of 8; 62 also leaves the
    TMA store for the direct one, N % 4 != 0); ffn/world 36 does the reverse."""
    x, w1, w2 = _tp_inputs(T=203, H=H, F=F, seed=H)
    _check_tp_gemm(x, w1, w2, 2, "auto", 3, virtual=True)


# --- GPU: NCCL with one rank, and one process per rank --------------------------------------------------

@pytest.mark.gpu
@needs_nccl()
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16", "i32"])
def test_nccl_with_one_rank_equals_the_input(dtype):
    rng = np.random.default_rng(3)
    (a,) = rank_inputs(rng, 1, 1003, dtype)
    assert_exact(co.allreduce([a], variant="nccl_allreduce").outputs, a)
    assert_exact(co.allgather([a]).outputs, a)
    assert_exact(co.reduce_scatter([a]).outputs, a)
    assert co.nccl_version().startswith("2.")


@pytest.mark.gpu
@needs_nccl()
def test_invoke_run_collectives_one_process_per_rank_with_one_rank():
    r = _inv("run", "collectives", "--ranks", "1", "--", "--n", "100003", "--iters", "3")
    assert r.returncode == 0, r.stderr
    df = co.parse_output(r.stdout)
    assert sorted(df["variant"]) == ["nccl_allgather", "nccl_allreduce", "nccl_reducescatter"]
    assert (df["check"] == "pass").all() and (df["ranks"] == "processes").all() and (df["rank"] == 0).all()


# --- GPU: compute-sanitizer on the virtual-rank launches ------------------------------------------------

@pytest.mark.gpu
def test_compute_sanitizer_is_clean_on_virtual_rank_launches(tmp_path):
    from harness.profiling import sanitize as hs

    try:
        sanitizer = hs.find_sanitizer()
    except ToolMissing as e:
        pytest.skip(str(e))
    work = [(hs.Case("collectives", label, tuple(argv)), tool)
            for label, argv in co.sanitize_args().items() for tool in ("memcheck", "racecheck", "synccheck")]
    with ThreadPoolExecutor(max_workers=4) as ex:
        outs = list(ex.map(lambda w: hs.run_case(w[0], w[1], sanitizer, logdir=tmp_path), work))
    bad = [f"{o.label} {o.tool}: {o.status} {o.detail}" for o in outs if not o.clean]
    assert not bad, bad


# --- several GPUs (skipped, with the reason, on fewer) ------------------------------------------------------

@pytest.mark.gpu
@needs_gpus(2)
@pytest.mark.parametrize("variant", LAB_ALLREDUCE + SIGNAL_ALLREDUCE)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16", "i32"])
def test_allreduce_one_rank_per_gpu(variant, dtype):
    world = min(N_GPUS, 8)
    rng = np.random.default_rng(11)
    for n in SIZES:
        arrays = rank_inputs(rng, world, n, dtype)
        res = co.allreduce(arrays, variant=variant, virtual=False)
        assert res.ranks == "devices"
        assert_exact(res.outputs, co.reference_allreduce(arrays))


@pytest.mark.gpu
@needs_gpus(2)
@pytest.mark.parametrize("method", ["kernel", "memcpy"])
def test_p2p_copy_between_two_gpus(method):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(1 << 20).astype(np.float32), rng.standard_normal(1 << 20).astype(np.float32)
    res = co.p2p_copy([a, b], "both", method, virtual=False)
    assert res.ranks == "devices"
    assert_exact([res.outputs[1]], a)
    assert_exact([res.outputs[0]], b)


@pytest.mark.gpu
@needs_gpus(2)
@needs_nccl()
def test_nccl_collectives_on_two_gpus():
    rng = np.random.default_rng(4)
    arrays = rank_inputs(rng, 2, 4098, np.float32)
    assert_exact(co.allreduce(arrays, variant="nccl_allreduce").outputs, co.reference_allreduce(arrays))
    assert_exact(co.allgather(arrays).outputs, np.concatenate(arrays))
    rs = co.reduce_scatter(arrays)
    total = co.reference_allreduce(arrays)
    assert_exact([rs.outputs[0]], total[:2049])
    assert_exact([rs.outputs[1]], total[2049:])


@pytest.mark.gpu
@needs_gpus(2)
@pytest.mark.parametrize("overlap", [False, True], ids=["plain", "overlap"])
@pytest.mark.parametrize("ar", TP_ALLREDUCE)
def test_tp_mlp_on_two_gpus(overlap, ar):
    from harness.calling.results import relative_error

    x, w1, w2 = _tp_inputs()
    res = co.tp_mlp(x, w1, w2, 2, overlap=overlap, virtual=False, ar_variant=ar)
    assert res.ranks == "devices"
    for r in range(2):
        assert relative_error(res.outputs[r], co.tp_reference(x, w1, w2)) < 5e-3
        assert res.outputs[r].tobytes() == res.outputs[0].tobytes()


# One rank per GPU: each GPU's GEMMs under the overlapped form's SM cap, the all-reduce beside them on
# the SMs left over, and every rank's maps in one cache (pointers on several devices).
@pytest.mark.gpu
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("gemm", ["auto", "mma_sync", "wgmma"])
@pytest.mark.parametrize("ar", ["02_ring_allreduce", "copy_engine"])
def test_tp_mlp_each_gemm_on_one_gpu_per_rank(world, gemm, ar):
    if gpus.too_few_gpus(world):
        pytest.skip(gpus.too_few_gpus(world))
    x, w1, w2 = _tp_inputs(T=1000, H=192, F=768, seed=world)
    assert _check_tp_gemm(x, w1, w2, world, gemm, 5, virtual=False, ar=ar).ranks == "devices"


def _expected_split(sms: int, tiles: int, launch_ranks: int, default_blocks: int, given: int = 0) -> tuple[int, int]:
    """tp_split's rule, restated: the wgmma GEMM's balanced persistent grid runs `tiles` tiles on
    ceil(tiles / rounds) SMs; the all-reduce gets one block a free SM (at least 4 SMs), the named
    --blocks if given, and no cap where it would take more than half the SMs."""
    rounds = -(-tiles // sms)
    busy = -(-tiles // rounds)
    free = max(4, sms - busy)
    blocks = given or max(1, min(default_blocks, free // launch_ranks))
    comm = blocks * launch_ranks
    return (0, default_blocks if not given else given) if 2 * comm > sms else (sms - comm, blocks)


@pytest.mark.gpu
def test_tp_split_caps_the_gemms_at_the_sms_the_allreduce_leaves():
    """One token block of 1024 rows at hidden 8192 and ffn/world 8192: both GEMMs are 8 x 32 tiles of
    128 x 256. The result line's gemm_sms and comm_blocks are the split the forward ran with."""
    from harness.calling import cudart

    H, world = 8192, 2
    F = 8192 * world
    why = co.unsupported_reason("tp_mlp_overlap") or co.tp_gemm_refusal("wgmma", world, H, F)
    if why:
        pytest.skip(why)
    sms = cudart.summary().sm_count
    shapes = [("--virtual",), ()] if not gpus.too_few_gpus(world) else [("--virtual",)]
    for shape in shapes:
        virtual = bool(shape)
        for given, ar in ((0, "02_ring_allreduce"), (6, "copy_engine")):
            args = ["--variant", "tp_mlp_overlap", "--world", str(world), *shape, "--tokens", "1024", "--hidden", str(H),
                    "--ffn", str(F), "--chunks", "1", "--gemm", "wgmma", "--allreduce", ar, "--iters", "1"]
            if given:
                args += ["--blocks", str(given)]
            r = _exe(*args, timeout=120)
            assert r.returncode == 0, r.stderr
            line = next(x for x in r.stdout.splitlines() if x.startswith("result "))
            got = tuple(int(re.search(rf"{k}=(\d+)", line).group(1)) for k in ("gemm_sms", "comm_blocks"))
            default = max(1, min(16, co.max_virtual_world(1) // world)) if virtual else 32
            want = _expected_split(sms, 8 * 32, world if virtual else 1, default, given)
            assert got == want, (shape, given, line)
            assert f"allreduce={ar}" in line and f"ranks={'virtual' if virtual else 'devices'}" in line


def test_tp_scaling_refuses_what_cannot_run_before_the_first_run(monkeypatch):
    ran = []
    monkeypatch.setattr(co, "run", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(gpus, "physical_gpus", lambda: ["0"])
    with pytest.raises(ValueError, match="needs 2 or more GPUs, one per rank; 1 visible"):
        co.tp_scaling()
    monkeypatch.setattr(gpus, "physical_gpus", lambda: ["0", "1"])
    for kw, msg in (({"worlds": [4]}, "world 4 needs 4 GPUs, one per rank; 2 visible"),
                    ({"worlds": [1]}, "at least 2"), ({"worlds": [2.0]}, "must be an integer"),
                    ({"worlds": [2], "repeats": 0}, "repeats must be at least 1"),
                    ({"worlds": [2], "gemm": "cublas"}, "unknown collectives tp_gemm 'cublas'; valid: auto"),
                    ({"worlds": [2], "ffn": 33}, r"ffn \(33\) must be a multiple of every world size, not of 2")):
        with pytest.raises((ValueError, TypeError), match=msg):
            co.tp_scaling(**kw)
    assert ran == []


def test_multi_gpu_sweeps_saves_each_csv_as_it_is_taken(monkeypatch, tmp_path):
    import pandas as pd

    calls = []

    def sweep(world, nodes=1):
        calls.append(("latency", world, nodes))
        if world == 8:
            raise RuntimeError("stopped")  # what was taken before it stays on disk
        return pd.DataFrame({"world": [world], "nodes": [nodes]})

    monkeypatch.setattr(co, "latency_sweep_processes", sweep)
    monkeypatch.setattr(co, "tp_scaling", lambda worlds, repeats: (calls.append(("tp", tuple(worlds), repeats))
                                                                   or pd.DataFrame({"w": worlds})))
    monkeypatch.setattr(gpus, "physical_gpus", lambda: ["0"])
    with pytest.raises(ValueError, match="need 2 or more GPUs, one per rank; 1 visible"):
        co.multi_gpu_sweeps(tmp_path / "a")
    assert not (tmp_path / "a").exists()
    monkeypatch.setattr(gpus, "physical_gpus", lambda: [str(i) for i in range(4)])
    folder = co.multi_gpu_sweeps(tmp_path / "b", repeats=2)
    assert calls == [("latency", 2, 1), ("latency", 4, 1), ("tp", (2, 4), 2), ("latency", 4, 2)]
    stamp = folder.name
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"collectives_latency_w2-{stamp}.csv", f"collectives_latency_w4-{stamp}.csv",
         f"collectives_tp_scaling-{stamp}.csv", f"collectives_socket_w4-{stamp}.csv"])
    assert pd.read_csv(folder / f"collectives_socket_w4-{stamp}.csv")["nodes"].tolist() == [2]
    calls.clear()
    monkeypatch.setattr(gpus, "physical_gpus", lambda: [str(i) for i in range(8)])
    with pytest.raises(RuntimeError, match="stopped"):
        co.multi_gpu_sweeps(tmp_path / "c", socket=False)
    kept = list((tmp_path / "c").iterdir())[0]
    assert sorted(p.name.split("-")[0] for p in kept.iterdir()) == ["collectives_latency_w2", "collectives_latency_w4"]


@pytest.mark.gpu
@needs_gpus(2)
def test_tp_scaling_alternates_one_gpu_and_each_form():
    why = co.unsupported_reason("tp_mlp")
    if why:
        pytest.skip(why)
    seen = []
    df = co.tp_scaling(worlds=[2], repeats=2, tokens=256, hidden=512, ffn=2048, gemm="auto", iters=1,
                       progress=lambda i, n, label: seen.append((i, n, label)))
    assert list(df.columns) == co.TP_SCALING_COLUMNS and len(df) == 8 and len(seen) == 8 and seen[0][:2] == (0, 8)
    assert list(df["world"]) == [1, 2, 2, 2] * 2 and list(df["order"]) == list(range(8))
    assert list(zip(df["variant"], df["allreduce"]))[1:4] == list(co.TP_FORMS)
    assert (df["ms"] > 0).all() and (df.loc[df["variant"] == "tp_mlp_overlap", "chunks"] == 8).all()


@pytest.mark.gpu
@needs_gpus(2)
@needs_nccl()
def test_invoke_run_collectives_two_processes():
    r = _inv("run", "collectives", "--ranks", "2", "--", "--n", "1000003", "--iters", "3")
    assert r.returncode == 0, r.stderr
    df = co.parse_output(r.stdout)
    assert len(df) == 6 and (df["check"] == "pass").all() and sorted(set(df["rank"])) == [0, 1]


@pytest.mark.gpu
@needs_gpus(2)
@pytest.mark.parametrize("variant", ["04_oneshot_signal", "05_twoshot_allreduce", "06_oneshot_ll", "auto_allreduce"])
def test_graph_captured_signal_rungs_one_rank_per_gpu(variant):
    world, n = min(N_GPUS, 8), 100_003
    rng = np.random.default_rng(23)
    with co.Communicator(world, n * 4, virtual=False) as c:
        arrays = rank_inputs(rng, world, n, np.float32)
        c.upload(arrays)
        c.poison()
        us = c.time(variant, np.float32, n, iters=100, graph=True) * 1e3
        assert_exact(c.download(n, np.float32), co.reference_allreduce(arrays))
        assert 0 < us < 1000


# What auto_allreduce runs at each size: the winners of the sweep one process per GPU on two and four
# H200s (NOTES-collectives.md), the one-shot rungs by bytes sent to the world - 1 peers. Virtual ranks on
# one GPU: the choice is the communicator's world and the size, not where the ranks are.
@pytest.mark.gpu
@pytest.mark.parametrize("world, picks", [
    (2, {4 << 10: "06_oneshot_ll", 256 << 10: "06_oneshot_ll", 512 << 10: "04_oneshot_signal",
         1 << 20: "04_oneshot_signal", 4 << 20: "02_ring_allreduce", 16 << 20: "02_ring_allreduce"}),
    (4, {4 << 10: "06_oneshot_ll", 64 << 10: "06_oneshot_ll", 256 << 10: "04_oneshot_signal",
         1 << 20: "05_twoshot_allreduce", 4 << 20: "05_twoshot_allreduce", 16 << 20: "02_ring_allreduce"}),
])
def test_auto_runs_the_measured_winner_at_each_size(world, picks):
    with co.Communicator(world, max(picks), virtual=True) as c:
        assert {b: c.auto_choice(np.float32, b // 4) for b in picks} == picks
        # the choice follows the bytes, not the count: 256 KiB of bf16 is twice float32's elements
        assert c.auto_choice(ml_dtypes.bfloat16, (256 << 10) // 2) == picks[256 << 10]


# --- several GPUs, one process per GPU: the executable and Python under each launcher's environment -----

def _processes(args, world, style="lab", faults=False, extra_env=None, deadline=120.0):
    if faults:
        build_twin("collectives", "exe")
    return launch.run_program("collectives", world, args, deadline_s=deadline, style=style, faults=faults,
                              extra_env=extra_env)


@pytest.mark.gpu
@needs_gpus(2)
@needs_nccl()
@pytest.mark.parametrize("style", ["lab", "mpirun", "torchrun"])
@pytest.mark.parametrize("variant", ["04_oneshot_signal", "05_twoshot_allreduce", "06_oneshot_ll", "auto_allreduce",
                                     "02_ring_allreduce", "03_oneshot_allreduce", "nccl_allreduce"])
def test_the_lab_kernels_run_one_process_per_gpu_under_each_launcher(style, variant):
    world = min(N_GPUS, 8)
    res = _processes(["--variant", variant, "--n", "10007", "--iters", "20", "--dtype", "bf16"], world, style)
    df = co.parse_output(res.stdout)
    assert sorted(df["rank"]) == list(range(world)) and (df["ranks"] == "processes").all()
    assert (df["check"] == "pass").all() and (df["mismatches"] == 0).all()
    if variant in ("04_oneshot_signal", "05_twoshot_allreduce", "06_oneshot_ll", "auto_allreduce", "nccl_allreduce"):
        assert (df["graph_ms"] > 0).all()


@pytest.mark.gpu
@needs_gpus(2)
@needs_nccl()
def test_the_peer_copy_runs_between_two_processes():
    res = _processes(["--variant", "01_p2p_copy", "--n", "4099"], 2)
    df = co.parse_output(res.stdout)
    assert len(df) == 2 and (df["check"] == "pass").all()


PY_RANK = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from harness.programs import collectives as co
env = co.rank_environment()
world, n = env.world, 7001
rng = np.random.default_rng(5)
arrays = [rng.integers(-8, 9, n).astype(np.float32) for _ in range(world)]
want = co.reference_allreduce(arrays)
with co.Communicator.from_environment(n * 4) as c:
    for variant in {variants!r}:
        out = c.run_rank(variant, arrays[env.rank])
        assert out.tobytes() == want.tobytes(), variant
    c.upload([arrays[env.rank]])
    c.poison()
    c.time("04_oneshot_signal", np.float32, n, iters=30, graph=True)
    assert c.download(n, np.float32)[0].tobytes() == want.tobytes()
print("python rank", env.rank, "ok", c.ranks)
"""


@pytest.mark.gpu
@needs_gpus(2)
@needs_nccl()
@pytest.mark.parametrize("style", ["lab", "torchrun"])
def test_python_one_process_per_gpu(style):
    world = min(N_GPUS, 8)
    code = PY_RANK.format(root=str(ROOT), variants=[*SIGNAL_ALLREDUCE, *LAB_ALLREDUCE, "nccl_allreduce"])
    res = launch.launch([sys.executable, "-c", code], world, 180.0, style=style)
    assert [r.stdout.strip() for r in res.ranks] == [f"python rank {r} ok processes" for r in range(world)]


# serial: each case counts the fault build's processes left on the whole machine, and its ranks' NCCL setup
# has a few seconds: never beside another case of its own (or a profiler) on the same GPUs.
@pytest.mark.gpu
@pytest.mark.serial
@needs_gpus(2)
@needs_nccl()
@pytest.mark.parametrize("fault, names", [
    ("exit:1", "rank 1 exited with status 3"),
    ("noopen:1", "rank\\(s\\) 1 never opened their peers' IPC handles"),
    ("foreign:1", "refused rank 1's IPC handles: its record belongs to another run"),
    ("freed:1", "refused rank 1's IPC handles: its handles name buffers it no longer holds"),
    ("hang:1", "rank 1's flag never came"),
])
def test_a_faulty_rank_ends_every_rank_within_the_deadline_naming_it(fault, names):
    build_twin("collectives", "exe")  # the fault build's compile (the first case's) is not the ranks' time
    t0 = time.monotonic()
    with pytest.raises(launch.RankFailure) as ei:
        _processes(["--variant", "04_oneshot_signal", "--n", "4099", "--timeout-ms", "8000"], 2, faults=True,
                   extra_env={"CUDALAB_FAULT_IPC": fault}, deadline=60.0)
    took = time.monotonic() - t0
    text = str(ei.value) + ei.value.stderr_tail
    assert re.search(names, text), text
    assert took < 40, took  # the ranks' own 8 s deadlines, not the launcher's minute
    # nothing left: no process of the fault build's executable runs on (or only as a zombie)
    exe = str(build.bin_path("collectives", True))
    assert not [p for p in _running(exe) if not _gone(p)]


def _running(exe: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if (d / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace") == exe:
                    pids.append(int(d.name))
    return pids


@pytest.mark.gpu
@needs_gpus(4)
@pytest.mark.parametrize("variant", LAB_ALLREDUCE + SIGNAL_ALLREDUCE)
def test_allreduce_on_four_gpus(variant):
    rng = np.random.default_rng(12)
    arrays = rank_inputs(rng, 4, 4099, np.float32)
    res = co.allreduce(arrays, variant=variant, virtual=False)
    assert res.ranks == "devices"
    assert_exact(res.outputs, co.reference_allreduce(arrays))


# --- CPU: variants this GPU or build cannot run are refused before any launch ---------------------------

def test_a_refused_tp_variant_is_left_out_of_the_sanitizer_cases(monkeypatch):
    why = "needs sm_80: this GPU is sm_75"
    monkeypatch.setattr(co, "unsupported_reason", lambda v: why if v.startswith("tp_mlp") else None)
    cases = co.sanitize_args()
    assert "tp_overlap_w2" not in cases and "ring_f32_w3" in cases
    monkeypatch.setattr(co, "unsupported_reason", lambda v: None)
    assert "tp_overlap_w2" in co.sanitize_args()


def test_a_refused_tp_variant_raises_with_the_reason_before_any_launch(monkeypatch):
    why = "needs sm_80: this build targets sm_75 (build with ARCH=80 or newer)"
    monkeypatch.setattr(co, "unsupported_reason", lambda v: why)

    def no_launch(*a, **k):
        raise AssertionError("a refused variant reached the communicator")

    monkeypatch.setattr(co, "Communicator", no_launch)
    monkeypatch.setattr(co, "plan", no_launch)
    x, w1, w2 = _tp_inputs()
    with pytest.raises(ValueError, match=re.escape(f"'tp_mlp_overlap' cannot run here: {why}")):
        co.tp_mlp(x, w1, w2, 2, overlap=True)


# --- two nodes rehearsed on one host: the node rule, the rehearsal's environment, the refusals -------------

GPUS4 = ["0", "1", "2", "3"]
ID = {"CUDALAB_ID_FILE": "/tmp/x.id"}


# (environment, (nodes, node, local rank)): each launcher's shape of "these ranks span nodes".
LAYOUTS = [
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"}, (2, 1, 1)),
    ({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}, (1, 0, 2)),
    ({"RANK": "5", "WORLD_SIZE": "6", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (3, 2, 1)),  # no GROUP_RANK
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, (2, 1, 1)),
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NNODES": "2", "SLURM_NODEID": "1"},
     (2, 1, 1)),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_NNODES": "1"}, (1, 0, 1)),
    # mpirun on one host rehearsing two nodes: its local variables count the whole host, CUDALAB_NODES wins
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "CUDALAB_NODES": "2"}, (2, 1, 1)),
    ({"RANK": "1", "WORLD_SIZE": "2", "CUDALAB_NODES": "2", "CUDALAB_NODE": "1"}, (2, 1, 0)),
    ({"RANK": "1", "WORLD_SIZE": "2"}, (1, 0, 1)),  # no local variables: one node
]


@pytest.mark.parametrize("env, want", LAYOUTS)
def test_node_layout_reads_each_launchers_shape_and_the_executable_agrees(env, want):
    got = co.rank_environment({**env, **ID})
    assert (got.nodes, got.node, got.local_rank) == want
    # The executable's node rule: across nodes every --variant is refused with the very line Python builds,
    # before any CUDA or NCCL call; on one node it goes on (to its NCCL check, or further where NCCL is built).
    blank = {k: "" for k in launch.RANK_VARIABLES}
    r = _exe("--variant", "02_ring_allreduce", "--n", "5", "--timeout-ms", "2000", env={**blank, **env, **ID})
    if want[0] > 1:
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip() == "error: " + co.ipc_refusal("--variant 02_ring_allreduce runs on", got)
    else:
        assert "cannot be mapped" not in r.stderr


@pytest.mark.parametrize("env, msg", [
    ({"RANK": "1", "WORLD_SIZE": "4", "CUDALAB_NODES": "3"}, "CUDALAB_NODES=3 must divide the world size 4"),
    ({"RANK": "1", "WORLD_SIZE": "4", "CUDALAB_NODES": "2", "CUDALAB_NODE": "1"},
     "CUDALAB_NODE=1, but rank 1 of 4 on 2 nodes is on node 0"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "4"}, "LOCAL_WORLD_SIZE=4 exceeds the world size 2"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NNODES": "3"}, "SLURM_NNODES=3 exceeds the world size 2"),
    ({"RANK": "0", "WORLD_SIZE": "2", "CUDALAB_NODES": "0"}, "CUDALAB_NODES must be"),
])
def test_a_node_layout_that_cannot_be_is_named_in_one_line_by_python_and_the_executable(env, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        co.rank_environment({**env, **ID})
    blank = {k: "" for k in launch.RANK_VARIABLES}
    r = _exe(env={**blank, **env, **ID})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr, r.stderr


def test_across_nodes_the_per_rank_communicator_is_refused_before_any_library_call(monkeypatch):
    monkeypatch.setattr(co, "lib", None)  # reaching the library would raise TypeError, not this
    env = {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", **ID}
    with pytest.raises(ValueError) as ei:
        co.Communicator.from_environment(1024, env=env)
    text = str(ei.value)
    assert "\n" not in text and "peers on another node cannot be mapped" in text
    assert "span 2 nodes (LOCAL_WORLD_SIZE=2 of 4 ranks)" in text and "without --variant" in text


IPV4 = re.compile(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")


@pytest.mark.parametrize("style", ["lab", "mpirun", "torchrun"])
def test_the_rehearsal_environment_holds_nccl_to_sockets_on_loopback(style, tmp_path):
    # Everything a careless caller could bring: another run's bootstrap address, a real interface, IB and
    # P2P back on, a rank of its own. The rehearsal keeps none of it, and keeps what it does not govern.
    base = {"PATH": "/bin", "RANK": "7", "NCCL_COMM_ID": "10.1.2.3:5000", "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_IB_DISABLE": "0", "NCCL_P2P_DISABLE": "0", "NCCL_NET": "IB", "MASTER_ADDR": "10.1.2.3",
            "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    extra = {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "INFO"}
    hosts = set()
    for r in range(4):
        env = launch.rank_env(r, 4, tmp_path / "nccl.id", base=base, extra=extra, style=style, master_port=4242,
                              nodes=2, gpus=GPUS4)
        for k, v in launch.REHEARSAL_NCCL.items():
            assert env[k] == v, k
        assert (env["NCCL_P2P_DISABLE"], env["NCCL_SHM_DISABLE"], env["NCCL_IB_DISABLE"]) == ("1", "1", "1")
        assert (env["NCCL_NET"], env["NCCL_SOCKET_IFNAME"], env["NCCL_NVLS_ENABLE"]) == ("Socket", "lo", "0")
        nccl = {k for k in env if k.startswith("NCCL_")}
        assert nccl == set(launch.REHEARSAL_NCCL) | {"NCCL_HOSTID", "NCCL_DEBUG"}, nccl  # no inherited NCCL_COMM_ID
        assert all(ip == "127.0.0.1" for v in env.values() for ip in IPV4.findall(v)), env
        if style == "torchrun":
            assert env["MASTER_ADDR"] == "127.0.0.1" and env["GROUP_RANK"] == str(r // 2)
        else:
            assert "MASTER_ADDR" not in env and env["CUDALAB_ID_FILE"].endswith("nccl.id")
        assert env["CUDA_VISIBLE_DEVICES"] == ("0,1" if r < 2 else "2,3")
        assert (env["CUDALAB_NODES"], env["CUDALAB_NODE"]) == ("2", str(r // 2))
        hosts.add(env["NCCL_HOSTID"])
        got = co.rank_environment(env)  # what the rank reads back
        assert (got.rank, got.world, got.local_rank, got.nodes, got.node) == (r, 4, r % 2, 2, r // 2)
    assert len(hosts) == 2  # one NCCL host per node
    # One node: nothing of the rehearsal, whatever was inherited
    one = launch.rank_env(1, 2, tmp_path / "nccl.id", base={"PATH": "/bin"}, style=style)
    assert not {"CUDALAB_NODES", "NCCL_SOCKET_IFNAME", "NCCL_P2P_DISABLE", "NCCL_HOSTID"} & set(one)
    assert co.rank_environment(one).nodes == 1


def test_the_mpirun_rehearsal_line_sets_each_node_and_loopback_only():
    argv = launch.mpirun_argv(["build/bin/collectives", "--n", "100"], 4, 2, GPUS4, port=29777,
                              options=("--allow-run-as-root",), extra_env={"NCCL_DEBUG": "INFO"})
    assert argv[:2] == ["mpirun", "--allow-run-as-root"] and argv.count(":") == 1
    for node, ctx in enumerate(" ".join(argv[2:]).split(" : ")):
        words = ctx.split()
        assert words[:2] == ["-np", "2"] and words[-3:] == ["build/bin/collectives", "--n", "100"]
        env = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "-x")
        assert {k: env[k] for k in launch.REHEARSAL_NCCL} == launch.REHEARSAL_NCCL
        assert env["NCCL_COMM_ID"] == "127.0.0.1:29777" and env["CUDALAB_NODES"] == "2"
        assert env["CUDALAB_NODE"] == str(node) and env["CUDA_VISIBLE_DEVICES"] == ("0,1", "2,3")[node]
        assert env["NCCL_DEBUG"] == "INFO"
        assert all(ip == "127.0.0.1" for v in env.values() for ip in IPV4.findall(v))
    # the line the program's page gives is this one
    page = (ROOT / "cuda" / "collectives" / "README.md").read_text()
    line = " ".join(launch.mpirun_argv(["build/bin/collectives", "--n", "268435456"], 4, 2, GPUS4))
    assert line in " ".join(page.replace("\\\n", " ").split()), line


def test_a_rehearsal_that_cannot_be_laid_out_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(launch.RanksRefused, match=r"--ranks 4 --nodes 3: the nodes must divide the ranks.*1, 2 or 4"):
        launch.launch(["true"], 4, nodes=3, gpus=GPUS4, folder=tmp_path)
    with pytest.raises(launch.RanksRefused, match=r"--ranks 4: one GPU per rank, and 2 GPU\(s\) are visible here"):
        launch.launch(["true"], 4, nodes=2, gpus=["0", "1"], folder=tmp_path)
    with pytest.raises(ValueError, match="needs the GPUs to share out"):
        launch.launch(["true"], 4, nodes=2, folder=tmp_path)
    with pytest.raises(ValueError, match="--nodes must be a positive integer"):
        launch.rank_env(0, 2, tmp_path / "x", nodes=0)
    with pytest.raises(launch.RanksRefused, match="the nodes must divide"):
        co.latency_sweep_processes(4, sizes=[4096], nodes=3)
    assert list(tmp_path.iterdir()) == []  # not even the launcher's folder


def test_invoke_run_nodes_refuses_in_one_line():
    for args, msg in [(["--ranks", "4", "--nodes", "3"], "the nodes must divide the ranks"),
                      (["--nodes", "2"], "give --ranks too"),
                      (["--ranks", "2", "--nodes", "two"], "--nodes must be an integer, got 'two'")]:
        r = _inv("run", "collectives", *args)
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr, (args, r.stderr)
    def visible(gpu_list: str, *args):
        return subprocess.run([sys.executable, "-m", "invoke", "run", "collectives", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": pythonpath(ROOT), "CUDA_VISIBLE_DEVICES": gpu_list})

    r = visible("0,1", "--ranks", "4", "--nodes", "2")
    assert r.returncode != 0 and r.stderr.strip() == ("collectives: --ranks 4: one GPU per rank, and 2 GPU(s) are "
                                                      "visible here (0, 1)"), r.stderr
    # A lab kernel across the rehearsed nodes: the ranks' own refusal (before any CUDA call), in one line.
    r = visible("0,1", "--ranks", "2", "--nodes", "2", "--variant", "02_ring_allreduce")
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and "peers on another node cannot be mapped" in lines[0], r.stderr


# A rank that prints what it reads: the layout, and where NCCL would go.
SHOW_RANK = """
import json, os, sys
sys.path.insert(0, {root!r})
from harness.programs import collectives as co
e = co.rank_environment()
print(json.dumps({{"rank": e.rank, "world": e.world, "local": e.local_rank, "nodes": e.nodes, "node": e.node,
                  "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "host": os.environ.get("NCCL_HOSTID"),
                  "ifname": os.environ.get("NCCL_SOCKET_IFNAME"), "comm_id": os.environ.get("NCCL_COMM_ID")}}))
"""


def _shown(text: str) -> dict[int, dict]:
    import json

    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return {r["rank"]: r for r in rows}


def test_the_launcher_starts_a_rehearsal_with_each_rank_on_its_node(tmp_path):
    res = launch.launch([sys.executable, "-c", SHOW_RANK.format(root=str(ROOT))], 4, 60.0, nodes=2, gpus=GPUS4,
                        folder=tmp_path)
    shown = _shown(res.stdout)
    assert sorted(shown) == [0, 1, 2, 3]
    for r, s in shown.items():
        assert (s["world"], s["local"], s["nodes"], s["node"]) == (4, r % 2, 2, r // 2)
        assert s["gpus"] == ("0,1", "2,3")[r // 2] and s["host"] == f"cudalab-node{r // 2}" and s["ifname"] == "lo"


def _mpirun_options() -> tuple[str, ...]:
    # As root Open MPI asks to be told; this host may have fewer cores than ranks.
    return (*(["--allow-run-as-root"] if os.geteuid() == 0 else []), "--oversubscribe")


def _run_group(argv, timeout: float, env=None):
    """argv in a session of its own, stopped whole (mpirun and every rank it started) if it overruns."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         cwd=ROOT, env={**os.environ, **(env or {})})
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{argv[0]} did not finish within {timeout} s:\n{err[-2000:]}") from None
    return p.returncode, out, err


MPIRUN = __import__("shutil").which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="mpirun not found: pip install -e '.[mpi]' (Open MPI's wheel, "
                                                          "which ships mpirun)")


@needs_mpirun
def test_mpirun_passes_each_rehearsed_node_its_environment():
    argv = launch.mpirun_argv([sys.executable, "-c", SHOW_RANK.format(root=str(ROOT))], 4, 2, GPUS4, port=29778,
                              mpirun=MPIRUN, options=_mpirun_options())
    code, out, err = _run_group(argv, 120)
    assert code == 0, err
    shown = _shown(out)
    assert sorted(shown) == [0, 1, 2, 3]
    for r, s in shown.items():
        assert (s["world"], s["local"], s["nodes"], s["node"]) == (4, r % 2, 2, r // 2)
        assert s["gpus"] == ("0,1", "2,3")[r // 2] and s["comm_id"] == "127.0.0.1:29778" and s["ifname"] == "lo"


def _result_lines(world: int, nbytes: int, ms: float, check: str = "pass") -> str:
    lines = []
    for r in range(world):
        for op in ("nccl_allreduce", "nccl_allgather", "nccl_reducescatter"):
            lines.append(f"result program=collectives variant={op} dtype=f32 n={nbytes // 4} bytes={nbytes} "
                         f"world={world} ranks=processes rank={r} ms={ms:.6f} algbw_gbs=1.0 busbw_gbs=1.5 "
                         f"mismatches=0 check={check}")
    return "\n".join(lines) + "\n"


def test_the_socket_sweep_times_both_paths_alike_in_the_latency_format(monkeypatch):
    calls = []

    def fake_run_program(prog, ranks, args, deadline_s=600.0, nodes=1, gpus=None, **kw):
        n = int(args[args.index("--n") + 1])
        calls.append((ranks, nodes, n, tuple(gpus or ())))
        ms = 0.5 if nodes > 1 else 0.05  # the socket path, ten times slower here
        return launch.LaunchResult(["collectives"], [launch.RankRun(0, 0, _result_lines(ranks, n * 4, ms), "")])

    monkeypatch.setattr(launch, "run_program", fake_run_program)
    monkeypatch.setattr(gpus, "physical_gpus", lambda: GPUS4)
    df = co.latency_sweep_processes(4, sizes=[4096, 1 << 20], iters=50, nodes=2)
    assert calls == [(4, 1, 1024, tuple(GPUS4)), (4, 2, 1024, tuple(GPUS4)),
                     (4, 1, 1 << 18, tuple(GPUS4)), (4, 2, 1 << 18, tuple(GPUS4))]
    assert {"variant", "bytes", "world", "rank", "eager_us", "graph_us", "busbw_gbs", "path", "nodes"} <= set(df)
    assert set(df["variant"]) == {"nccl_allreduce"} and len(df) == 2 * 2 * 4
    sock = df[df.path == "socket"]
    assert (sock["nodes"] == 2).all() and (df[df.path == "nvlink"]["nodes"] == 1).all()
    assert np.allclose(sock["eager_us"], 500.0) and df["graph_us"].isna().all()
    one = sock[sock.bytes == 1 << 20].iloc[0]
    assert one["busbw_gbs"] == pytest.approx((1 << 20) / 500e-6 * 1.5 / 1e9)

    def failing(prog, ranks, args, **kw):
        return launch.LaunchResult(["collectives"], [launch.RankRun(0, 0, _result_lines(ranks, 4096, 0.1, "fail"), "")])

    monkeypatch.setattr(launch, "run_program", failing)
    with pytest.raises(AssertionError, match="nccl_allreduce at 4096 bytes on the nvlink path"):
        co.latency_sweep_processes(4, sizes=[4096], nodes=2)


# --- GPU: the rehearsal runs NCCL over sockets on loopback, by both launchers; its faults end every rank ----

NCCL_INFO = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,BOOTSTRAP"}
CHANNEL = re.compile(r"Channel \d+/\d+ : .* via (\S+)")


def assert_sockets_on_loopback(text: str, nodes: int) -> None:
    """NCCL's own account (NCCL_DEBUG=INFO) of a rehearsal: its socket transport on lo and nothing else,
    every channel through it, never peer-to-peer or shared memory; the node count NCCL saw, where said."""
    using = re.findall(r"(?:NET/Socket|Bootstrap)\s*: Using (.*)", text)
    assert any("lo:127.0.0.1" in u for u in using), text[-3000:]
    ifaces = [i for u in using for i in re.findall(r"\[\d+\]([^:\s]+):", u)]
    assert ifaces and set(ifaces) == {"lo"}, ifaces
    vias = CHANNEL.findall(text)
    assert vias and all(v.startswith("NET/Socket") for v in vias), sorted(set(vias))
    assert not re.search(r"via (P2P|SHM)", text)
    assert all(ip == "127.0.0.1" for ip in re.findall(r"\b(\d+\.\d+\.\d+\.\d+)<", text)), text[-3000:]
    for seen in re.findall(r"nNodes (\d+)", text):
        assert int(seen) == nodes, [line for line in text.splitlines() if "nNodes" in line][:6]


def _rehearsal(args, world, style="lab", extra_env=None, deadline=180.0, argv_prefix=()):
    if argv_prefix:
        exe = build.bin_path("collectives")
        return launch.launch([*argv_prefix, str(exe), *args], world, deadline, extra_env=extra_env, style=style,
                             nodes=2, gpus=gpus.physical_gpus())
    return launch.run_program("collectives", world, args, deadline_s=deadline, style=style, extra_env=extra_env,
                              nodes=2, gpus=gpus.physical_gpus())


def _three_collectives_pass(df, world: int) -> None:
    assert sorted(df["rank"].unique()) == list(range(world)) and (df["ranks"] == "processes").all()
    for r in range(world):
        mine = df[df["rank"] == r]
        assert sorted(mine["variant"]) == ["nccl_allgather", "nccl_allreduce", "nccl_reducescatter"]
    assert (df["check"] == "pass").all() and (df["mismatches"] == 0).all() and (df["world"] == world).all()


@pytest.mark.gpu
@needs_nccl()
@pytest.mark.parametrize("world", [pytest.param(2, marks=needs_gpus(2)), pytest.param(4, marks=needs_gpus(4))])
@pytest.mark.parametrize("style", ["lab", "mpirun", "torchrun"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_the_rehearsal_runs_nccls_collectives_over_sockets_on_loopback(world, style, dtype):
    # 100003: not a multiple of the world, a pack or a chunk; the reduce-scatter takes the largest multiple.
    res = _rehearsal(["--n", "100003", "--iters", "5", "--dtype", dtype], world, style, NCCL_INFO)
    _three_collectives_pass(co.parse_output(res.stdout), world)
    assert_sockets_on_loopback(res.stdout + "".join(r.stderr for r in res.ranks), nodes=2)


@pytest.mark.parametrize("variant", ["01_p2p_copy", "02_ring_allreduce", "03_oneshot_allreduce", "04_oneshot_signal",
                                     "05_twoshot_allreduce", "06_oneshot_ll", "auto_allreduce", "nccl_allreduce"])
def test_the_rehearsal_refuses_every_ipc_variant_in_one_line(variant):
    # The executable refuses before any CUDA call, so the GPUs shared out need not exist: this runs anywhere.
    with pytest.raises(launch.RankFailure) as ei:
        launch.run_program("collectives", 2, ["--variant", variant, "--n", "4099"], deadline_s=60.0, nodes=2,
                           gpus=["0", "1"])
    err = ei.value
    assert err.returncode == 2 and "\n" not in str(err)
    assert "peers on another node cannot be mapped" in str(err) and "span 2 nodes (CUDALAB_NODES=2)" in str(err)


@pytest.mark.gpu
@needs_nccl()
@needs_mpirun
@pytest.mark.parametrize("world", [pytest.param(2, marks=needs_gpus(2)), pytest.param(4, marks=needs_gpus(4))])
def test_the_rehearsal_under_mpirun_runs_nccls_collectives_over_sockets_on_loopback(world):
    exe = build.bin_path("collectives")
    argv = launch.mpirun_argv([str(exe), "--n", "100003", "--iters", "5"], world, 2, gpus.physical_gpus(),
                              port=launch.free_port_pair(), mpirun=MPIRUN, options=_mpirun_options(),
                              extra_env=NCCL_INFO)
    code, out, err = _run_group(argv, 240)
    assert code == 0, err[-3000:]
    _three_collectives_pass(co.parse_output(out), world)
    assert_sockets_on_loopback(out + err, nodes=2)


# A rank that fails in the middle of a rehearsal: every rank runs the executable as its child; rank K, after
# DELAY s (NCCL set up, the collectives under way), dies (SIGKILL to itself: the launcher sees the rank
# killed) or hangs (SIGSTOP to its executable: its peers wait on it in NCCL).
REHEARSAL_FAULT = """
import os, signal, subprocess, sys, time
kind, who, delay = os.environ["CUDALAB_REHEARSAL_FAULT"].split(":")
child = subprocess.Popen(sys.argv[1:])
if int(os.environ["RANK"]) != int(who):
    sys.exit(child.wait())
time.sleep(float(delay))
if kind == "die":
    os.kill(os.getpid(), signal.SIGKILL)
child.send_signal(signal.SIGSTOP)
time.sleep(3600)
"""


@pytest.mark.gpu
@pytest.mark.serial
@needs_nccl()
@needs_gpus(2)
@pytest.mark.parametrize("kind", ["die", "hang"])
def test_a_rank_that_dies_or_hangs_in_the_rehearsal_ends_every_rank_within_the_deadline(kind):
    world = 4 if N_GPUS >= 4 else 2
    deadline = 40.0
    t0 = time.monotonic()
    with pytest.raises(launch.RankFailure) as ei:
        # Calls that never run out (1 MiB, a million iterations) so that the fault lands mid-run.
        _rehearsal(["--n", str(1 << 18), "--iters", "1000000", "--timeout-ms", "8000"], world,
                   extra_env={"CUDALAB_REHEARSAL_FAULT": f"{kind}:1:4"}, deadline=deadline,
                   argv_prefix=(sys.executable, "-c", REHEARSAL_FAULT))
    took = time.monotonic() - t0
    err = ei.value
    if kind == "die":
        assert err.rank == 1 and "rank 1 was killed by SIGKILL" in str(err), str(err)
        assert sorted(err.stopped) == [r for r in range(world) if r != 1]
    else:
        # NCCL cannot say which peer stopped answering. Either a waiting rank gives up at its own deadline
        # (8 s) and exits 1, or one stays blocked inside NCCL and the launcher's deadline ends them all; in
        # both the launcher names the rank that failed first and, among those it stopped, the hung one.
        assert err.rank != 1 and 1 in err.stopped, str(err)
        assert err.timed_out or "did not finish within" in (str(err) + err.stderr_tail), str(err)
    assert took < deadline + launch.GRACE_S + 10, took
    exe = str(build.bin_path("collectives"))
    assert not [p for p in _running(exe) if not _gone(p)]


@pytest.mark.gpu
@needs_nccl()
@needs_gpus(2)
def test_the_socket_sweep_puts_both_paths_in_one_table():
    df = co.latency_sweep_processes(2, sizes=[4096, 1 << 20], iters=10, nodes=2)
    assert sorted(set(df["path"])) == ["nvlink", "socket"] and len(df) == 2 * 2 * 2
    assert (df["eager_us"] > 0).all() and (df["busbw_gbs"] > 0).all()
    assert set(df[df.path == "socket"]["nodes"]) == {2} and set(df[df.path == "nvlink"]["nodes"]) == {1}

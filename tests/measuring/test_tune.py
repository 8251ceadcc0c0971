"""`invoke tune matmul`: where the winner is cached, when it is used, and (GPU) a small real search."""

from __future__ import annotations

import json

import pytest

from conftest import write_json as write
from harness import programs
from harness.base import paths
from harness.calling import library
from harness.measuring import results_csv, timing, tune
from harness.programs import matmul as mm

DEVICE = "NVIDIA H100 80GB HBM3"
TUNE_FILE = "matmul-tune.json"


def test_gpu_folder_is_the_model():
    assert paths.gpu_folder(DEVICE) == "h100"
    assert paths.gpu_folder("NVIDIA H200") == "h200"
    assert paths.gpu_folder("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"
    assert paths.gpu_folder("Some GPU") == "some-gpu"


def test_bench_save_goes_where_the_notes_are(results_dir, tmp_path):
    csv = tmp_path / "bench-x.csv"
    csv.write_text("a\n1\n")
    assert results_csv.save(csv, DEVICE) == results_dir / "h100" / "bench-x.csv"


def test_tuned_choice_default_without_a_file(results_dir):
    winner, why = mm.tuned_choice(DEVICE)
    assert winner is None and "invoke tune matmul" in why


def test_tuned_choice_uses_the_cached_winner(results_dir):
    cfg = library.read_table("matmul", "config")[5]
    write(results_dir / "h100" / TUNE_FILE, device=DEVICE, winner=cfg)
    assert mm.tuned_choice(DEVICE) == (cfg, f"tuned on this device ({results_dir / 'h100' / TUNE_FILE})")


def test_tuned_choice_ignores_another_device_or_an_unknown_config(results_dir):
    write(results_dir / "h100" / TUNE_FILE, device="NVIDIA H100 PCIe", winner=library.read_table("matmul", "config")[5])
    winner, why = mm.tuned_choice(DEVICE)
    assert winner is None and "H100 PCIe" in why
    write(results_dir / "h100" / TUNE_FILE, device=DEVICE, winner="08_pipelined-1x1x1")
    winner, why = mm.tuned_choice(DEVICE)
    assert winner is None and "does not have" in why
    (results_dir / "h100" / TUNE_FILE).write_text("{not json")
    assert mm.tuned_choice(DEVICE)[0] is None


def test_tune_front_door():
    """The registry finds a program's search; the measuring layer only times and caches it."""
    with pytest.raises(ValueError, match="tunable programs: .*matmul"):
        programs.tuner("square")
    assert programs.tuner("matmul") is mm.tune
    assert {"matmul", "gemm_tc", "attention"} <= set(programs.tunables())
    assert not hasattr(tune, "tunables") and not hasattr(tune, "run")


def test_default_tuned_config_is_a_pipelined_one():
    """The compiled default, in a fresh process: in this one an earlier test may have applied the
    cached winner of this GPU (bench/results/h100/matmul-tune.json on an H100)."""
    import subprocess
    import sys

    from harness.compile import build

    code = ("from harness.calling import library; "
            "print(library.read_table('matmul', 'config')[library.load('matmul').matmul_tuned_config()])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=build.ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "08_pipelined-128x128x16-w64x32-s3"


@pytest.mark.long
def test_the_library_is_the_one_holder_of_the_tuned_choice(results_dir, monkeypatch):
    """apply_tuned asks the library what the tuned rung runs and whether a set chose it, each time, and
    keeps no copy: a cache written after the choice changes nothing until the library is reset; reset,
    the cache is read again; with no cache the compiled default runs, still unchosen. (gemm_tc's
    library loads and takes a set without a GPU; matmul's set checks the device, so only its reset here.)"""
    from conftest import ensure_built
    from harness.base.errors import CudaError
    from harness.calling import cudart
    from harness.programs import gemm_tc as gt

    ensure_built("gemm_tc")
    lib = library.load("gemm_tc")
    configs = library.read_table("gemm_tc", "config")
    before = lib.gemm_tc_tuned_config() if lib.gemm_tc_tuned_is_set() else -1
    monkeypatch.setattr(cudart, "device_name", lambda i=0: DEVICE)
    cache = results_dir / "h100" / "gemm_tc-tune.json"
    default = "04_wgmma_persistent-128x256x64-s4-gm8"
    try:
        tune.set_tuned("gemm_tc", -1)
        assert not tune.tuned_is_set("gemm_tc") and gt.apply_tuned() == default  # no cache: the default
        assert not tune.tuned_is_set("gemm_tc")  # ... unchosen, so a cache written later is read
        write(cache, device=DEVICE, winner=configs[5])
        assert gt.apply_tuned() == configs[5] and tune.tuned_is_set("gemm_tc")
        write(cache, device=DEVICE, winner=configs[9])
        assert gt.apply_tuned() == configs[5]  # chosen in this process: the library's choice stands
        assert configs[lib.gemm_tc_tuned_config()] == configs[5]
        tune.set_tuned("gemm_tc", -1)
        assert lib.gemm_tc_tuned_config() == configs.index(default) and not tune.tuned_is_set("gemm_tc")
        assert gt.apply_tuned() == configs[9]
        for bad in (-2, len(configs)):
            with pytest.raises(CudaError):
                tune.set_tuned("gemm_tc", bad)
        assert configs[lib.gemm_tc_tuned_config()] == configs[9]  # a refused set changes nothing
    finally:
        lib.gemm_tc_set_tuned(before)

    ensure_built("matmul")
    mlib = library.load("matmul")
    before = mlib.matmul_tuned_config() if mlib.matmul_tuned_is_set() else -1  # a GPU test may have chosen
    try:
        tune.set_tuned("matmul", -1)
        assert not tune.tuned_is_set("matmul")
        assert library.read_table("matmul", "config")[mlib.matmul_tuned_config()] == "08_pipelined-128x128x16-w64x32-s3"
    finally:
        mlib.matmul_set_tuned(before)


@pytest.mark.gpu
def test_gpu_tune_small(results_dir):
    df, path = mm.tune(size=256, save=True, options=timing.SMOKE)
    ok = df[df["status"] == "ok"]
    assert len(ok) >= 5 and (ok["tflops"] > 0).all()
    assert df["winner"].sum() == 1 and df.loc[df["winner"], "status"].iloc[0] == "ok"
    data = json.loads(path.read_text())
    assert data["winner"] in library.read_table("matmul", "config") and data["device"]
    # Every configuration that does not fit is listed with the limit it exceeds, never launched.
    for st in df.loc[df["status"] != "ok", "status"]:
        assert st.startswith("refused: needs") and "at most" in st
    assert mm.apply_tuned() == data["winner"]  # the search handed its winner to the library
    tune.set_tuned("matmul", -1)  # a fresh process's state: the cache is read again
    assert mm.apply_tuned() == data["winner"]
    tune.set_tuned("matmul", -1)


# --- attention: 03_flash_bf16's (warps, stages) per head size ---------------------------------------

def test_attention_tuned_choice_per_head_size(results_dir, monkeypatch):
    from harness.programs import attention as at

    path = results_dir / "h100" / "attention-tune.json"
    winner, why = at.tuned_choice(128, DEVICE)
    assert winner is None and "invoke tune attention" in why
    write(path, device=DEVICE, winners={"64": "flash_bf16_w8s3", "128": "flash_bf16_w4s2"})
    assert at.tuned_choice(64, DEVICE)[0] == "flash_bf16_w8s3"
    assert at.tuned_choice(128, DEVICE) == ("flash_bf16_w4s2", f"tuned on this device ({path})")
    # Another device's file, or a name this build lacks, leaves the compiled default.
    write(path, device="NVIDIA H200", winners={"128": "flash_bf16_w4s2"})
    assert at.tuned_choice(128, DEVICE)[0] is None
    write(path, device=DEVICE, winners={"128": "flash_bf16_w16s9"})
    winner, why = at.tuned_choice(128, DEVICE)
    assert winner is None and "flash_bf16_w16s9" in why
    # runs_as: only 03_flash_bf16 is redirected, once per process and head size.
    write(path, device=DEVICE, winners={"64": "flash_bf16_w8s3", "128": "flash_bf16_w4s2"})
    monkeypatch.setattr(at.cudart, "device_name", lambda i=0: DEVICE)
    monkeypatch.setattr(at, "_tuned", {})
    assert at.runs_as("03_flash_bf16", 128) == "flash_bf16_w4s2"
    assert at.runs_as("03_flash_bf16", 64) == "flash_bf16_w8s3"
    assert at.runs_as("02_flash", 128) == "02_flash"
    assert at.runs_as("flash_bf16_w4s2", 128) == "flash_bf16_w4s2"
    assert set(at.TUNING_VARIANTS) <= set(at.BF16_VARIANTS)


def test_attention_tuned_choice_per_variant(results_dir, monkeypatch):
    """05_flash_wgmma's winners live under winners_by_variant; a cache written before 05 existed
    (only "winners") leaves 05 on its compiled default, and one variant's choice is never given to
    the other."""
    from harness.programs import attention as at

    path = results_dir / "h100" / "attention-tune.json"
    write(path, device=DEVICE, winners={"64": "flash_bf16_w8s3", "128": "flash_bf16_w4s2"})
    winner, why = at.tuned_choice(128, DEVICE, variant="05_flash_wgmma")
    assert winner is None and "no choice of 05_flash_wgmma" in why
    write(path, device=DEVICE, winners={"64": "flash_bf16_w8s3", "128": "flash_bf16_w4s2"},
          winners_by_variant={"03_flash_bf16": {"64": "flash_bf16_w8s3", "128": "flash_bf16_w4s2"},
                              "05_flash_wgmma": {"64": "flash_wgmma_ppip_k128s2", "128": "flash_bf16_w4s2"}})
    assert at.tuned_choice(64, DEVICE, variant="05_flash_wgmma")[0] == "flash_wgmma_ppip_k128s2"
    winner, why = at.tuned_choice(128, DEVICE, variant="05_flash_wgmma")
    assert winner is None and "not one of" in why  # 03's choice named for 05: refused
    assert at.tuned_choice(128, DEVICE)[0] == "flash_bf16_w4s2"
    monkeypatch.setattr(at.cudart, "device_name", lambda i=0: DEVICE)
    monkeypatch.setattr(at, "_tuned", {})
    assert at.runs_as("05_flash_wgmma", 64) == "flash_wgmma_ppip_k128s2"
    assert at.runs_as("05_flash_wgmma", 128) == "05_flash_wgmma"
    assert at.runs_as("flash_wgmma_pp_k128s2", 64) == "flash_wgmma_pp_k128s2"


def test_attention_tune_refuses_a_bad_size():
    with pytest.raises(ValueError, match="at most 92680"):
        programs.tuner("attention")(size=10**6)


@pytest.mark.long
@pytest.mark.gpu
def test_gpu_attention_tune_small(results_dir, monkeypatch):
    """A small real search. A deliberately wrong kernel (the fault build's: it skips the last key tile,
    so it is also the fastest) is put among the choices: the search must list it as wrong and never pick it."""
    from fault_build import use_fault_library
    from harness.programs import attention as at

    use_fault_library(monkeypatch, "attention")
    monkeypatch.setattr(at, "_tuned", {})
    choices = at.TUNING_VARIANTS + ("flash_bf16_skip_last_tile",)
    tuned = at.tuned
    monkeypatch.setattr(at, "tuned", lambda: {**tuned(), "03_flash_bf16": choices})  # tune() searches tuned()'s choices
    searched = {v: cs for v, cs in at.TUNED.items() if at.unsupported_reason(v) is None}
    if not searched:  # sm_75: every tuned kernel is refused, and the search says why before timing anything
        with pytest.raises(ValueError, match="nothing to tune here: 03_flash_bf16 needs sm_80") as ei:
            at.tune(size=200, save=True, options=timing.SMOKE)
        pytest.skip(str(ei.value))
    df, path = at.tune(size=200, save=True, options=timing.SMOKE)
    assert len(df) == len(at.TC_D) * sum(len(cs) for cs in searched.values())
    bad = df[df["config"] == "flash_bf16_skip_last_tile"]
    assert len(bad) == len(at.TC_D), "the wrong kernel was not among the choices searched"
    assert bad["status"].str.startswith("wrong answer").all() and not bad["winner"].any()
    ok = df[df["config"] != "flash_bf16_skip_last_tile"]
    assert (ok["status"] == "ok").all(), ok[ok["status"] != "ok"][["D", "config", "status"]]
    assert (ok["tflops_full"] > 0).all() and (ok["tflops_causal"] > 0).all()
    # One winner per (variant, D), each one of that variant's own choices.
    assert df.groupby(["variant", "D"])["winner"].sum().tolist() == [1] * (len(at.TC_D) * len(searched))
    data = json.loads(path.read_text())
    assert set(data["winners"]) == {"64", "128"}
    assert set(data["winners"].values()) <= set(choices) - {"flash_bf16_skip_last_tile"}
    assert set(data["winners_by_variant"]) == set(searched)
    for v, w in data["winners_by_variant"].items():
        assert set(w) == {"64", "128"} and set(w.values()) <= set(searched[v])
        assert at.runs_as(v, 64) == w["64"]
    assert at.runs_as("03_flash_bf16", 128) == data["winners"]["128"]


def test_attention_tune_refuses_in_one_line_when_every_kernel_is_refused(monkeypatch):
    """On sm_75 both tuned kernels are refused: the search names each reason and times nothing."""
    from harness.programs import attention as at

    reasons = {"03_flash_bf16": "needs sm_80: this GPU is sm_75", "05_flash_wgmma": "needs sm_90a: this GPU is sm_75"}
    monkeypatch.setattr(at, "unsupported_reason", lambda v: reasons[v])
    monkeypatch.setattr(timing, "run_plan", lambda *a, **k: pytest.fail("a refused search timed something"))
    with pytest.raises(ValueError) as ei:
        at.tune(size=200, save=False, options=timing.SMOKE)
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith("attention has nothing to tune here: ")
    assert all(f"{v} {why}" in msg for v, why in reasons.items())

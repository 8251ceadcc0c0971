"""`invoke tune matmul`: where the winner is cached, when it is used, and (GPU) a small real search."""

from __future__ import annotations

import json

import pytest

from harness import bench, tune
from harness.programs import matmul as mm

DEVICE = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RESULTS_DIR", tmp_path)
    return tmp_path


def write(path, **data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_gpu_folder_is_the_model():
    assert mm.gpu_folder(DEVICE) == "h100"
    assert mm.gpu_folder("NVIDIA H200") == "h200"
    assert mm.gpu_folder("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"


def test_tuned_choice_default_without_a_file(results_dir):
    winner, why = mm.tuned_choice(DEVICE)
    assert winner is None and "invoke tune matmul" in why


def test_tuned_choice_uses_the_cached_winner(results_dir):
    cfg = mm.configs()[5]
    write(results_dir / "h100" / mm.TUNE_FILE, device=DEVICE, winner=cfg)
    assert mm.tuned_choice(DEVICE) == (cfg, f"tuned on this device ({results_dir / 'h100' / mm.TUNE_FILE})")


def test_tuned_choice_ignores_another_device_or_an_unknown_config(results_dir):
    write(results_dir / "h100" / mm.TUNE_FILE, device="NVIDIA H100 PCIe", winner=mm.configs()[5])
    winner, why = mm.tuned_choice(DEVICE)
    assert winner is None and "H100 PCIe" in why
    write(results_dir / "h100" / mm.TUNE_FILE, device=DEVICE, winner="08_pipelined-1x1x1")
    winner, why = mm.tuned_choice(DEVICE)
    assert winner is None and "does not have" in why
    (results_dir / "h100" / mm.TUNE_FILE).write_text("{not json")
    assert mm.tuned_choice(DEVICE)[0] is None


def test_tune_front_door():
    with pytest.raises(ValueError, match="tunable programs: .*matmul"):
        tune.tunable("square")
    assert tune.tunable("matmul") is mm
    with pytest.raises(ValueError, match="reps"):
        tune.run("matmul", size=64, reps=3)


def test_default_tuned_config_is_a_pipelined_one():
    from harness import library

    lib = library.load("matmul")
    assert mm.configs()[lib.matmul_tuned_config()] == "08_pipelined-128x128x16-w64x32-s3"


@pytest.mark.gpu
def test_gpu_tune_small(results_dir):
    df, path = mm.tune(size=256, reps=10, save=True)
    ok = df[df["status"] == "ok"]
    assert len(ok) >= 5 and (ok["tflops"] > 0).all()
    assert df["winner"].sum() == 1 and df.loc[df["winner"], "status"].iloc[0] == "ok"
    data = json.loads(path.read_text())
    assert data["winner"] in mm.configs() and data["device"]
    # Every configuration that does not fit is listed with the limit it exceeds, never launched.
    for st in df.loc[df["status"] != "ok", "status"]:
        assert st.startswith("refused: needs") and "at most" in st
    mm._applied.clear()
    assert mm.apply_tuned() == data["winner"]
    mm._applied.clear()

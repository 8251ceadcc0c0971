"""Without a GPU the seed programs still give their result, computed on the CPU and labelled so:
square through its C twin, matmul and attention on the simulator, Mandelbrot's twins and picture,
grayscale through the numpy reference. Each checker is shown failing on a wrong answer."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from harness import programs as registry
from harness.compile import build
from harness.programs import attention, grayscale, mandelbrot, matmul, square

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


def _inv(*args):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=build.ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **NO_GPU})


@pytest.fixture(scope="module")
def square_cpu_built():
    build.build_programs(["square"])
    assert build.bin_path("square_cpu").exists()


def test_the_label_is_one_wording():
    assert registry.cpu_label("how") == "computed on the CPU (no GPU): how"
    assert registry.cpu_label("how", no_gpu=False) == "computed on the CPU: how"
    assert set(registry.cpu_programs()) >= {"square", "matmul", "attention", "mandelbrot"}


def test_square_on_cpu_runs_the_c_twin(square_cpu_built):
    df, how = square.on_cpu(["4099"])
    assert list(df["check"]) == ["pass"] and int(df["n"][0]) == 4099 and int(df["mismatches"][0]) == 0
    assert "square_cpu 4099" in how
    with pytest.raises(ValueError, match="one argument N"):
        square.on_cpu(["--variant", "01_naive"])
    with pytest.raises(ValueError, match="between 1 and"):
        square.on_cpu(["0"])


def test_compare_square_without_a_gpu_gives_the_cpu_rows(square_cpu_built, monkeypatch):
    monkeypatch.setattr(registry, "gpu_here", lambda: (False, "no GPU (test)"))
    df, text = square.compare(n=1000, runs=2)
    assert list(df["what"]) == ["CPU process (build/bin/square_cpu)", "CPU loop only (timed inside square_cpu)"]
    assert (df["median_ms"] >= 0).all()
    assert text.startswith("computed on the CPU (no GPU):") and "With a GPU" in text


@pytest.mark.parametrize("mod", [matmul, attention, mandelbrot], ids=lambda m: m.__name__.split(".")[-1])
def test_on_cpu_checks_pass(mod):
    df, how = mod.on_cpu([])
    assert len(df) == 2 and (df["check"] == "pass").all(), df
    assert how


def test_matmul_on_cpu_fails_a_wrong_kernel(monkeypatch):
    # A tiled twin without its first barrier reads tiles before they are loaded: the checker must say fail.
    real = matmul.matmul_tiled_sim
    monkeypatch.setattr(matmul, "matmul_tiled_sim", lambda a, b, tw=8: real(a, b, tw=tw, sync=False))
    df, _ = matmul.on_cpu(["19", "23", "17"])
    assert list(df["check"]) == ["pass", "fail"]
    with pytest.raises(ValueError, match="1..96"):
        matmul.on_cpu(["97", "2", "2"])
    with pytest.raises(ValueError, match="three integers"):
        matmul.on_cpu(["3", "4"])


def test_attention_on_cpu_fails_a_wrong_twin(monkeypatch):
    real = attention.twin
    monkeypatch.setattr(attention, "twin", lambda q, k, v, causal=False: real(q, k, v, causal=not causal))
    df, _ = attention.on_cpu([])
    assert list(df["check"]) == ["fail", "fail"]


def test_mandelbrot_on_cpu_fails_a_wrong_twin(monkeypatch):
    monkeypatch.setattr(mandelbrot, "twin", lambda w, h, it: np.zeros((h, w), dtype=np.uint32))
    df, _ = mandelbrot.on_cpu([])
    assert df["check"].iloc[0] == "fail" and df["mismatches"].iloc[0] > 0


def test_mandelbrot_picture_on_the_cpu_is_the_kernels_arithmetic():
    d = mandelbrot.viz_data(width=64, height=48, iters=50, cpu=True)
    assert d["computed_on"].startswith("computed on the CPU (no GPU):")
    assert np.array_equal(d["counts"], mandelbrot.twin(64, 48, 50))  # the 01_naive kernel's own twin
    fast = mandelbrot.viz_data(width=32, height=32, iters=40, variant="02_fast", cpu=True)
    assert np.array_equal(fast["counts"], mandelbrot.reference_fast(32, 32, 40))
    from analysis import mandelbrot as am

    fig, _ = am.figure(d)
    assert "computed on the CPU (no GPU)" in fig.axes[0].get_title()


def test_grayscale_cli_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "g.png"
    assert grayscale.cli([], out=str(out), cpu=True) == 0
    said = capsys.readouterr().out
    assert "computed on the CPU (no GPU)" in said and "check=pass" in said and "device=cpu" in said
    from PIL import Image

    grey = np.asarray(Image.open(out))
    x = grayscale.planar(grayscale.test_image())
    assert np.array_equal(grey, grayscale.reference(x))


def test_grey_on_cpu_checker_fails_a_wrong_image(monkeypatch):
    x = grayscale.planar(grayscale.test_image(40, 60))
    monkeypatch.setattr(grayscale, "reference", lambda x: np.zeros(x.shape[1:], dtype=np.uint8))
    _, checked, bad = grayscale.grey_on_cpu(x, sample=500)
    assert checked == 500 and bad > 0


def test_invoke_run_without_a_gpu_says_computed_on_the_cpu(square_cpu_built):
    r = _inv("run", "matmul")
    assert r.returncode == 0, r.stderr
    assert "computed on the CPU (no GPU)" in r.stdout and "pass" in r.stdout
    r = _inv("run", "matmul", "--variant", "02_tiled")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "needs a GPU" in r.stderr
    r = _inv("run", "square", "--", "1000")
    assert r.returncode == 0 and "square_cpu" in r.stdout and "computed on the CPU (no GPU)" in r.stdout


def test_invoke_viz_mandelbrot_without_a_gpu(tmp_path):
    r = _inv("viz", "mandelbrot", "--width", "64", "--height", "48", "--outdir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "computed on the CPU (no GPU)" in r.stdout and (tmp_path / "mandelbrot.png").exists()

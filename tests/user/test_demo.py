"""`invoke demo`: without a GPU it builds, computes on the CPU what has a CPU twin, draws what it can
(the Mandelbrot set and grayscale from their numpy twins, the simulated grid-stride figures, recorded
profiles), writes the report, says what each skipped step would add on a GPU, and exits 0. With a
GPU every step passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import GPU_OK
from harness.compile import build
from harness.user import demo as hdemo


def _inv(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=build.ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.skipif(GPU_OK, reason="checks the no-GPU path (CI runs it); on this machine the slow "
                                   "test_demo_passes_on_the_gpu runs the demo")
def test_demo_without_a_gpu_exits_0_and_lists_the_skipped_steps():
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this would run the no-GPU path anywhere; on a GPU
    # machine it is skipped to keep the default suite short (it is the slowest test, ~40 s).
    r = _inv("demo", env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = " ".join(r.stdout.split())  # rich wraps long lines
    assert "No GPU here" in out and "These steps need a GPU and were skipped:" in out
    for step in ("quick bench", "profile square", "run hello"):
        assert step in out.split("were skipped:")[1], step
    state = json.loads((hdemo.REPORT / "demo.json").read_text())
    steps = {s["name"]: s for s in state["steps"]}
    assert state["gpu"] is False
    passed = [s for s in state["steps"] if s["status"] == "passed"]
    assert len(passed) >= 9, [s["name"] for s in passed]
    for name in ("build", "draw gridstride", "draw mandelbrot", "draw grayscale", "square on the CPU",
                 "matmul on the CPU", "attention on the CPU", "mandelbrot on the CPU", "draw recorded profiles",
                 "report"):
        assert steps[name]["status"] == "passed", (name, steps[name])
    for name in ("draw mandelbrot", "draw grayscale", "square on the CPU", "matmul on the CPU", "draw gridstride"):
        assert "computed on the CPU (no GPU)" in steps[name]["detail"], (name, steps[name]["detail"])
    assert not [s for s in state["steps"] if s["status"] == "failed"]
    skipped = [s for s in state["steps"] if s["status"] == "skipped"]
    assert skipped and all(s["needs_gpu"] for s in skipped)
    # Each skipped step says what a GPU would add, not only that it needs one.
    assert all(s["detail"].startswith("needs a GPU: ") and len(s["detail"]) > 40 for s in skipped), skipped
    html = (hdemo.REPORT / "index.html").read_text()
    assert html.index("The tour") < html.index("Tests") < html.index("Benchmarks")
    assert "<b>mandelbrot</b>: escape counts" in html and "computed on the CPU (no GPU)" in html
    # The tests shown are this demo's own steps, not whatever pytest run wrote build/test-results last.
    assert "invoke demo (this run" in html and f"{len(passed)} passed" in html
    assert (hdemo.REPORT / "demo-junit.xml").exists()


def test_closing_lines_name_the_gpu_steps():
    res = hdemo.DemoResult([hdemo.Step("build"), hdemo.Step("quick bench", "skipped", "needs a GPU", needs_gpu=True),
                            hdemo.Step("run x", "skipped", "needs a GPU", needs_gpu=True)], gpu=False,
                           gpu_why="cudaErrorNoDevice (100): no CUDA-capable device -- hint")
    lines = res.closing_lines()
    assert lines[0] == "demo: 1 passed, 0 failed, 2 skipped"
    assert lines[1].startswith("No GPU here (cudaErrorNoDevice (100): no CUDA-capable device).")
    assert "skipped: quick bench, run x." in lines[1]
    assert not res.failed and list(res.table()["status"]) == ["passed", "skipped", "skipped"]


def test_every_program_and_picture_gets_a_step(monkeypatch, tmp_path):
    """With a GPU (faked), the plan covers each program, each picture, the bench, the two profiles
    and the report, in that order; steps themselves are stubbed."""
    calls = []
    monkeypatch.setattr(hdemo, "gpu_state", lambda: (True, ""))
    monkeypatch.setattr(hdemo, "REPORT", tmp_path)
    monkeypatch.setattr(hdemo, "collect_facts", lambda: {"gpu": True, "tools": {}})
    monkeypatch.setattr(hdemo, "step_build", lambda: (hdemo.Step("build"), build.programs()))
    monkeypatch.setattr(hdemo, "step_run", lambda p: calls.append(("run", p)) or hdemo.Step(f"run {p}"))
    monkeypatch.setattr(hdemo, "step_picture", lambda n, gpu: calls.append(("draw", n)) or [hdemo.Step(f"draw {n}")])
    monkeypatch.setattr(hdemo, "step_image", lambda p, gpu: calls.append(("image", p)) or hdemo.Step(f"draw {p}"))
    monkeypatch.setattr(hdemo, "step_cpu", lambda p, gpu: calls.append(("cpu", p)) or hdemo.Step(f"{p} on the CPU"))
    monkeypatch.setattr(hdemo, "step_bench", lambda gpu: calls.append(("bench",)) or hdemo.Step("quick bench"))
    monkeypatch.setattr(hdemo, "step_profile", lambda p, gpu: calls.append(("profile", p)) or hdemo.Step(f"profile {p}"))
    seen = []
    res = hdemo.run(on_total=lambda n: seen.append(n), on_step=lambda s: seen.append(s))
    assert [c[1] for c in calls if c[0] == "run"] == build.programs()
    assert ("draw", "gridstride") in calls
    assert ("bench",) in calls
    from harness import programs

    assert [c[1] for c in calls if c[0] == "cpu"] == programs.cpu_programs()
    assert [c[1] for c in calls if c[0] == "profile"] == [p for p in hdemo.PROFILED if p in build.programs()]
    assert [s.name for s in res.steps][-1] == "report" and res.steps[-1].status == "passed"
    assert seen[0] == len(res.steps)  # the progress bar's total is the number of steps
    assert (tmp_path / "index.html").exists() and (tmp_path / "demo.json").exists()
    assert (tmp_path / "demo-junit.xml").exists()


def test_demo_junit_holds_its_steps(tmp_path):
    from analysis import report

    res = hdemo.DemoResult([hdemo.Step("build"), hdemo.Step("draw x", "failed", "ValueError: bad"),
                            hdemo.Step("quick bench", "skipped", "needs a GPU: times", needs_gpu=True)], gpu=False)
    path = res.write_junit(tmp_path / "j.xml")
    tot, bad = report.junit_summary(path)
    assert (tot["tests"], tot["passed"], tot["failures"], tot["skipped"], tot["name"]) == (3, 1, 1, 1, "invoke demo")
    assert list(bad["test"]) == ["demo::draw x"] and bad["message"][0] == "ValueError: bad"


def test_skipped_steps_say_what_a_gpu_adds():
    assert "times the kernels against their ceilings" in hdemo.gpu_adds("bench")
    for prog in ("square", "grayscale", "hello"):  # what ran instead is said from what ran, not assumed here
        assert "CPU" not in hdemo.gpu_adds("run", prog)
    assert hdemo.gpu_adds("profile", "square").startswith("needs a GPU: profiles square")


def test_a_run_step_names_its_cpu_twin_only_where_one_really_ran(tmp_path):
    """Without a GPU, a skipped `run X` said "its CPU twin ran above" for programs whose twin ran below
    it, or not at all (grayscale's picture is drawn later): the words now come from the steps."""
    skipped = {p: hdemo.Step(f"run {p}", "skipped", hdemo.gpu_adds("run", p), needs_gpu=True)
               for p in ("grayscale", "grid_stride", "hello", "mandelbrot")}
    steps = [hdemo.Step("square on the CPU", cpu_of="square"), hdemo.Step("run square", "skipped",
                                                                          hdemo.gpu_adds("run", "square"), needs_gpu=True),
             *skipped.values(),
             hdemo.step_image("grayscale", gpu=False, outdir=tmp_path),
             *hdemo.step_picture("gridstride", gpu=False, outdir=tmp_path),
             hdemo.Step("draw mandelbrot", "failed", "ValueError: x", cpu_of="mandelbrot")]
    hdemo.say_what_ran_instead(steps)
    details = {s.name: s.detail for s in steps}
    assert "ran above" not in " ".join(details.values())
    assert details["run square"].endswith("computed on the CPU instead: 'square on the CPU' (above)")
    assert details["run grayscale"].endswith("computed on the CPU instead: 'draw grayscale' (below)")
    assert details["run grid_stride"].endswith("computed on the CPU instead: 'draw gridstride' (below)")
    assert "instead" not in details["run hello"] and "instead" not in details["run mandelbrot"]  # none ran, one failed


def test_no_driver_at_all_is_said_as_no_gpu(monkeypatch):
    from harness.calling import cudart

    runtime_says = ("cudaGetDeviceCount: cudaErrorInsufficientDriver (35): CUDA driver version is insufficient for "
                    "CUDA runtime version -- no usable NVIDIA driver")
    monkeypatch.setattr(cudart, "gpu_available", lambda: (False, runtime_says))
    monkeypatch.setattr(cudart, "driver_version", lambda: 0)  # what the runtime reports with no driver installed
    ok, why = hdemo.gpu_state()
    last = hdemo.DemoResult([], gpu=ok, gpu_why=why).closing_lines()[1]
    assert not ok and "no GPU" in last and "no NVIDIA driver" in last and "insufficient" not in last
    monkeypatch.setattr(cudart, "driver_version", lambda: 12020)  # a driver, too old: the runtime's words stand
    assert hdemo.gpu_state() == (False, runtime_says)


# End to end (minutes on a GPU): `invoke test --marker slow`, not the default run.
@pytest.mark.slow
@pytest.mark.gpu
def test_demo_passes_on_the_gpu():
    r = _inv("demo", timeout=1200)
    state = json.loads((hdemo.REPORT / "demo.json").read_text())
    failed = [f"{s['name']}: {s['detail']}" for s in state["steps"] if s["status"] == "failed"]
    assert r.returncode == 0 and not failed, "\n".join(failed) + r.stderr[-2000:]
    assert state["gpu"] is True
    assert not [s for s in state["steps"] if s["status"] == "skipped" and s["needs_gpu"]]


def test_run_step_counts_a_variant_the_build_cannot_run_as_not_run(monkeypatch):
    """A variant refused before any launch ("cannot run here: needs sm_90a: ...", status 2) is listed
    as not run here; any other status 2 is still a failure."""
    from types import SimpleNamespace

    from harness import programs
    from harness.calling import runner

    monkeypatch.setattr(programs, "sanitize_cases", lambda prog: [("02_flash", ("--variant", "02_flash")),
                                                                  ("05_flash_wgmma", ("--variant", "05"))])
    out = {"02_flash": SimpleNamespace(returncode=0, stdout="result program=attention check=pass\n", stderr="")}
    refused = SimpleNamespace(returncode=2, stdout="", stderr="error: variant 05_flash_wgmma cannot run here: needs "
                              "sm_90a: this build has no sm_90a code (build with ARCH=90)\n")
    monkeypatch.setattr(runner, "run", lambda prog, *argv, **k: out.get(argv[1], refused))
    st = hdemo.step_run("attention")
    assert st.status == "passed", st.detail
    assert "1 not run here: 05_flash_wgmma (needs sm_90a: this build has no sm_90a code" in st.detail
    refused.stderr = "error: B, H, S and D are needed\n"
    st = hdemo.step_run("attention")
    assert st.status == "failed" and "exited 2" in st.detail

"""The timing engine (harness.measuring.timing, NVBench in a child process): its statistics, the reading of
NVBench's JSON recorded on an H100, the session folder's join of plan, results and side file, its
refusals, and on a GPU a real session."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest

from conftest import pids_mentioning, pythonpath, sigint_as_from_a_terminal
from harness.base.errors import ToolMissing
from harness.measuring import timing

FIX = Path(__file__).parent.parent / "fixtures"
PROBE = FIX / "nvbench_0.3.0_h100_probe.json"  # NVIDIA H100 80GB HBM3, cuda-bench 0.3.0


def test_summarize_median_and_iqr():
    t = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 3.0, 2.0, 4.0, 3.0])
    s = np.array([5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 3.0, 2.0, 4.0, 3.0])
    assert t.median_ms == np.median(s) == 3.0
    assert t.p25_ms == np.percentile(s, 25) and t.p75_ms == np.percentile(s, 75)
    assert t.iqr_ms == pytest.approx(np.percentile(s, 75) - np.percentile(s, 25))
    assert t.rate(3e6) == pytest.approx(1e9)  # 3e6 bytes in 3 ms = 1 GB/s
    assert t.samples == 10
    with pytest.raises(ValueError):
        timing.summarize([])
    with pytest.raises(ValueError):
        timing.summarize([1.0, float("nan")])


def _probe():
    return json.loads(PROBE.read_text())


def test_the_recorded_json_names_its_device():
    d = _probe()
    assert d["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"


def test_timing_from_a_recorded_state():
    """cuBLAS BF16 2048^3 on the H100: the summaries are seconds; a Timing holds milliseconds."""
    bm = next(b for b in _probe()["benchmarks"] if b["name"] == "cublas_r0")
    t = timing.timing_from_state(bm["states"][0], timeout_s=10.0)
    s = timing.summaries(bm["states"][0])
    assert t.median_ms == pytest.approx(float(s["nv/cold/time/gpu/median"]["value"]) * 1e3)
    assert t.p25_ms == pytest.approx(float(s["nv/cold/time/gpu/q1"]["value"]) * 1e3)
    assert t.p75_ms == pytest.approx(float(s["nv/cold/time/gpu/q3"]["value"]) * 1e3)
    assert t.p25_ms < t.median_ms < t.p75_ms
    assert 0.02 < t.median_ms < 0.04  # 29 us: 2 * 2048^3 FLOP at ~580 TFLOP/s
    assert 550 < t.rate(2.0 * 2048**3) / 1e12 < 620
    assert t.samples == 6783 and t.noise == pytest.approx(0.0141, abs=1e-3)
    assert 1700 < t.sm_clock_mhz < 2000
    assert not t.timed_out
    assert timing.timing_from_state(bm["states"][0], timeout_s=0.5).timed_out  # walltime 0.78 s


def test_a_state_without_samples_gives_none():
    assert timing.timing_from_state({"summaries": [{"tag": "nv/cold/sample_size", "data": [
        {"name": "value", "type": "int64", "value": "0"}]}]}) is None
    assert timing.timing_from_state({"summaries": []}) is None


def _session(tmp_path, names_to_keys, side=None):
    """A session folder as the child leaves it: plan.json, nvbench.json (the recorded states, renamed
    m<index> as the child names them) and side.json."""
    d = _probe()
    by_name = {b["name"]: b for b in d["benchmarks"]}
    items, bms = [], []
    for i, (recorded, key) in enumerate(names_to_keys):
        items.append({"key": key, "target": "x:y", "kwargs": {}, "warmup_s": None})
        if recorded is not None:
            bm = json.loads(json.dumps(by_name[recorded]))
            bm["name"] = f"m{i:05d}"
            bms.append(bm)
    (tmp_path / "plan.json").write_text(json.dumps({"options": {**timing.Options().__dict__}, "items": items}))
    (tmp_path / "nvbench.json").write_text(json.dumps({**d, "benchmarks": bms}))
    if side is not None:
        (tmp_path / "side.json").write_text(json.dumps(side))
    return tmp_path


def test_read_session_joins_keys_conditions_and_errors(tmp_path):
    side = {"ceil:a:r0:0": {"conditions": {"sm_clock_min_mhz": 1755.0}, "work": None, "note": ""},
            "case:0:r0": {"conditions": {}, "work": 123.0, "note": "ran w4m2s2"},
            "case:1:r0": {"error": "LookupError: no bench case"}}
    out = _session(tmp_path, [("cublas_r0", "ceil:a:r0:0"), ("wgmma_r0", "case:0:r0"), (None, "case:1:r0")], side)
    got, errors = timing.read_session(out)
    assert set(got) == {"ceil:a:r0:0", "case:0:r0"}
    assert got["ceil:a:r0:0"].conditions == {"sm_clock_min_mhz": 1755.0}
    assert got["case:0:r0"].work == 123.0 and got["case:0:r0"].note == "ran w4m2s2"
    assert got["case:0:r0"].median_ms > got["ceil:a:r0:0"].median_ms  # 03_wgmma is slower than cuBLAS there
    assert errors == {"case:1:r0": "LookupError: no bench case"}


def test_read_session_without_results(tmp_path):
    out = _session(tmp_path, [("memcpy", "k")])
    (out / "nvbench.json").unlink()
    assert timing.read_session(out) == ({}, {})


def test_plan_refusals_before_anything_runs(monkeypatch):
    with pytest.raises(ValueError, match="unique"):
        timing.run_plan([timing.Item("a", "m:f"), timing.Item("a", "m:f")])
    assert timing.run_plan([]) == {}
    monkeypatch.setattr(timing, "engine_version", lambda: None)
    with pytest.raises(ToolMissing, match=r"cuda-bench not found.*`pip install -e \.`"):
        timing.run_plan([timing.Item("a", "m:f")])


def test_no_gpu_is_said_before_the_child_starts(monkeypatch):
    """Without a device the session's child died in cuda-bench's ImportError (libcuda.so.1), a traceback
    under `invoke bench -p matmul` and `invoke profile`: the parent now says there is no GPU, at once."""
    from harness.base.errors import NoGPUError
    from harness.calling import cudart

    def no_device():
        raise NoGPUError(100, "cudaErrorNoDevice", "no CUDA-capable device is detected", "cudaGetDeviceCount")

    def popen(*a, **kw):
        raise AssertionError("the child was started")

    monkeypatch.setattr(timing, "engine_version", lambda: "0.3.0")
    monkeypatch.setattr(cudart, "device_count", no_device)
    monkeypatch.setattr(timing.subprocess, "Popen", popen)
    with pytest.raises(NoGPUError, match="no CUDA device is visible"):
        timing.run_plan([timing.Item("a", "m:f")])


def test_resolve_names_the_target_format():
    assert timing.resolve("harness.measuring.bench:memcpy_setup").__name__ == "memcpy_setup"
    with pytest.raises(ValueError, match="module:function"):
        timing.resolve("harness.measuring.bench.memcpy_setup")


def test_a_failing_child_raises_with_its_log(tmp_path, monkeypatch):
    """The parent's side of a session whose child dies: TimingError with the child's last lines."""
    monkeypatch.setattr(timing, "engine_version", lambda: "0.3.0")
    monkeypatch.setattr(timing, "require_gpu", lambda: None)  # the child is a stand-in: no device needed
    fake = tmp_path / "fakechild"
    fake.mkdir()
    (fake / "harness" / "measuring").mkdir(parents=True, exist_ok=True)
    # A stand-in `python -m harness.measuring.timing` that prints progress for one item and fails.
    (fake / "harness" / "__init__.py").write_text("")
    (fake / "harness" / "measuring" / "timing.py").write_text(
        f"import sys\nprint({timing.PROGRESS!r} + ' 0 a', flush=True)\nprint('boom: no device')\nsys.exit(3)\n")
    monkeypatch.setattr(timing.subprocess, "Popen", _popen_in(fake, timing.subprocess.Popen))
    seen = []
    with pytest.raises(timing.TimingError, match=r"status 3.*\n.*boom: no device"):
        timing.run_plan([timing.Item("a", "m:f"), timing.Item("b", "m:f")], on_progress=lambda i, k: seen.append((i, k)),
                        workdir=tmp_path / "s")
    assert seen == [(0, "a")]
    assert (tmp_path / "s" / "plan.json").exists() and "boom" in (tmp_path / "s" / "child.log").read_text()


def _popen_in(folder, real):
    def popen(cmd, **kw):
        kw["cwd"] = folder
        kw["env"] = {**kw["env"], "PYTHONPATH": pythonpath(folder, env=kw["env"])}  # the stand-in shadows harness
        return real(cmd, **kw)
    return popen


@pytest.mark.gpu
def test_a_real_session_times_a_copy(tmp_path):
    """One NVBench session of two Items sharing a setup: both timed, the copy faster than 100 GB/s,
    the conditions sampled, and the session folder left with NVBench's own JSON."""
    if timing.engine_version() is None:
        pytest.skip(f"cuda-bench is not installed: {timing.INSTALL_HINT}")
    n = 64 << 20
    items = [timing.Item(k, "harness.measuring.bench:memcpy_setup", {"nbytes": n}) for k in ("first", "second")]
    got = timing.run_plan(items, timing.QUICK, workdir=tmp_path / "s")
    for t in got.values():
        assert 0 < t.p25_ms <= t.median_ms <= t.p75_ms and t.samples >= 10
        assert t.rate(2 * n) / 1e9 > 100
        assert "sm_clock_mean_mhz" in t.conditions
    data = json.loads((tmp_path / "s" / "nvbench.json").read_text())
    assert [b["name"] for b in data["benchmarks"]] == ["m00000", "m00001"]


def test_a_silent_hanging_child_is_killed_at_the_limit(tmp_path, monkeypatch):
    """A session that hangs without printing (a launch deadlocked behind NVBench's blocking kernel,
    say) is stopped by the watchdog, not waited on forever."""
    monkeypatch.setattr(timing, "engine_version", lambda: "0.3.0")
    monkeypatch.setattr(timing, "require_gpu", lambda: None)  # the child is a stand-in: no device needed
    fake = tmp_path / "fakechild"
    (fake / "harness" / "measuring").mkdir(parents=True, exist_ok=True)
    (fake / "harness" / "__init__.py").write_text("")
    (fake / "harness" / "measuring" / "timing.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(timing.subprocess, "Popen", _popen_in(fake, timing.subprocess.Popen))
    import time

    t0 = time.monotonic()
    with pytest.raises(timing.TimingError, match=r"ran past 1 s and was stopped; 0 of 1"):
        timing.run_plan([timing.Item("a", "m:f")], timeout=1.0, workdir=tmp_path / "s")
    assert time.monotonic() - t0 < 30


def test_doctor_names_the_timing_engine(monkeypatch):
    from harness.user import doctor

    monkeypatch.setattr(timing, "engine_version", lambda: None)
    row = next(c for c in doctor.check_packages() if c.item == "python:cuda-bench")
    assert not row.ok and not row.optional and "cuda-bench" in row.fix
    monkeypatch.setattr(timing, "engine_version", lambda: "0.3.0")
    row = next(c for c in doctor.check_packages() if c.item == "python:cuda-bench")
    assert row.ok and row.detail.startswith("0.3.0")


INTERRUPTED = '''
import os
import sys
sys.path.insert(0, {root!r})
from harness.measuring import timing
fake = {fake!r}
timing.engine_version = lambda: "0.3.0"
timing.require_gpu = lambda: None  # the child is a stand-in: no device needed
real = timing.subprocess.Popen
def popen(cmd, **kw):
    kw["cwd"] = fake
    kw["env"] = {{**kw["env"], "PYTHONPATH": os.pathsep.join([fake, kw["env"].get("PYTHONPATH", "")])}}
    return real(cmd, **kw)
timing.subprocess.Popen = popen
try:
    timing.run_plan([timing.Item("a", "m:f")], workdir={work!r}, on_progress=lambda i, k: print("started", flush=True))
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
'''


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_session_and_its_children_at_once(tmp_path, sig):
    """Ctrl-C while a session runs: the parent stops its child and what the child started (the whole
    process group) at once, instead of waiting for the plan to finish. A SIGTERM (`timeout` around a
    bench) alike: the parent used to die at once and leave the session running on the GPU."""
    import os
    import subprocess
    import sys
    import time

    marker = f"cudalab-timing-test-{os.getpid()}-{time.time_ns()}"
    fake = tmp_path / "fakechild"
    (fake / "harness" / "measuring").mkdir(parents=True, exist_ok=True)
    (fake / "harness" / "__init__.py").write_text("")
    # A session that starts a worker of its own and then takes a minute.
    (fake / "harness" / "measuring" / "timing.py").write_text(
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])\n"
        f"print({timing.PROGRESS!r} + ' 0 a', flush=True)\ntime.sleep(60)\n")
    root = str(Path(__file__).resolve().parents[2])
    script = INTERRUPTED.format(root=root, fake=str(fake), work=str(tmp_path / "s"))
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_as_from_a_terminal)
    assert p.stdout.readline().strip() == "started"

    def sleepers():
        return pids_mentioning(marker)

    try:
        deadline = time.monotonic() + 30
        while not sleepers():
            assert time.monotonic() < deadline, "the fake session's worker did not start"
            time.sleep(0.05)
        t0 = time.monotonic()
        p.send_signal(sig)
        out, err = p.communicate(timeout=90)
        assert time.monotonic() - t0 < 10, f"the interrupt waited {time.monotonic() - t0:.0f} s for the session"
        assert p.returncode == 130 and "interrupted" in out, err
        time.sleep(0.3)
        assert sleepers() == [], "the session's own child runs on"
    finally:
        for q in sleepers():
            os.kill(q, signal.SIGKILL)
        if p.poll() is None:
            p.kill()

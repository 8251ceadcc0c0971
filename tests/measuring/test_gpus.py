"""pytest-xdist workers: how many --jobs gives, which GPU each takes, and how --gpus is read (CPU only)."""

from __future__ import annotations

import pytest

from conftest import pythonpath
from harness.base import paths
from harness.measuring import gpus, results_csv


def test_each_worker_takes_one_gpu_round_robin():
    assert [gpus.assign(f"gw{i}", "0,1") for i in range(4)] == ["0", "1", "0", "1"]
    assert gpus.assign("gw0", "3") == "3"
    assert gpus.assign("gw5", "2,5,7") == "7"
    assert gpus.assign("master", "0,1") is None and gpus.assign("", "0,1") is None
    assert gpus.assign("gw0", "") is None


def test_pin_worker_sets_cuda_visible_devices_only_in_a_worker():
    env = {"PYTEST_XDIST_WORKER": "gw1", gpus.ENV: "4,6"}
    assert gpus.pin_worker(env) == "6" and env["CUDA_VISIBLE_DEVICES"] == "6"
    env = {gpus.ENV: "4,6"}  # not a worker: leave CUDA alone
    assert gpus.pin_worker(env) is None and "CUDA_VISIBLE_DEVICES" not in env
    env = {"PYTEST_XDIST_WORKER": "gw0", "CUDA_VISIBLE_DEVICES": "2"}  # a plain -n run: untouched
    assert gpus.pin_worker(env) is None and env["CUDA_VISIBLE_DEVICES"] == "2"


def test_a_test_needing_several_gpus_says_why_it_cannot_run_here():
    assert gpus.too_few_gpus(2, {}, ["0", "1"]) is None
    assert gpus.too_few_gpus(2, {}, ["0"]) == "needs 2 GPUs (one rank per GPU); 1 visible"
    assert gpus.too_few_gpus(4, {}, ["0", "1"]) == "needs 4 GPUs (one rank per GPU); 2 visible"
    # A worker that --gpus pinned to one of two GPUs sees one: the machine has enough, the reason says
    # what hid the other and how to run the test.
    pinned = {"PYTEST_XDIST_WORKER": "gw1", gpus.ENV: "0,1"}
    assert gpus.pin_worker(dict(pinned)) == "1"
    why = gpus.too_few_gpus(2, pinned, ["1"])
    assert why.startswith("needs 2 GPUs (one rank per GPU); 1 visible to this worker, which --gpus pinned")
    assert why.endswith("run the multi-GPU tests without --gpus")
    # --gpus with fewer GPUs than the test needs: pinning is not the reason, and is not named.
    assert gpus.too_few_gpus(4, pinned, ["1"]) == "needs 4 GPUs (one rank per GPU); 1 visible"


def test_select_reads_all_and_numbers():
    assert gpus.select("all", ["0", "1"]) == ["0", "1"]
    assert gpus.select("1", ["0", "1"]) == ["1"]
    assert gpus.select("1,0", ["4", "5"]) == ["5", "4"]  # numbers are positions among the visible GPUs
    with pytest.raises(ValueError, match="does not exist; 2 visible"):
        gpus.select("2", ["0", "1"])
    with pytest.raises(ValueError, match="`all` or comma-separated"):
        gpus.select("zero", ["0"])
    with pytest.raises(ValueError, match="named twice"):
        gpus.select("0,0", ["0", "1"])
    with pytest.raises(ValueError, match="no GPU is visible"):
        gpus.select("all", [])


def test_physical_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert gpus.physical_gpus() == ["3", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpus.physical_gpus() == []


def test_worker_env_passes_the_gpu_list():
    env = gpus.worker_env(["0", "1"], {"PATH": "/bin"})
    assert env == {"PATH": "/bin", gpus.ENV: "0,1"}


def test_each_gpu_writes_its_own_csv(tmp_path, monkeypatch):
    import pandas as pd


    monkeypatch.setattr(paths, "BUILD_BENCH", tmp_path)
    meta = {"device": "NVIDIA H100 80GB HBM3", "driver": "13.0", "runtime": "13.0", "nvcc": "13.0",
            "date": "2026-11-23T12:00:00"}
    rows = pd.DataFrame([{"program": "square", "variant": "01_naive", "size": "2^24", "ratio": 0.9, "unit": "GB/s"}])
    a = results_csv.write(rows, {**meta, "gpu": "0"}, {})
    b = results_csv.write(rows, {**meta, "gpu": "1"}, {})
    assert a != b and a.name.endswith("-gpu0-20261123T120000.csv") and "-gpu1-" in b.name
    cases, m, _ = results_csv.read(b)
    assert m["gpu"] == "1" and m["device"] == meta["device"] and len(cases) == 1


def test_jobs_gives_the_number_of_workers():
    assert gpus.test_workers("auto", cpus=64, xdist=True) == gpus.MAX_AUTO_JOBS == 16
    assert gpus.test_workers("auto", cpus=2, xdist=True) == 2
    assert gpus.test_workers("auto", cpus=16, xdist=False) == 1  # no xdist: one process, no complaint
    assert gpus.test_workers("3", cpus=2, xdist=True) == 3
    assert gpus.test_workers("1", n_gpus=2, xdist=True) == 2  # at least one worker per GPU
    assert gpus.test_workers(" 1 ", xdist=False) == 1
    for bad in ("0", "-2", "abc", "", "2.5"):
        with pytest.raises(ValueError, match="--jobs takes `auto` or a number"):
            gpus.test_workers(bad, xdist=True)
    with pytest.raises(ValueError, match=r"need pytest-xdist.*pip install -e '\.\[dev\]'"):
        gpus.test_workers("4", xdist=False)


def _tiny_suite(tmp_path, tests: str, markers: list[str], *args: str):
    """`tests` as one test file beside a copy of this project's conftest, run by pytest with `args`
    in a child process (the markers registered); returns the finished process, which must pass."""
    import os
    import shutil
    import subprocess
    import sys

    from harness.compile import build

    shutil.copy(build.ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_tiny.py").write_text(tests)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n" + "".join(f"    {m}\n" for m in markers))
    env = dict(os.environ, PYTHONPATH=pythonpath(build.ROOT))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args,
                        "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def test_profiler_slow_and_serial_tests_never_overlap(tmp_path):
    """The real thing, on a tiny suite with this project's conftest under -n 2 (what `invoke test
    --jobs 2` runs): the profiler, slow and serial tests never run at the same time, whichever worker
    has them; the others do spread over both workers."""
    _tiny_suite(tmp_path,
                "import os, time, pytest\n"
                "def _note(kind, i, nap=0.0):\n"
                "    t0 = time.monotonic(); time.sleep(nap)\n"
                "    open(f'{kind}-{i}', 'w').write(f\"{os.environ['PYTEST_XDIST_WORKER']} {t0} {time.monotonic()}\")\n"
                "@pytest.mark.parametrize('i', range(3))\n"
                "@pytest.mark.profiler\n"
                "def test_p(i): _note('locked', i, 0.3)\n"
                "@pytest.mark.parametrize('i', range(3))\n"
                "@pytest.mark.slow\n"
                "def test_s(i): _note('locked', 10 + i, 0.3)\n"
                "@pytest.mark.parametrize('i', range(3))\n"
                "@pytest.mark.serial\n"
                "def test_r(i): _note('locked', 20 + i, 0.3)\n"
                "@pytest.mark.parametrize('i', range(12))\n"
                "def test_free(i): _note('free', i, 0.05)\n",
                ["profiler", "slow", "serial"], "-n", "2")

    def runs(kind):
        return [(w, float(a), float(b)) for w, a, b in (p.read_text().split() for p in tmp_path.glob(f"{kind}-*"))]

    locked = sorted(runs("locked"), key=lambda x: x[1])
    assert len(locked) == 9
    overlaps = [(x, y) for x, y in zip(locked, locked[1:]) if y[1] < x[2]]
    assert not overlaps, overlaps
    assert len({w for w, _, _ in runs("free")}) == 2  # the control: the other tests do spread


def test_long_tests_are_collected_first_and_the_rest_keep_their_order(tmp_path):
    """This project's conftest on a tiny suite: the long-marked tests come first (pytest-xdist then
    starts them first), in their own order, and every other test keeps its place after them."""
    r = _tiny_suite(tmp_path,
                    "import pytest\n"
                    "def test_a(): pass\n"
                    "@pytest.mark.long\n"
                    "def test_b(): pass\n"
                    "def test_c(): pass\n"
                    "@pytest.mark.parametrize('i', range(2))\n"
                    "@pytest.mark.long\n"
                    "def test_d(i): pass\n"
                    "def test_long_in_name_only(): pass\n",
                    ["long"], "--co")
    order = [line.split("::")[1] for line in r.stdout.splitlines() if "::" in line]
    assert order == ["test_b", "test_d[0]", "test_d[1]", "test_a", "test_c", "test_long_in_name_only"], order


def test_workers_share_the_cores_among_their_blas_threads():
    env = gpus.share_cores(8, {"PATH": "/bin"}, cpus=16)
    assert {env[v] for v in gpus.BLAS_THREAD_VARS} == {"2"} and env["PATH"] == "/bin"
    assert gpus.share_cores(8, {}, cpus=4)["OMP_NUM_THREADS"] == "1"
    assert gpus.share_cores(8, {"OMP_NUM_THREADS": "3"}, cpus=16)["OMP_NUM_THREADS"] == "3"  # the user's wins
    assert "OMP_NUM_THREADS" not in gpus.share_cores(1, {}, cpus=16)


def test_invoke_test_builds_the_pytest_command(monkeypatch, capsys):
    """The command `invoke test` runs, from the task itself with a mock context: the workers and the
    scheduler when pytest-xdist is there; one process and a hint when it is not; --jobs 1 and a
    user's own -n give one process without the hint."""
    import importlib.util

    from harness.compile import build

    spec = importlib.util.spec_from_file_location("cudalab_tasks", build.ROOT / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)

    from harness.user import cli

    def hints():  # what the task said besides the line it always prints before pytest starts
        return "".join(x for x in capsys.readouterr().err.splitlines(True) if not x.startswith("test: starting pytest"))

    def command(jobs="auto", args="", xdist=True, marker=""):
        monkeypatch.setattr(gpus, "have_xdist", lambda: xdist)
        seen = []
        # The one place the task starts pytest, recorded here and never run (it would run the whole suite).
        monkeypatch.setattr(cli, "run_pytest", lambda cmd, env: seen.append(" ".join(cmd)) or 0)
        tasks.test.body(None, jobs=jobs, args=args, marker=marker)
        return seen[0]

    monkeypatch.setattr(gpus.os, "cpu_count", lambda: 4)
    cmd = command()
    assert " -n 4 --dist loadgroup" in cmd
    assert "not installed" not in hints()
    cmd = command(xdist=False)
    assert " -n " not in cmd and "pytest-xdist is not installed" in hints()
    assert " -n " not in command(jobs="1") and not hints()
    cmd = command(args="-x -n 2")
    assert cmd.count(" -n ") == 1 and cmd.endswith("-x -n 2")
    # The slow tests alone: one process under auto (they take turns anyway); workers when asked.
    assert " -n " not in command(marker="slow") and " -n 3 " in command(marker="slow", jobs="3")
    assert " -n 4 " in command(marker="gpu and not slow")

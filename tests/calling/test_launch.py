"""harness/calling/launch.py's limits: a rank count the machine cannot hold is refused before anything
starts, in one line naming the count and the limit, and no failure path leaves its temporary folder.
The ranks are the stand-in rank program (tests/fixtures/fake_rank.py) or `sleep`: no GPU needed."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import pythonpath
from harness.calling import launch

ROOT = Path(__file__).resolve().parents[2]
FAKE_RANK = ROOT / "tests" / "fixtures" / "fake_rank.py"

# A launcher under an open-file limit of LIMIT, its temporary folders under WORK.
LIMITED = r"""
import resource, sys
sys.path.insert(0, {root!r})
limit, ranks, work, bypass = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "bypass"
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from harness.calling import launch
if bypass:  # reach the failure path of a rank that cannot start, past the check made to prevent it
    launch.check_capacity = lambda n: None
try:
    launch.launch(["sleep", "30"], ranks, 60.0, folder=work)
except ValueError as e:
    print(type(e).__name__, e)
    sys.exit(3)
"""


def _limited(tmp_path, limit: int, ranks: int, bypass: bool = False):
    work = tmp_path / "work"
    work.mkdir()
    p = subprocess.run([sys.executable, "-c", LIMITED.format(root=str(ROOT)), str(limit), str(ranks), str(work),
                        "bypass" if bypass else "check"], capture_output=True, text=True, timeout=120)
    return p, sorted(work.iterdir())


def test_too_many_ranks_for_the_open_file_limit_is_refused_before_anything_starts(tmp_path):
    p, left = _limited(tmp_path, 256, 200)
    assert p.returncode == 3, p.stderr
    line = p.stdout.strip()
    assert line.startswith("RanksRefused --ranks 200:") and "limit of 256" in line and "\n" not in line
    assert left == []  # not even the temporary folder was made


def test_a_rank_that_cannot_start_leaves_no_folder_and_no_rank(tmp_path):
    """Past the check (bypassed here), a launcher that runs out of descriptors mid-way names the rank and
    the count, stops the ranks it started, and removes its folder: with every descriptor in use, the
    folder's removal itself used to fail and leave it behind."""
    p, left = _limited(tmp_path, 64, 40, bypass=True)
    assert p.returncode == 3, p.stderr
    assert "could not start rank" in p.stdout and "cannot hold 40 ranks" in p.stdout
    assert left == [], f"left behind: {left}"


def test_a_rank_count_beyond_one_host_is_refused(tmp_path):
    with pytest.raises(launch.RanksRefused, match=r"--ranks 10000: more than the 256 ranks"):
        launch.launch(["true"], 10000, folder=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_process_limit_is_checked(monkeypatch):
    monkeypatch.setattr(launch.resource, "getrlimit",
                        lambda which: (100, 100) if which == launch.resource.RLIMIT_NPROC else (1 << 20, 1 << 20))
    monkeypatch.setattr(launch.os, "geteuid", lambda: 1000)
    busy = 90  # this user's processes and threads already
    monkeypatch.setattr(launch, "_user_tasks", lambda: busy)
    with pytest.raises(launch.RanksRefused, match=rf"--ranks 8: needs 16 more processes, and this user runs {busy} of "
                                                  r"its limit of 100"):
        launch.check_capacity(8)
    launch.check_capacity(4)


def test_a_failed_start_stops_the_ranks_already_running(tmp_path, monkeypatch):
    started = []
    real = launch._procs.start

    def start(argv, **kw):
        if len(started) == 3:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        p = real(argv, **kw)
        started.append(p)
        return p

    monkeypatch.setattr(launch._procs, "start", start)
    with pytest.raises(launch.RanksRefused, match=r"--ranks 5: could not start rank 3: Resource temporarily "
                                                  r"unavailable; this machine cannot hold 5 ranks now"):
        launch.launch(["sleep", "30"], 5, 60.0, folder=tmp_path)
    assert [p.returncode for p in started] == [-15] * 3  # stopped (SIGTERM), not left to sleep
    assert list(tmp_path.iterdir()) == []


def test_invoke_run_ranks_under_a_low_open_file_limit_says_so_in_one_line(tmp_path):
    """`(ulimit -n 256; invoke run collectives --ranks 200)`: one line naming the count and the limit,
    before the program is looked for, and no /tmp/cudalab-ranks-* left."""
    cmd = f"ulimit -n 256 && exec {sys.executable} -m invoke run collectives --ranks 200"
    p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": pythonpath(ROOT), "TMPDIR": str(tmp_path)})
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--ranks 200" in lines[0] and "limit of 256" in lines[0], p.stderr
    assert not list(tmp_path.glob("cudalab-ranks-*"))


def test_fake_ranks_still_run(tmp_path):
    res = launch.launch([sys.executable, str(FAKE_RANK)], 2, 60.0, extra_env={"FAKE_RANK_MODE": "ok"}, folder=tmp_path)
    assert [r.returncode for r in res.ranks] == [0, 0] and "rank=1 world=2" in res.stdout
    assert list(tmp_path.iterdir()) == []

"""`invoke new NAME` end to end, in a scratch copy of the project: the folder it writes builds, its tests
pass (on a GPU its GPU tests run too), and with no edit anywhere else the program is in every list the
lab keeps: the help of `invoke run` and `invoke bench`, the bench, the profiler's and the sanitizer's
runs, the demo's runs, the report's tour and the README's learning path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import pythonpath
from harness.programs import scaffold

ROOT = Path(__file__).resolve().parents[1]
NAME = "zz_scratch"
# What `invoke new` writes: ARCHITECTURE.md's recipe names the same files.
FOLDER = sorted(f.format(p=NAME) for f in scaffold.LAYOUT.values())


# What a copy leaves behind when the tree is no git checkout (CI's fresh-machine stage copies one).
_NOT_SOURCE = ("build", ".git", "__pycache__", ".pytest_cache", ".ruff_cache", "*.egg-info", ".offline", ".carry-*",
               ".progress.json")


def _copy_project(dest: Path) -> None:
    if not (ROOT / ".git").exists():
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*_NOT_SOURCE), symlinks=True)
        return
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.split(b"\0")
    for rel in filter(None, listed):
        src = ROOT / rel.decode()
        if src.is_file() and not src.is_symlink():
            (dest / rel.decode()).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel.decode()).write_bytes(src.read_bytes())


def _run(cwd: Path, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=pythonpath(cwd), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.long
def test_invoke_new_writes_a_program_that_builds_tests_and_is_everywhere(tmp_path):
    proj = tmp_path / "lab"
    _copy_project(proj)
    r = _run(proj, "-m", "invoke", "new", NAME)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (proj / "cuda" / NAME).iterdir()) == FOLDER
    assert f"| `{NAME}` |" in (proj / "README.md").read_text()
    # Nothing else changed: the folder and the README's generated table are the whole edit.
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    assert NAME not in changed  # the real project is untouched

    # A name that exists, or is no identifier, is refused in one line.
    for bad, says in ((NAME, "exists already"), ("9lives", "is not a program name"), ("common", "cannot name")):
        r = _run(proj, "-m", "invoke", "new", bad)
        assert r.returncode == 1 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

    r = _run(proj, "-m", "invoke", "build", "--programs", NAME)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = _run(proj, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", f"cuda/{NAME}",
             "tests/test_program_folders.py", timeout=900)
    assert r.returncode == 0, r.stdout[-3000:]

    probe = f"""
from harness import programs

p = {NAME!r}
assert p in programs.names() and p in programs.bench_programs(), "registry / bench"
assert [c.ceiling for c in programs.bench_cases([p], quick=True)] == ["memcpy"], "a bench case against memcpy"
assert programs.sanitize_cases(p) and programs.profile_runs(p), "sanitizer and profiler runs"
assert p in [q for q, _ in programs.tour()], "the report's tour"
assert p in programs.cpu_programs(), "the demo's CPU step"
print("ok")
"""
    r = _run(proj, "-c", probe)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    for task in ("run", "bench"):
        r = _run(proj, "-m", "invoke", "--help", task)
        assert r.returncode == 0 and NAME in r.stdout, (task, r.stdout)

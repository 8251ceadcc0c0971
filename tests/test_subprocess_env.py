"""Tests that start Python in a subprocess extend the caller's PYTHONPATH (conftest.py's
pythonpath), never replace it: on a machine where cffi, invoke or pytest's plugins were installed into
a folder named by PYTHONPATH (pip --target), a replaced one makes the child fail to import them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import pythonpath

TESTS = Path(__file__).resolve().parent


def test_pythonpath_puts_its_entries_first_and_keeps_the_callers(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", f"/opt/site{':'}{':'}/other")
    assert pythonpath("/repo", tmp_path) == f"/repo:{tmp_path}:/opt/site:/other"
    monkeypatch.delenv("PYTHONPATH")
    assert pythonpath("/repo") == "/repo"  # no empty entry (which would mean the current folder)
    assert pythonpath("/fake", env={"PYTHONPATH": "/x"}) == "/fake:/x"


def test_a_child_still_imports_what_only_the_callers_pythonpath_holds(monkeypatch, tmp_path):
    (tmp_path / "only_here_mod.py").write_text("VALUE = 42\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    r = subprocess.run([sys.executable, "-c", "import only_here_mod; print(only_here_mod.VALUE)"],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(TESTS)})
    assert r.returncode == 0 and r.stdout.strip() == "42", r.stderr


# A line that sets PYTHONPATH for a child: a dict entry, a keyword, or an item assignment.
_SETS = re.compile(r"""["']PYTHONPATH["']\s*[:\]]\s*=?|PYTHONPATH\s*=""")


def test_no_test_replaces_pythonpath():
    bad = []
    for f in sorted(TESTS.rglob("*.py")):
        if f.name in ("conftest.py", Path(__file__).name):
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if _SETS.search(line) and "pythonpath(" not in line and '.get("PYTHONPATH"' not in line:
                bad.append(f"{f.relative_to(TESTS)}:{i}: {line.strip()}")
    assert not bad, "set PYTHONPATH with conftest.pythonpath(...) so the caller's entries stay:\n" + "\n".join(bad)

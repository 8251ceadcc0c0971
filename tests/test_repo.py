"""The repository as CI receives it: its entry scripts must stay executable (a rewrite that drops the
mode bit makes `.ci/run` fail before it runs a single test)."""

import os
import subprocess

import pytest

from harness.base.paths import ROOT

SCRIPTS = (".ci/run", ".ci/gpu")


def test_the_ci_scripts_are_executable():
    assert [s for s in SCRIPTS if not os.access(ROOT / s, os.X_OK)] == []


def test_the_ci_scripts_are_executable_in_git():
    """What a clone gets is the mode git records; a copy without git (CI's fresh-machine copy) has only
    the files' own modes, checked above."""
    r = subprocess.run(["git", "ls-files", "-s", *SCRIPTS], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        pytest.skip("not a git checkout: only the files' own modes can be checked")
    modes = {line.split()[3]: line.split()[0] for line in r.stdout.splitlines()}
    assert modes == {s: "100755" for s in SCRIPTS}, modes

"""The repository as CI receives it: its entry scripts must stay executable (a rewrite that drops the
mode bit makes `.ci/run` fail before it runs a single test)."""

import subprocess

from harness.base.paths import ROOT


def test_the_ci_scripts_are_executable_in_git():
    out = subprocess.run(["git", "ls-files", "-s", ".ci/run", ".ci/gpu"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    modes = {line.split()[3]: line.split()[0] for line in out}
    assert modes == {".ci/run": "100755", ".ci/gpu": "100755"}, modes

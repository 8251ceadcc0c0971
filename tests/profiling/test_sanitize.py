"""harness.profiling.sanitize: compute-sanitizer's reports (recorded on an H200, tests/fixtures/sanitizer_*),
the runs each program gets, and the program x tool summary. On a GPU: every program comes out
clean under all four tools, and the planted out-of-bounds access (the fault build's `square --oob`) is caught."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import fault_build
from conftest import stand_in
from harness import programs
from harness.base.errors import NotBuilt
from harness.compile import build
from harness.profiling import sanitize as hs

FIX = Path(__file__).parent.parent / "fixtures"
V = "sanitizer_2025.3.1_h200"


def _fixture(name: str) -> tuple[str, int]:
    text = (FIX / f"{V}_{name}.txt").read_text()
    rc = int(text.strip().splitlines()[-1].removeprefix("rc="))
    return text, rc


@pytest.mark.parametrize("name, status, errors", [
    ("memcheck_square_oob", "errors", 2),  # the invalid access and the launch failure it causes
    ("memcheck_square_clean", "clean", 0),
    ("racecheck_toy_race", "errors", 9),  # "(9 errors, 248 warnings)": errors are counted
    ("racecheck_hello_clean", "clean", 0),
    ("initcheck_toy_uninit", "errors", 256),  # not the 206 of "206 errors were not printed"
    ("synccheck_hello_clean", "clean", 0),
])
def test_recorded_reports(name, status, errors):
    text, rc = _fixture(name)
    st, n, detail = hs.classify(text, rc)
    assert (st, n) == (status, errors)
    if status == "errors":
        assert rc == hs.ERROR_EXITCODE and detail


def test_detail_names_the_error():
    text, rc = _fixture("memcheck_square_oob")
    assert hs.classify(text, rc)[2] == "Invalid __global__ read of size 4 bytes"
    text, rc = _fixture("racecheck_toy_race")
    assert "9 errors" in hs.classify(text, rc)[2]


def test_program_failure_is_not_clean():
    assert hs.classify("========= ERROR SUMMARY: 0 errors\n", 1)[0] == "program failed"
    assert hs.classify("usage: x N\n", 2)[0] == "program failed"  # the sanitizer never finished
    assert hs.classify("========= Error: Device not supported\n", 1)[0] == "unsupported"
    assert hs.classify("no summary at all\n", hs.ERROR_EXITCODE)[:2] == ("errors", 1)


def test_command_line():
    cmd = hs.command("memcheck", Path("/b/square"), ["--oob"], "/cs")
    assert cmd[:3] == ["/cs", "--tool", "memcheck"]
    assert cmd[cmd.index("--error-exitcode") + 1] == str(hs.ERROR_EXITCODE)
    assert cmd[-2:] == ["/b/square", "--oob"]
    assert "--racecheck-report" in hs.command("racecheck", Path("/b/x"), [], "/cs")
    # memcheck pads every allocation, so that a read past one buffer's end is not a read of the next one's
    assert cmd[cmd.index("--padding") + 1] == str(hs.MEMCHECK_PADDING)
    assert "--padding" not in hs.command("racecheck", Path("/b/x"), [], "/cs")


def test_tools_for():
    assert hs.tools_for("all") == ["memcheck", "racecheck", "initcheck", "synccheck"]
    assert hs.tools_for("memcheck,synccheck") == ["memcheck", "synccheck"]
    with pytest.raises(ValueError, match="unknown sanitizer tool"):
        hs.tools_for("leakcheck")


def _cases(prog, rec=None, args=None):
    # What `invoke sanitize` hands down: the registry's (label, argv) as the sanitizer's Cases.
    return [hs.Case(prog, label, argv) for label, argv in programs.sanitize_cases(prog, rec, args=args)]


def test_cases_contract(monkeypatch):
    as_list = stand_in(monkeypatch, "p", sanitize_args=lambda: [["--variant", "01_a", "33"], ["--variant", "02_b", "33"]])
    assert [(c.label, c.argv) for c in _cases("p", as_list)] == [("01_a", ("--variant", "01_a", "33")),
                                                                  ("02_b", ("--variant", "02_b", "33"))]
    as_dict = stand_in(monkeypatch, "p", sanitize_args=lambda: {"small": [5], "ragged": [7, 3]})
    assert [(c.label, c.argv) for c in _cases("p", as_dict)] == [("small", ("5",)), ("ragged", ("7", "3"))]
    one = stand_in(monkeypatch, "p", sanitize_args=lambda: ["all"])
    assert [c.argv for c in _cases("p", one)] == [("all",)]
    by_variant = stand_in(monkeypatch, "p", variants=("01_a", "02_b"), profile_args=lambda v: ["--variant", v, "9"])
    assert [(c.label, c.argv) for c in _cases("p", by_variant)] == [("01_a", ("--variant", "01_a", "9")),
                                                                     ("02_b", ("--variant", "02_b", "9"))]
    plain = stand_in(monkeypatch, "p", variants=("01_a",))  # variants the executable may not take: run it plainly
    assert [c.argv for c in _cases("p", plain)] == [()]
    assert [c.argv for c in _cases("hello")] == [("all",)]  # hello.profile_args
    # The caller's arguments replace the program's runs with one run, labelled by its --variant.
    assert [(c.label, c.argv) for c in _cases("p", as_list, args=["--variant", "02_b", "7"])] == [
        ("02_b", ("--variant", "02_b", "7"))]
    assert [(c.label, c.argv) for c in _cases("p", as_list, args=["--oob", 1000])] == [("--oob 1000", ("--oob", "1000"))]


def _outcome(prog, tool, status, errors=0, label="default"):
    return hs.Outcome(prog, label, tool, [], 0 if status == "clean" else 1, errors, status)


def test_summary_table():
    outs = [_outcome("a", "memcheck", "clean"), _outcome("a", "racecheck", "clean"),
            _outcome("b", "memcheck", "errors", 2, "v1"), _outcome("b", "memcheck", "errors", 1, "v2"),
            _outcome("b", "racecheck", "program failed"), _outcome("b", "racecheck", "clean", label="v2")]
    t = hs.summary(outs)
    assert list(t.columns) == ["memcheck", "racecheck"] and list(t.index) == ["a", "b"]
    assert t.loc["a", "memcheck"] == "clean" and t.loc["a", "racecheck"] == "clean"
    assert t.loc["b", "memcheck"] == "3 errors"
    assert t.loc["b", "racecheck"] == "program failed"
    assert not hs.all_clean(outs) and hs.all_clean(outs[:2])


def test_sanitize_with_a_fake_sanitizer(monkeypatch, tmp_path):
    """The whole loop: runs per program x tool, logs, the summary, with recorded outputs."""
    from harness.programs import square as sq

    monkeypatch.setattr(hs, "find_sanitizer", lambda: "/fake/compute-sanitizer")
    monkeypatch.setattr(hs, "SANITIZE_DIR", tmp_path)
    monkeypatch.setattr(hs.runner, "executable", lambda prog, faults=False: Path("/bin/true"))
    oob, oob_rc = _fixture("memcheck_square_oob")
    clean, _ = _fixture("memcheck_square_clean")

    def run(argv, timeout):
        bad = "--oob" in argv and argv[argv.index("--tool") + 1] == "memcheck"
        return subprocess.CompletedProcess(argv, oob_rc if bad else 0, oob if bad else clean, "")

    outs = hs.sanitize(_cases("hello") + _cases("square"), ["memcheck", "synccheck"], run=run, jobs=2)
    assert len(outs) == (1 + len(sq.sanitize_args())) * 2 and hs.all_clean(outs)  # hello once, square per case
    outs = hs.sanitize(_cases("square", args=["--oob", "1000"]), ["memcheck", "synccheck"], run=run)
    t = hs.summary(outs)
    assert t.loc["square", "memcheck"] == "2 errors" and t.loc["square", "synccheck"] == "clean"
    assert outs[0].log.read_text().startswith("$ /fake/compute-sanitizer --tool memcheck")
    path = hs.write_summary(outs, tmp_path)
    assert path.read_text().splitlines()[1].startswith("square,2 errors")


def test_unknown_program_is_one_line_before_any_run():
    r = subprocess.run([sys.executable, "-m", "invoke", "sanitize", "-p", "square,no_such_program"], cwd=build.ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"unknown program 'no_such_program'; programs: {', '.join(build.programs())}"]


# --- on the GPU ----------------------------------------------------------------------------------

def _inv(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=build.ROOT, capture_output=True, text=True,
                          timeout=timeout)


# End to end (minutes on a GPU): `invoke test --marker slow`, not the default run.
@pytest.mark.slow
@pytest.mark.gpu
def test_invoke_sanitize_is_clean_for_every_program():
    r = _inv("sanitize", "--jobs", "8")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "sanitize: all" in r.stdout and "run(s) clean" in r.stdout
    runs = pd.read_csv(hs.SANITIZE_DIR / "runs.csv")
    assert set(runs["program"]) == set(build.programs())
    assert set(runs["tool"]) == set(hs.TOOLS) and (runs["status"] == "clean").all()
    table = pd.read_csv(hs.SANITIZE_DIR / "summary.csv").set_index("program")
    assert (table == "clean").all().all()


@pytest.mark.long
@pytest.mark.gpu
def test_sanitize_catches_the_planted_out_of_bounds_write(tmp_path):
    """The fault build's `square --oob` writes one element past its array: memcheck must report it, and
    `invoke sanitize` must call the same run of the product, which has no such flag, clean."""
    fault_build.build_twin("square", "exe")
    bad = hs.run_case(hs.Case("square", "--oob 1000", ("--oob", "1000"), faults=True), "memcheck", logdir=tmp_path)
    assert bad.status == "errors" and bad.errors > 0, (bad.status, bad.detail, bad.log.read_text())
    assert str(build.bin_path("square", True)) in bad.argv
    r = _inv("sanitize", "-p", "square", "--tool", "memcheck", "--", "1000")  # the same run without the flag
    assert r.returncode == 0, r.stdout + r.stderr


def test_an_executable_the_build_did_not_write_is_refused(monkeypatch, tmp_path):
    """The sanitizer runs only the file the build wrote (checked against its record), never a
    stray file of the same name, and says which command builds it."""
    stray = tmp_path / "square"
    stray.write_text("#!/bin/sh\nexit 0\n")
    stray.chmod(0o755)
    monkeypatch.setattr(build, "bin_path", lambda prog: stray)
    ran = []
    with pytest.raises(NotBuilt, match=r"not verified.*invoke build --programs square"):
        hs.run_case(hs.Case("square", "default", ()), "memcheck", "/fake/compute-sanitizer", logdir=tmp_path,
                    run=lambda argv, timeout: ran.append(argv))
    assert ran == []
    monkeypatch.setattr(build, "bin_path", lambda prog: tmp_path / "missing")
    with pytest.raises(NotBuilt, match=r"missing: run `invoke build --programs square`"):
        hs.run_case(hs.Case("square", "default", ()), "memcheck", "/fake/compute-sanitizer", logdir=tmp_path)

"""The invoke interface: the task map and its failure messages."""

from __future__ import annotations

import subprocess
import sys

from harness import build

ROOT = build.ROOT


def inv(*args, **kw):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=kw.get("timeout", 300))


def inv_many(arg_lists):
    """inv() for each argument list, run side by side (each is a Python start-up: ~1 s apiece in turn)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as ex:
        return list(ex.map(lambda a: inv(*a), arg_lists))


def test_task_list_is_the_project_map():
    out = inv("--list").stdout
    for name in ("build", "test", "run", "doctor", "clean", "compare", "viz", "bench"):
        assert f"  {name}" in out, name


def test_run_unknown_program_is_a_clear_error():
    r = inv("run", "no_such_program")
    assert r.returncode != 0 and "unknown program" in r.stderr


def test_run_passes_arguments_after_dashdash():
    r = inv("run", "hello", "--", "cpu")
    assert r.returncode == 0 and "Hello World from the CPU!" in r.stdout
    r = inv("run", "hello", "--", "loop", "0", "1")
    assert r.returncode == 2 and "BLOCKS must be a positive integer" in r.stderr


def test_doctor_reports_each_item():
    r = inv("doctor")
    for item in ("nvcc", "gcc", "driver", "GPU", "ncu", "nsys", "compute-sanitizer", "python:numpy"):
        assert item in r.stdout, item
    assert "nvprof" in r.stdout and "nsys" in r.stdout


def test_single_letter_options(tmp_path):
    # `-n`, as invoke spells a one-letter option (the documented command); no stray "stride:" line.
    r = inv("viz", "gridstride", "-n", "40", "--blocks", "2", "--threads", "4", "--simulate",
            "--outdir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "stride:" not in r.stdout
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "gridstride_n40_b2_t4_sim_heatmap.png", "gridstride_n40_b2_t4_sim_scatter.png",
        "gridstride_n40_b2_t4_sim_strip.png"]
    r = inv("viz", "gridstride", "-n30", "--simulate", "--outdir", str(tmp_path))
    assert r.returncode == 0 and (tmp_path / "gridstride_n30_b8_t32_sim_strip.png").exists()


def test_sanitize_takes_a_list_of_programs():
    # The tool is checked before anything runs, so a bogus one is the only complaint.
    r = inv("sanitize", "-p", "square,grid_stride", "--tool", "bogus")
    assert r.returncode != 0
    assert "unknown sanitizer tool" in r.stderr and "Traceback" not in r.stderr
    r = inv("sanitize", "-p", "no_such_program")
    assert r.returncode != 0 and "unknown program 'no_such_program'" in r.stderr


def test_user_errors_are_one_line_not_tracebacks(tmp_path):
    (tmp_path / "notes.txt").write_text("not,a\nbench\n")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    cases = [
        (["viz", "gridstride", "-n", "abc", "--simulate"], "-n must be an integer, got 'abc'"),
        (["compare", "square", "-n", "abc"], "-n must be an integer, got 'abc'"),
        (["compare", "square", "-n", "0"], "-n must be at least 1"),
        (["build", "--jobs", "abc"], "--jobs must be an integer"),
        (["bench", "--programs", "nosuch"], "unknown program 'nosuch'"),
        (["plot", "bench", "--csv", str(tmp_path / "notes.txt")], "is not a bench CSV"),
        (["plot", "bench", "--csv", str(tmp_path / "nosuch.csv")], "does not exist"),
        (["report", "--outdir", "/proc/cudalab-report"], "report: "),
        (["sanitize", "-p", "nosuch"], "unknown program 'nosuch'"),
        (["viz", "nosuch"], "nothing to draw for 'nosuch'"),
        (["test", "--gpus", "zero"], "--gpus"),
        (["test", "--jobs", "abc"], "--jobs takes `auto` or a number of workers (1 or more); got 'abc'"),
        (["test", "--jobs", "0"], "--jobs takes `auto`"),
    ]
    for (args, match), r in zip(cases, inv_many([a for a, _ in cases])):
        assert r.returncode != 0, args
        assert match in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) <= 2, (args, r.stderr)


def test_help_describes_every_argument():
    import re

    names = ("build", "test", "run", "compare", "viz", "bench", "profile", "sanitize", "plot", "tune", "report",
             "demo")
    for name, r in zip(names, inv_many([("--help", n) for n in names])):
        out = r.stdout
        options = out.split("Options:", 1)[1] if "Options:" in out else ""
        for line in options.splitlines():
            m = re.match(r"^  (-\S.*?)(?:\s{2,}(.*))?$", line)
            if m:
                assert (m.group(2) or "").strip(), f"{name}: {m.group(1)} has no help text"


def test_gpu_ci_script_names_only_real_tasks_and_options():
    """.ci/gpu (the GPU half of CI, run on the device) drives invoke: a renamed task or option would
    only show up there, on scarce GPU time, so its dry run is checked here against `invoke --help`."""
    import re

    from harness import tune

    stages = ["env", "build", "test", "jobs", "slow", "sanitize", "tune", "bench", "bench2", "quickall", "ncu", "nsys",
              "gpus"]
    r = subprocess.run(["bash", str(ROOT / ".ci" / "gpu"), "--dry-run", *stages], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = []  # (task, [its --options]) for every `-m invoke TASK ...` in the printed commands
    for piece in re.split(r";|&&|\|\||\n", r.stdout):
        words = re.findall(r"'[^']*'|\"[^\"]*\"|[^\s'\"]+", piece)  # quoted pytest --args stay one word
        if "invoke" in words and words.index("invoke") + 1 < len(words):
            rest = words[words.index("invoke") + 1:]
            rest = rest[:rest.index("--")] if "--" in rest else rest
            calls.append((rest[0], [w for w in rest[1:] if w.startswith("--")]))
    assert {t for t, _ in calls} >= {"doctor", "build", "test", "sanitize", "tune", "bench", "profile"}
    assert any(t == "profile" and "--metrics" in o for t, o in calls)
    tasks = sorted({t for t, _ in calls})
    helps = {}
    for task, h in zip(tasks, inv_many([("--help", t) for t in tasks])):
        assert h.returncode == 0, f"{task}: {h.stderr}"
        helps[task] = h.stdout
    for task, opts in calls:
        for opt in opts:
            assert re.search(rf"(^|\s){re.escape(opt)}[\s=\[]", helps[task], re.M), f"invoke {task} has no {opt}"
    assert "matmul" in tune.tunables()
    r = subprocess.run(["bash", str(ROOT / ".ci" / "gpu"), "--dry-run", "nosuch"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "unknown stage 'nosuch'" in r.stdout


def test_task_then_help_prints_the_help():
    """`invoke plot --help` (the order people type): invoke hands `--help` to a task whose first argument is
    positional as that argument's value, and those tasks used to answer "nothing called '--help'"."""
    names = ("run", "compare", "viz", "profile", "plot", "tune")
    for name, r, ref in zip(names, inv_many([(n, "--help") for n in names]),
                            inv_many([("--help", n) for n in names])):
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout == ref.stdout and f"] {name} [--options]" in r.stdout, name
    r = inv("plot", "-h")
    assert r.returncode == 0 and "Usage:" in r.stdout

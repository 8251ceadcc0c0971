"""The invoke interface: the task map and its failure messages."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ensure_built
from harness import programs
from harness.compile import build

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
    ensure_built("hello", "exe")  # its CPU path runs without a GPU, but the executable must exist
    r = inv("run", "hello", "--", "cpu")
    assert r.returncode == 0 and "Hello World from the CPU!" in r.stdout
    r = inv("run", "hello", "--", "loop", "0", "1")
    assert r.returncode == 2 and "BLOCKS must be a positive integer" in r.stderr


@pytest.mark.long
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


@pytest.mark.long
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

    from harness import programs as _registry

    # Every stage the script has: the list its refusal of an unknown one gives.
    r = subprocess.run(["bash", str(ROOT / ".ci" / "gpu"), "--dry-run", "nosuch"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "unknown stage 'nosuch'" in r.stdout
    stages = r.stdout.split("stages:", 1)[1].split()
    assert {"env", "build", "test", "sanitize", "gpus", "ptx75", "ptx80"} <= set(stages)
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
    assert {t for t, _ in calls} >= {"doctor", "build", "test", "sanitize", "tune", "bench", "profile", "demo"}
    assert any(t == "profile" and "--metrics" in o for t, o in calls)
    tasks = sorted({t for t, _ in calls})
    helps = {}
    for task, h in zip(tasks, inv_many([("--help", t) for t in tasks])):
        assert h.returncode == 0, f"{task}: {h.stderr}"
        helps[task] = h.stdout
    for task, opts in calls:
        for opt in opts:
            # invoke shows a boolean flag's negation as --[no-]name.
            shown = rf"(?:{re.escape(opt)}|--\[no-\]{re.escape(opt[5:])})" if opt.startswith("--no-") else re.escape(opt)
            assert re.search(rf"(^|\s){shown}[\s=\[]", helps[task], re.M), f"invoke {task} has no {opt}"
    assert "matmul" in _registry.tunables()


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


# --- the task map: whole first sentences, one meaning per short flag ---------------------------------

def _collection():
    import importlib.util

    from invoke import Collection

    spec = importlib.util.spec_from_file_location("cudalab_tasks_under_test", ROOT / "tasks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return Collection.from_module(mod)


def test_every_task_has_a_whole_short_first_sentence():
    """`invoke --list` shows a docstring's first line: it must be a whole sentence on its own (it cut
    "A broken program does not stop" and "spread over" mid-sentence), and short."""
    import re

    ns = _collection()
    assert len(ns.task_names) >= 14
    listing = inv("--list").stdout
    shown = {}  # task -> its --list text, wrapped lines joined
    for line in listing.splitlines():
        m = re.match(r"^  (\S+)\s{2,}(.*)$", line)
        if m:
            cur = m.group(1)
            shown[cur] = m.group(2).strip()
        elif line.startswith("    ") and shown:
            shown[cur] += " " + line.strip()
    for name in ns.task_names:
        first = ns[name].__doc__.lstrip().splitlines()[0].strip()
        assert first.endswith("."), f"{name}: first line is not a whole sentence: {first!r}"
        assert not first.endswith(("e.g.", "i.e.")), name
        assert len(first) <= 110, f"{name}: first line is {len(first)} characters"
        assert first[0].isupper() or first[0] == "`", name
        assert shown.get(name) == first, (name, shown.get(name), first)


def test_short_flags_have_one_meaning_and_h_is_help():
    """No two tasks give one short flag different meanings (viz's -e was --iters, bench's --repeat), and
    -h is never an option (viz's --height had it)."""
    ns = _collection()
    meaning: dict[str, set] = {}
    for name in ns.task_names:
        for arg in ns[name].get_arguments():
            long = arg.name
            for flag in arg.names:
                if len(flag) == 1 and flag != long:
                    meaning.setdefault(flag, set()).add(long)
    assert "h" not in meaning, meaning.get("h")
    clashes = {f: sorted(m) for f, m in meaning.items() if len(m) > 1}
    assert not clashes, clashes
    assert meaning["p"] == {"programs"} and meaning["v"] == {"variant"}  # the documented ones stay
    r = inv("viz", "-h")
    assert r.returncode == 0 and "Usage:" in r.stdout


def test_the_short_flag_check_catches_a_clash(monkeypatch):
    """The check above is not vacuous: with invoke's own automatic short flags it finds the clashes."""
    from invoke import Task

    ns = _collection()
    meaning: dict[str, set] = {}
    for name in ns.task_names:
        t = ns[name]
        auto = Task(t.body, name=name, help=dict(t.help), positional=t.positional, optional=t.optional,
                    iterable=t.iterable, incrementable=t.incrementable, auto_shortflags=True)
        for arg in auto.get_arguments(ignore_unknown_help=True):
            for flag in arg.names:
                if len(flag) == 1 and flag != arg.name:
                    meaning.setdefault(flag, set()).add(arg.name)
    assert meaning["e"] == {"iters", "repeat"} and "height" in meaning["h"]


# --- what to type instead: one line each, never a traceback ------------------------------------------

@pytest.mark.parametrize("args,says", [
    (["run", "hello", "shapes"], "arguments for the program go after `--`; type: invoke run hello -- shapes"),
    (["run", "hello", "loop", "2", "--", "extra"], "type: invoke run hello -- loop 2 extra"),
    (["run", "hello", "--frobnicate"], "'--frobnicate' is not an option of run"),
    (["viz"], "invoke viz: name a picture: " + ", ".join(programs.pictures())),
    (["run"], "invoke run: name a program: attention,"),
    (["plot"], "name what to draw: bench, profile, tune or timeline"),
    (["viz", "gridstride", "5"], "'5' is neither an option of viz nor a task"),
    (["test", "--marker", "gpu and"], "test: --marker 'gpu and' is not a pytest expression: expected not OR left "
                                       "parenthesis OR identifier; got end of input"),
    (["test", "--keyword", "a b"], "test: --keyword 'a b' is not a pytest expression"),
    (["test", "-m", "not (gpu"], "is not a pytest expression"),
    (["viz", "gridstride", "--simulate", "--iters", "5"],
     "viz gridstride: --iters does not apply to gridstride (it is for mandelbrot)"),
    (["viz", "gridstride", "--simulate", "--variant", "02_fast", "--region", "0 1 0 1"],
     "--region does not apply to gridstride (it is for mandelbrot); --variant does not apply"),
    (["viz", "mandelbrot", "--simulate"], "viz mandelbrot: --simulate does not apply to mandelbrot (it is for "
     + ", ".join(p for p in programs.pictures() if programs.picture_takes(p, "simulate")) + ")"),
    (["viz", "mandelbrot", "-n", "5"], "-n does not apply to mandelbrot (it is for "
     + ", ".join(p for p in programs.pictures() if programs.picture_takes(p, "n")) + ")"),
    (["run", "hello", "--image", "x.png"], "run hello: --image does not apply to hello (it is for grayscale)"),
    (["run", "matmul", "--out", "x.png"], "run matmul: --out does not apply to matmul (it is for grayscale)"),
])
def test_mistyped_commands_say_what_to_type(args, says):
    r = inv(*args)
    assert r.returncode != 0, (args, r.stdout)
    assert says in r.stderr, (args, r.stderr)
    assert "Traceback" not in r.stderr and "INTERNALERROR" not in r.stderr and "No idea" not in r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1, (args, r.stderr)


def test_good_pytest_expressions_pass_the_check():
    """The marker check lets a valid expression through to pytest (here one that selects nothing)."""
    r = inv("test", "--marker", "gpu and not gpu", "--jobs", "1", "--args", "-q tests/calling/test_parse.py")
    assert "is not a pytest expression" not in r.stderr
    assert r.returncode == 5 and "pytest collected no tests" in r.stderr, r.stderr


def test_viz_without_a_gpu_suggests_the_simulator():
    from conftest import GPU_OK, ensure_built

    if GPU_OK:
        pytest.skip("checks the no-GPU message")
    ensure_built("grid_stride", "exe")
    r = inv("viz", "gridstride", "-n", "40")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].endswith("draws it without one: invoke viz gridstride -n 40 --simulate")
    assert "Traceback" not in r.stderr


def test_progress_without_a_terminal_is_lines_that_move(capsys):
    """A notebook cell, a log or CI cannot redraw a bar: each named step is a line as it ends, and a
    count without names says each tenth, so a long build is not silent until it finishes."""
    from harness.user import cli

    with cli.progress("build") as bar:  # pytest's captured stderr is no terminal
        t = bar.add_task("", total=None)
        bar.update(t, total=3)
        for what in ("NVCC cuda/a.cu", "LINK build/lib/liba.so", "LINK build/bin/a"):
            bar.update(t, advance=1, description=what)
    with cli.progress("viz") as bar:
        t = bar.add_task("simulating", total=None)
        for done in range(1, 101):
            bar.update(t, completed=done, total=100)
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == ["build [1/3] NVCC cuda/a.cu", "build [2/3] LINK build/lib/liba.so", "build [3/3] LINK build/bin/a"]
    assert err[3:] == [f"viz [{k}/100]" for k in range(10, 101, 10)]


def test_an_interrupted_bench_says_what_it_kept(monkeypatch, tmp_path):
    """Ctrl-C part way through a bench: one line with how far it got and what was written (the session's
    results exist only once it ends), status 130; the whole runs of a --repeat before it stay."""
    from invoke import Context, Exit

    import tasks
    from harness import programs as registry
    from harness.measuring import bench as hbench
    from harness.measuring import results_csv

    monkeypatch.setattr(registry, "bench_cases", lambda names, quick: ["a case"])
    monkeypatch.setattr(registry, "bench_libraries", lambda cases: [])
    monkeypatch.setattr(registry, "ceilings", lambda: {})
    monkeypatch.setattr(hbench, "check_built", lambda libs: None)
    monkeypatch.setattr(hbench, "metadata", lambda: {})
    calls, stop_at = [], [1]

    def run(cases, ceilings, quick, rounds, on_total, on_progress):
        calls.append(1)
        on_total(10)
        for k in range(4):
            on_progress(f"square 01 2^24 (round {k + 1}/2)")
        if len(calls) == stop_at[0]:
            raise KeyboardInterrupt
        for k in range(4, 10):
            on_progress(f"square 01 2^24 (round {k + 1}/2)")
        return "frame", {}

    monkeypatch.setattr(hbench, "run", run)
    written = []
    monkeypatch.setattr(results_csv, "write",
                        lambda df, meta, ceil: written.append(tmp_path / "bench" / f"run{len(calls)}.csv") or written[-1])
    with pytest.raises(Exit) as ei:
        tasks.bench(Context(), quick=True)
    assert ei.value.code == 130
    assert ei.value.message == ("bench: interrupted after 4 of 10 measurements; the timing session was stopped, and a "
                                "session keeps its results only when it ends, so this run wrote none")
    calls.clear()
    stop_at[0] = 2
    with pytest.raises(Exit) as ei:
        tasks.bench(Context(), quick=True, repeat="3")
    assert ei.value.message.startswith("bench: interrupted after 14 of 30 measurements;")
    assert ei.value.message.endswith(f"wrote none; the 1 whole run(s) before it are in {tmp_path / 'bench'}")
    assert [p.name for p in written] == ["run1.csv"]


def test_invoke_test_says_what_happens_before_pytests_first_line(capsys, monkeypatch):
    """Between the build's last line and pytest's first result, pytest starts its workers and collects
    every test in silence (minutes on a small machine): the task says so before it starts pytest."""
    import tasks
    from harness.user import cli

    said_before = []

    def run_pytest(cmd, env):  # the one place the task starts pytest: recorded here, never run
        said_before.append(capsys.readouterr().err)
        return 0

    monkeypatch.setattr(cli, "run_pytest", run_pytest)
    tasks.test.body(None, jobs="1")
    assert len(said_before) == 1 and "test: starting pytest" in said_before[0]
    assert "collecting the tests" in said_before[0]

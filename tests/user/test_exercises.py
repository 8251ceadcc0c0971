"""invoke exercise: the markers in the lab's sources, the texts made from them, and the checker shown
to fail. For every exercise on the Python track (CPU, CI): a fresh file fails, the lab's solution
passes, and each wrong solution fails with a message that points at the cause. The CUDA track's
texts compile here; running them is in the gpu-marked tests at the end."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest
from wrong_solutions import check_fails, patched, write

from conftest import pythonpath, sigint_as_from_a_terminal
from harness.calling.cdecl import extract_cdef
from harness.user import exercises as hx
from harness.user.exercises import catalog, child, markers
from harness.user.exercises import check as hcheck

ROOT = hx.ROOT
FIX = Path(__file__).parent.parent / "fixtures"
PY_EXERCISES = [e.name for e in catalog.EXERCISES if "python" in e.tracks]
CU_EXERCISES = [e.name for e in catalog.EXERCISES if "cuda" in e.tracks]


# --- the markers ---------------------------------------------------------------------------------

def test_every_marker_in_the_sources_belongs_to_an_exercise_and_pairs_up():
    seen = set()
    # Every source of the programs, so that a program that adds exercises needs no line here; the entry
    # points (exercise_*.cu) are read as one copy span of their exercise's (hx.spans), not on their own.
    sources = sorted(p for p in (ROOT / "cuda").rglob("*")
                     if p.suffix in (".cu", ".cuh", ".py") and p.is_file() and not p.name.startswith("exercise_"))
    assert any(p.name == "matmul_kernels.cuh" for p in sources)
    for path in sources:
        rel = str(path.relative_to(ROOT))
        text = path.read_text()
        names = markers.names_in(text)
        assert names <= set(catalog.BY_NAME), f"{rel}: markers of unknown exercises {names - set(catalog.BY_NAME)}"
        for n in names:
            assert markers.parse(text, n, rel)  # raises MarkerError when unbalanced
        seen |= names
    assert seen == set(catalog.BY_NAME)


@pytest.mark.parametrize("text, where", [
    ("// EXERCISE a: copy\nx\n", "never ends"),
    ("// EXERCISE a: copy\n// EXERCISE a: begin do it\nx\n// EXERCISE a: end copy\n", "inside a blank"),
    ("// EXERCISE a: begin do it\nx\n// EXERCISE a: end\n", "outside a copy span"),
    ("// EXERCISE a: copy\n// EXERCISE a: begin\nx\n// EXERCISE a: end\n// EXERCISE a: end copy\n", "without a TODO"),
    ("// EXERCISE a: copy\n// EXERCISE a: begin t\n// EXERCISE a: end\n// EXERCISE a: end copy\n", "holds no solution"),
    ("// EXERCISE a: copy\n// EXERCISE a: copy\n", "inside another copy span"),
    ("// EXERCISE a: end\n", "without a `begin`"),
])
def test_unbalanced_markers_are_named_with_their_line(text, where):
    with pytest.raises(markers.MarkerError, match=re.escape(where)):
        markers.parse(text, "a", "f.cu")


def test_render_replaces_each_blank_with_its_todo_and_stub_and_keeps_other_exercises_out():
    src = ("keep 1\n// EXERCISE a: copy\nint f() {\n// EXERCISE b: copy\n    // EXERCISE a: begin compute x\n"
           "    // EXERCISE a: todo carefully\n    int x = 42;\n    // EXERCISE a: stub int x = 0;\n"
           "    // EXERCISE a: end\n    return x;\n// EXERCISE b: end copy\n}\n// EXERCISE a: end copy\nkeep 2\n")
    spans = markers.parse(src, "a")
    todo = markers.render(spans, "a", "//", "todo")
    sol = markers.render(spans, "a", "//", "solution")
    assert todo == "int f() {\n    // TODO (a): compute x carefully\n    int x = 0;\n    return x;\n}\n"
    assert sol == "int f() {\n    int x = 42;\n    return x;\n}\n"
    assert "EXERCISE" not in todo + sol and "keep" not in todo + sol


@pytest.mark.parametrize("name", PY_EXERCISES)
def test_python_texts_compile_and_the_solution_holds_the_labs_code(name):
    ex = hx.exercise(name)
    learner, sol = hx.learner_text(ex, "python"), hx.solution_text(ex, "python")
    compile(learner, f"{name}.py", "exec")
    compile(sol, f"{name}.py", "exec")
    assert "TODO (" in learner and "TODO (" not in sol
    assert "EXERCISE" not in learner + sol
    lab = (ROOT / ex.py_source).read_text()
    for line in sol.splitlines()[12:]:
        assert line in lab.splitlines(), f"{name}: solution line not in {ex.py_source}: {line!r}"


@pytest.mark.parametrize("name", CU_EXERCISES)
def test_cuda_texts_compile_alone_with_the_labs_flags(name, tmp_path):
    """Every marked region compiles as the solution, and the learner's fresh file compiles too (so a
    fresh check reaches the run and fails there, not on the TODOs)."""
    ex = hx.exercise(name)
    for which in ("solution", "learner"):
        text = hx.solution_text(ex, "cuda") if which == "solution" else hx.learner_text(ex, "cuda")
        path = write(tmp_path, name, "cuda", text)
        compiled = hcheck.compile_learner(ex, tmp_path, path, text)  # compiled here, loaded by the worker only
        assert compiled.path.exists() and "exercise_run" in [f.name for f in extract_cdef(text).functions]


def test_a_cuda_compile_error_names_the_learners_file_and_line_and_quotes_it(tmp_path):
    ex = hx.exercise("square")
    text = patched("square", "cuda", [("    if (i >= n) return;\n", "    if (i >= n) return\n")])
    path = write(tmp_path, "square", "cuda", text)
    lineno = text.splitlines().index("    if (i >= n) return") + 1
    v = hcheck.check("square", "cuda", tmp_path)
    assert not v.passed
    msg = "\n".join(t for _, t in v.lines)
    # nvcc reports the missing `;` where the next statement starts; either line is quoted from the file
    m = re.search(rf"{re.escape(str(path))}:({lineno}|{lineno + 1}): error", msg)
    assert m, msg
    k = int(m.group(1))
    assert f"{k:6d} | {text.splitlines()[k - 1].rstrip()}" in msg
    assert ex.name in v.final_line() or "fix:" in v.final_line()


def test_without_a_gpu_the_cuda_track_compiles_then_points_to_the_python_track(tmp_path, monkeypatch):
    from harness.calling import cudart

    monkeypatch.setattr(cudart, "gpu_available", lambda: (False, "no CUDA device"))
    ex = hx.exercise("grayscale")
    write(tmp_path, "grayscale", "cuda", hx.solution_text(ex, "cuda"))
    v = hcheck.check("grayscale", "cuda", tmp_path)
    assert v.compiled_only and not v.passed
    assert v.lines[0][0] is True and "compiles" in v.lines[0][1]
    assert "needs a GPU" in v.final_line() and "Python track" in v.final_line()


@pytest.mark.parametrize("old, new, says", [
    ("__global__ void grayscale_01_1d(", "__global__ void grayscale_1d(", "no kernel grayscale_01_1d"),
    ("unsigned char *__restrict__ out,\n                                int n)",
     "unsigned char *__restrict__ out,\n                                long long n)", "parameters changed"),
    ('extern "C" int exercise_run(', 'extern "C" int my_run(', "entry point exercise_run"),
])
def test_cuda_renamed_kernel_changed_signature_or_entry_point_is_one_line_before_compiling(old, new, says, tmp_path):
    write(tmp_path, "grayscale", "cuda", patched("grayscale", "cuda", [(old, new)]))
    v = hcheck.check("grayscale", "cuda", tmp_path)
    assert not v.passed and says in v.first_fix and "\n" not in v.first_fix
    assert len(v.lines) == 1  # nothing compiled, nothing run


# --- the Python track: fresh fails, solution passes, wrong solutions fail with the cause ---------

@pytest.mark.parametrize("name", PY_EXERCISES)
def test_python_fresh_start_fails_and_the_written_solution_passes(name, tmp_path):
    path, created = hx.start(name, "python", tmp_path)
    assert created and path.read_text() == hx.learner_text(hx.exercise(name), "python")
    v = hcheck.check(name, "python", tmp_path)
    assert not v.passed and v.final_line().startswith("fix: ")
    _, written, backup = hx.solution(name, "python", tmp_path, write=True)
    assert written == path and backup is not None and backup.read_text() == hx.learner_text(hx.exercise(name), "python")
    v = hcheck.check(name, "python", tmp_path)
    assert v.passed, v.lines
    assert v.final_line().startswith("passed")
    assert all(ok for ok, _ in v.lines)
    assert json.loads((tmp_path / hx.PROGRESS).read_text())[name]["python"]["status"] == "passed"


WRONG_PY = {
    "square": [
        ("    if i < n:\n", "    if True:\n", "bounds check"),
        ("    i = blockidx * blockdim + threadidx\n", "    i = blockidx * blockdim + threadidx + 1\n", "never written"),
        ("    i = blockidx * blockdim + threadidx\n", "    i = blockidx + threadidx\n", "never written"),
        ("        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n", "        a[i] = 0\n", "writes zeros"),
    ],
    "grid_stride": [
        ("    stride = ctx.blockDim.x * ctx.gridDim.x\n", "    stride = ctx.blockDim.x\n", "more than one thread"),
        ("    stride = ctx.blockDim.x * ctx.gridDim.x\n", "    stride = 2 * ctx.blockDim.x * ctx.gridDim.x\n",
         "never written"),
        ("    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x\n", "    i = ctx.threadIdx.x\n", "more than one thread"),
        ("    while i < n:\n", "    while i <= n:\n", "bounds check"),
    ],
    "grayscale": [
        ("    if i < n:\n", "    if True:\n", "bounds check"),
        ("x[i + 2 * n]", "x[i + 2]", "outputs wrong"),
        ("    i = blockidx * blockdim + threadidx\n", "    i = blockidx * blockdim + threadidx + 1\n", "never written"),
        ("        out[i] = _grey(x[i], x[i + n], x[i + 2 * n])\n", "        out[i] = 0\n", "writes zeros"),
    ],
    "grayscale_2d": [
        ("    if c >= w or r >= h:\n", "    if c >= w:\n", "bounds check"),
        ("    r = blockidx.y * blockdim.y + threadidx.y\n", "    r = blockidx.y + threadidx.y\n", "never written"),
        ("    c = blockidx.x * blockdim.x + threadidx.x\n", "    c = blockidx.x * blockdim.x + threadidx.y\n",
         "never written"),
    ],
    "matmul": [
        ("    if r >= h or c >= w:\n        return\n", "", "bounds check"),
        ("    for i in range(k):\n", "    for i in range(k - 1):\n", "outputs wrong"),
        ("n[i * w + c]", "n[i * k + c]", "wrong"),
        ("    out[r * w + c] = o\n", "    out[r * w + c] = 0.0\n", "writes zeros"),
    ],
    "matmul_tiled": [
        ("        if sync:\n            yield  # the whole tile must be loaded before anyone reads a row or column of it\n",
         "", "barrier after the loads"),
        ("        yield  # everyone must finish reading this tile before the next phase overwrites it\n", "",
         "the barrier after the products"),
        ("m[r * k + tc + idx] if r < h and idx + tc < k else 0.0", "m[r * k + tc + idx]", "bounds check"),
        ("n[(tr + idx) * w + c]", "n[(tc + idx) * w + c]", "wrong"),
    ],
    "mandelbrot": [
        ("    while n < max_iters:\n", "    while n <= max_iters:\n", "outputs wrong"),
        ("        x = (xx - yy) + cr\n", "        x = (x * x - y * y) + cr\n", "outputs wrong"),
        ("        if xx + yy > dt(4):\n", "        if xx + yy > dt(2):\n", "outputs wrong"),
        ("        n += 1\n", "        n += 1\n        break\n", "outputs wrong"),
    ],
    "mandelbrot_zoom": [
        ("ZOOM_REGION = (-0.7469, -0.7449, 0.1049, 0.1069)", "ZOOM_REGION = (-2.0, 1.0, -1.5, 1.5)", "zoom in"),
        ("ZOOM_REGION = (-0.7469, -0.7449, 0.1049, 0.1069)", "ZOOM_REGION = (-0.1, -0.05, -0.05, 0.0)",
         "inside the set"),
        ("ZOOM_REGION = (-0.7469, -0.7449, 0.1049, 0.1069)", "ZOOM_REGION = (1.0, 1.05, 1.0, 1.05)",
         "escapes at once"),
    ],
    "flash_softmax": [
        ("        o = alpha * o + p @ vs\n", "        o = o + p @ vs\n", "outputs wrong"),
        ("        lsum = alpha * lsum + p.sum()\n", "        lsum = lsum + p.sum()\n", "outputs wrong"),
        ("        p = np.exp(s - m_new)\n", "        p = np.exp(s - m)\n", "NaN"),
        ("        o = alpha * o + p @ vs\n", "        o = alpha * o\n", "writes zeros"),
    ],
}


def _py_cases():
    for name, wrongs in WRONG_PY.items():
        for k, (old, new, says) in enumerate(wrongs):
            yield pytest.param(name, old, new, says, id=f"{name}-{k}")


def _here(names: list[str]) -> set[str]:
    """The exercises whose wrong solutions are tabled here: the others' table lives beside their program
    (cuda/<prog>/test_<prog>_exercises.py, through tests/wrong_solutions.py)."""
    own = {e.name for e in catalog.EXERCISES
           if (ROOT / "cuda" / e.program / f"test_{e.program}_exercises.py").is_file()}
    return set(names) - own


def test_every_exercise_has_at_least_three_wrong_solutions():
    assert _here(PY_EXERCISES) <= set(WRONG_PY) <= set(PY_EXERCISES)
    assert all(len(w) >= 3 for w in WRONG_PY.values())
    assert _here(CU_EXERCISES) <= set(WRONG_CUDA) <= set(CU_EXERCISES)
    assert all(len(w) >= 3 for w in WRONG_CUDA.values())
    for e in catalog.EXERCISES:
        if e.name not in WRONG_PY and e.name not in WRONG_CUDA:
            assert (ROOT / "cuda" / e.program / f"test_{e.program}_exercises.py").is_file(), e.name


@pytest.mark.parametrize("name, old, new, says", list(_py_cases()))
def test_python_wrong_solution_fails_with_its_cause(name, old, new, says, tmp_path):
    check_fails(name, "python", [(old, new)], says, None, tmp_path)


def test_python_kernel_error_names_the_learners_line(tmp_path):
    path = write(tmp_path, "square", "python", patched("square", "python", [("    if i < n:\n", "    if True:\n")]))
    v = hcheck.check("square", "python", tmp_path)
    line = path.read_text().splitlines().index("        v = int(a[i]) & 0xFFFFFFFF") + 1
    assert f"{path}:{line}: `v = int(a[i]) & 0xFFFFFFFF`: IndexError" in v.first_fix


def test_python_hang_is_stopped_at_the_deadline(tmp_path):
    write(tmp_path, "grid_stride", "python", patched("grid_stride", "python", [("    stride = ctx.blockDim.x * ctx.gridDim.x\n", "    stride = 0\n")]))
    v = hcheck.check("grid_stride", "python", tmp_path, deadline=5)
    assert not v.passed and "stopped after 5 s" in v.first_fix and "never finished" in v.first_fix


STOPPED_CHECK = """
import sys
sys.path.insert(0, {root!r})
from harness.user.exercises import check
try:
    check._run_worker({{}}, 60, prefix=["sh", "-c", "sleep 60 & echo $! > {pidfile}; wait", "sh"])
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_check_interrupted_or_terminated_leaves_no_worker(tmp_path, sig):
    """Ctrl-C, or a SIGTERM (a timeout around `invoke exercise check`), while the check's worker runs:
    the worker's process group goes with the check. On SIGTERM it used to run on alone."""
    import subprocess
    import sys
    import time

    pidfile = tmp_path / "pid"
    p = subprocess.Popen([sys.executable, "-c", STOPPED_CHECK.format(root=str(ROOT), pidfile=str(pidfile))],
                         preexec_fn=sigint_as_from_a_terminal)
    t0 = time.monotonic()
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert p.poll() is None and time.monotonic() - t0 < 30, "the worker did not start"
        time.sleep(0.05)
    sleeper = int(pidfile.read_text())
    p.send_signal(sig)
    try:
        assert p.wait(timeout=20) == 130
        stat = Path(f"/proc/{sleeper}/stat")
        while stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            assert time.monotonic() - t0 < 30, "the worker's child outlived the check"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(OSError):
            os.kill(sleeper, signal.SIGKILL)
        if p.poll() is None:
            p.kill()


def test_python_syntax_error_is_file_line_with_the_line_quoted(tmp_path):
    path = write(tmp_path, "matmul", "python", patched("matmul", "python", [("    o = 0.0\n", "    o = = 0.0\n")]))
    v = hcheck.check("matmul", "python", tmp_path)
    line = path.read_text().splitlines().index("    o = = 0.0") + 1
    assert v.first_fix.startswith(f"{path}:{line}: ") and "o = = 0.0" in "\n".join(t for _, t in v.lines)


# --- bad input: one line each, naming the fix; nothing of the learner's lost ----------------------

def test_unknown_exercise_names_the_ones_there_are(tmp_path):
    with pytest.raises(hx.ExerciseError, match="no exercise called 'sqaure'.*square, grid_stride"):
        hx.start("sqaure", None, tmp_path)


def test_missing_empty_and_foreign_files_and_a_dir_that_is_a_file(tmp_path):
    with pytest.raises(hx.ExerciseError, match=r"no file .*square\.py: run `invoke exercise start square` first"):
        hcheck.check("square", "python", tmp_path)
    write(tmp_path, "square", "python", "  \n")
    with pytest.raises(hx.ExerciseError, match="is empty: write your solution there"):
        hcheck.check("square", "python", tmp_path)
    assert (tmp_path / "square.py").read_text() == "  \n"
    write(tmp_path, "square", "python", hx.learner_text(hx.exercise("grayscale"), "python"))
    with pytest.raises(hx.ExerciseError, match="is the file of exercise grayscale, not square"):
        hcheck.check("square", "python", tmp_path)
    f = tmp_path / "afile"
    f.write_text("x")
    for call in (lambda: hx.start("square", None, f), lambda: hcheck.check("square", None, f),
                 lambda: hx.hint("square", f), lambda: hx.solution("square", None, f, write=True)):
        with pytest.raises(hx.ExerciseError, match="is a file, not a folder: name a folder"):
            call()
    assert f.read_text() == "x"


def test_renamed_or_resigned_python_kernel_is_one_line(tmp_path):
    write(tmp_path, "grayscale", "python", patched("grayscale", "python", [("def rgb2grey_bk(", "def rgb2grey(")]))
    v = hcheck.check("grayscale", "python", tmp_path)
    assert "defines no rgb2grey_bk" in v.first_fix and "\n" not in v.first_fix
    write(tmp_path, "grayscale", "python", patched("grayscale", "python", [("threadidx, blockdim, x, out, n)", "threadidx, blockdim, x, out)")]))
    v = hcheck.check("grayscale", "python", tmp_path)
    assert "put the parameters back" in v.first_fix


def test_start_never_overwrites_and_solution_writes_only_when_asked(tmp_path):
    path, created = hx.start("matmul", None, tmp_path)
    path.write_text(path.read_text() + "# my work\n")
    again, created2 = hx.start("matmul", None, tmp_path)
    assert again == path and not created2 and path.read_text().endswith("# my work\n")
    text, written, backup = hx.solution("matmul", None, tmp_path)
    assert written is None and backup is None and path.read_text().endswith("# my work\n")
    assert "for i in range(k):" in text
    _, written, backup = hx.solution("matmul", None, tmp_path, write=True)
    assert backup.read_text().endswith("# my work\n") and written.read_text() == text
    _, _, backup2 = hx.solution("matmul", None, tmp_path, write=True)
    assert backup2 != backup and backup.read_text().endswith("# my work\n")


def test_hints_come_one_at_a_time_and_are_remembered(tmp_path):
    ex = hx.exercise("flash_softmax")
    got = [hx.hint("flash_softmax", tmp_path) for _ in range(len(ex.hints) + 1)]
    assert [g[0] for g in got] == list(range(1, len(ex.hints) + 1)) + [len(ex.hints)]
    assert got[0][2] == ex.hints[0] and got[-1][2] == ex.hints[-1]
    assert json.loads((tmp_path / hx.PROGRESS).read_text())["flash_softmax"]["hints"] == len(ex.hints)


def test_list_shows_every_exercise_in_order_with_status(tmp_path):
    assert len(catalog.EXERCISES) >= 9
    hx.start("square", None, tmp_path)
    rows = hx.listing(tmp_path)
    first = ["square", "grid_stride", "grayscale", "grayscale_2d", "matmul", "matmul_tiled", "mandelbrot",
             "mandelbrot_zoom", "flash_softmax"]
    # in the learning path's order, the later programs' exercises between them where their programs fall
    assert [r["exercise"] for r in rows] == [e.name for e in catalog.EXERCISES]
    assert [r["exercise"] for r in rows if r["exercise"] in first] == first
    assert (rows[0]["python"], rows[0]["cuda"]) == ("started", "not started")
    assert (rows[1]["python"], rows[1]["cuda"]) == ("not started", "not started")
    assert next(r for r in rows if r["exercise"] == "mandelbrot_zoom")["cuda"] == "-"


def test_a_damaged_progress_file_is_rewritten_not_fatal(tmp_path):
    (tmp_path / hx.PROGRESS).write_text("{not json")
    hx.start("square", None, tmp_path)
    assert json.loads((tmp_path / hx.PROGRESS).read_text())["square"]["python"]["status"] == "started"


# --- the CUDA track's verdict, on recorded or made-up runs (CPU) ---------------------------------

def test_only_element_0_unwritten_names_the_shifted_index_not_the_bounds_check():
    from harness.user.exercises import worker

    a = np.arange(2, 33, dtype=np.int32)
    ref = a * a
    out = ref.copy()
    out[0] = a[0]  # in place: element 0 left as it was, every other one right
    facts = {}
    msg = worker.compare("square", out, ref, guard=catalog.poisoned(catalog.GUARD, np.int32), before=a, facts=facts)
    assert msg.startswith("1 of 31 outputs never written: only element 0") and "index is not 0" in msg
    assert facts == {"only_first": True, "n": 31}
    one = {}
    assert "never written (first at index 0" in worker.compare("square", a[:1], ref[:1], before=a[:1], facts=one)
    bad = [dict(label="n=1", ok=False, message="1 of 1 outputs never written", ragged=True, **one),
           dict(label="n=31", ok=False, message=msg, ragged=True, **facts)]
    assert "only element 0 was never written" in worker.summarize("square", bad)
    out[1] = a[1]  # two elements missed: not the shifted index
    assert "2 of 31 outputs never written (first at index 0" in worker.compare("square", out, ref, before=a)


def _learner_file(tmp_path, name):
    """matmul_tiled without its barrier after the products (the wrong solution below), and the line
    of its inner product."""
    old, new, _ = WRONG_CUDA["matmul_tiled"][1]
    path = write(tmp_path, name, "cuda", patched(name, "cuda", [(old, new)]))
    k = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "acc += As[" in ln)
    return path, k


def _racecheck_text(k):
    """racecheck's report on that file, recorded on an H100 (its first hazard and the summary): the read
    was on line 84 of the file then; moved to line k, where today's text has it."""
    text = (FIX / "sanitizer_h100_racecheck_exercise_matmul_tiled_no_second_barrier.txt").read_text()
    assert "exercise_matmul_tiled-434cf61b89733be1.cu:84\n" in text
    return text.replace("exercise_matmul_tiled-434cf61b89733be1.cu:84\n", f"exercise_matmul_tiled-434cf61b89733be1.cu:{k}\n")


MATMUL_TILED_WRONG = {"results": [
    {"label": "33x29 @ 29x31", "ok": True, "message": None, "ragged": True},
    {"label": "1023x517 @ 517x1031", "ok": False, "ragged": True,
     "message": "162877 of 1054713 outputs wrong, first at index 37516: got 21.9383, expected 21.5965"}],
    "pattern": "only sizes that are not a multiple of the tile fail: look at the bounds check"}


def _ran(output: str, status: int) -> child.Outcome:
    """A sanitizer run's outcome: its output and exit status."""
    out = child.Output()
    out.feed(output.encode())
    return child.Outcome(status, out)


def test_a_wrong_output_is_blamed_on_the_sanitizers_finding_with_the_line_before_the_values(tmp_path):
    path, k = _learner_file(tmp_path, "matmul_tiled")
    clean = (FIX / "sanitizer_2025.3.1_h200_memcheck_square_clean.txt").read_text()
    v = hcheck.Verdict("matmul_tiled", "cuda", path)
    hcheck._cuda_verdict(hx.exercise("matmul_tiled"), path, v, MATMUL_TILED_WRONG,
                         {"memcheck": _ran(clean, 0), "racecheck": _ran(_racecheck_text(k), 86)})
    quote = path.read_text().splitlines()[k - 1].strip()
    assert v.first_fix.startswith("compute-sanitizer racecheck: 6721 error(s)"), v.first_fix
    assert f"at {path}:{k}: `{quote}`" in v.first_fix and "__syncthreads()" in v.first_fix
    texts = [t for _, t in v.lines]
    assert "compute-sanitizer memcheck: clean" in texts and any(t.startswith("1023x517") for t in texts)
    assert not any("bounds check" in t for t in texts)  # the guess from the values is not offered


def test_with_both_sanitizers_clean_the_values_give_the_cause(tmp_path):
    path, _ = _learner_file(tmp_path, "matmul_tiled")
    clean = (FIX / "sanitizer_2025.3.1_h200_memcheck_square_clean.txt").read_text()
    v = hcheck.Verdict("matmul_tiled", "cuda", path)
    hcheck._cuda_verdict(hx.exercise("matmul_tiled"), path, v, MATMUL_TILED_WRONG,
                         {"memcheck": _ran(clean, 0), "racecheck": _ran(clean, 0)})
    assert v.first_fix.startswith("only sizes that are not a multiple of the tile fail") and "(first: 1023x517" in v.first_fix
    assert [ok for ok, t in v.lines if "compute-sanitizer" in t] == [True, True]
    # a sanitizer run that gave no verdict is said, and fails a check that nothing else fails
    v = hcheck.Verdict("matmul_tiled", "cuda", path)
    hcheck._cuda_verdict(hx.exercise("matmul_tiled"), path, v, {"results": MATMUL_TILED_WRONG["results"][:1]},
                         {"memcheck": _ran("boom\n", 1), "racecheck": _ran(clean, 0)})
    assert not v.passed and v.first_fix.startswith("compute-sanitizer memcheck: the small case under it failed")


def test_matmul_tiled_sanitizer_case_spans_two_tiles_and_each_exercise_has_one():
    for name in CU_EXERCISES:
        small = [c for c in catalog.cases(name, "cuda") if c.small]
        assert len(small) == 1, name
    (c,) = [c for c in catalog.cases("matmul_tiled", "cuda") if c.small]
    assert c.params["k"] > c.params["tw"] and c.ragged  # a second tile loaded over the first, and ragged edges


def test_the_timing_session_loads_the_learners_file_from_the_compile_steps_cache(tmp_path, monkeypatch):
    from harness.calling import inline

    ex = hx.exercise("square")
    text = hx.solution_text(ex, "cuda")
    path = write(tmp_path, "square", "cuda", text)
    assert not hcheck.compile_learner(ex, tmp_path, path, text).cache_hit
    monkeypatch.setenv("CUDALAB_CACHE", str(hcheck.cache_folder(tmp_path).resolve()))
    assert inline.load(text, name=hcheck.module_name("square", "learner")).cache_hit


def test_a_tree_without_device_info_built_still_gets_its_verdict_and_says_why_no_speed(tmp_path, monkeypatch):
    from harness import programs
    from harness.base.errors import NotBuilt

    def missing(progs=None):
        raise NotBuilt("build/lib/libdevice_info.so", "device_info")

    monkeypatch.setattr(programs, "ceilings", missing)
    path, _ = _learner_file(tmp_path, "matmul_tiled")
    v = hcheck.Verdict("matmul_tiled", "cuda", path)
    hcheck._speed(hx.exercise("matmul_tiled"), tmp_path, path.read_text(), v)
    assert v.lines == [(None, "speed not measured: build/lib/libdevice_info.so is missing: run `invoke build "
                              "--programs device_info` (or `invoke build` for every program)")] and v.ratio is None


def test_a_worker_past_its_deadline_is_stopped_with_what_it_started(tmp_path):
    """Under compute-sanitizer the worker is the sanitizer's child: the whole process group goes."""
    import time

    pidfile = tmp_path / "pid"
    p = hcheck._start_worker({}, prefix=["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait", "sh"])
    t0 = time.monotonic()
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() - t0 < 30
        time.sleep(0.05)
    assert p.finish(time.monotonic() + 0.5).timed_out
    assert time.monotonic() - t0 < 30 and p.proc.returncode is not None
    stat = Path(f"/proc/{int(pidfile.read_text())}/stat")

    def alive():
        try:
            return stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"  # dead but unreaped counts as gone
        except FileNotFoundError:
            return False

    while alive():
        assert time.monotonic() - t0 < 30, "the worker's child outlived it"
        time.sleep(0.05)


# --- the CUDA track on a GPU ----------------------------------------------------------------------

WRONG_CUDA = {
    "square": [
        ("    if (i >= n) return;\n", "", "wrote past the end"),
        # The bounds check stays, so nothing is written past the end: element 0 is nobody's.
        ("    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
         "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x + 1;\n", "an index shifted by one"),
        ("    a[i] = wrap_square(a[i]);\n", "    a[i] = 0;\n", "writes zeros"),
    ],
    "grid_stride": [
        ("    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
         "    const long long idx = threadIdx.x;\n", "more than one thread"),
        ("    const long long stride = (long long)gridDim.x * blockDim.x;\n",
         "    const long long stride = 2LL * gridDim.x * blockDim.x;\n", "never written"),
        ("i < n; i += stride", "i <= n; i += stride", "wrote past the end"),
    ],
    "grayscale": [
        ("    if (i < n) out[i]", "    out[i]", "wrote past the end"),
        ("x[i + 2 * stride]);  // the last block", "x[i + 2]);  // the last block", "outputs wrong"),
        ("grey_u8(x[i], x[i + stride], x[i + 2 * stride]);  // the last block", "0;  // the last block",
         "writes zeros"),
    ],
    "grayscale_2d": [
        ("    if (c >= w || r >= h) return;", "    if (c >= w) return;", "wrote past the end"),
        ("    const int r = blockIdx.y * blockDim.y + threadIdx.y;\n", "    const int r = blockIdx.y + threadIdx.y;\n",
         "never written"),
        ("    const int c = blockIdx.x * blockDim.x + threadIdx.x;\n", "    const int c = blockIdx.x * blockDim.x + threadIdx.y;\n",
         "never written"),
    ],
    "matmul": [
        ("    if (row >= m || col >= n) return;", "    if (row >= m) return;", "wrote past the end"),
        ("for (int kk = 0; kk < k; ++kk) acc", "for (int kk = 0; kk < k - 1; ++kk) acc", "outputs wrong"),
        ("    C[(size_t)row * n + col] = alpha * acc;\n", "    C[(size_t)row * n + col] = 0.0f;\n",
         "writes zeros"),
    ],
    "matmul_tiled": [
        ("        // Rows of As and columns of Bs come from other threads' loads: wait for the whole tile.\n"
         "        __syncthreads();\n", "", "racecheck"),
        ("        // The next iteration overwrites the tiles: wait until everyone has finished reading them.\n"
         "        __syncthreads();\n", "", "racecheck"),
        ("    a = (row < m && a_k < k) ? A[(size_t)row * k + a_k] : 0.0f;\n", "    a = A[(size_t)row * k + a_k];\n",
         "memcheck"),
    ],
    "mandelbrot": [
        ("    while (n < max_iters) {\n", "    while (n <= max_iters) {\n", "outputs wrong"),
        ("        x = A::add(A::sub(xx, yy), cr);\n", "        x = A::add(A::sub(A::mul(x, x), A::mul(y, y)), cr);\n",
         "outputs wrong"),
        ("        if (A::add(xx, yy) > (T)4) break;\n", "        if (A::add(xx, yy) > (T)2) break;\n", "outputs wrong"),
    ],
    "flash_softmax": [
        ("            for (int c = 0; c < OC; ++c) o[r][c] *= alpha;\n", "            for (int c = 0; c < OC; ++c) o[r][c] *= 1.0f;\n",
         "outputs wrong"),
        ("            for (int off = 8; off > 0; off >>= 1) rs += __shfl_xor_sync(0xffffffffu, rs, off);\n", "",
         "outputs wrong"),
        ("            l[r] = l[r] * alpha + rs;\n", "            l[r] = l[r] + rs;\n", "outputs wrong"),
    ],
}


def _cu_cases():
    for name, wrongs in WRONG_CUDA.items():
        for k, (old, new, says) in enumerate(wrongs):
            yield pytest.param(name, old, new, says, id=f"{name}-{k}")


@pytest.mark.parametrize("name, old, new, says", list(_cu_cases()))
def test_cuda_wrong_solutions_are_valid_edits_of_the_solution(name, old, new, says):
    """CPU half of the GPU test below: each planted mistake is found in the solution text."""
    assert patched(name, "cuda", [(old, new)]) != hx.solution_text(hx.exercise(name), "cuda")


@pytest.mark.long
@pytest.mark.gpu
@pytest.mark.grader
@pytest.mark.parametrize("name", CU_EXERCISES)
def test_gpu_cuda_fresh_fails_and_solution_passes_with_sanitizer_and_ratio(name, tmp_path):
    hx.start(name, "cuda", tmp_path)
    v = hcheck.check(name, "cuda", tmp_path, timing=False)
    assert not v.passed and v.first_fix
    hx.solution(name, "cuda", tmp_path, write=True)
    v = hcheck.check(name, "cuda", tmp_path)
    assert v.passed, v.lines
    text = "\n".join(t for _, t in v.lines)
    assert "compute-sanitizer memcheck: clean" in text and "compute-sanitizer racecheck: clean" in text
    assert v.ratio is not None and v.ratio > 0 and "the lab's solution" in text and "ceiling" in text


@pytest.mark.long
@pytest.mark.gpu
@pytest.mark.grader
@pytest.mark.parametrize("name, old, new, says", list(_cu_cases()))
def test_gpu_cuda_wrong_solution_fails_with_its_cause(name, old, new, says, tmp_path):
    check_fails(name, "cuda", [(old, new)], says, None, tmp_path)


@pytest.mark.long
@pytest.mark.gpu
@pytest.mark.grader
def test_gpu_cuda_hang_is_stopped_and_said(tmp_path):
    """The sanitizer runs start with the cases and would hang the same way: they are stopped with them,
    so the check ends soon after the cases' deadline, not at the sanitizers' longer one."""
    write(tmp_path, "grid_stride", "cuda", patched("grid_stride", "cuda", [("    const long long stride = (long long)gridDim.x * blockDim.x;\n", "    const long long stride = 0;\n")]))
    v = hcheck.check("grid_stride", "cuda", tmp_path, deadline=20, timing=False)
    assert not v.passed and "stopped after 20 s" in v.first_fix
    assert v.seconds < 20 + 30, v.seconds  # the compile, and the stop of three process groups


# --- the invoke task ------------------------------------------------------------------------------

def _invoke(*args, cwd):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT))
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), "exercise", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_invoke_exercise_list_start_and_bad_input_in_one_line(tmp_path):
    r = _invoke("list", cwd=tmp_path)
    assert r.returncode == 0 and "flash_softmax" in r.stdout and "mandelbrot_zoom" in r.stdout
    r = _invoke("start", "grayscale", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "exercises" / "grayscale.py").exists()
    r = _invoke("start", "grayscale", cwd=tmp_path)
    assert r.returncode == 0 and "already there (your work is kept)" in r.stdout
    for args, says in [(("check", "nosuch"), "no exercise called 'nosuch'"), (("frobnicate", "square"), "no action"),
                       (("check", "square"), "run `invoke exercise start square` first")]:
        r = _invoke(*args, cwd=tmp_path)
        assert r.returncode != 0 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_start_from_a_subfolder_of_the_project_writes_the_projects_exercises(tmp_path, monkeypatch):
    """Run from cuda/ (or any folder inside the project), the default is the project's exercises/, not
    a new cuda/exercises/; outside the project it stays exercises/ of the current folder."""
    from harness.base import paths
    from harness.user import exercises as hx

    project = tmp_path / "project"
    (project / "cuda" / "square").mkdir(parents=True)
    monkeypatch.setattr(paths, "ROOT", project)
    monkeypatch.chdir(project / "cuda" / "square")
    path, created = hx.start("grayscale")
    assert created and path.resolve() == (project / "exercises" / "grayscale.py").resolve()
    assert not (project / "cuda" / "exercises").exists() and not (project / "cuda" / "square" / "exercises").exists()
    with pytest.raises(hx.ExerciseError) as e:  # the advice names no --dir for the default folder
        hx.read_learner(hx.folder(None), hx.exercise("square"), "python")
    assert "--dir" not in str(e.value)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert hx.start("grayscale")[0].resolve() == (outside / "exercises" / "grayscale.py").resolve()

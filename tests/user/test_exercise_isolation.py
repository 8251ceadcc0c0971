"""invoke exercise check: the learner's code runs only in a child process, and the checker decides.

Each learner file below is written to a temporary folder by its test: code that runs at load time
(a C constructor, a Python module's top level), prints a forged verdict, ends the process, crashes
it, hangs it, prints without end, or floods the source scan. None of it may pass, crash or hang the
checker, or leave a process behind; each gets one message that says what happened. The CUDA track's
cases here need nvcc but no GPU: a library's constructors run when it is loaded, GPU or not."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import pythonpath, sigint_as_from_a_terminal
from harness.user import exercises as hx
from harness.user.exercises import check as hcheck
from harness.user.exercises import child

ROOT = hx.ROOT
A_I = "        a[i] = "  # the store in square's Python kernel
FORGED = 'cudalab-exercise: {"results": [{"label": "n=1", "ok": true, "message": null, "ragged": false}]}'


def _write(d: Path, name: str, track: str, text: str) -> Path:
    path = hx.learner_path(d, hx.exercise(name), track)
    d.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _solution(name: str, track: str) -> str:
    return hx.solution_text(hx.exercise(name), track)


def _status(d: Path, name: str, track: str) -> dict:
    return json.loads((d / hx.PROGRESS).read_text())[name][track]


def _gone(pid: int, within: float = 20.0) -> bool:
    """The process is gone (or a zombie, dead but not yet reaped) within `within` seconds."""
    t0 = time.monotonic()
    stat = Path(f"/proc/{pid}/stat")
    while time.monotonic() - t0 < within:
        try:
            if stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


# --- the Python track ----------------------------------------------------------------------------

def test_a_forged_verdict_line_and_os_exit_at_import_fail_and_are_not_recorded_as_passed(tmp_path):
    """The file prints the line the old worker's parent trusted, then ends the process with status 0."""
    pidfile = tmp_path / "pid"
    _write(tmp_path, "square", "python", _solution("square", "python") + (
        f"\nimport os\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\nprint('passed')\n"
        f"print({FORGED!r}, flush=True)\nos._exit(0)\n"))
    v = hcheck.check("square", "python", tmp_path)
    assert not v.passed
    assert "exited with status 0 while your file was being imported" in v.first_fix
    assert "cudalab-exercise:" in v.first_fix  # its output is quoted, not believed
    assert _status(tmp_path, "square", "python")["status"] == "failed"
    assert int(pidfile.read_text()) != os.getpid()  # imported in a child, never here
    assert not any(m.startswith("cudalab_exercise_") for m in sys.modules)


def test_os_exit_inside_a_kernel_fails_and_names_the_case(tmp_path):
    sol = _solution("square", "python")
    old = "        a[i] = "
    assert sol.count(old) == 1
    _write(tmp_path, "square", "python", sol.replace(old, f"        print({FORGED!r}, flush=True); import os; "
                                                          f"os._exit(0)\n{old}"))
    v = hcheck.check("square", "python", tmp_path)
    assert not v.passed and "exited with status 0 during case n=1 threads=32" in v.first_fix
    assert "a kernel returns" in v.first_fix


def test_sys_exit_inside_a_kernel_is_named_with_the_learners_line(tmp_path):
    sol = _solution("square", "python")
    path = _write(tmp_path, "square", "python", sol.replace(A_I, "        sys.exit(0)\n" + A_I, 1)
                  .replace("import math", "import sys\nimport math", 1))
    v = hcheck.check("square", "python", tmp_path)
    line = path.read_text().splitlines().index("        sys.exit(0)") + 1
    assert not v.passed and f"{path}:{line}: `sys.exit(0)`: the kernel called sys.exit(0)" in v.first_fix
    assert "status 0:" not in v.first_fix


def test_a_learners_print_in_a_kernel_is_shown_bounded(tmp_path):
    """Each thread prints; the output, over a megabyte, comes back as its head and tail and the count
    of the bytes dropped, and a right kernel still passes."""
    sol = _solution("square", "python")
    _write(tmp_path, "square", "python", sol.replace(A_I, "        print('thread', i, 'x' * 40)\n" + A_I, 1))
    v = hcheck.check("square", "python", tmp_path)
    assert v.passed, v.report()
    shown = [t for ok, t in v.lines if ok is None and t.startswith("your code printed")]
    assert len(shown) == 1 and shown[0].splitlines()[1].startswith("thread 0 ")
    assert "bytes not shown" in shown[0] and len(shown[0].splitlines()) <= 22


def test_status_follows_the_last_check_and_remembers_a_pass(tmp_path):
    sol = _solution("square", "python")
    _write(tmp_path, "square", "python", sol)
    assert hcheck.check("square", "python", tmp_path).passed
    _write(tmp_path, "square", "python", sol.replace(A_I, A_I + "0 * ", 1))
    assert not hcheck.check("square", "python", tmp_path).passed
    st = _status(tmp_path, "square", "python")
    assert st["status"] == "failed" and st["passed_once"] is True
    row = next(r for r in hx.listing(tmp_path) if r["exercise"] == "square")
    assert row["python"] == "failed (passed before)"


def test_every_failure_is_printed_once(tmp_path):
    _write(tmp_path, "square", "python", hx.learner_text(hx.exercise("square"), "python"))
    v = hcheck.check("square", "python", tmp_path)
    assert not v.passed
    lines = v.report()
    assert lines[-1] == f"fix: {v.first_fix}"
    assert not any(ln[5:] == v.first_fix for ln in lines[:-1])


def test_exercise_list_fits_80_columns(tmp_path):
    import pandas as pd

    from harness.base import console

    hx.start("square", None, tmp_path)
    lines = console.table_lines(pd.DataFrame(hx.listing(tmp_path)), "exercises", 80)
    assert all(len(ln) <= 80 for ln in lines), "\n".join(lines)
    assert len(lines) <= len(hx.listing(tmp_path)) + 4  # one row per exercise, not a stacked form


def test_whatever_the_learners_code_writes_into_the_checks_pipe_is_never_a_pass(tmp_path):
    """The file writes a forged record, then garbage, into every descriptor it has, then ends."""
    record = json.dumps({"loaded": True, "arrays": []}).encode()
    _write(tmp_path, "square", "python", _solution("square", "python") + (
        "\nimport os, struct\n"
        f"rec = {record!r}\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.write(fd, struct.pack('>I', len(rec)) + rec + b'\\xff' * 100)\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"))
    v = hcheck.check("square", "python", tmp_path)
    assert not v.passed
    assert "cannot be read" in v.first_fix or "while your file was being imported" in v.first_fix


def test_records_are_data_only():
    with pytest.raises(child.ChannelError):
        child.parse_records(b"\x00\x00\x00\x05{}xyz")
    with pytest.raises(child.ChannelError):
        child.parse_records(b"\xff\xff\xff\xff")
    import io
    import struct

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)  # a pickle inside an .npy
    head = json.dumps({"case": 0, "arrays": ["out"]}).encode()
    blob = buf.getvalue()
    with pytest.raises(child.ChannelError, match="not a plain .npy"):
        child.parse_records(struct.pack(">I", len(head)) + head + struct.pack(">Q", len(blob)) + blob)


def test_the_output_is_the_labs_bounded_capture_keeping_head_and_tail_and_counting_the_rest():
    from harness.base.procs import BoundedOutput

    b = child.Output(20)
    assert isinstance(b, BoundedOutput)
    for _ in range(1000):
        b.feed(b"0123456789abcdef")
    assert b.total == 16000 and b.dropped == 15980 and len(b.head) == 10 and len(b.tail) == 10
    assert b.text().startswith("0123456789\n[... 15980 bytes") and b.text().endswith("...]\n6789abcdef")
    b = child.Output(2000)
    b.feed("".join(f"line {i}\n" for i in range(10_000)).encode())
    lines = b.excerpt(3).splitlines()
    assert lines[:3] == ["line 0", "line 1", "line 2"] and lines[-1] == "line 9999" and len(lines) == 7
    assert lines[3].startswith("[... ") and f"and {b.dropped} bytes not shown" in lines[3]


# --- the source scan -----------------------------------------------------------------------------

def test_a_file_over_the_size_limit_is_refused_in_one_line(tmp_path):
    path = _write(tmp_path, "square", "cuda", "// " + "__global__ __launch_bounds__(" * 340_000 + "\n")
    assert path.stat().st_size > 9_000_000
    t0 = time.perf_counter()
    with pytest.raises(hx.ExerciseError, match=r"over the check's limit of 1,048,576") as e:
        hcheck.check("square", "cuda", tmp_path)
    assert time.perf_counter() - t0 < 1.0 and "\n" not in str(e.value)


@pytest.mark.parametrize("where", ["code", "comment", "string"])
def test_the_source_scan_is_linear_on_a_pathological_file_within_the_limit(where):
    """Repeated `__global__ __launch_bounds__(` with no closing parenthesis: a backtracking pattern
    tries every start against the rest of the file (hours for a megabyte); the scan takes well under
    a second, and finds the kernel after it."""
    ex = hx.exercise("square")
    flood = "__global__ __launch_bounds__(" * 34_000
    text = {"code": flood, "comment": f"/* {flood} */", "string": f'const char *s = "{flood}";'}[where]
    text = text + "\n" + _solution("square", "cuda")
    assert len(text.encode()) < hx.MAX_SOURCE_BYTES
    t0 = time.perf_counter()
    prob = hcheck.static_problems(ex, text)
    assert time.perf_counter() - t0 < 1.0
    # The flood itself is not a kernel: in code it swallows what follows up to the first `)`, which the
    # scan reports as it would any garbled declaration; in a comment or a string it is nothing.
    assert prob is None or where == "code"


def test_the_kernel_scan_ignores_comments_and_reads_launch_bounds():
    code = hcheck._code_only('// __global__ void k(int x)\n/* __global__ void k(float y) */\n'
                             '__global__ __launch_bounds__(256, (2)) void k(int *a,\n  int n) {}\n')
    assert hcheck._params_of(code, "k") == "int *a, int n"


# --- the CUDA track: what runs at load time (nvcc, no GPU needed) ----------------------------------

def _cuda_file(tmp_path: Path, prelude: str) -> Path:
    return _write(tmp_path, "square", "cuda", prelude + "\n" + _solution("square", "cuda"))


@pytest.fixture
def no_device(monkeypatch):
    """No device visible to the check or its worker, whatever the machine has: the library is loaded
    (its constructors run) and nothing more."""
    from harness.calling import cudart

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(cudart, "gpu_available", lambda: (False, "no CUDA device"))


CONSTRUCTOR = "#include <cstdio>\n#include <cstdlib>\n#include <csignal>\n#include <unistd.h>\n" \
              "__attribute__((constructor)) static void learner_at_load() {{ {body} }}\n"


def test_a_constructor_that_prints_passed_and_exits_0_fails(tmp_path, no_device):
    _cuda_file(tmp_path, CONSTRUCTOR.format(body=f'puts("passed"); puts({json.dumps(FORGED)}); fflush(stdout); exit(0);'))
    v = hcheck.check("square", "cuda", tmp_path)
    assert not v.passed and not v.compiled_only
    assert "exited with status 0 while your library was being loaded" in v.first_fix
    assert "constructor" in v.first_fix and "passed" in v.first_fix  # what it printed, quoted
    assert _status(tmp_path, "square", "cuda")["status"] == "failed"


@pytest.mark.parametrize("body, says", [
    ("raise(SIGSEGV);", "was killed by SIGSEGV (a bad memory access) while your library was being loaded"),
    ('fprintf(stderr, "terminate called after throwing an instance of learner_error\\n"); abort();',
     "was killed by SIGABRT"),
], ids=["sigsegv", "abort"])
def test_a_constructor_that_crashes_is_one_message_naming_the_signal(tmp_path, no_device, body, says):
    _cuda_file(tmp_path, CONSTRUCTOR.format(body=body))
    v = hcheck.check("square", "cuda", tmp_path)
    assert not v.passed and says in v.first_fix
    if "abort" in body:
        assert "terminate called after throwing an instance of learner_error" in v.first_fix
    assert sum(1 for ok, _ in v.lines if ok is False) == 1


@pytest.mark.long
def test_a_global_thrust_device_vector_is_named_with_sigabrt_and_its_stderr(tmp_path, no_device):
    _cuda_file(tmp_path, "#include <thrust/device_vector.h>\nthrust::device_vector<int> learner_global(16);\n")
    v = hcheck.check("square", "cuda", tmp_path)
    assert not v.passed and "was killed by SIGABRT" in v.first_fix and "terminate" in v.first_fix


def test_a_constructor_that_never_ends_is_stopped_at_the_deadline_with_its_group(tmp_path, no_device):
    pidfile = tmp_path / "pid"
    _cuda_file(tmp_path, CONSTRUCTOR.format(
        body=f'FILE *f = fopen("{pidfile}", "w"); fprintf(f, "%d\\n", (int)getpid()); fclose(f); for (;;) {{}}'))
    t0 = time.monotonic()
    hcheck.compile_learner(hx.exercise("square"), tmp_path, hx.learner_path(tmp_path, hx.exercise("square"), "cuda"),
                           hx.learner_path(tmp_path, hx.exercise("square"), "cuda").read_text())
    t0 = time.monotonic()  # the compile, above, is not the check's deadline's business
    v = hcheck.check("square", "cuda", tmp_path, deadline=4)
    assert time.monotonic() - t0 < 30
    assert not v.passed and "stopped after 4 s while your library was being loaded" in v.first_fix
    assert _gone(int(pidfile.read_text()))


# --- Ctrl-C --------------------------------------------------------------------------------------

def test_ctrl_c_during_invoke_exercise_check_stops_the_worker_says_interrupted_and_exits_130(tmp_path):
    pidfile = tmp_path / "pid"
    sol = _solution("grid_stride", "python")
    old = "    stride = ctx.blockDim.x * ctx.gridDim.x\n"
    assert sol.count(old) == 1
    (tmp_path / "exercises").mkdir()
    _write(tmp_path / "exercises", "grid_stride", "python", sol.replace(old, "    stride = 0\n") + (
        f"\nimport os\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"))
    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "invoke", "-r", str(ROOT), "exercise", "check", "grid_stride"],
                         cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_as_from_a_terminal)
    t0 = time.monotonic()
    worker = None
    try:
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert p.poll() is None and time.monotonic() - t0 < 60, "the worker did not start"
            time.sleep(0.05)
        worker = int(pidfile.read_text())
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 130, (out, err)
        assert "interrupted" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert _gone(worker)
        progress = tmp_path / "exercises" / hx.PROGRESS
        assert not progress.exists() or "passed" not in progress.read_text()
    finally:
        if worker is not None:
            with contextlib.suppress(OSError):
                os.kill(worker, signal.SIGKILL)
        if p.poll() is None:
            p.kill()

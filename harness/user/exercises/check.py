"""`invoke exercise check`: run a learner's file through the checks and say what to fix.

The learner's code runs only in a child process (harness/user/exercises/worker.py, started through
child.py): its own process group, a deadline, a bounded capture of its output. This process never
imports the learner's Python file nor loads their compiled library: the CUDA track's file is compiled
here by the lab's inline compiler (harness/compile/jit.py: the Makefile's nvcc flags, errors as
file:line with the line quoted) into a cache folder of the exercises' own, and loaded by the worker
only. The worker sends raw outputs over a pipe of its own; judge() below computes each case's
reference and decides, so nothing the learner's code prints or does in its process can pass a case.
The cases are fresh each check (a seed the verdict prints; `--seed` replays them). The extra runs the
grader's evidence needs are the worker's too, asked for here and judged here: each case again with a
second poison (byte outputs, where every value is an answer), the Python track's failing barrier cases
again with the threads of each block mirrored (a second worker), and on the CUDA track the cases run
on a counting build of the learner's file (compiled here, loaded there) whose counters come back as
arrays.
On the CUDA track two more children run a small case under compute-sanitizer memcheck and racecheck
(harness/profiling/sanitize.py), and a wrong output is blamed on what a sanitizer found, with the
learner's line, before any guess from the values. A kernel that passes is timed against the lab's
solution and the program's ceiling by the timing engine (harness/measuring/timing.py, NVBench, in a
child of its own).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.base.errors import ToolMissing
from harness.base.paths import ROOT
from harness.base.procs import sigterm_as_interrupt
from harness.user.exercises import (
    ExerciseError,
    catalog,
    child,
    exercise,
    folder,
    read_learner,
    solution_text,
    track_of,
    update_progress,
    worker,
)
from harness.user.exercises.catalog import Exercise, new_seed, speed

PYTHON_DEADLINE_S = 30.0
CUDA_DEADLINE_S = 60.0
LOAD_DEADLINE_S = 30.0  # without a GPU, for loading the library alone
SANITIZER_DEADLINE_S = 120.0
SANITIZER_OUTPUT_BYTES = 64 << 10  # head and tail each: the first error's location, and the summary


@dataclass
class Verdict:
    """What check found: a line per check, then `passed` or the first thing to fix."""
    name: str
    track: str
    path: Path
    lines: list = field(default_factory=list)  # (ok: bool | None, text); None is information
    first_fix: str | None = None
    ratio: float | None = None
    compiled_only: bool = False
    seconds: float = 0.0
    seed: int | None = None  # the cases' seed: `--seed` replays them
    cases_ran: bool = False

    @property
    def passed(self) -> bool:
        return self.first_fix is None and not self.compiled_only

    def say(self, ok, text: str) -> None:
        self.lines.append((ok, text))
        if ok is False and self.first_fix is None:
            self.first_fix = text

    def final_line(self) -> str:
        if self.passed:
            extra = f"; speed {self.ratio:.2f}x the lab's solution" if self.ratio is not None else ""
            return f"passed: {self.name} ({self.track} track){extra}"
        if self.compiled_only:
            return (f"compiled; running it needs a GPU, and none is here: try the Python track "
                    f"(invoke exercise start {self.name}), or check this file on a machine with a GPU")
        return f"fix: {self.first_fix}"

    def report(self) -> list[str]:
        """The lines to print: a mark and the text of each line, then the final line. The thing to fix
        is said once, at the end: its own line above is left out."""
        out, skipped = [], False
        for ok, text in self.lines:
            if ok is False and not skipped and text == self.first_fix:
                skipped = True
                continue
            mark = "ok  " if ok else ("FAIL" if ok is False else "    ")
            first, *rest = str(text).splitlines() or [""]
            out.append(f"{mark} {first}")
            out.extend(f"     {line}" for line in rest)
        first, *rest = self.final_line().splitlines()
        return out + [first] + [f"     {line}" for line in rest]


@contextlib.contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _start_worker(job: dict, prefix: list[str] | None = None, channel: bool = True,
                  limit: int = child.OUTPUT_BYTES) -> child.Child:
    """The worker on `job`, in a process group of its own; `channel`: with the pipe its results come
    back on (a run under compute-sanitizer has none: its verdict is the sanitizer's report)."""
    cmd = (prefix or []) + [sys.executable, "-m", "harness.user.exercises.worker", json.dumps(job)]
    return child.Child(cmd, env=_child_env(), cwd=str(ROOT), channel=channel, limit=limit)


def _run_worker(job: dict, deadline: float, prefix: list[str] | None = None) -> child.Outcome:
    """Start the worker and collect what it leaves; its group is stopped at the deadline, on an
    interrupt, and once it ends."""
    p = _start_worker(job, prefix)
    try:
        return p.finish(p.t0 + deadline)
    except BaseException:  # an interrupt: the worker goes too
        p.stop()
        raise


def _cases_job(cases: list) -> list[dict]:
    return [dataclasses.asdict(c) for c in cases]


# --- the verdict: the checker's side decides, from the child's raw results -------------------------

def _ended(ex: Exercise, track: str, oc: child.Outcome, during: str | None) -> str:
    """Why a child left no result (it ended early or crashed), with its output's last lines."""
    how = child.how_it_ended(oc.status)
    if during is None:
        if track == "python":
            when, why = ("while your file was being imported", "code at the top level of the file ended the "
                         "process (sys.exit, os._exit) or crashed it: the check imports the file, then calls "
                         f"{ex.py_entry}; keep the work inside it")
        else:
            when, why = ("while your library was being loaded, before any case ran", "code that runs at load time "
                         "(an __attribute__((constructor)) function, or a global object's constructor such as a "
                         "global thrust::device_vector) ended or crashed the process: the check loads the library, "
                         "then calls exercise_run; keep the work inside the functions it calls")
    elif oc.status == 0:
        when, why = (f"during case {during}", "the kernel (or the code around it) ended the process: exit(), "
                     "sys.exit() or os._exit() there stops the check; a kernel returns")
    else:
        when, why = f"during case {during}", "the kernel or the code that calls it crashed the process"
    msg = f"the check's process {how} {when}: {why}"
    tail = oc.output.last_lines()
    return msg + (f"\nits output ended with:\n{tail}" if tail else "\n(it printed nothing)")


def _facts(ex: Exercise, case: catalog.Case) -> dict:
    return {"label": case.label, "ragged": case.ragged, "exact_multi": case.exact_multi, **ex.problem.facts(case)}


def _numbers(a) -> bool:
    return a is not None and a.dtype.kind in "biuf"


def _compare_case(name: str, case: catalog.Case, arrays: dict, r: dict) -> str | None:
    """The case's reference, computed here, against the outputs that came back: the first run's, the
    second poison's run (a problem's two_poisons) and the counting build's counters (CUDA track)."""
    out = arrays.get("out")
    if not _numbers(out):
        return "no output came back for this case (the results the check's process sent were not numbers)"
    if catalog.two_poisons(name):
        for second, first in (("out_alt", "out"), ("guard_alt", "guard")):
            a, b = arrays.get(second), arrays.get(first)
            if (a is None) != (b is None) or (a is not None and (a.shape != b.shape or a.dtype != b.dtype)):
                return "the second run's output did not come back whole (the results the check's process sent)"
    for key in ("others", "leaked", "managed", "guard"):
        if key in arrays and not _numbers(arrays[key]):
            return f"the results the check's process sent hold no numbers for {key!r}"
    problem = catalog.counted_problem(name, arrays)
    if problem:
        return problem
    inp = catalog.inputs(name, case)
    ref = catalog.reference(name, case, inp)
    got = worker.outputs(name, lambda alt: ((arrays["out_alt"], arrays.get("guard_alt")) if alt else
                                            (out, arrays.get("guard"))))
    msg = worker.compare(name, out, ref, got["guard"], before=inp.get(catalog.problem(name).in_place), facts=r,
                         unwritten=got.get("unwritten"), guard_written=got.get("guard_written"),
                         tail=catalog.tail(name, case))
    r["zeros"] = bool(out.size and np.all(out == 0) and np.any(np.asarray(ref) != 0))
    if msg is not None:
        r.update(catalog.out_facts(name, case, out, ref))
    return msg


def _by_case(oc: child.Outcome) -> dict:
    """{case number: (its record, its arrays)}, the first record of each case."""
    by_case: dict = {}
    for r, arrays in oc.records:
        if isinstance(r.get("case"), int):
            by_case.setdefault(r["case"], (r, arrays))
    return by_case


def judge(ex: Exercise, track: str, cases: list, oc: child.Outcome) -> dict:
    """{"fatal": message}, or {"results": a dict per case, "pattern": summarize()'s}: from the raw
    results the worker sent, compared here with the references computed here. A case passes only
    when its output came back and matches; a worker that ends early leaves failures, never a pass."""
    if oc.channel_error:
        return {"fatal": f"the check's process sent results that cannot be read ({oc.channel_error}): something in "
                         f"your code wrote into the check's pipe, or the process was stopped while writing",
                "shown": True}
    records = [r for r, _ in oc.records]
    fatal = next((r["fatal"] for r in records if "fatal" in r and "case" not in r), None)
    if fatal is not None:
        return {"fatal": str(fatal)}
    if not any(r.get("loaded") for r in records):
        return {"fatal": _ended(ex, track, oc, None), "shown": True}
    by_case = _by_case(oc)
    if ex.judges_value:
        if 0 not in by_case:
            return {"fatal": _ended(ex, track, oc, f"reading {ex.py_entry}"), "shown": True}
        region = by_case[0][0].get("value")
        try:
            ok, msg, _ = catalog.verdict(ex.name, region)
        except (ValueError, TypeError) as e:
            return {"fatal": f"{ex.py_entry}: {e}"}
        return {"results": [{"label": f"region {region}", "ok": ok, "message": None if ok else msg, "ragged": False,
                             "detail": msg}]}
    results: list = []
    notes = [f"the check's counting build did not load ({str(r['counting_failed'])[:300]}); the cases ran on your "
             f"file as it is" for r in records if "counting_failed" in r][:1]
    shown = False
    for k, case in enumerate(cases):
        r = _facts(ex, case)
        got = by_case.get(k)
        if got is None:
            r.update(ok=False, message=_ended(ex, track, oc, case.label))
            results.append(r)
            shown = True
            break
        rec, arrays = got
        if "error" in rec:
            msg = str(rec["error"])
            if rec.get("fatal"):
                r["fatal"] = True
        else:
            msg = _compare_case(ex.name, case, arrays, r)
            r["compared"] = True
        r.update(ok=msg is None, message=msg)
        results.append(r)
        if r.get("fatal"):
            break  # a CUDA error: the worker ran no more cases
    done = any(r.get("done") for r in records)
    if not shown and not any(r.get("fatal") for r in results) and (not done or oc.status != 0):
        results.append({"label": "after the last case", "ragged": False, "ok": False, "shown": True,
                        "message": f"the check's process {child.how_it_ended(oc.status)} after the cases: the code "
                                   f"that runs at exit (a global object's destructor, an atexit handler) failed\n"
                                   + oc.output.last_lines()})
        shown = True
    return {"results": results, "pattern": worker.summarize(ex.name, results, track), "shown": shown,
            "notes": notes, "track": track}


ORDER_RUNS = 2  # failing cases run again with the threads mirrored: enough to see a race, cheap on the simulator


def _order_runs(ex: Exercise, job: dict, cases: list, oc: child.Outcome, data: dict, deadline: float) -> None:
    """Python track: the first failing cases (wrong values, not an exception) run again in a second
    worker with the threads of each block in the opposite order (catalog.reversed_threads); a case whose
    output changes, or that fails or never finishes only in that order, depends on the order the
    threads run in: a missing barrier. The pattern over the cases is then made again."""
    results = data["results"]
    picked = [k for k, r in enumerate(results[:len(cases)]) if r.get("compared") and not r["ok"]][:ORDER_RUNS]
    if not picked:
        return
    first = _by_case(oc)
    again = _run_worker(dict(job, cases=[job["cases"][k] for k in picked], alt=False, reverse=True), deadline)
    second = {} if again.channel_error else _by_case(again)
    for i, k in enumerate(picked):
        a = first[k][1].get("out")
        rec, arrays = second.get(i, ({}, {}))
        b = arrays.get("out")
        if "error" in rec or not _numbers(b) or a.shape != b.shape or a.dtype != b.dtype:
            results[k]["order_dependent"] = True  # it fails, ends or hangs only in the other order
        else:
            results[k]["order_dependent"] = not np.array_equal(a.ravel().view(np.uint8), b.ravel().view(np.uint8))
    data["pattern"] = worker.summarize(ex.name, results, data.get("track", "python"))


def _show_output(v: Verdict, oc: child.Outcome, data: dict) -> None:
    """What the learner's code printed (bounded), unless a message above already quotes it."""
    if oc.output.total and not data.get("shown"):
        v.lines.append((None, f"your code printed ({oc.output.total} bytes):\n{oc.output.excerpt()}"))


def _case_lines(v: Verdict, data: dict) -> tuple[str | None, str | None]:
    """A line per case; (the first failure's value-based cause, the pattern over the cases), None when
    every case is right. The caller decides whether they become the thing to fix."""
    if data.get("fatal"):
        v.lines.append((False, data["fatal"]))
        return data["fatal"], None
    res = data["results"]
    bad = [r for r in res if not r["ok"]]
    v.lines.extend((None, note) for note in data.get("notes", ()))
    for r in res:
        v.lines.append((r["ok"], f"{r['label']}: " + ("right" if r["ok"] else r["message"])
                        if r.get("detail") is None else f"{r['label']}: {r['detail']}"))
    if not bad:
        return None, None
    return f"{bad[0]['label']}: {bad[0]['message']}", data.get("pattern")


def _report_cases(v: Verdict, data: dict) -> None:
    cause, pattern = _case_lines(v, data)
    if pattern:
        cause = f"{pattern} (first: {cause})"
    if cause and v.first_fix is None:
        v.first_fix = cause


def check(name: str, track: str | None = None, dir_=None, *, deadline: float | None = None, sanitize: bool = True,
          timing: bool = True, seed: int | None = None) -> Verdict:
    """`seed`: the cases' seed (fresh when None, so that no hard-coded output passes twice); the verdict
    says it, so a failure can be replayed."""
    t0 = time.perf_counter()
    ex = exercise(name)
    d = folder(dir_)
    track = track_of(ex, track, d)
    path, text = read_learner(d, ex, track)
    v = Verdict(ex.name, track, path, seed=new_seed() if seed is None else _seed(seed))
    if track == "python":
        _check_python(ex, path, v, deadline or PYTHON_DEADLINE_S)
    else:
        _check_cuda(ex, d, path, text, v, deadline or CUDA_DEADLINE_S, sanitize, timing)
    if not v.passed and v.cases_ran and not ex.judges_value:
        v.lines.append((None, f"the cases came from seed {v.seed}: `invoke exercise check {ex.name}"
                              f"{' --track cuda' if track == 'cuda' else ''} --seed {v.seed}` runs the same ones"))
    v.seconds = time.perf_counter() - t0
    status = "passed" if v.passed else "compiled" if v.compiled_only else "failed"
    with contextlib.suppress(OSError):
        update_progress(d, ex.name, track_status=(track, status, v.ratio if v.passed else None))
    return v


def _seed(seed) -> int:
    try:
        value = int(seed)
    except (TypeError, ValueError):
        raise ExerciseError(f"--seed must be a whole number (the one a check printed), got {seed!r}") from None
    if value < 0:
        raise ExerciseError(f"--seed must be a whole number >= 0 (the one a check printed), got {seed}")
    return value


def _check_python(ex: Exercise, path: Path, v: Verdict, deadline: float) -> None:
    cases = [] if ex.judges_value else catalog.cases(ex.name, "python", v.seed)
    job = {"track": "python", "name": ex.name, "file": str(path.resolve()), "solution": solution_text(ex, "python"),
           "cases": _cases_job(cases), "alt": catalog.two_poisons(ex.name)}
    oc = _run_worker(job, deadline)
    if oc.timed_out:
        loaded = any(r.get("loaded") for r, _ in oc.records)
        v.say(False, f"stopped after {deadline:.0f} s: "
                     + ("the kernel never finished (a loop that never ends: a stride of 0, or a loop condition that "
                        "stays true)" if loaded else
                        f"importing {path.name} never finished: code at the top level of the file never ends"))
        _show_output(v, oc, {})
        return
    data = judge(ex, "python", cases, oc)
    v.cases_ran = True
    # Shared memory and barriers: a race shows as order dependence.
    if ex.problem.order_checked and data.get("results"):
        _order_runs(ex, job, cases, oc, data, deadline)
    _show_output(v, oc, data)
    _report_cases(v, data)


# --- the CUDA track ------------------------------------------------------------------------------

def _code_only(text: str) -> str:
    """`text` with its comments blanked (string and character literals kept whole, so that a `//`
    inside one is not a comment). One pass of one regular expression, each alternative written so that
    it never backtracks (`[^*]*` runs, then a star that does not close): an unclosed comment or string
    simply runs to the end."""
    def blank(m: re.Match) -> str:
        return m.group() if m.group()[0] in "\"'" else " "

    return _COMMENT_OR_LITERAL.sub(blank, text)


_COMMENT_OR_LITERAL = re.compile(r"//[^\n]*"
                                 r"|/\*[^*]*(?:\*+[^*/][^*]*)*(?:\*+/)?"
                                 r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"?'
                                 r"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'?")
# After `__global__`, anchored there: the return type and __launch_bounds__(...) (one level of nested
# parentheses inside) in either order, then the kernel's name and its opening parenthesis. Each part
# stops at the first character that cannot continue it, so a `__global__` costs no more than the
# stretch up to the next parenthesis, whatever follows.
_KERNEL_HEAD = re.compile(r"\s*(?:void\s+)?(?:__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)?\)\s*)?"
                          r"(?:void\s+)?(\w+)\s*\(")
_HEAD_MAX = 400  # from `__global__` to the kernel's name: the return type and launch bounds
_PARAMS_MAX = 4000  # characters of a parameter list: far more than any kernel of the exercises has


def _params_of(code: str, kernel: str) -> str | None:
    """The parameter list of `__global__ ... kernel(...)` in `code` (comments blanked), whitespace
    folded; None when there is none. Linear in the text: each `__global__` is looked at once, over the
    stretch after it up to a parenthesis."""
    for m in re.finditer("__global__", code):  # a plain literal: searched at C speed
        if code.find(kernel, m.end(), m.end() + _HEAD_MAX) < 0 or (m.start() and (code[m.start() - 1].isalnum()
                                                                                  or code[m.start() - 1] == "_")):
            continue  # not this kernel's declaration (the name is not near), or part of a longer word
        h = _KERNEL_HEAD.match(code, m.end())
        if h is None or h.group(1) != kernel:
            continue
        end = code.find(")", h.end(), h.end() + _PARAMS_MAX)
        if end < 0:
            return None
        return re.sub(r"\s+", " ", code[h.end():end]).strip()
    return None


def static_problems(ex: Exercise, text: str) -> str | None:
    """A renamed kernel, changed parameters or a removed entry point: one line, before compiling.
    (read_learner has bounded the text's size; every scan here is linear in it.)"""
    sol, code = _code_only(solution_text(ex, "cuda")), _code_only(text)
    for k in ex.cu_kernels:
        want, got = _params_of(sol, k), _params_of(code, k)
        if got is None:
            return (f"no kernel {k} in the file: the entry point launches it by that name (renamed?); keep the name "
                    f"the exercise gave it")
        if got != want:
            return f"{k}'s parameters changed: ({got}); the entry point passes ({want}): put them back"
    if not re.search(r'\bextern\s+"C"\s+int\s+exercise_run\s*\(', code):
        return ("the entry point exercise_run at the end of the file is gone or changed: copy it back from "
                f"`invoke exercise solution {ex.name} --track cuda`")
    return None


def cache_folder(d: Path) -> Path:
    """The exercises' own compile cache (never under build/, which `invoke clean` empties)."""
    return d / ".build"


def _compile_text(text: str, name: str, display: str | None = None):
    """Compile a CUDA file into the inline compiler's cache and load nothing: only the worker loads
    a learner's library (code that runs at load time then runs there), and the worker's own
    inline.load of the same text and name is a cache hit."""
    from harness.compile import jit

    return jit._compile(text, kind="lib", name=name, arch=None, flags=(), verbose=False,
                        display=display or "<inline>")


def compile_learner(ex: Exercise, d: Path, path: Path, text: str):
    with _env(CUDALAB_CACHE=cache_folder(d).resolve()):
        return _compile_text(text, module_name(ex.name, "learner"), str(path))


def _check_cuda(ex: Exercise, d: Path, path: Path, text: str, v: Verdict, deadline: float, sanitize: bool,
                timing: bool) -> None:
    from harness.base.errors import BuildError
    from harness.calling import cudart

    prob = static_problems(ex, text)
    if prob:
        v.say(False, prob)
        return
    try:
        t = time.perf_counter()
        compiled = compile_learner(ex, d, path, text)
        v.say(True, f"compiles ({'from the cache' if compiled.cache_hit else f'{time.perf_counter() - t:.1f} s'})")
    except BuildError as e:
        v.say(False, str(e.args[0]) if e.args else str(e))
        return
    ok, why = cudart.gpu_available()
    cases = catalog.cases(ex.name, "cuda", v.seed)
    job = {"track": "cuda", "name": ex.name, "file": str(path.resolve()), "display": str(path),
           "cases": _cases_job(cases), "alt": catalog.two_poisons(ex.name)}
    # One cache for everything below: the child processes, and the solution's compile in a thread (which
    # reads the variable when it starts, so it is set for the whole of this block, never changed in it).
    with _env(CUDALAB_CACHE=cache_folder(d).resolve()):
        if not ok:
            v.lines.append((None, f"no GPU here ({why})"))
            _load_only(ex, job, v, min(deadline, LOAD_DEADLINE_S))
            return
        solution = None
        if timing and speed(ex.name) is not None:
            # The lab's solution, compiled for the timing while the learner's kernel runs (a cache hit
            # after the first check in this folder).
            pool = ThreadPoolExecutor(1)
            solution = pool.submit(_load_solution, ex)
            pool.shutdown(wait=False)
        try:
            _counting_build(ex, path, text, job, v)
            oc, sanitized = _run_cuda(ex, job, deadline, sanitize)
            if oc.timed_out:
                loaded = any(r.get("loaded") for r, _ in oc.records)
                v.say(False, f"stopped after {deadline:.0f} s: " + (
                    "the kernel never finished (a loop that never ends: a stride of 0, a loop condition that stays "
                    "true, or a barrier some threads never reach)" if loaded else
                    "loading your library never finished: code that runs at load time (a constructor) never ends"))
                _show_output(v, oc, {})
                return
            data = judge(ex, "cuda", cases, oc)
            v.cases_ran = True
            _show_output(v, oc, data)
            _cuda_verdict(ex, path, v, data, sanitized)
            if timing and v.first_fix is None:
                _speed(ex, d, text, v, solution)
        finally:
            if solution is not None:
                with contextlib.suppress(Exception):
                    solution.result()


def _counting_build(ex: Exercise, path: Path, text: str, job: dict, v: Verdict) -> None:
    """Compile the counting build of the learner's file (catalog.check_source: what the values cannot
    show, counted) here, loading nothing; the worker then loads it from the cache and runs the cases on
    it. A file the rewrite does not fit is run as it is, and that is said."""
    from harness.base.errors import BuildError

    counted = catalog.check_source(ex.name, text)
    if counted is None:
        return
    try:
        _compile_text(counted, module_name(ex.name, "check"), str(path))
    except BuildError as e:
        first = (str(e.args[0]) if e.args else str(e)).splitlines()
        v.lines.append((None, f"the check's counting build: not built ({first[0] if first else 'no message'}); the "
                              f"cases run on your file as it is"))
        return
    job["counting"] = True


def _load_only(ex: Exercise, job: dict, v: Verdict, deadline: float) -> None:
    """Without a GPU: load the library in the worker all the same, so that what it runs at load time
    (and a symbol nothing defines) shows here rather than on the first machine with a GPU."""
    oc = _run_worker(dict(job, load_only=True, cases=[]), deadline)
    if oc.timed_out:
        v.say(False, f"stopped after {deadline:.0f} s while your library was being loaded: code that runs at load time "
                     f"(an __attribute__((constructor)) function, a global object's constructor) never ends")
        return
    data = judge(ex, "cuda", [], oc)
    if data.get("fatal"):
        v.say(False, data["fatal"])
        return
    if not data["results"]:
        v.say(True, "loads (in a child process)")
    else:
        _report_cases(v, data)
    _show_output(v, oc, data)
    v.compiled_only = v.first_fix is None


def _load_solution(ex: Exercise):
    return _compile_text(solution_text(ex, "cuda"), module_name(ex.name, "solution"))


def _run_cuda(ex: Exercise, job: dict, deadline: float, sanitize: bool):
    """The cases, and at the same time compute-sanitizer memcheck and racecheck on the small case:
    each its own process on the one GPU, so the check takes the longest of them, not their sum.
    (the cases' child.Outcome, {tool: its child.Outcome, or "skipped": why}); a cases' Outcome that
    timed out: the cases ran past `deadline` (the sanitizer runs, which would hang the same way, are
    stopped)."""
    from harness.profiling import sanitize as hs

    sanitized: dict = {}
    procs: dict = {}
    try:
        with sigterm_as_interrupt():  # a SIGTERM unwinds like Ctrl-C, through the except below
            procs["cases"] = _start_worker(job)
            if sanitize:
                try:
                    tool_path = hs.find_sanitizer()
                except ToolMissing as e:
                    sanitized["skipped"] = f"sanitizer skipped: {e}"
                else:
                    small = dict(job, cases=[c for c in job["cases"] if c.get("small")], counting=False)
                    for tool in ("memcheck", "racecheck"):
                        procs[tool] = _start_worker(small, prefix=hs.command(tool, Path(sys.executable), [], tool_path)[:-1],
                                                    channel=False, limit=2 * SANITIZER_OUTPUT_BYTES)
            t0 = procs["cases"].t0
            oc = procs["cases"].finish(t0 + deadline)
            if oc.timed_out:
                for p in procs.values():
                    p.stop()
                return oc, {}
            for tool in ("memcheck", "racecheck"):
                if tool in procs:
                    sanitized[tool] = procs[tool].finish(t0 + SANITIZER_DEADLINE_S)
            return oc, sanitized
    except BaseException:  # an interrupt: nothing of ours keeps running
        for p in procs.values():
            p.stop()
        raise


def _cuda_verdict(ex: Exercise, path: Path, v: Verdict, data: dict, sanitized: dict) -> None:
    """The cases' lines, then the sanitizers': when the output is wrong and a sanitizer saw a race or
    an access outside an allocation, that (with the learner's line) is the thing to fix, not a guess
    from the values (a race that shows only on the large case looks like a ragged-edge bug there)."""
    cause, pattern = _case_lines(v, data)
    found, failed = _sanitizer_lines(ex, path, v, sanitized)
    if found:
        return  # v.say made the first sanitizer error the thing to fix
    if pattern:
        cause = f"{pattern} (first: {cause})"
    cause = cause or (failed[0] if failed else None)
    if cause and v.first_fix is None:
        v.first_fix = cause


_LOCATION = re.compile(r"in (\S+?):(\d+)")


def _sanitizer_lines(ex: Exercise, path: Path, v: Verdict, sanitized: dict) -> tuple[bool, list[str]]:
    """A line per sanitizer run. (whether one reported errors: v.say makes the first the thing to fix;
    the runs that gave no verdict, which fail the check only when nothing else does)."""
    from harness.profiling import sanitize as hs

    if "skipped" in sanitized:
        v.lines.append((None, sanitized["skipped"]))
    lines = path.read_text(errors="replace").splitlines()
    found, failed = False, []
    for tool in ("memcheck", "racecheck"):
        if tool not in sanitized:
            continue
        oc = sanitized[tool]
        out, rc = oc.output.text(), oc.status
        if rc is None:
            failed.append(f"compute-sanitizer {tool}: no result within {SANITIZER_DEADLINE_S:.0f} s")
            v.lines.append((False, failed[-1]))
            continue
        status, n, detail = hs.classify(out, rc)
        if status == "clean":
            v.say(True, f"compute-sanitizer {tool}: clean")
            continue
        if status == "unsupported":
            v.lines.append((None, f"compute-sanitizer {tool}: {detail}"))
            continue
        if status != "errors":
            tail = "\n".join(out.strip().splitlines()[-6:])
            failed.append(f"compute-sanitizer {tool}: the small case under it failed: {detail}:\n{tail}")
            v.lines.append((False, failed[-1]))
            continue
        where = ""
        stem = f"exercise_{ex.name}-"
        for m in _LOCATION.finditer(out):
            if Path(m.group(1)).name.startswith(stem):
                k = int(m.group(2))
                quote = lines[k - 1].strip() if 1 <= k <= len(lines) else ""
                where = f" at {path}:{k}: `{quote}`"
                break
        cause = {"memcheck": "an access outside an allocation: a missing or wrong bounds check",
                 "racecheck": "threads of a block read and write the same shared memory without a __syncthreads() "
                              "between"}[tool]
        v.say(False, f"compute-sanitizer {tool}: {n} error(s){where}: {detail}: {cause}")
        found = True
    return found, failed


def module_name(name: str, which: str) -> str:
    """The inline module's name, part of its cache file's name: the learner's is the one the compile
    step built (so the timing session's load is a cache hit, not a second compile of the same text)."""
    return f"exercise_{name}" if which == "learner" else f"exercise_{name}_{which}"


def timing_setup(name: str, which: str, source: str, cache: str):
    """harness.measuring.timing's target: the learner's (or the lab's) kernel on the exercise's timed case."""
    from harness.calling import inline
    from harness.user.exercises import catalog

    os.environ["CUDALAB_CACHE"] = cache
    mod = inline.load(source, name=module_name(name, which))
    return catalog.timing_launch(name, mod, speed(name).params)


def _speed(ex: Exercise, d: Path, text: str, v: Verdict, solution=None) -> None:
    """`solution`: the Future of the lab's solution's compile (_load_solution), started earlier."""
    from harness import programs
    from harness.measuring import bench
    from harness.measuring import timing as ht

    sp = speed(ex.name)
    if sp is None:
        return
    cache = str(cache_folder(d).resolve())
    items = [ht.Item("learner", "harness.user.exercises.check:timing_setup",
                     {"name": ex.name, "which": "learner", "source": text, "cache": cache}),
             ht.Item("solution", "harness.user.exercises.check:timing_setup",
                     {"name": ex.name, "which": "solution", "source": solution_text(ex, "cuda"), "cache": cache})]
    try:
        # Inside the try: the peak ceilings read the device from build/lib/libdevice_info.so, and a tree
        # not built yet still gets its correctness verdict, with the line that says what to build.
        ceiling = (programs.ceilings().get(sp.ceiling) or bench.built_in(sp.ceiling))(True)
        if isinstance(ceiling, bench.TimedCeiling):
            items.append(ht.Item("ceiling", ceiling.target, ceiling.kwargs))
        with _env(CUDALAB_CACHE=cache):
            # Both compiled before the session starts, so that its loads are cache hits: the learner's
            # file by the compile step, the solution in the background since then.
            if solution is not None:
                solution.result()
            else:
                _load_solution(ex)
        t = ht.run_plan(items, ht.QUICK)
    except Exception as e:  # timing is a report, not a check: say why it is missing
        v.lines.append((None, f"speed not measured: {e}"))
        return
    mine, lab = t["learner"].median_ms, t["solution"].median_ms
    v.ratio = lab / mine
    scale = {"GB/s": 1e9, "TFLOP/s": 1e12, "Ginst/s": 1e9}
    if isinstance(ceiling, bench.TimedCeiling):
        ceil_rate = ceiling.amount / (t["ceiling"].median_ms * 1e-3) / scale[ceiling.unit]
    else:
        ceil_rate = ceiling.value
    mine_rate = sp.amount / (mine * 1e-3) / scale[ceiling.unit]
    v.lines.append((None, f"speed: {mine:.3f} ms, {v.ratio:.2f}x the lab's solution ({lab:.3f} ms); "
                          f"{mine_rate / ceil_rate:.2f} of the {ceiling.name} ceiling ({mine_rate:.4g} of "
                          f"{ceil_rate:.4g} {ceiling.unit})"))


__all__ = ["check", "Verdict", "static_problems", "compile_learner", "ExerciseError"]

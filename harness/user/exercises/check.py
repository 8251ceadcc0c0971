"""`invoke exercise check`: run a learner's file through the checks and say what to fix.

Python track: the learner's module is imported and its kernel run on harness.base.sim in a child process
(harness/user/exercises/worker.py) with a deadline. CUDA track: the file alone is compiled by the lab's
inline compiler (harness/compile/jit.py: the Makefile's nvcc flags, errors as file:line with the line quoted)
into a cache folder of the exercises' own, then run in a child with a deadline while two more children
run a small case under compute-sanitizer memcheck and racecheck (harness/profiling/sanitize.py). A wrong
output is blamed on what a sanitizer found, with the learner's line, before any guess from the values. A
kernel that passes is timed against the lab's solution and the program's ceiling by the timing engine
(harness/measuring/timing.py, NVBench).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness.base.errors import ToolMissing
from harness.base.procs import sigterm_as_interrupt, stop_group
from harness.compile.build import ROOT
from harness.user.exercises import (
    ExerciseError,
    exercise,
    folder,
    read_learner,
    solution_text,
    track_of,
    update_progress,
)
from harness.user.exercises.catalog import Exercise, new_seed, speed
from harness.user.exercises.worker import TAG

PYTHON_DEADLINE_S = 30.0
CUDA_DEADLINE_S = 60.0
SANITIZER_DEADLINE_S = 120.0


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
        return f"fix: {self.first_fix.splitlines()[0]}"


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


def _start_worker(job: dict, prefix: list[str] | None = None) -> subprocess.Popen:
    cmd = (prefix or []) + [sys.executable, "-m", "harness.user.exercises.worker", json.dumps(job)]
    # Its own process group: a run stopped at its deadline takes along what it started (under
    # compute-sanitizer, the worker is the sanitizer's child).
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            env=_child_env(), cwd=str(ROOT), start_new_session=True)


def _finish_worker(p: subprocess.Popen, until: float) -> tuple[dict | None, str, int | None]:
    """(the worker's JSON or None, its output, its status; None when it ran past `until`, a
    time.monotonic() instant, and was stopped)."""

    try:
        out, err = p.communicate(timeout=max(0.0, until - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop_group(p)
        return None, "", None
    for line in reversed(out.splitlines()):
        if line.startswith(TAG):
            return json.loads(line[len(TAG):]), out + err, p.returncode
    return None, out + err, p.returncode


def _run_worker(job: dict, deadline: float, prefix: list[str] | None = None) -> tuple[dict | None, str, int | None]:
    """(the worker's JSON or None, its output, its status; None when it ran past the deadline)."""

    p = _start_worker(job, prefix)
    try:
        with sigterm_as_interrupt():  # a SIGTERM (a timeout around the check) unwinds like Ctrl-C
            return _finish_worker(p, time.monotonic() + deadline)
    except BaseException:  # an interrupt: the worker goes too
        stop_group(p)
        raise


def _case_lines(v: Verdict, data: dict) -> tuple[str | None, str | None]:
    """A line per case; (the first failure's value-based cause, the pattern over the cases), None when
    every case is right. The caller decides whether they become the thing to fix."""
    v.cases_ran = True
    if data.get("fatal"):
        v.lines.append((False, data["fatal"]))
        return data["fatal"], None
    res = data["results"]
    bad = [r for r in res if not r["ok"]]
    for r in res:
        v.lines.append((r["ok"], f"{r['label']}: " + ("right" if r["ok"] else r["message"])
                        if r.get("detail") is None else f"{r['label']}: {r['detail']}"))
    if not bad:
        return None, None
    return f"{bad[0]['label']}: {bad[0]['message']}", data.get("pattern")


def _report_cases(v: Verdict, data: dict) -> None:
    cause, pattern = _case_lines(v, data)
    if pattern:
        v.lines.append((False, pattern))
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
    if not v.passed and v.cases_ran and ex.name != "mandelbrot_zoom":
        v.lines.append((None, f"the cases came from seed {v.seed}: `invoke exercise check {ex.name}"
                              f"{' --track cuda' if track == 'cuda' else ''} --seed {v.seed}` runs the same ones"))
    v.seconds = time.perf_counter() - t0
    status = "passed" if v.passed else "started"
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
    job = {"track": "python", "name": ex.name, "file": str(path.resolve()), "solution": solution_text(ex, "python"),
           "seed": v.seed}
    data, out, rc = _run_worker(job, deadline)
    if rc is None:
        v.say(False, f"stopped after {deadline:.0f} s: the kernel never finished (a loop that never ends: a stride of 0, "
                     f"or a loop condition that stays true)")
        return
    if data is None:
        tail = "\n".join(out.strip().splitlines()[-6:])
        v.say(False, f"the check's process failed (status {rc}):\n{tail}")
        return
    _report_cases(v, data)


# --- the CUDA track ------------------------------------------------------------------------------

_KERNEL = r"__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:void\s+)?{name}\s*\(([^)]*)\)"


def _params_of(text: str, kernel: str) -> str | None:
    m = re.search(_KERNEL.format(name=re.escape(kernel)), text)
    return None if m is None else re.sub(r"\s+", " ", m.group(1)).strip()


def static_problems(ex: Exercise, text: str) -> str | None:
    """A renamed kernel, changed parameters or a removed entry point: one line, before compiling."""
    sol = solution_text(ex, "cuda")
    for k in ex.cu_kernels:
        want, got = _params_of(sol, k), _params_of(text, k)
        if got is None:
            return (f"no kernel {k} in the file: the entry point launches it by that name (renamed?); keep the name "
                    f"the exercise gave it")
        if got != want:
            return f"{k}'s parameters changed: ({got}); the entry point passes ({want}): put them back"
    if not re.search(r'extern\s+"C"\s+int\s+exercise_run\s*\(', text):
        return ("the entry point exercise_run at the end of the file is gone or changed: copy it back from "
                f"`invoke exercise solution {ex.name} --track cuda`")
    return None


def cache_folder(d: Path) -> Path:
    """The exercises' own compile cache (never under build/, which `invoke clean` empties)."""
    return d / ".build"


def compile_learner(ex: Exercise, d: Path, path: Path, text: str):
    from harness.calling import inline

    with _env(CUDALAB_CACHE=cache_folder(d).resolve()):
        return inline.load(text, name=module_name(ex.name, "learner"), _display=str(path))


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
        mod = compile_learner(ex, d, path, text)
        v.say(True, f"compiles ({'from the cache' if mod.cache_hit else f'{time.perf_counter() - t:.1f} s'})")
    except BuildError as e:
        v.say(False, str(e.args[0]) if e.args else str(e))
        return
    ok, why = cudart.gpu_available()
    if not ok:
        v.lines.append((None, f"no GPU here ({why})"))
        v.compiled_only = True
        return
    job = {"track": "cuda", "name": ex.name, "file": str(path.resolve()), "display": str(path), "seed": v.seed}
    # One cache for everything below: the child processes, and the solution's compile in a thread (which
    # reads the variable when it starts, so it is set for the whole of this block, never changed in it).
    with _env(CUDALAB_CACHE=cache_folder(d).resolve()):
        solution = None
        if timing and speed(ex.name) is not None:
            # The lab's solution, compiled for the timing while the learner's kernel runs (a cache hit
            # after the first check in this folder).
            pool = ThreadPoolExecutor(1)
            solution = pool.submit(_load_solution, ex)
            pool.shutdown(wait=False)
        try:
            data, out, rc, sanitized = _run_cuda(ex, job, deadline, sanitize)
            if rc is None:
                v.say(False, f"stopped after {deadline:.0f} s: the kernel never finished (a loop that never ends: a "
                             f"stride of 0, a loop condition that stays true, or a barrier some threads never reach)")
                return
            _cuda_verdict(ex, path, v, data, out, rc, sanitized)
            if timing and v.first_fix is None:
                _speed(ex, d, text, v, solution)
        finally:
            if solution is not None:
                with contextlib.suppress(Exception):
                    solution.result()


def _load_solution(ex: Exercise):
    from harness.calling import inline

    return inline.load(solution_text(ex, "cuda"), name=module_name(ex.name, "solution"))


def _run_cuda(ex: Exercise, job: dict, deadline: float, sanitize: bool):
    """The cases, and at the same time compute-sanitizer memcheck and racecheck on the small case:
    each its own process on the one GPU, so the check takes the longest of them, not their sum.
    (data, output, status, {tool: (data, output, status) or a note why it did not run}); status None:
    the cases ran past `deadline` (the sanitizer runs, which would hang the same way, are stopped)."""
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
                    small = dict(job, small=True)
                    for tool in ("memcheck", "racecheck"):
                        procs[tool] = _start_worker(small, prefix=hs.command(tool, Path(sys.executable), [], tool_path)[:-1])
            t0 = time.monotonic()
            data, out, rc = _finish_worker(procs["cases"], t0 + deadline)
            if rc is None:
                for p in procs.values():
                    stop_group(p)
                return data, out, rc, {}
            for tool in ("memcheck", "racecheck"):
                if tool in procs:
                    sanitized[tool] = _finish_worker(procs[tool], t0 + SANITIZER_DEADLINE_S)
            return data, out, rc, sanitized
    except BaseException:  # an interrupt: nothing of ours keeps running
        for p in procs.values():
            if p.returncode is None:
                stop_group(p)
        raise


def _cuda_verdict(ex: Exercise, path: Path, v: Verdict, data: dict | None, out: str, rc: int, sanitized: dict) -> None:
    """The cases' lines, then the sanitizers': when the output is wrong and a sanitizer saw a race or
    an access outside an allocation, that (with the learner's line) is the thing to fix, not a guess
    from the values (a race that shows only on the large case looks like a ragged-edge bug there)."""
    if data is None:
        tail = "\n".join(out.strip().splitlines()[-6:])
        cause, pattern = f"the check's process failed (status {rc}):\n{tail}", None
        v.lines.append((False, cause))
    else:
        cause, pattern = _case_lines(v, data)
    found, failed = _sanitizer_lines(ex, path, v, sanitized)
    if found:
        return  # v.say made the first sanitizer error the thing to fix
    if pattern:
        v.lines.append((False, pattern))
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
        _data, out, rc = sanitized[tool]
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
        ceiling = {**bench.BUILT_IN, **programs.ceilings()}[sp.ceiling](True)
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

"""The child process that runs a learner's kernel: `python -m harness.user.exercises.worker JSON`,
and the comparison the checker makes of what it sends back.

Only this process imports the learner's Python file or loads their compiled library, in a process
group of its own, under the checker's deadline (harness/user/exercises/child.py): a kernel that never
ends, code that runs at load time (a constructor, an import) and a CUDA error that ruins the context
touch this process alone. It sends raw results over a pipe of its own: `loaded` once the learner's
code is in, the output arrays of each case (or the error the kernel raised, with the learner's
line), then `done`. The extra runs the checker asks for (each case again with a second poison, the
threads of a block in the opposite order, the CUDA track's counting build) run here too and come
back as more named arrays. It never judges them: the checker computes the reference and calls
outputs(), compare() and summarize() below. Whatever the learner's code prints is shown to the learner, bounded, and
decides nothing.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import re
import sys
import traceback
from pathlib import Path

import numpy as np

from harness.user.exercises import catalog

poisoned, is_poison = catalog.poisoned, catalog.is_poison


def _fmt(v) -> str:
    return f"{float(v):.6g}" if np.issubdtype(np.asarray(v).dtype, np.floating) else str(int(v))


def compare(name: str, out: np.ndarray, ref: np.ndarray, guard: np.ndarray | None = None,
            before: np.ndarray | None = None, facts: dict | None = None, unwritten: np.ndarray | None = None,
            guard_written: np.ndarray | None = None, tail: np.ndarray | None = None) -> str | None:
    """None when out matches ref within the lab's tolerance, else what is wrong, pointing at a cause.
    `before`: an in-place kernel's input, to tell elements left alone from elements computed wrongly.
    `unwritten`, `guard_written`: masks from two runs with two poisons, where one poison is a legal
    value (a problem's two_poisons); without them, an element holding the poison was never written.
    `tail`: the elements in a partial block (catalog.tail).
    `facts`, when given, gets what summarize() looks for across cases (only_first: element 0 alone was
    never written, every other element is right; n: the output's size; tail_only: every bad element
    lies in a partial block)."""
    out = np.asarray(out).ravel()
    ref = np.asarray(ref).ravel()
    if out.size != ref.size:
        return f"the output has {out.size} elements, expected {ref.size}"
    if guard is not None or guard_written is not None:
        stray = guard_written if guard_written is not None else ~is_poison(guard)
        bad = np.flatnonzero(stray)
        if bad.size:
            return (f"wrote past the end of the output (element {ref.size + int(bad[0])}, {bad.size} element(s) after "
                    f"the last): threads beyond the data were not stopped: the bounds check")
    tol = catalog.tolerance(name)
    unwritten = is_poison(out) if unwritten is None else np.asarray(unwritten).ravel()
    if tol is None:
        wrong = out != ref.astype(out.dtype)
        ok = not wrong.any()
    else:
        from harness.calling.results import relative_error

        try:
            err = relative_error(out, ref)
        except ValueError:
            err = math.inf
        ok = bool(np.isfinite(err) and err <= tol)
        scale = float(np.linalg.norm(ref) / max(1.0, math.sqrt(ref.size))) or 1.0
        with np.errstate(invalid="ignore"):
            wrong = ~(np.abs(out.astype(np.float64) - ref) <= 10 * tol * scale)
    if ok:
        return None
    n = out.size
    if before is not None:
        unwritten = unwritten | ((out == np.asarray(before).ravel()) & (out != ref))
    if facts is not None and tail is not None:
        bad = wrong | unwritten
        facts["tail_only"] = bool(bad.any() and not (bad & ~np.asarray(tail).ravel()).any())
    if unwritten.any():
        i = int(np.flatnonzero(unwritten)[0])
        only_first = i == 0 and int(unwritten.sum()) == 1 and not (wrong & ~unwritten).any()
        if facts is not None:
            facts.update(only_first=only_first, n=n)
        if only_first and n > 1:
            # Every thread did its work one element to the right (or element 0's thread was stopped):
            # nothing was written past the end, so the bounds check is not the cause.
            return (f"1 of {n} outputs never written: only element 0, and every other element is right: the first "
                    f"thread's index is not 0 (an index shifted by one, or a bounds check that also stops i == 0)")
        return (f"{int(unwritten.sum())} of {n} outputs never written (first at index {i}; they still hold the "
                f"check's poison): no thread wrote them: check the index, the stride and that the grid covers "
                f"every element")
    if out.size > 1 and np.all(out == 0) and np.any(ref != 0):
        return "every output is 0: the kernel writes zeros (is the result computed and stored?)"
    if out.dtype.kind == "f" and not np.isfinite(out).all():
        nan = ~np.isfinite(out)
        i = int(np.flatnonzero(nan)[0])
        if facts is not None:
            facts["nan"] = True
        why = catalog.problem(name).nan_cause
        return f"{int(nan.sum())} of {n} outputs are NaN or infinite (first at index {i})" + (f": {why}" if why else "")
    idx = np.flatnonzero(wrong)
    i = int(idx[0]) if idx.size else int(np.argmax(np.abs(out.astype(np.float64) - ref)))
    msg = f"{max(idx.size, 1)} of {n} outputs wrong, first at index {i}: got {_fmt(out[i])}, expected {_fmt(ref[i])}"
    if tol is not None:
        msg += f" (relative error {err:.3g} > {tol:g})"
    return msg


def summarize(name: str, results: list[dict], track: str = "python") -> str | None:
    """A pattern over the cases that points at the cause, or None. A cause is named only on evidence:
    the bounds check when the sizes that are a multiple of the block (several blocks of them) pass and
    the others fail only in their partial blocks; a barrier when the output changes with the order the
    threads run in (Python track; on the CUDA track racecheck says it)."""
    bad = [r for r in results if not r["ok"]]
    good = [r for r in results if r["ok"]]
    # An output that changes with the threads' order has a race, whatever it holds (a sum read before it
    # is complete can make every output 0): that comes before the values' own patterns.
    raced = any(r.get("order_dependent") for r in bad)
    if not bad or not re.match(r"\d+ of \d+ outputs" + (r"|every output is 0" if raced else ""),
                               bad[0]["message"] or ""):
        return None  # the first failure names its own cause (an exception, a stray write)
    problem = catalog.problem(name)
    if raced:
        which = problem.barrier_cause or ("the barrier after the loads (a thread reads the tile before the others have stored it)"
                 if any(r.get("nan") for r in bad) else
                 "the barrier after the products (a tile is overwritten while other threads still read it)")
        return f"the output changes with the order the threads of a block run in: a missing barrier: {which}"
    if all(r.get("zeros") for r in bad):
        return "every failing case's output is all 0: the kernel writes zeros (is the result computed and stored?)"
    if all(r.get("only_first") for r in bad) and any(r.get("n", 0) > 1 for r in bad):
        return ("in every failing case only element 0 was never written and every other element is right: the first "
                "thread's index is not 0 (an index shifted by one, or a bounds check that also stops i == 0)")
    first = problem.first_pattern(bad, track)
    if first:
        return first
    if not good:
        return None
    if all(r["ragged"] for r in bad) and any(r.get("exact_multi") for r in good) \
            and all(r.get("tail_only") is not False for r in bad):
        if problem.ragged_cause:
            return problem.ragged_cause
        what = problem.unit
        return (f"only sizes that are not a multiple of the {what} fail, in their partial {what}s (sizes that are, "
                f"with several {what}s, pass): look at the bounds check")
    return problem.pattern(bad, good, track)


# --- the Python track ----------------------------------------------------------------------------

def _where(exc: BaseException, path: Path) -> str:
    """`file:line: code` of the deepest frame in the learner's file."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path.resolve()]
    if not frames:
        return ""
    f = frames[-1]
    return f"{path}:{f.lineno}: `{(f.line or '').strip()}`: "


def _exit_message(e: SystemExit, what: str) -> str:
    return (f"{what} called sys.exit({e.code!r}): the check calls your code and needs it to return; nothing in it "
            f"may end the process")


def import_learner(path: Path, modname: str):
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except SyntaxError as e:
        line = (e.text or "").rstrip()
        return None, f"{path}:{e.lineno}: {e.msg}" + (f"\n  {e.lineno:4d} | {line}" if line else "")
    except SystemExit as e:
        return None, f"{_where(e, path)}" + _exit_message(e, f"importing {path.name}")
    except Exception as e:  # the learner's module raised while it was imported
        return None, f"{_where(e, path)}importing {path.name} raised {type(e).__name__}: {e}"
    return mod, None


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def outputs(name: str, run) -> dict:
    """The checker's side of the two poisons: run(alt) -> (output, guard or None), the arrays one run
    sent back. {"out", "guard", and for a problem with two_poisons "unwritten" and "guard_written"}: an element
    is unwritten when it holds each run's poison (a legal value cannot be both), and a guard element
    was written when it lost either."""
    out, guard = run(False)
    got = {"out": out, "guard": guard}
    if catalog.two_poisons(name):
        out2, guard2 = run(True)
        got["unwritten"] = is_poison(np.asarray(out).ravel()) & is_poison(np.asarray(out2).ravel(), alt=True)
        if guard is not None:
            got["guard_written"] = ~is_poison(guard) | ~is_poison(guard2, alt=True)
    return got


def _jsonable(value):
    """A value the learner's file defines (a zoom's REGION) as JSON for the checker, which judges it (a repr when it is not numbers)."""
    try:
        if hasattr(value, "tolist"):  # a numpy array or scalar: its numbers
            value = value.tolist()
        elif isinstance(value, (list, tuple)):
            value = [v.tolist() if hasattr(v, "tolist") else v for v in value]
        json.dumps(value, allow_nan=False)
        return value
    except Exception:  # noqa: BLE001 -- whatever the learner's object does, the checker gets its repr
        return repr(value)[:200]


def run_python(send, name: str, path: Path, solution: str, cases: list, alt: bool = False,
               reverse: bool = False) -> None:
    """The cases the checker sent, each run once (`alt`: and again with the second poison, sent as
    "out_alt"); `reverse`: with the threads of each block run in the opposite order (the checker asks
    for it again on a failing case, and compares the two outputs)."""
    ex = catalog.by_name()[name]
    mod, err = import_learner(path, f"cudalab_exercise_{name}")
    if err:
        send({"fatal": err})
        return
    send({"loaded": True})
    entry = ex.py_entry
    if not hasattr(mod, entry):
        send({"fatal": f"{path} defines no {entry}: the check calls it by that name (renamed?); keep the name the "
                       f"exercise gave it"})
        return
    if ex.judges_value:
        send({"case": 0, "value": _jsonable(getattr(mod, entry))})
        send({"done": True})
        return
    fn = getattr(mod, entry)
    ns: dict = {}
    exec(compile(solution, "<solution>", "exec"), ns)  # noqa: S102 -- the lab's own text, for the signature
    want = _params(ns[entry])
    if not callable(fn) or _params(fn) != want:
        got = _params(fn) if callable(fn) else type(fn).__name__
        send({"fatal": f"{entry} in {path} takes ({', '.join(got) if isinstance(got, list) else got}), the check "
                       f"calls it with ({', '.join(want)}): put the parameters back as the exercise gave them"})
        return
    from harness.base import sim

    if reverse:
        fn = catalog.reversed_threads(fn)
    for k, case in enumerate(cases):
        inp = catalog.inputs(name, case)
        try:
            arrays = {"out": np.asarray(catalog.run_python(name, fn, case, inp))}
            if alt:
                arrays["out_alt"] = np.asarray(catalog.run_python(name, fn, case, inp, alt=True))
            send({"case": k}, arrays)
            continue
        except catalog.RedundantWrites as e:  # raised as it happens: such a grid can take very long to finish
            msg = str(e)
        except IndexError as e:
            msg = (f"{_where(e, path)}IndexError: {e}: a thread read or wrote past the end of an array: "
                   f"the bounds check, or the index computed on this line (a row length or stride)")
        except sim.SimError as e:
            msg = f"{_where(e, path)}{e}: every thread of a block must reach each barrier (a bare yield)"
        except SystemExit as e:
            msg = _where(e, path) + _exit_message(e, "the kernel")
        except Exception as e:  # the learner's kernel raised: say where, and go on to the next case
            msg = f"{_where(e, path)}{type(e).__name__}: {e}"
        send({"case": k, "error": msg})
    send({"done": True})


# --- the CUDA track ------------------------------------------------------------------------------

def run_cuda(send, name: str, source: str, display: str, cases: list, load_only: bool, alt: bool = False,
             counting: bool = False) -> None:
    """`load_only`: load the library (so that what it runs at load time runs here) and stop; where
    there is no GPU to run the cases on. `alt`: each case again with the second poison ("out_alt",
    "guard_alt"). `counting`: the cases run on the counting build (catalog.check_source, compiled by
    the checker already), whose counters come back as more arrays for the checker to read."""
    from harness.base.errors import CudaError, CudalabError
    from harness.calling import inline

    try:
        # No test load in a child of this process first: this process is that child, and the checker
        # judges how the load ended (its status, its output) as it judges the cases.
        mod = inline.load(source, name=f"exercise_{name}", _display=display, _probe=False)
    except CudalabError as e:
        send({"fatal": str(e)})
        return
    send({"loaded": True})
    if load_only:
        send({"done": True})
        return
    counted = catalog.check_source(name, source) if counting else None
    if counted is not None:
        try:
            mod = inline.load(counted, name=f"exercise_{name}_check", _display=display, _probe=False)
        except CudalabError as e:
            send({"counting_failed": str(e).splitlines()[0] if str(e) else type(e).__name__})
    for k, case in enumerate(cases):
        inp = catalog.inputs(name, case)
        try:
            arrays = catalog.run_cuda(name, mod, case, inp)
            if alt:
                again = catalog.run_cuda(name, mod, case, inp, alt=True)
                arrays["out_alt"], arrays["guard_alt"] = again["out"], again["guard"]
            send({"case": k}, arrays)
            continue
        except CudaError as e:
            send({"case": k, "error": f"CUDA error: {e}", "fatal": True})
            break  # the context may be unusable now
        except CudalabError as e:
            msg = str(e)
        send({"case": k, "error": msg})
    send({"done": True})


def main(argv: list[str]) -> int:
    from harness.user.exercises import child

    job = json.loads(argv[0])
    chan = child.Channel.from_environment()
    send = chan.send if chan is not None else (lambda record, arrays=None: None)
    cases = [catalog.Case(**c) for c in job.get("cases", [])]
    if job["track"] == "python":
        run_python(send, job["name"], Path(job["file"]), job["solution"], cases, job.get("alt", False),
                   job.get("reverse", False))
    else:
        run_cuda(send, job["name"], Path(job["file"]).read_text(), job["display"], cases, job.get("load_only", False),
                 job.get("alt", False), job.get("counting", False))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The exercises, gathered from the programs' records: the one list the grader reads.

Each program declares the exercises it offers in its RECORD (harness/programs/record.py's Exercise),
each with its problem (cuda/<prog>/<prog>_exercises.py, a harness.programs.exercise.Problem): the
cases, the inputs, the reference and tolerance, how each track runs the learner's kernel. This module
turns those declarations into the grader's view (the program that holds each, its CUDA file's fixed
end read from the program's folder) and hands each question to the exercise's problem; it names no
exercise itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import (  # noqa: F401  (the grader's names for the kit)
    GUARD,
    Case,
    RedundantWrites,
    Speed,
    cdiv,
    is_poison,
    poison_value,
    poisoned,
    redundant_message,
    reversed_threads,
)


@dataclass(frozen=True)
class Exercise:
    """One exercise as the grader sees it: its declaration (record.Exercise), the program that holds
    it, and its CUDA file's fixed end as text."""
    name: str
    program: str
    origin: str
    writes: str
    tracks: tuple
    py_source: str | None  # relative to the repository root
    py_entry: str | None  # the function (or value) the check reads
    cu_source: str | None
    cu_kernels: tuple = ()  # kernels whose name and parameters the check relies on
    cu_glue: str = ""  # the CUDA file's fixed end: the entry point(s) the check calls
    cu_includes: str = ""
    hints: tuple = ()
    block: str = ""  # the launch shape, for messages
    problem: kit.Problem = field(default=None, compare=False, repr=False)

    @property
    def judges_value(self) -> bool:
        """The answer is a value the learner's file defines, not a kernel (kit.ValueProblem)."""
        return isinstance(self.problem, kit.ValueProblem)


def _view(prog: str, d) -> Exercise:
    if not isinstance(d.problem, kit.Problem):
        raise TypeError(f"cuda/{prog}/{prog}.py: exercise {d.name}'s problem must be a "
                        f"harness.programs.exercise.Problem, not {type(d.problem).__name__}")
    glue = kit.glue_text(prog, d.glue) if d.glue else ""
    return Exercise(d.name, prog, d.origin, d.writes, tuple(d.tracks), d.py_source or f"cuda/{prog}/{prog}.py",
                    d.py_entry, d.cu_source, tuple(d.cu_kernels), glue, d.cu_includes, tuple(d.hints), d.block,
                    d.problem)


@cache
def exercises() -> tuple[Exercise, ...]:
    """Every exercise, in the order of the learning path (the programs' order, then each record's)."""
    from harness import programs

    recs = sorted((programs.record(p) for p in programs.names()), key=lambda r: (r.order, r.name))
    out = [_view(r.name, d) for r in recs for d in r.exercises]
    seen: dict = {}
    for e in out:
        if e.name in seen:
            raise ValueError(f"two programs declare an exercise called {e.name!r}: {seen[e.name]} and {e.program}")
        seen[e.name] = e.program
    return tuple(out)


@cache
def by_name() -> dict[str, Exercise]:
    return {e.name: e for e in exercises()}


def __getattr__(attr: str):
    # EXERCISES and BY_NAME are read from the records on first use, not when the grader is imported.
    if attr == "EXERCISES":
        return exercises()
    if attr == "BY_NAME":
        return by_name()
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def problem(name: str) -> kit.Problem:
    return by_name()[name].problem


def new_seed() -> int:
    """A fresh seed for one check's cases (recorded in its output, so a failure can be replayed)."""
    import secrets

    return secrets.randbelow(10**9)


# --- each question, asked of the exercise's problem ------------------------------------------------

def cases(name: str, track: str, seed: int = 0) -> list[Case]:
    """The check's cases. Fixed ones reach the edges each exercise's mistakes live on (one element,
    sizes that are a multiple of the block with several blocks, sizes that are not, the values where
    a rounding or a comparison decides); one more, and every random input, come from `seed`."""
    return problem(name).cases(track, seed)


def speed(name: str) -> Speed | None:
    return problem(name).speed()


def inputs(name: str, case: Case) -> dict:
    return problem(name).inputs(case)


def reference(name: str, case: Case, inp: dict) -> np.ndarray:
    return problem(name).reference(case, inp)


def tolerance(name: str) -> float | None:
    """None: exact equality (integers, and the float kernels whose rounding the reference pins)."""
    return problem(name).tolerance


def two_poisons(name: str) -> bool:
    return problem(name).two_poisons


def tail(name: str, case: Case) -> np.ndarray | None:
    return problem(name).tail(case)


def run_python(name: str, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
    return problem(name).run_python(fn, case, inp, alt)


def run_cuda(name: str, mod, case: Case, inp: dict, alt: bool = False) -> dict:
    return problem(name).run_cuda(mod, case, inp, alt)


def check_source(name: str, text: str) -> str | None:
    return problem(name).check_source(text)


def counted_problem(name: str, got: dict) -> str | None:
    return problem(name).counted_problem(got)


def timing_launch(name: str, mod, params: dict):
    return problem(name).timing_launch(mod, params)


def verdict(name: str, value) -> tuple[bool, str, dict]:
    return problem(name).verdict(value)

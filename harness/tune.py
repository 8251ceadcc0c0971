"""`invoke tune <prog>`: a program's small parameter search, timed with harness.timing and cached per
GPU under bench/results/<gpu>/ (the program decides the file and what "the winner" means).

A program that can be tuned offers `tune(size, reps, save, on_progress) -> (table, path)` in its
module; matmul times its compiled ladder configurations and caches the fastest for "09_tuned".
"""

from __future__ import annotations


def tunables() -> list[str]:
    """The programs with a parameter search (a `tune` function in their module)."""
    from . import programs as registry

    return [p for p in registry.names() if callable(registry.hook(p, "tune"))]


def tunable(prog: str):
    """The program's module when it has a `tune` function, else ValueError naming the ones that do."""
    from . import programs as registry

    have = tunables()
    if prog not in have:
        raise ValueError(f"{prog!r} has no parameter search; tunable programs: {', '.join(have) or 'none'}")
    return registry.module(prog)


def run(prog: str, size: int = 4096, reps: int = 10, save: bool = True, on_progress=None):
    """Run `prog`'s search; returns (table, path of the cached result or None)."""
    if size < 1 or reps < 10:
        raise ValueError(f"size must be >= 1 and reps >= 10 (harness.timing's minimum), got size={size} reps={reps}")
    return tunable(prog).tune(size=size, reps=reps, save=save, on_progress=on_progress)

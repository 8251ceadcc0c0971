"""What every program shares for checking and running: one name for each.

    relative_error(out, ref)          ||out - ref|| / ||ref|| in float64 (the tests' checker)
    parse_output(text, program)       an executable's `result program=<program> ...` lines
    run(program, *args, timeout=...)  run build/bin/<program> and parse its result lines

Program modules use these instead of defining their own (harness/programs/__init__.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.calling import parse, runner


def relative_error(out, ref) -> float:
    """||out - ref|| / ||ref|| (Frobenius, in float64; the plain norm of out - ref when ref is all
    zeros). A NaN or infinity anywhere in out gives inf, so a poisoned, unwritten element fails
    every `relative_error(...) <= tol` check. Different shapes raise ValueError."""
    out64, ref64 = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if out64.shape != ref64.shape:
        raise ValueError(f"shape mismatch: {out64.shape} vs {ref64.shape}")
    if not np.all(np.isfinite(out64)):
        return float("inf")
    num = float(np.linalg.norm(out64 - ref64))
    den = float(np.linalg.norm(ref64))
    return num / den if den > 0 else num


def parse_output(text: str, program: str) -> pd.DataFrame:
    """The `result program=<program> ... check=pass|fail` lines, numbers converted. ValueError when
    there is none: a run that printed no result did not finish."""
    return parse.results(text, program)


def run(program: str, *args, timeout: float = 300) -> pd.DataFrame:
    """Run build/bin/<program> with args and parse its result lines. A failed check is exit status 1
    and raises ProgramError."""
    return parse_output(runner.run(program, *[str(a) for a in args], timeout=timeout).stdout, program)

"""hello: the launch shapes of the Stringer course (sections 2.3-2.6)."""

from __future__ import annotations

import pandas as pd

from harness.base.errors import TraceError
from harness.calling import parse, runner
from harness.programs.record import Program, Tour

COLUMNS = ["kernel", "block", "thread", "global"]

# kernel -> (blocks, threads) of `hello shapes`
SHAPES = {"kernelA": (1, 1), "kernelB": (1, 10), "kernelC": (10, 1), "kernelD": (10, 10)}


def frame(text: str) -> pd.DataFrame:
    """The tagged `hello ...` lines as a DataFrame with kernel, block, thread and global columns."""
    df = parse.tagged(text, "hello", columns=COLUMNS)
    for c in ("block", "thread", "global"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    return df


def expected(what: str, blocks: int = 2, threads: int = 5) -> dict[str, set[tuple[int, int]]]:
    """kernel -> the (block, thread) pairs `hello <what>` must print (empty for cpu-only modes)."""
    out: dict[str, set[tuple[int, int]]] = {}
    if what in ("gpu", "all"):
        out["helloGPU"] = {(0, 0)}
    if what in ("ints", "all"):
        out["printInts"] = {(0, 0)}
    if what in ("shapes", "all"):
        out.update({k: expected_shape(b, t) for k, (b, t) in SHAPES.items()})
    if what in ("loop", "all"):
        out["loop"] = expected_shape(blocks, threads)
    return out


def check(df: pd.DataFrame, what: str, blocks: int = 2, threads: int = 5) -> pd.DataFrame:
    """Raise TraceError unless every (block, thread) the launches imply printed exactly once."""
    for kernel, want in expected(what, blocks, threads).items():
        rows = df[df["kernel"] == kernel]
        got = [(int(b), int(t)) for b, t in zip(rows["block"], rows["thread"])]
        if kernel == "printInts":  # one thread prints ten lines
            got = sorted(set(got)) if len(got) == 10 else got
        missing = sorted(want - set(got))
        dup = sorted({p for p in got if got.count(p) > 1}) if len(got) != len(set(got)) else []
        if missing or dup or len(got) != len(want):
            raise TraceError(f"hello {what}: kernel {kernel} printed {len(got)} of {len(want)} lines "
                             f"({len(missing)} missing, {len(dup)} duplicated)", missing, dup)
    return df


def run(what: str = "all", *args, timeout: float = 60) -> pd.DataFrame:
    """Run build/bin/hello <what> [args], parse its lines, and check that none is missing."""
    df = frame(runner.run("hello", what, *args, timeout=timeout).stdout)
    blocks, threads = (int(args[0]), int(args[1])) if what == "loop" and len(args) == 2 else (2, 5)
    return check(df, what, blocks, threads)


def expected_shape(blocks: int, threads: int) -> set[tuple[int, int]]:
    """The (block, thread) pairs a <<<blocks, threads>>> launch must print."""
    return {(b, t) for b in range(blocks) for t in range(threads)}


def profile_args(variant: str | None = None) -> list[str]:
    """argv for `invoke profile hello` and `invoke sanitize`: every kernel of the program once."""
    return ["all"]


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='hello',
    summary='a kernel launch; blocks, threads and the global index',
    follows='intro course §2.3-2.6',
    order=10,
    profile_args=profile_args,
    run=run,
    tour=Tour("hello from the CPU and the GPU and the launch shapes; the chart is each kernel's share of GPU time under nsys", drawn=('plots/profile_recorded_hello.png',)),
)

"""hello: the launch shapes of the Stringer course (sections 2.3-2.6)."""

from __future__ import annotations

import pandas as pd

from .. import parse, runner

COLUMNS = ["kernel", "block", "thread", "global"]

# kernel -> (blocks, threads) of `hello shapes`
SHAPES = {"kernelA": (1, 1), "kernelB": (1, 10), "kernelC": (10, 1), "kernelD": (10, 10)}


def frame(text: str) -> pd.DataFrame:
    """The tagged `hello ...` lines as a DataFrame with kernel, block, thread and global columns."""
    df = parse.tagged(text, "hello", columns=COLUMNS)
    for c in ("block", "thread", "global"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    return df


def run(what: str = "all", *args, timeout: float = 60) -> pd.DataFrame:
    """Run build/bin/hello <what> [args] and parse its lines."""
    return frame(runner.run("hello", what, *args, timeout=timeout).stdout)


def expected_shape(blocks: int, threads: int) -> set[tuple[int, int]]:
    """The (block, thread) pairs a <<<blocks, threads>>> launch must print."""
    return {(b, t) for b in range(blocks) for t in range(threads)}

"""One GPU's share of `invoke bench --gpus ...` (harness.measuring.bench.run_on_gpus starts one of these per GPU,
side by side, each with $CUDA_VISIBLE_DEVICES set to its GPU before anything touches CUDA).

    python -m harness.measuring.bench_worker INDEX COUNT OUTDIR [PROGRAMS] [--quick]

The worker takes every COUNT-th group of cases that share a ceiling (starting at INDEX), so each case
is still timed in rounds beside its own ceiling on the same GPU, and writes its own CSV, named after
its GPU, into OUTDIR.
"""

from __future__ import annotations

import sys
from pathlib import Path


def share(cases: list, index: int, count: int) -> list:
    """The cases of every count-th ceiling group, starting at `index` (groups in order of appearance)."""
    groups = list(dict.fromkeys(c.ceiling for c in cases))
    mine = set(groups[index::count])
    return [c for c in cases if c.ceiling in mine]


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    args = [a for a in argv if a != "--quick"]
    if len(args) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    index, count, out = int(args[0]), int(args[1]), Path(args[2])
    names = [p for p in (args[3] if len(args) == 4 else "").split(",") if p] or None
    from harness.measuring import bench  # after the argument check: the usage error stays fast

    bench.check_built(names)
    cases = share(bench.collect(names, quick), index, count)
    if not cases:
        print(f"worker {index}: no cases in its share", file=sys.stderr)
        return 0
    df, ceil = bench.run(names, quick=quick, cases=cases)
    bench.write_csv(df, bench.metadata(), ceil, folder=out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

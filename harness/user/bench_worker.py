"""One GPU's share of `invoke bench --gpus ...` (harness.measuring.bench.run_on_gpus starts one of these per GPU,
side by side, each with $CUDA_VISIBLE_DEVICES set to its GPU before anything touches CUDA).

    python -m harness.user.bench_worker INDEX COUNT OUTDIR [PROGRAMS] [--quick]

The worker collects the programs' cases and ceilings through the registry, as `invoke bench` does,
takes every COUNT-th group of cases that share a ceiling (starting at INDEX: harness.measuring.bench.share),
so each case is still timed in rounds beside its own ceiling on the same GPU, and writes its own CSV,
named after its GPU, into OUTDIR. It lives here, above both, because it wires programs to measuring.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import programs
from harness.measuring import bench, results_csv


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    args = [a for a in argv if a != "--quick"]
    if len(args) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    index, count, out = int(args[0]), int(args[1]), Path(args[2])
    names = [p for p in (args[3] if len(args) == 4 else "").split(",") if p] or None
    cases = bench.share(programs.bench_cases(names, quick), index, count)
    if not cases:
        print(f"worker {index}: no cases in its share", file=sys.stderr)
        return 0
    bench.check_built(programs.bench_libraries(cases))
    df, ceil = bench.run(cases, programs.ceilings(), quick=quick)
    results_csv.write(df, bench.metadata(), ceil, folder=out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

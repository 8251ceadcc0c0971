"""The bench as pytest items, for `invoke bench --gpus ...` (harness.bench.run_on_gpus): pytest-xdist
starts one worker per GPU, each worker pins itself to its GPU, takes its share of the cases, measures
the ceilings those cases need on that GPU, and writes its own CSV when it finishes.

Not a test file: pytest runs it only when given its path. Configuration comes from the environment
($CUDALAB_BENCH_PROGRAMS, $CUDALAB_BENCH_QUICK, $CUDALAB_BENCH_OUT, $CUDALAB_GPUS).
"""

from __future__ import annotations

from harness import gpus

gpus.pin_worker()  # before anything below can start CUDA

import os  # noqa: E402
from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from harness import bench  # noqa: E402

NAMES = [p for p in os.environ.get("CUDALAB_BENCH_PROGRAMS", "").split(",") if p] or None
QUICK = bool(os.environ.get("CUDALAB_BENCH_QUICK"))
OUT = Path(os.environ.get("CUDALAB_BENCH_OUT") or bench.BUILD_BENCH)
# Every worker collects the same list (xdist requires it); only setup() touches the GPU.
CASES = bench.collect(NAMES, QUICK)


class _Worker:
    def __init__(self):
        self.rows: list[dict] = []
        self.ceilings: dict[str, bench.Ceiling] = {}
        self.tried: set[str] = set()

    def ceiling(self, case: bench.BenchCase) -> bench.Ceiling | None:
        if case.ceiling not in self.tried:  # measured once per worker, on its GPU, when first needed
            self.tried.add(case.ceiling)
            self.ceilings.update(bench.measure_ceilings([case.ceiling], [case.program], QUICK))
        return self.ceilings.get(case.ceiling)

    def write(self) -> None:
        if self.rows:
            meta = bench.metadata()
            path = bench.write_csv(pd.DataFrame(self.rows), meta, self.ceilings)  # named after its GPU
            if OUT != bench.BUILD_BENCH:
                path.replace(OUT / path.name)


@pytest.fixture(scope="module")
def worker():
    w = _Worker()
    yield w
    w.write()


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{c.program}-{c.variant}-{c.size}" for c in CASES])
def test_bench_case(index, worker):
    case = CASES[index]
    worker.rows.append(bench.run_case(case, worker.ceiling(case), QUICK))

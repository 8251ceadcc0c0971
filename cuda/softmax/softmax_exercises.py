"""softmax's exercises: the block-per-row kernel (02: the max and the sum as shared-memory trees, the
normalised write) and the online one (04: the running max and the rescaled running sum, and the merge of
two such pairs). The problems the check runs (harness/programs/exercise.py says what each part is);
declared in softmax.py's RECORD."""

from __future__ import annotations

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed

PY_THREADS, CU_THREADS = 8, 256  # threads sharing a row: the simulator's (small, so rows span several strides), the lab's
SCALES = (0.125, 0.5, 1.75)  # the online exercise's scales on the Python track (besides 1)
PEAK, BELOW_PEAK = 1000.0, 880.0  # a wide row's lone peak, and the most its other scores reach
NEG_LO, NEG_HI = -1000.0, -760.0  # a "neg" row's scores: exp of any of them underflows to 0, even in float64


def _sm():
    from harness.programs import softmax  # this program's own module (it imports this file for its RECORD)

    return softmax


def _n(k: int, what: str) -> str:
    return f"{k} {what}" + ("" if k == 1 else "s")


def _kind_label(kind: str) -> str:
    return {"": "", "wide": ", scores from -1000 up to +1000",
            "neg": f", every score between {NEG_LO:g} and {NEG_HI:g}"}[kind]


def _other_block_size(bad: list[dict], good: list[dict]) -> str | None:
    """The cause when only the rows shared by another number of threads than the usual one fail."""
    usual = kit.unusual_block_size(bad, good)
    if usual is None:
        return None
    return (f"only the rows shared by other than {usual} threads fail (every case with {usual} passes): a block "
            f"size is typed in somewhere: the columns' stride and the trees' first half come from blockDim.x")


class SoftmaxRow(kit.Problem):
    """softmax of each row of a float32 rows x cols matrix, one block per row (256 threads on the GPU,
    8 on the simulator), the max and the sum reduced through shared memory."""

    order_checked = True  # the learner writes the trees' barriers
    barrier_cause = ("each level of the max and sum trees reads what the level before wrote, and the row's max "
                     "must be read by every thread before the buffer is reused for the sums: a barrier after each")
    nan_cause = ("an exp overflowed to inf, the row's sum was 0, or a red[] cell no thread stored was read: every "
                 "exponent needs the row's own max subtracted (a tree step, a barrier or some thread's columns "
                 "missing from the max lets a larger score overflow), a max that starts above every score makes "
                 "every exp(x - max) underflow to 0, and every thread, even one with no column, stores its value in "
                 "red[] for each tree")
    ragged_cause = ("only rows whose length is not a multiple of the block's threads fail, in their last partial "
                    "stride (rows that are, several strides long, pass): look at the bounds check: every loop over a "
                    "thread's columns c = t, t + blockDim.x, ... runs while c < cols")
    short_cause = ("only rows shorter than the block fail (fewer columns than threads; longer rows pass): the threads "
                   "with no column still take part in both trees: each must store the identity in red[] (-inf for "
                   "the max, 0 for the sum) and reach every barrier")

    @property
    def tolerance(self) -> float:
        return _sm().TOL  # the program's own: float32 exps and a tree-summed row, against float64 (softmax.py)

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        nt = PY_THREADS if py else CU_THREADS
        # (rows, cols, kind): one column; shorter than the block; one stride; several whole strides (the
        # evidence that lets a failure in the partial strides alone blame the bounds check); ragged ones; a
        # wide case (exp overflows unless the row's true max is subtracted: see inputs); a case whose scores
        # are all far below 0 (a max that starts at 0 instead of -inf makes the sum 0); the CUDA track's
        # large case.
        shapes = ([(3, 1, ""), (2, 5, ""), (3, 8, ""), (4, 32, ""), (3, 13, ""), (2, 37, ""), (PY_THREADS + 4, 29, "wide"),
                   (3, 19, "neg")] if py else
                  [(3, 1, ""), (4, 100, ""), (3, 256, ""), (5, 1024, ""), (7, 1000, ""), (2, 4097, ""),
                   (CU_THREADS + 4, 777, "wide"), (4, 300, "neg"), (1024, 2053, "")])
        shapes.append((int(rng.integers(1, 5 if py else 9)), int(rng.integers(2, 49 if py else 3001)), ""))
        shapes = [(r, c, k, nt) for r, c, k in shapes]
        if py:  # other block sizes: a kernel written for one blockDim (a stride or a tree's start typed in) fails
            shapes += [(2, 12, "", 4), (3, 45, "", 16)]
        # The sanitizers' case: several blocks, a partial stride, both trees.
        small = (3, 13) if py else (7, 1000)
        return kit.made(shapes, lambda r, c, k, b: f"{_n(r, 'row')} of {_n(c, 'column')}" + _kind_label(k)
                        + (f", {b} threads a row" if b != nt else "") + self.scale_label(py, r, c, k),
                        lambda r, c, k, b: {"rows": r, "cols": c, "kind": k, "threads": b,
                                            **self.scale_param(py, r, c, k)},
                        lambda r, c, k, b: c % b, lambda r, c, k, b: c % b == 0 and c > b,
                        lambda r, c, k, b: (r, c) == small, seed, wide=lambda r, c, k, b: k == "wide")

    def scale_param(self, py: bool, rows: int, cols: int, kind: str) -> dict:
        return {}

    def scale_label(self, py: bool, rows: int, cols: int, kind: str) -> str:
        return ""

    def inputs(self, case: Case) -> dict:
        p, rng = case.params, kit.rng(case)
        rows, cols, kind = p["rows"], p["cols"], p["kind"]
        if kind == "neg":
            x = rng.uniform(NEG_LO, NEG_HI, (rows, cols))
        elif kind == "wide":
            # The first blockDim.x rows have a lone peak, row i's in thread i's last column, over scores of at
            # most BELOW_PEAK: a reduction that leaves out any one thread's max misses the peak in some row,
            # and exp(PEAK - BELOW_PEAK) overflows. The rows after them span +-1000 at random.
            x = rng.uniform(-PEAK, PEAK, (rows, cols))
            lone = min(rows, p["threads"])
            x[:lone] = rng.uniform(-PEAK, BELOW_PEAK, (lone, cols))
            last = cols - 1 - (cols - 1) % p["threads"]  # the first column of the last stride
            for i in range(lone):
                c = last + i if last + i < cols else last + i - p["threads"]
                x[i, c] = PEAK
        else:
            x = rng.uniform(-10.0, 10.0, (rows, cols))
        return {"x": x.astype(np.float32)}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return _sm().reference(inp["x"]).ravel()

    def tail(self, case: Case) -> np.ndarray | None:
        p = case.params
        return np.tile(np.arange(p["cols"]) >= (p["cols"] // p["threads"]) * p["threads"], p["rows"])

    def facts(self, case: Case) -> dict:
        p = case.params
        return {"wide": p["kind"] == "wide", "neg": p["kind"] == "neg", "short": p["cols"] < p["threads"],
                "threads": p["threads"]}

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        # Before the sizes' rule: a row shorter than the block lies wholly in its partial stride, so a
        # fault of the idle threads would otherwise read as a bounds check.
        if bad and all(r.get("short") for r in bad):
            return self.short_cause
        return None

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        odd = _other_block_size(bad, good)
        if odd:
            return odd
        if good and all(r.get("neg") for r in bad):
            return (f"only the rows whose every score is far below 0 ({NEG_LO:g} to {NEG_HI:g}) fail: the max starts "
                    f"above every score there, so every exp(x - max) underflows to 0 and the sum is 0: start the max "
                    f"at -inf, the identity of max (any score is larger), not at 0")
        if good and all(r.get("wide") or r.get("neg") for r in bad):
            return ("only the rows whose scores reach +-1000 fail: exp overflows (or underflows to a sum of 0) there "
                    "unless the row's true max is subtracted from every exponent: check that the max takes every "
                    "column of the row into account, through every step of the tree")
        return None

    def _shape(self, case: Case) -> tuple[int, int, int]:
        p = case.params
        return p["rows"], p["cols"], p["threads"]

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        rows, cols, nt = self._shape(case)
        out = kit.poisoned((rows, cols), np.float32)
        sim.launch(fn, rows, nt, inp["x"], out, rows, cols, shared={"red": ((nt,), np.float32)})
        return out.ravel()

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        rows, cols, _ = self._shape(case)
        return kit.cuda_outputs(mod, {"x": inp["x"]}, {"out": (rows * cols, np.float32, False)},
                                lambda d: mod.exercise_run(d["x"], d["out"], rows, cols, None))

    def speed(self) -> Speed:
        rows, cols = _sm().BENCH_ROWS, _sm().BENCH_COLS
        # The bench's bytes: x read once and out written once, 4 bytes each (the least a softmax moves).
        return Speed({"rows": rows, "cols": cols}, "memcpy", 8.0 * rows * cols)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        rows, cols = params["rows"], params["cols"]
        x, out = dev(rows * cols, np.float32, 0x3C), dev(rows * cols, np.float32)
        return kit.prepared(lambda s: mod.exercise_run(x, out, rows, cols, s), close)


class SoftmaxOnline(SoftmaxRow):
    """The same softmax in one pass for the max and the sum: each thread's running (max, sum) pair,
    the sum rescaled when the max grows, then the pairs merged in a shared-memory tree (given)."""

    order_checked = False  # the learner writes no shared memory and no barrier here
    nan_cause = ("an exp overflowed to inf, or a 0 or NaN sum: the running sum must be rescaled by exp(m_old - m_new) "
                 "(not its inverse) when the max grows, each term taken relative to the max it is added under, and "
                 "the merge must bring both sums to the larger max, and two empty pairs (-inf, 0) must merge into an "
                 "empty pair (-inf - -inf is NaN); a max that starts above every score makes every term underflow to 0")
    short_cause = ("only rows shorter than the block fail (fewer columns than threads; longer rows pass): a thread "
                   "with no column holds the empty pair (-inf, 0), and the merge of two empty pairs must leave it as "
                   "it is: -inf - -inf is NaN, so return before computing the rescale factors when the merged max is "
                   "-inf")

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        odd = _other_block_size(bad, good)
        if odd:
            return odd
        if good and all(r.get("neg") for r in bad):
            return (f"only the rows whose every score is far below 0 ({NEG_LO:g} to {NEG_HI:g}) fail: the running max "
                    f"starts above every score there, so no score is ever a new max and every term underflows to 0: "
                    f"start it at -inf (any score is larger), with the sum at 0")
        if good and all(r.get("wide") or r.get("neg") for r in bad):
            return ("only the rows whose scores reach +-1000 fail: exp overflows (or underflows to a sum of 0) there: "
                    "every term must be taken relative to the running max as it is then, and the merge must keep the "
                    "larger of the two maxima and rescale both sums to it")
        return None

    def scale_param(self, py: bool, rows: int, cols: int, kind: str) -> dict:
        # The Python track's kernel takes the scores' scale (attention's 1/sqrt(d)): cases other than the wide
        # and the negative ones (whose ranges are set for scale 1) take one that is not 1, so a term that leaves
        # it out fails. The CUDA track's entry point passes 1.
        if not py or kind:
            return {"scale": 1.0}
        return {"scale": SCALES[(rows + cols) % len(SCALES)]}

    def scale_label(self, py: bool, rows: int, cols: int, kind: str) -> str:
        sc = self.scale_param(py, rows, cols, kind)["scale"]
        return "" if sc == 1.0 else f", scale {sc:g}"

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return _sm().reference(inp["x"], case.params.get("scale", 1.0)).ravel()

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        rows, cols, nt = self._shape(case)
        out = kit.poisoned((rows, cols), np.float32)
        sim.launch(fn, rows, nt, inp["x"], out, rows, cols, np.float32(case.params.get("scale", 1.0)), None,
                   shared={"red_m": ((nt,), np.float32), "red_d": ((nt,), np.float32)})
        return out.ravel()


"""histogram's exercises: the 01 kernel (one atomicAdd per byte on the global bins, the bounds check) and
the 02 kernel (the block's own bins in shared memory: zeroed, a barrier, counted, a barrier, merged with
one atomic per bin). The problems the check runs (harness/programs/exercise.py says what each part is);
declared in histogram.py's RECORD.

The output is the 256 uint32 bins, exact. The kernels add to the bins, so they start at 0 (the entry
point zeroes them, as the lab's does); what the poison does for other outputs, the guard after the
bins and the counts themselves do here: a bin past the last lands in the poisoned guard, and every
count a wrong kernel loses or adds shows as a bin below or above numpy's.
"""

from __future__ import annotations

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed

BINS = 256
SKEW = 0.9  # the skewed cases: this share of the bytes hold one value, so many threads add to one bin at once


# The one-byte case is not the first: with its byte not counted every bin is 0, a failure that names
# no size, and the grader reads the pattern over the cases from the first failure's words.
def _rows_python(rng) -> list[tuple]:
    # Blocks smaller than the 256 bins on the simulator, so the loops strided by blockDim.x over the
    # bins (zeroing, merging) matter; one block larger than the bins.
    rows = [(192, 64, "uniform"), (1000, 64, "uniform"), (1, 32, "uniform"), (512, 32, "skewed"),
            (777, 32, "skewed"), (4099, 128, "uniform"), (600, 256, "skewed")]
    t = int(rng.choice([32, 64, 128]))
    n = int(rng.integers(300, 3000))
    rows.append((n + (n % t == 0), t, str(rng.choice(["uniform", "skewed"]))))  # the fresh one, never whole blocks
    return rows


def _rows_cuda(rng) -> list[tuple]:
    rows = [(1024, 256, "uniform"), (1000, 256, "uniform"), (1, 256, "uniform"), (16384, 256, "skewed"),
            (4099, 128, "skewed"), (5000, 512, "uniform"), (10_000_019, 256, "skewed")]
    t = int(rng.choice([128, 256, 512]))
    n = int(rng.integers(300, 200_000))
    rows.append((n + (n % t == 0), t, str(rng.choice(["uniform", "skewed"]))))
    return rows


class _Bins(np.ndarray):
    """The global bins on the Python track: counts how many bin values the launch changed (a block that
    merges its counters changes each of its non-zero bins once; counting every byte into the global
    bins changes one for each byte)."""

    changed: list | None = None

    @staticmethod
    def _index(key) -> None:
        # numpy counts a negative index from the end: a GPU writes before the array's start.
        if isinstance(key, (int, np.integer)) and int(key) < 0:
            raise BinOutside(f"bins[{int(key)}]: a bin below 0, which numpy would take from the end: a byte's bin is "
                             f"its value as an unsigned number, 0 .. {BINS - 1} (a signed byte, or a value minus one, "
                             f"goes below)")

    def __getitem__(self, key):
        self._index(key)
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self._index(key)
        before = np.array(np.ndarray.__getitem__(self, key), copy=True)
        super().__setitem__(key, value)
        if self.changed is not None:
            self.changed[0] += int(np.count_nonzero(np.ndarray.__getitem__(self, key) != before))


class BinOutside(Exception):
    """A bin index below 0 (numpy would wrap it to the end)."""


class SharedUnused(Exception):
    """The counts are right, but the bytes were counted straight into the global bins."""


class HistogramAtomic(kit.Problem):
    """The 256 counts of n uint8 bytes, one thread per byte: cdiv(n, threads) blocks (Python: blocks of
    32 to 256 threads on the simulator; CUDA: 128 to 512, mostly the lab's 256)."""

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        rows = _rows_python(rng) if track == "python" else _rows_cuda(rng)
        return kit.made(rows, lambda n, t, k: f"n={n} threads={t} {k} bytes",
                        lambda n, t, k: {"n": n, "threads": t, "kind": k}, lambda n, t, k: n % t,
                        lambda n, t, k: n % t == 0 and n > t, lambda n, t, k: n == 1000, seed)

    def inputs(self, case: Case) -> dict:
        n, rng = case.params["n"], kit.rng(case)
        x = rng.integers(0, BINS, n, dtype=np.uint8)
        if case.params["kind"] == "skewed":
            x[rng.random(n) < SKEW] = rng.integers(0, BINS)  # a hot value of its own each check
        return {"x": x}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return np.bincount(inp["x"], minlength=BINS).astype(np.uint32)

    def out_facts(self, case: Case, out: np.ndarray, ref: np.ndarray) -> dict:
        o, r = out.astype(np.int64).ravel(), ref.astype(np.int64).ravel()
        if o.size != r.size:
            return {}
        wrong = o != r
        return {"lost": bool(wrong.any() and (o[wrong] < r[wrong]).all()),
                "extra": bool(wrong.any() and (o[wrong] > r[wrong]).all()),
                "over_n": bool((o > case.params["n"]).any()),
                # the simulator's fill of shared counters (2^32-1) merged: far more than any case's bytes
                "fill": bool((o >= 1 << 31).any())}

    lost_cause = {
        "python": ("some bytes were never counted: every thread with i < n counts its own byte x[i] once (the index "
                   "from the block and the thread); or the bins were set to 0 inside the kernel (the entry point "
                   "zeroes them before the launch; a zeroing in the kernel wipes the counts of the blocks that ran "
                   "before it: the check runs the blocks last to first)"),
        "cuda": ("many threads add to one bin at the same time, and only atomicAdd makes each read-add-write whole (a "
                 "plain ++ or += keeps one of two adds that overlap); or some bytes were never counted (the index)"),
    }
    extra_cause = {
        "python": "a byte was counted twice, or counted into its neighbour's bin (the index, the bin of x[i])",
        "cuda": "a byte was counted twice, or bytes past n were counted (the index and the bounds check, i < n)",
    }

    def _counts_cause(self, bad: list[dict], track: str) -> str | None:
        if all(r.get("lost") for r in bad):
            return "in every failing case the wrong bins hold fewer counts than numpy's: counts were lost: " + \
                self.lost_cause[track]
        if all(r.get("extra") for r in bad):
            return "in every failing case the wrong bins hold more counts than numpy's: " + self.extra_cause[track]
        return None

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        # Before the sizes are read only where a case of whole blocks fails too: a mistake that fails
        # the partial blocks alone is the bounds check's, which the grader names from the sizes.
        return self._counts_cause(bad, track) if any(not r["ragged"] for r in bad) else None

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        return self._counts_cause(bad, track)

    def _shared(self):
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        n, t = case.params["n"], case.params["threads"]
        bins = np.zeros(BINS, dtype=np.uint32).view(_Bins)  # the kernel adds to the bins: they start at 0
        bins.changed = [0]
        # The blocks run last to first: on a GPU they run in any order, and only adding to the bins gives
        # the same counts in every order (a zeroing by block 0 inside the kernel does not).
        sim.launch(kit.blocks_reversed(fn), kit.cdiv(n, t), t, inp["x"], n, bins, shared=self._shared())
        got = bins.view(np.ndarray)
        self._after(case, inp, got, bins.changed[0])
        return got

    def _after(self, case: Case, inp: dict, got: np.ndarray, changed: int) -> None:
        """What the run shows besides the counts, once they are right."""

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        n, t = case.params["n"], case.params["threads"]
        return kit.cuda_outputs(mod, {"x": inp["x"]}, {"out": (BINS, np.uint32, False)},
                                lambda d: mod.exercise_run(d["x"], n, d["out"], t, None))

    def speed(self) -> Speed:
        n = 1 << 26
        return Speed({"n": n, "threads": 256}, "memcpy", float(n))  # bytes read; the 1 KiB of bins is noise

    def timing_launch(self, mod, params: dict):
        from harness.calling import cudart

        n, t = params["n"], params["threads"]
        d_in = cudart.to_device(np.random.default_rng(0).integers(0, BINS, n, dtype=np.uint8))  # uniform bytes
        try:
            dev, close_bins = kit.dev_buffers()
            bins = dev(BINS, np.uint32)
        except BaseException:
            d_in.close()
            raise

        def close():
            close_bins()
            d_in.close()

        return kit.prepared(lambda s: mod.exercise_run(d_in, n, bins, t, s), close)


class HistogramPrivate(HistogramAtomic):
    """The same counts through each block's own 256 counters in shared memory: zeroed, a barrier,
    counted, a barrier, each non-zero counter added to the global bins with one atomic."""

    order_checked = True
    barrier_cause = ("every counter zeroed before any thread counts (a barrier after the zeroing), and every byte of "
                     "the block counted before its counters are merged (a barrier before the merge); in Python a "
                     "bare `yield` is __syncthreads()")
    lost_cause = {
        "python": ("a block merged its counters with a plain store (=) where every block adds to the same bins (+=, "
                   "atomicAdd on the GPU), or some counters were never merged or some bytes never counted (the loops "
                   "strided by blockDim.x over the bins, the index), or the bins were set to 0 inside the kernel (the "
                   "entry point zeroes them before the launch: the check runs the blocks last to first)"),
        "cuda": ("a block's counters were read before all its threads had counted (the __syncthreads() before the "
                 "merge) or zeroed after some had (the __syncthreads() after the zeroing), merged with a plain store "
                 "where every block adds to the same bins (atomicAdd), or some counters never merged (the loop "
                 "strided by blockDim.x)"),
    }
    extra_cause = {
        "python": ("a byte was counted twice or a counter merged twice: each of the BINS counters is zeroed and merged "
                   "by one thread (start at threadIdx.x, step by blockDim.x)"),
        "cuda": ("the block's shared counters started from what an earlier block left in shared memory (zero all "
                 "kBins of them, in a loop strided by blockDim.x, before counting), or a byte was counted twice"),
    }

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        if track == "python" and any(r.get("fill") for r in bad):
            return ("some bins hold more counts than there are bytes: a shared counter was added to or merged from the "
                    "simulator's fill (2^32-1, which wraps): set every one of the BINS counters to 0, in a loop "
                    "strided by blockDim.x, before any thread counts")
        return super().first_pattern(bad, track)

    def check_source(self, text: str) -> str | None:
        """The cases run with half of each block's warps starting late: a missing barrier after the zeroing
        (or before the merge) then loses counts on the GPU as it does in the check's reversed blocks."""
        return kit.warps_skewed(text, "histogram_02_shared_private")

    def _shared(self):
        return {"local": ((BINS,), np.uint32)}

    def _after(self, case: Case, inp: dict, got: np.ndarray, changed: int) -> None:
        # Named only once the counts are right: wrong counts are the first thing to fix.
        if not np.array_equal(got, self.reference(case, inp)):
            return
        n, t = case.params["n"], case.params["threads"]
        x = inp["x"]
        merges = sum(np.unique(x[s:s + t]).size for s in range(0, n, t))  # each block's non-zero counters
        if changed > merges:
            raise SharedUnused(
                f"the counts are right, but the global bins changed {changed} times where merging each block's "
                f"non-zero counters once changes them {merges} times: the bytes were counted straight into the "
                f"global bins; count each byte in the block's shared counters (local), and after the barrier add "
                f"each non-zero counter to bins once")

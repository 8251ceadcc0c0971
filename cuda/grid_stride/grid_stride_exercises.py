"""grid_stride's exercise: the grid-stride loop of square's second kernel (its blanks are marked in
cuda/square/square.py and square.cu, where the loop lives). The problem the check runs
(harness/programs/exercise.py says what each part is); declared in grid_stride.py's RECORD."""

from __future__ import annotations

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed


class Shared(kit.Counting):
    """kit.Counting that also counts each thread's elements: the grid shares the work, so no thread
    writes more than its share, ceil(n / the grid's thread count) (one thread running the whole loop
    gives right values, each element written once, and the grid idle)."""

    share: int = 0
    mine: dict

    def __setitem__(self, key, value):
        fresh = int(np.count_nonzero(self.owner[np.arange(self.owner.size)[key]] < 0))
        super().__setitem__(key, value)
        self.mine[self.writer] = self.mine.get(self.writer, 0) + fresh

    def check_share(self) -> None:
        """After the launch, so that an element written by two threads is said first (that is the
        cause where a thread's extra elements belong to others)."""
        writer, k = max(self.mine.items(), key=lambda kv: kv[1], default=(-1, 0))
        if k > self.share:
            raise kit.RedundantWrites(
                f"one thread (global index {writer}) wrote {k} elements, more than its share of {self.share} (n over "
                f"the grid's thread count): the grid's threads share the work, each starting at its own global "
                f"index and stepping by the whole grid's thread count")


class GridStride(kit.Problem):
    """out = x * x over float32 with a grid of the check's choice, often smaller than n. Every element
    must be written by one thread only: a stride of blockDim alone gives right values with the work done
    many times over, so the Python track counts the writing threads and the CUDA track's counting build
    does the same on the GPU."""

    tolerance = 1e-5  # square's check_close

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        # Grids smaller than n (each thread handles several elements), exactly n, and larger than n.
        launches = [(1, 1, 32), (7, 2, 32), (64, 2, 32), (97, 3, 16), (256, 2, 32), (1000, 2, 128), (50, 4, 32),
                    (4099, 5, 64)]
        launches += [(20011, 4, 128)] if track == "python" else [(10_000_019, 264, 256)]
        launches.append((int(rng.integers(100, 3000)), int(rng.integers(2, 7)), int(rng.choice([16, 32, 64]))))
        return kit.made(launches, lambda n, b, t: f"n={n} grid={b}x{t}",
                        lambda n, b, t: {"n": n, "blocks": b, "threads": t},
                        lambda *_: False, lambda *_: False, lambda n, b, t: n == 97, seed)

    def inputs(self, case: Case) -> dict:
        return {"x": kit.rng(case).standard_normal(case.params["n"]).astype(np.float32) * 8}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        x = inp["x"].astype(np.float64)
        return (x * x).astype(np.float32)

    def facts(self, case: Case) -> dict:
        p = case.params
        return {"strided": p["blocks"] * p["threads"] < p["n"]}

    def out_facts(self, case: Case, out: np.ndarray, ref: np.ndarray) -> dict:
        # Exactly the elements past the grid's first pass never written: every thread stopped after
        # its first element (an `if` where the loop belongs, or a loop that never steps on).
        p = case.params
        unwritten = kit.is_poison(np.asarray(out).ravel())
        past = np.arange(unwritten.size) >= p["blocks"] * p["threads"]
        return {"first_pass_only": bool(past.any() and np.array_equal(unwritten, past))}

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        if all(r.get("first_pass_only") for r in bad):
            return ("only the elements past the grid's first pass (index >= blocks x threads) were never written: "
                    "each thread stops after its first element: loop while i < n, adding the stride each time")
        return None

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        if good and all(r.get("strided") for r in bad):
            return "only grids smaller than n fail: the stride must be the whole grid's thread count"
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        p = case.params
        out = kit.counting(p["n"], np.float32).view(Shared)
        out.owner, out.mine = np.full(p["n"], -1, dtype=np.int64), {}
        out.share = kit.cdiv(p["n"], p["blocks"] * p["threads"])
        x = inp["x"].copy()
        x.setflags(write=False)  # the input, const in the CUDA kernel: a thread that writes it fails at its line
        sim.launch(kit.as_writer(fn, out), p["blocks"], p["threads"], x, out, p["n"])
        out.check_share()
        return np.asarray(out)

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        from harness.calling import cudart

        p = case.params
        n = p["n"]
        counted = "exercise_count_writes" in set(getattr(mod, "functions", ()))
        extra = []
        if counted:
            owner = cudart.to_device(np.zeros(n + kit.GUARD, dtype=np.uint64))
            others = cudart.to_device(np.zeros(n + kit.GUARD, dtype=np.uint32))
            extra = [owner, others]
        try:
            if counted:
                mod.exercise_count_writes(owner, others, n + kit.GUARD)

            def call(d):
                mod.exercise_run(d["x"], d["out"], n, p["blocks"], p["threads"], None)

            got = kit.cuda_outputs(mod, {"x": inp["x"]}, {"out": (n, np.float32, False)}, call)
            if counted:
                got["others"] = others.to_host()
            return got
        finally:
            for d in extra:
                d.close()

    def check_source(self, text: str) -> str | None:
        """The kernel's `float *out` parameter becomes the counted output (None when the learner's file
        no longer has it in the shape the counting needs: the plain file serves)."""
        import re

        m = re.search(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:void\s+)?"
                      r"square_02_grid_stride\s*\(([^)]*)\)", text)
        if m is None:
            return None
        params, k = re.subn(r"float\s*\*\s*(?:__restrict__\s*)?out\b", "cudalab_counted_out out", m.group(1))
        if k != 1:
            return None
        before, _, after = kit.glue_text("grid_stride", "exercise_grid_stride.count.cu").partition(kit.SPLIT)
        return text[:m.start()] + before + text[m.start():m.start(1)] + params + text[m.end(1):] + after

    def counted_problem(self, got: dict) -> str | None:
        others = got.get("others")
        if others is not None and others.size and np.asarray(others).any():
            i = int(np.argmax(others))
            return kit.redundant_message(i, int(others[i]) + 1)
        return None

    def speed(self) -> Speed:
        n = 1 << 26
        return Speed({"n": n, "blocks": 132 * 8, "threads": 256}, "memcpy", 8.0 * n)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        x, o = dev(params["n"], np.float32, 0x3F), dev(params["n"], np.float32)
        return kit.prepared(lambda s: mod.exercise_run(x, o, params["n"], params["blocks"], params["threads"], s),
                            close)

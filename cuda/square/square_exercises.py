"""square's exercise: the course's first kernel (one thread per element, the bounds check) and its
managed-memory program. The problem the check runs (harness/programs/exercise.py says what each part is);
the exercise itself is declared in square.py's RECORD."""

from __future__ import annotations

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed


class OneEach(np.ndarray):
    """The in-place array, noting which element each thread writes: square runs one thread per element,
    so a thread that writes a second element does another thread's work (one thread squaring the whole
    array gives right values with no parallelism at all). Writing its own element twice is fine."""

    wrote: dict
    writer: int = -1
    blockdim: int = 1

    def __setitem__(self, key, value):
        idx = np.unique(np.arange(self.size)[key])
        first = self.wrote.setdefault(self.writer, int(idx[0])) if idx.size else None
        other = [int(i) for i in idx if i != first][:1]
        if other:
            b, t = divmod(self.writer, self.blockdim)
            raise kit.RedundantWrites(
                f"block {b}'s thread {t} wrote element {first} and element {other[0]}: the kernel runs one "
                f"thread per element, each squaring only a[i] at its own global index i")
        super().__setitem__(key, value)


class Square(kit.Problem):
    """int32 squared in place, wrapping modulo 2^32; the CUDA track also runs the course's program
    (exercise_managed), and its counting build counts allocations left unfreed."""

    in_place = "a"

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        sizes = [(1, 32), (31, 32), (257, 64), (1024, 256), (1000, 256), (4099, 96)]
        sizes += [(20011, 128)] if track == "python" else [(1 << 20, 256), (10_000_019, 256)]
        t = int(rng.choice([32, 64, 128]))
        n = int(rng.integers(300, 5000))
        sizes.append((n + (n % t == 0), t))  # the fresh one, never a multiple of the block
        return kit.made(sizes, lambda n, t: f"n={n} threads={t}", lambda n, t: {"n": n, "threads": t},
                        lambda n, t: n % t, lambda n, t: n % t == 0 and n > t, lambda n, t: n == 257, seed)

    def inputs(self, case: Case) -> dict:
        return {"a": kit.rng(case).integers(-2**31, 2**31, size=case.params["n"], dtype=np.int64).astype(np.int32)}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        sq = inp["a"].astype(np.int64) * inp["a"].astype(np.int64)
        return (sq & 0xFFFFFFFF).astype(np.uint32).view(np.int32)

    def tail(self, case: Case) -> np.ndarray:
        n, t = case.params["n"], case.params["threads"]
        return np.arange(n) >= (n // t) * t

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        p = case.params
        a = inp["a"].copy().view(OneEach)
        a.wrote, a.blockdim = {}, p["threads"]

        def noted(blockidx, threadidx, blockdim, *args):
            a.writer = blockidx * blockdim + threadidx
            return fn(blockidx, threadidx, blockdim, *args)

        sim.blk_kernel(noted, kit.cdiv(p["n"], p["threads"]), p["threads"], a, p["n"])
        return np.asarray(a)

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        from harness.calling import cudart

        n = case.params["n"]
        host = kit.poisoned(n + kit.GUARD, np.int32)
        host[:n] = inp["a"]
        d = cudart.to_device(host)
        try:
            mod.exercise_run(d, n, case.params["threads"], None)
            res = d.to_host()
        finally:
            d.close()
        got = {"out": res[:n], "guard": res[n:]}
        if n <= 1 << 20:  # the course's managed-memory program, on the host array
            h = inp["a"].copy()
            counted = "exercise_live_allocations" in set(getattr(mod, "functions", ()))
            live = mod.exercise_live_allocations() if counted else None
            mod.exercise_managed(h, n, case.params["threads"])
            if live is not None:
                got["leaked"] = np.array([mod.exercise_live_allocations() - live], dtype=np.int64)
            got["managed"] = h
        return got

    def check_source(self, text: str) -> str:
        return kit.counting_build("square", "exercise_square.count.cu", text)

    def counted_problem(self, got: dict) -> str | None:
        leaked = got.get("leaked")
        if leaked is not None and leaked.size and int(np.asarray(leaked).ravel()[0]) > 0:
            return (f"exercise_managed returned with {int(np.asarray(leaked).ravel()[0])} allocation(s) never freed: "
                    f"a leak: cudaFree what cudaMallocManaged gave, once the host has read the result")
        managed = got.get("managed")
        if managed is not None and not np.array_equal(np.asarray(managed).ravel(), np.asarray(got["out"]).ravel()):
            return ("exercise_managed (the course's program with managed memory) gives a different result from the "
                    "kernel: look at the allocation, the copies, the launch and the cudaDeviceSynchronize before the "
                    "host reads the result")
        return None

    def speed(self) -> Speed:
        n = 1 << 26
        return Speed({"n": n, "threads": 256}, "memcpy", 8.0 * n)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        a = dev(params["n"], np.int32, 0x01)
        return kit.prepared(lambda s: mod.exercise_run(a, params["n"], params["threads"], s), close)

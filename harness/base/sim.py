"""A Python kernel simulator, after GPU MODE lecture 3: run CUDA-shaped Python functions over a
grid of blocks and threads, serially, so a twin of each kernel can be checked against numpy and
its thread-to-data mapping predicted exactly.

The lecture's three runners keep their signatures:
    run_kernel(f, times, *args)                  f(i, *args)
    blk_kernel(f, blocks, threads, *args)        f(blockidx, threadidx, blockdim, *args)
    blk_kernel2d(f, blocks, threads, *args)      f(blockidx: dim3, threadidx: dim3, blockdim: dim3, *args)

`launch` is the general form: a 1-D/2-D/3-D grid, gridDim (for grid-stride loops) and per-block
shared memory with __syncthreads(). A kernel that synchronises is written as a generator: each
bare `yield` is a __syncthreads(). All threads of a block advance to the barrier before any passes
it, just as on the GPU, so a tile loaded by some threads is seen by all; a barrier that some
threads of a block skip raises SimError (undefined behaviour on the GPU).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np


@dataclass(frozen=True)
class dim3:  # noqa: N801 -- named as in CUDA
    x: int = 1
    y: int = 1
    z: int = 1

    @classmethod
    def of(cls, v) -> dim3:
        if isinstance(v, dim3):
            return v
        if isinstance(v, (tuple, list)):
            return cls(*v)
        return cls(int(v))

    @property
    def size(self) -> int:
        return self.x * self.y * self.z

    def __iter__(self):
        """All indexes in CUDA's linear order (x fastest)."""
        for z in range(self.z):
            for y in range(self.y):
                for x in range(self.x):
                    yield dim3(x, y, z)


class SimError(RuntimeError):
    pass


def run_kernel(f: Callable, times: int, *args) -> None:
    """Lecture 3's first runner: f(i, *args) for i in range(times), a "thread" per i."""
    for i in range(times):
        f(i, *args)


def blk_kernel(f: Callable, blocks: int, threads: int, *args) -> None:
    """Lecture 3's block runner: f(blockidx, threadidx, blockdim, *args)."""
    for i in range(blocks):
        for j in range(threads):
            f(i, j, threads, *args)


def blk_kernel2d(f: Callable, blocks: dim3, threads: dim3, *args) -> None:
    """Lecture 3's 2-D runner: f(blockidx, threadidx, blockdim, *args) with dim3 indexes."""
    blocks, threads = dim3.of(blocks), dim3.of(threads)
    for b in blocks:
        for t in threads:
            f(b, t, threads, *args)


def launch(kernel: Callable, grid, block, *args, shared: Callable[[], dict] | dict | None = None,
           on_block: Callable[[int, int], None] | None = None) -> None:
    """Run `kernel(ctx, *args)` for every thread of every block, CUDA-style.

    ctx has blockIdx, threadIdx, blockDim, gridDim (dim3) and `shared`, a namespace of arrays that
    every thread of the block sees. `shared` is a dict name -> (shape, dtype), or a callable
    returning a dict of arrays; it is made fresh for each block (filled with NaN or a marker so that
    reading an unwritten cell shows up). Generator kernels synchronise at each `yield`.
    `on_block(done, total)` is called after each block, for a progress bar on long simulations.
    """
    grid, block = dim3.of(grid), dim3.of(block)
    if grid.size == 0 or block.size == 0:
        raise SimError(f"empty launch: grid={grid} block={block}")
    is_gen = inspect.isgeneratorfunction(kernel)
    for k, b in enumerate(grid):
        smem = SimpleNamespace(**_make_shared(shared))
        ctxs = [SimpleNamespace(blockIdx=b, threadIdx=t, blockDim=block, gridDim=grid, shared=smem) for t in block]
        if not is_gen:
            for c in ctxs:
                kernel(c, *args)
        else:
            _run_block_in_lockstep([kernel(c, *args) for c in ctxs], b)
        if on_block is not None:
            on_block(k + 1, grid.size)


def _make_shared(spec) -> dict:
    if spec is None:
        return {}
    if callable(spec):
        return dict(spec())
    out = {}
    for name, (shape, dtype) in spec.items():
        dt = np.dtype(dtype)
        fill = np.nan if dt.kind == "f" else np.iinfo(dt).max if dt.kind in "iu" else 0
        out[name] = np.full(shape, fill, dtype=dt)
    return out


def _run_block_in_lockstep(threads: list, block_idx: dim3) -> None:
    """Advance every thread generator to its next barrier; all must arrive, or all must finish."""
    live = threads
    phase = 0
    while live:
        arrived, finished = [], 0
        for g in live:
            try:
                next(g)
                arrived.append(g)
            except StopIteration:
                finished += 1
        if arrived and finished:
            raise SimError(f"block {block_idx}: {finished} thread(s) exited while {len(arrived)} waited at "
                           f"__syncthreads() #{phase + 1} -- a barrier inside divergent code")
        live = arrived
        phase += 1


def thread_order(grid, block) -> list[tuple[dim3, dim3]]:
    """(blockIdx, threadIdx) pairs in the order `launch` visits them."""
    grid, block = dim3.of(grid), dim3.of(block)
    return [(b, t) for b in grid for t in block]

"""harness.base.sim: the lecture's runners and the shared-memory launch."""

from __future__ import annotations

import numpy as np
import pytest

from harness.base import sim
from harness.base.sim import dim3


def test_run_kernel_and_blk_kernel_visit_every_index():
    seen = []
    sim.run_kernel(lambda i, out: out.append(i), 5, seen)
    assert seen == list(range(5))
    pairs = []
    sim.blk_kernel(lambda b, t, bd, out: out.append((b, t, bd)), 3, 4, pairs)
    assert pairs == [(b, t, 4) for b in range(3) for t in range(4)]


def test_blk_kernel2d_indexes():
    out = np.full((5, 7), -1)

    def k(b, t, bd, out):
        r, c = b.y * bd.y + t.y, b.x * bd.x + t.x
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = r * 100 + c

    sim.blk_kernel2d(k, dim3(2, 3), dim3(4, 2), out)
    r, c = np.indices(out.shape)
    np.testing.assert_array_equal(out, r * 100 + c)


def test_grid_stride_launch_sees_griddim():
    n, owner = 23, {}

    def k(ctx, n, owner):
        i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
        stride = ctx.gridDim.x * ctx.blockDim.x
        for j in range(i, n, stride):
            assert j not in owner
            owner[j] = i

    sim.launch(k, 2, 4, n, owner)
    assert owner == {j: j % 8 for j in range(n)}


def test_shared_memory_tile_is_shared_after_syncthreads(rng):
    x = rng.standard_normal(24)
    out = np.full(3, np.nan)

    def block_sum(ctx, x, out):
        t = ctx.threadIdx.x
        ctx.shared.tile[t] = x[ctx.blockIdx.x * ctx.blockDim.x + t]
        yield  # __syncthreads(): thread 0 reads every thread's element
        if t == 0:
            out[ctx.blockIdx.x] = ctx.shared.tile.sum()

    sim.launch(block_sum, 3, 8, x, out, shared={"tile": ((8,), np.float64)})
    np.testing.assert_allclose(out, x.reshape(3, 8).sum(axis=1))


def test_missing_barrier_reads_unwritten_shared_memory():
    out = np.zeros(1)

    def no_sync(ctx, out):
        ctx.shared.tile[ctx.threadIdx.x] = 1.0
        if ctx.threadIdx.x == 0:
            out[0] = ctx.shared.tile.sum()  # without a barrier, other threads have not written yet

    sim.launch(no_sync, 1, 4, out, shared={"tile": ((4,), np.float64)})
    assert np.isnan(out[0])


def test_divergent_barrier_is_an_error():
    def bad(ctx):
        if ctx.threadIdx.x < 2:
            yield

    with pytest.raises(sim.SimError, match="divergent"):
        sim.launch(bad, 1, 4)


def test_dim3():
    assert dim3.of(5) == dim3(5, 1, 1) and dim3.of((2, 3)).size == 6
    assert [(d.x, d.y) for d in dim3(2, 2)] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    with pytest.raises(sim.SimError):
        sim.launch(lambda ctx: None, 0, 1)

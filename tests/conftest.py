"""Shared test set-up: the `gpu` marker's skip, seeds, and the build the tests load from."""

from __future__ import annotations

import numpy as np
import pytest

from harness import gpus

# Under `invoke test --gpus ...` each pytest-xdist worker takes one GPU: set before CUDA starts below.
gpus.pin_worker()

from harness import cudart  # noqa: E402

SEEDS = (0, 1, 2)


def _gpu_state() -> tuple[bool, str]:
    try:
        return cudart.gpu_available()
    except Exception as e:  # libcudart missing altogether
        return False, str(e)


GPU_OK, GPU_WHY = _gpu_state()


# tryfirst: pytest-xdist reads the xdist_group marks in its own hook of this name (--dist loadgroup).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    skip = None if GPU_OK else pytest.mark.skip(reason=f"needs a GPU: {GPU_WHY}")
    for item in items:
        if skip is not None and "gpu" in item.keywords:
            item.add_marker(skip)
        # Under `invoke test --jobs N` these share one worker, one after another: a profiler owns the
        # GPU's counters while it replays a kernel, and the slow tests time and profile whole programs.
        if "profiler" in item.keywords or "slow" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("one_at_a_time"))


@pytest.fixture(params=SEEDS, ids=[f"seed{s}" for s in SEEDS])
def rng(request) -> np.random.Generator:
    """Random inputs from several seeds (never zeros)."""
    return np.random.default_rng(request.param)


def poison(shape, dtype) -> np.ndarray:
    """An output array whose every element is obviously unwritten: NaN for floats, 0xAB bytes else."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.full(shape, np.nan, dtype=dt)
    return np.full(int(np.prod(shape)) * dt.itemsize, 0xAB, dtype=np.uint8).view(dt).reshape(shape)

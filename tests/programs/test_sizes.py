"""Device allocation sizes: the arithmetic is checked on the CPU before any CUDA call."""

from __future__ import annotations

import numpy as np
import pytest

from harness.calling import cudart, inline


@pytest.fixture
def no_malloc(monkeypatch):
    calls = []

    def malloc(nbytes):
        calls.append(nbytes)
        raise AssertionError(f"cudaMalloc({nbytes}) was reached")

    monkeypatch.setattr(cudart, "malloc", malloc)
    return calls


@pytest.mark.parametrize("shape,dtype", [
    ((2**32, 2**32), np.float32),   # 2**64 elements: numpy's int64 product wrapped to 0 bytes
    ((2**62, 3), np.float32),       # wrapped to a negative count
    ((2**61, 2), np.float64),       # 2**65 bytes
    ((2**63,), np.uint8),           # one byte past 2**63 - 1
])
def test_empty_refuses_sizes_past_any_allocation(no_malloc, shape, dtype):
    with pytest.raises(ValueError, match=r"more than any allocation can be \(at most 2\*\*63 - 1"):
        inline.empty(shape, dtype)
    assert no_malloc == []


def test_sizes_that_fit_reach_malloc_exactly(no_malloc):
    """A size that fits goes to cudaMalloc exactly (Python ints, never wrapped); the edge is 2**63 - 1."""
    for shape, dtype, nbytes in [((2**30, 2**30), np.float32, 2**62), ((2**63 - 1,), np.uint8, 2**63 - 1),
                                 ((3, 0, 5), np.float64, 0)]:
        with pytest.raises(AssertionError, match="was reached"):
            inline.empty(shape, dtype)
        assert no_malloc[-1] == nbytes, shape


@pytest.mark.parametrize("nbytes,exc", [(-1, ValueError), (2**63, ValueError), (1.5, TypeError), (True, TypeError)])
def test_device_buffer_refuses_bad_byte_counts(no_malloc, nbytes, exc):
    with pytest.raises(exc):
        cudart.DeviceBuffer(nbytes)
    assert no_malloc == []


@pytest.mark.parametrize("shape,exc", [
    ((2.7, 3.9), TypeError),       # int() truncated these to (2, 3)
    (2.0, TypeError),
    ((True, 3), TypeError),        # a bool is not a size, though int(True) is 1
    (np.bool_(True), TypeError),
    ((np.float32(4), 2), TypeError),
    (("4", 2), TypeError),
    ("4", TypeError),
    ((None,), TypeError),
    ((4, -1), ValueError),
    (-3, ValueError),
])
def test_empty_refuses_a_size_that_is_not_a_whole_count(no_malloc, shape, exc):
    with pytest.raises(exc, match="shape"):
        cudart.empty(shape)
    assert no_malloc == []


def test_integer_sizes_of_any_integer_type_are_taken(no_malloc):
    for shape, nbytes in [((np.int64(2), np.uint8(3)), 24), (5, 20), (np.int32(2), 8), ([2, 3], 24), ((), 4)]:
        with pytest.raises(AssertionError, match="was reached"):
            cudart.empty(shape)
        assert no_malloc[-1] == nbytes, shape

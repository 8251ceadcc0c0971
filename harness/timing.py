"""The one timing loop (DESIGN.md, Benchmarks).

    warm up; before each timed repetition flush the L2 with a cudaMemsetAsync over a buffer at
    least twice the L2 size; time each repetition with a pair of events on the launch's stream;
    at least 10 repetitions; report the median and the 25th-75th percentile spread.

`launch(stream)` must enqueue the work on the given stream (a device-pointer entry point) and
return without synchronising. It must do nothing else: the start event is recorded right before it
is called, so Python work inside it (checking and converting arguments: tens of microseconds, as
long as a small kernel) would be timed as the kernel's. Marshal once, before timing: a bench case's
`setup()` builds the call with `harness.library.Library.prepare(fname, ..., library.STREAM)`, whose
result is exactly such a `launch`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

MIN_REPS = 10


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p25_ms: float
    p75_ms: float
    samples_ms: tuple = field(repr=False, default=())

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms

    def rate(self, amount: float) -> float:
        """amount per second at the median time (bytes -> B/s, FLOPs -> FLOP/s, ...)."""
        return amount / (self.median_ms * 1e-3)


def summarize(samples_ms) -> Timing:
    s = np.asarray(list(samples_ms), dtype=np.float64)
    if s.size == 0:
        raise ValueError("no samples to summarize")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"timing samples must be finite and non-negative, got {s}")
    p25, med, p75 = np.percentile(s, [25, 50, 75])
    return Timing(float(med), float(p25), float(p75), tuple(float(x) for x in s))


class L2Flusher:
    """A device buffer of 2 x L2 that a memset sweeps, evicting whatever the last run left in L2."""

    def __init__(self, device: int = 0):
        from . import cudart

        self.nbytes = max(2 * cudart.attribute("l2_bytes", device), 1 << 20)
        self.buf = cudart.DeviceBuffer(self.nbytes)
        self._value = 0

    def flush(self, stream) -> None:
        # A different byte each time so no layer can treat the memset as a no-op.
        self._value = (self._value + 1) & 0xFF
        self.buf.fill_bytes(self._value, stream)

    def close(self) -> None:
        self.buf.close()


def time_launch(launch: Callable[[object], None], *, warmup: int = 3, reps: int = 20, flush: bool = True,
                stream=None, flusher: L2Flusher | None = None) -> Timing:
    """Time `launch(stream)` with CUDA events; returns median and IQR over `reps` repetitions."""
    from . import cudart

    if reps < MIN_REPS:
        raise ValueError(f"reps must be at least {MIN_REPS}, got {reps}")
    own_stream = stream is None
    s = cudart.Stream() if own_stream else stream
    handle = s.handle if isinstance(s, cudart.Stream) else s
    own_flusher = flush and flusher is None
    fl = L2Flusher() if own_flusher else flusher
    start, end = cudart.Event(), cudart.Event()
    try:
        for _ in range(warmup):
            launch(handle)
        samples = []
        for _ in range(reps):
            if flush:
                fl.flush(handle)
            start.record(handle)
            launch(handle)
            end.record(handle)
            end.synchronize()
            samples.append(start.elapsed_ms(end))
        return summarize(samples)
    finally:
        start.close()
        end.close()
        if own_flusher:
            fl.close()
        if own_stream:
            s.close()

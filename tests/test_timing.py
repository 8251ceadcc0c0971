"""The timing loop: its statistics, and the order of flush, events and launches."""

from __future__ import annotations

import numpy as np
import pytest

from harness import cudart, timing


def test_summarize_median_and_iqr():
    t = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 3.0, 2.0, 4.0, 3.0])
    s = np.array([5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 3.0, 2.0, 4.0, 3.0])
    assert t.median_ms == np.median(s) == 3.0
    assert t.p25_ms == np.percentile(s, 25) and t.p75_ms == np.percentile(s, 75)
    assert t.iqr_ms == pytest.approx(np.percentile(s, 75) - np.percentile(s, 25))
    assert t.rate(3e6) == pytest.approx(1e9)  # 3e6 bytes in 3 ms = 1 GB/s
    with pytest.raises(ValueError):
        timing.summarize([])
    with pytest.raises(ValueError):
        timing.summarize([1.0, float("nan")])


class _Log:
    def __init__(self):
        self.calls = []


def test_loop_flushes_l2_before_every_timed_rep(monkeypatch):
    log = _Log()
    clock = iter(np.arange(1.0, 1000.0))

    class FakeEvent:
        def __init__(self):
            self.t = None

        def record(self, stream):
            self.t = next(clock)
            log.calls.append("record")

        def synchronize(self):
            log.calls.append("sync")

        def elapsed_ms(self, end):
            return end.t - self.t

        def close(self):
            pass

    class FakeStream:
        handle = "stream"

        def close(self):
            pass

    class FakeFlusher:
        def flush(self, stream):
            assert stream == "stream"
            log.calls.append("flush")

        def close(self):
            pass

    monkeypatch.setattr(cudart, "Event", FakeEvent)
    monkeypatch.setattr(cudart, "Stream", FakeStream)
    monkeypatch.setattr(timing, "L2Flusher", FakeFlusher)

    def launch(stream):
        assert stream == "stream"
        log.calls.append("launch")

    t = timing.time_launch(launch, warmup=2, reps=10)
    assert log.calls[:2] == ["launch", "launch"]  # warm-up, untimed
    body = log.calls[2:]
    assert body == ["flush", "record", "launch", "record", "sync"] * 10
    assert t.median_ms == 1.0 and len(t.samples_ms) == 10
    with pytest.raises(ValueError, match="at least 10"):
        timing.time_launch(launch, reps=5)


@pytest.mark.gpu
def test_timing_a_real_copy():
    n = 64 << 20
    a, b = cudart.DeviceBuffer(n), cudart.DeviceBuffer(n)
    try:
        t = timing.time_launch(lambda s: cudart.memcpy_dtod(b.ptr, a.ptr, n, s), reps=10)
    finally:
        a.close()
        b.close()
    assert 0 < t.p25_ms <= t.median_ms <= t.p75_ms
    assert t.rate(2 * n) / 1e9 > 100  # any modern GPU copies faster than 100 GB/s

"""grid_stride: the trace parser on traces recorded on a real GPU, its checks (which must fail on a
broken trace), the simulator's mapping vs numpy, argv handling, and (GPU) the live trace vs the twin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.base.errors import ProgramError, TraceError
from harness.calling import runner
from harness.compile import build as hb
from harness.programs import grid_stride as gs

FIXTURES = Path(__file__).parent / "fixtures"
FIX_500 = FIXTURES / "grid_stride_n500_b8_t32.txt"
FIX_100 = FIXTURES / "grid_stride_n100_b8_t32.txt"


@pytest.fixture(scope="module")
def built():
    hb.build(hb.targets("grid_stride"))
    return True


def sorted_trace(df: pd.DataFrame) -> pd.DataFrame:
    return df[gs.COLUMNS].sort_values("Element Index").reset_index(drop=True).astype(np.int64)


def drop_line(text: str, element: int) -> str:
    return "\n".join(ln for ln in text.splitlines() if f"processing element {element}." not in ln)


# --- CPU: parser and checks on recorded traces ----------------------------------------------------

@pytest.mark.parametrize("path,n", [(FIX_500, 500), (FIX_100, 100)])
def test_recorded_trace_parses_and_validates(path, n):
    text = path.read_text()
    df = gs.parse_trace(text)
    assert list(df.columns) == gs.COLUMNS
    assert len(df) == n
    assert df.attrs["device"] and "NVIDIA" in df.attrs["device"]  # the fixture names its GPU
    assert df.attrs["all_squared"] is True
    v = gs.validate(df, n, 8, 32)
    pd.testing.assert_frame_equal(sorted_trace(v), gs.expected_mapping(n, 8, 32))


def test_recorded_small_trace_uses_only_the_first_threads():
    df = gs.validate(gs.parse_trace(FIX_100.read_text()), 100, 8, 32)
    assert sorted(df["Thread ID"]) == list(range(100))  # N < threads: one element each, threads 100.. idle
    assert df["Block ID"].max() == 3


def test_a_missing_line_raises():
    text = drop_line(FIX_500.read_text(), 321)
    with pytest.raises(TraceError, match="missing") as e:
        gs.validate(gs.parse_trace(text), 500, 8, 32)
    assert e.value.missing == [321]


def test_a_duplicated_line_raises():
    lines = FIX_500.read_text().splitlines()
    dup = next(ln for ln in lines if "processing element 42." in ln)
    with pytest.raises(TraceError, match="more than once") as e:
        gs.validate(gs.parse_trace("\n".join(lines + [dup])), 500, 8, 32)
    assert e.value.duplicated == [42]


def test_a_wrong_value_raises():
    text = FIX_500.read_text().replace("processing element 7. Old value: 7, New value: 49",
                                       "processing element 7. Old value: 7, New value: 48")
    assert "New value: 48" in text
    with pytest.raises(TraceError, match="New Value"):
        gs.validate(gs.parse_trace(text), 500, 8, 32)


def test_wrong_thread_ids_raise():
    df = gs.parse_trace(FIX_500.read_text())
    df.loc[0, "Thread ID"] += 1
    with pytest.raises(TraceError, match="Thread ID"):
        gs.validate(df, 500, 8, 32)


def test_the_programs_own_verdict_counts():
    text = FIX_500.read_text().replace("All elements were squared? TRUE", "All elements were squared? FALSE")
    with pytest.raises(TraceError, match="FALSE"):
        gs.validate(gs.parse_trace(text), 500, 8, 32)


def test_an_empty_trace_raises():
    with pytest.raises(TraceError):
        gs.validate(gs.parse_trace("# device: nothing\nhello\n"), 10)


# --- CPU: the twin on the simulator ---------------------------------------------------------------

@pytest.mark.parametrize("n,blocks,threads", [(500, 8, 32), (100, 4, 64), (10000, 3, 128), (1, 1, 1),
                                               (100, 8, 32), (257, 2, 16), (1000, 7, 13), (64, 64, 1)])
def test_simulator_mapping_matches_numpy(n, blocks, threads):
    sim = gs.simulate(n, blocks, threads)
    assert sim.attrs["all_squared"]
    v = gs.validate(sim, n, blocks, threads)
    pd.testing.assert_frame_equal(sorted_trace(v), gs.expected_mapping(n, blocks, threads))


def test_simulated_values_wrap_like_int32():
    sim = gs.validate(gs.simulate(50000, 2, 32), 50000, 2, 32)
    i = sim["Element Index"].to_numpy()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(sim["New Value"].to_numpy(), (i.astype(np.int32) * i.astype(np.int32)))


@pytest.mark.parametrize("args,exc", [((0, 8, 32), ValueError), ((10, 0, 32), ValueError),
                                      ((10, 8, 0), ValueError), ((10, 8, 2048), ValueError),
                                      ((gs.MAX_N + 1, 8, 32), ValueError), ((10.5, 8, 32), TypeError)])
def test_bad_launches_raise_before_running(args, exc):
    with pytest.raises(exc):
        gs.simulate(*args)
    with pytest.raises(exc):
        gs.run(*args)


def test_viz_data_from_the_simulator():
    d = gs.viz_data(n=300, blocks=2, threads=64, simulate=True)
    assert d.simulated and d.source == "simulated" and len(d.frame) == 300


# --- CPU: the executable refuses bad argv before touching the device -------------------------------

@pytest.mark.parametrize("args,match", [(["0"], "N must be a positive"), (["-1", "8", "32"], "N must be a positive"),
                                        (["10", "0", "32"], "BLOCKS must be a positive"),
                                        (["10", "8", "0"], "THREADS must be a positive"),
                                        (["10", "8"], "usage"), (["x"], "integer"),
                                        ([str(gs.MAX_N + 1)], "at most")])
def test_executable_bad_argv(built, args, match):
    r = runner.run("grid_stride", *args, check=False)
    assert r.returncode == 2, r.stderr
    assert match in r.stderr


# --- GPU ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("n,blocks,threads", [(500, 8, 32), (100, 4, 64), (10000, 3, 128), (1, 1, 1)])
def test_gpu_trace_equals_the_simulator(built, n, blocks, threads):
    gpu = gs.run(n, blocks, threads)
    sim = gs.validate(gs.simulate(n, blocks, threads), n, blocks, threads)
    pd.testing.assert_frame_equal(sorted_trace(gpu), sorted_trace(sim))


@pytest.mark.gpu
def test_gpu_defaults_are_the_courses(built):
    r = runner.run("grid_stride")
    df = gs.validate(gs.parse_trace(r.stdout), 500, 8, 32)
    assert len(df) == 500 and "All elements were squared? TRUE" in r.stdout
    assert "result program=grid_stride n=500 blocks=8 threads=32 check=pass" in r.stdout


@pytest.mark.gpu
def test_gpu_threads_above_the_device_maximum(built):
    with pytest.raises(ProgramError) as e:
        runner.run("grid_stride", 100, 2, 2048)
    assert e.value.returncode == 2
    assert "THREADS must be at most" in e.value.stderr_tail


@pytest.mark.gpu
@pytest.mark.parametrize("args", [(0, 8, 32), (100, 0, 32)])
def test_gpu_zero_sizes_are_clear_errors(built, args):
    r = runner.run("grid_stride", *args, check=False)
    assert r.returncode == 2 and "must be a positive" in r.stderr


@pytest.mark.gpu
def test_library_host_form(built):
    """Through libgrid_stride.so. In a subprocess: the printf FIFO can only be sized before the
    process's first printf-ing launch, which another test in this process may already have made."""
    code = (
        "import numpy as np\n"
        "from harness.calling import library\n"
        "a = np.arange(300, dtype=np.int32)\n"
        "library.load('grid_stride').grid_stride_square(a, 300, 3, 32)\n"
        "assert (a == np.arange(300) ** 2).all()\n"
        "import sys; sys.stdout.flush()\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=str(hb.ROOT))
    assert p.returncode == 0, p.stderr
    df = gs.validate(gs.parse_trace(p.stdout), 300, 3, 32)
    assert len(df) == 300

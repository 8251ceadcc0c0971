"""harness.calling.parse on synthetic lines and on output recorded on a real GPU (tests/fixtures)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.calling import parse
from harness.programs import device_info, hello

FIX = Path(__file__).parent.parent / "fixtures"


def test_tagged_line_parsing():
    text = """some human text
result program=matmul variant=02_tiled m=4096 ms=1.25 check=pass
device_info name="NVIDIA H200"
# comment k=v
result program=square variant=01_naive m=7 ms=0.5 check=fail
"""
    df = parse.tagged(text, "result")
    assert list(df["program"]) == ["matmul", "square"]
    assert df["m"].tolist() == [4096, 7] and df["ms"].tolist() == [1.25, 0.5]
    assert parse.tagged_dict(text, "device_info") == {"name": "NVIDIA H200"}
    assert parse.parse_line("no tag here") is None
    assert parse.parse_line("x=1 y=2") is None  # the first token must be a tag


def test_result_lines_of_one_program():
    import pytest

    text = "result program=matmul variant=01_naive ms=2 check=pass\nresult program=other x=1\n"
    df = parse.results(text, "matmul")
    assert df[["variant", "ms", "check"]].values.tolist() == [["01_naive", 2, "pass"]]
    with pytest.raises(ValueError, match="result program=square"):
        parse.results(text, "square")
    with pytest.raises(ValueError):
        parse.results("", "matmul")


def test_hello_all_fixture():
    text = (FIX / "hello_all_h200.txt").read_text()
    assert "H200" in text.splitlines()[0]
    df = hello.frame(text)
    assert list(df.columns[:4]) == hello.COLUMNS
    counts = df["kernel"].value_counts().to_dict()
    assert counts == {"cpu": 1, "helloGPU": 1, "printInts": 10, "kernelA": 1, "kernelB": 10, "kernelC": 10,
                      "kernelD": 100, "loop": 10}
    for k, (b, t) in hello.SHAPES.items():
        got = {(int(r.block), int(r.thread)) for r in df[df.kernel == k].itertuples()}
        assert got == hello.expected_shape(b, t), k
    assert sorted(df[df.kernel == "printInts"]["value"].astype(int)) == list(range(10))
    assert pd.isna(df[df.kernel == "cpu"]["block"]).all()


def test_hello_check_accepts_the_fixture_and_catches_a_missing_line():
    import pytest

    from harness.base.errors import TraceError

    text = (FIX / "hello_all_h200.txt").read_text()
    hello.check(hello.frame(text), "all")
    lines = text.splitlines()
    drop = next(i for i, line in enumerate(lines) if "kernel=kernelD block=3 thread=7" in line)
    with pytest.raises(TraceError, match="kernelD printed 99 of 100"):
        hello.check(hello.frame("\n".join(lines[:drop] + lines[drop + 1:])), "all")
    with pytest.raises(TraceError, match="duplicated"):
        hello.check(hello.frame("\n".join(lines + [lines[drop]])), "all")


def test_hello_loop_fixture_covers_every_index_once():
    hello.check(hello.frame((FIX / "hello_loop_4_32_h200.txt").read_text()), "loop", 4, 32)
    df = hello.frame((FIX / "hello_loop_4_32_h200.txt").read_text())
    assert len(df) == 128
    assert sorted(df["global"].astype(int)) == list(range(128))
    assert (df["global"] == df["block"] * 32 + df["thread"]).all()


def test_device_info_fixture():
    d = device_info.parse_output((FIX / "device_info_h200.txt").read_text())
    assert d["name"] == "NVIDIA H200" and d["compute_capability"] == "9.0"
    assert d["sm_count"] == 132 and d["warp_size"] == 32 and d["max_threads_per_block"] == 1024
    # The derived peaks follow the formulas printed beside them.
    lanes, sms, clock_hz = d["fp32_lanes_per_sm"], d["sm_count"], d["clock_mhz"] * 1e6
    assert abs(d["fp32_tflops"] - sms * lanes * 2 * clock_hz / 1e12) < 1e-2
    assert abs(d["fp32_inst_per_s"] / (sms * lanes * clock_hz) - 1) < 1e-5
    bw = 2 * d["mem_clock_mhz"] * 1e6 * d["bus_width_bits"] / 8 / 1e9
    assert abs(d["mem_bandwidth_gbs"] - bw) < 0.1

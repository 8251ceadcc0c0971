"""hello's output as recorded on a real GPU (fixtures/), read and checked on the CPU."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.programs import hello

FIX = Path(__file__).parent / "fixtures"


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

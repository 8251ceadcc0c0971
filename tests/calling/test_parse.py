"""harness.calling.parse on synthetic lines and on output recorded on a real GPU (tests/fixtures)."""

from __future__ import annotations

from harness.calling import parse


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



"""analysis.report builds index.md and a self-contained index.html from a build folder made of
fixtures: recorded nsys output, a bench CSV, a sanitizer summary, a junit file and small figures.
Missing pieces are listed as "not generated"."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from analysis import profile as aprof  # noqa: E402
from analysis import report  # noqa: E402
from harness import bench, timing  # noqa: E402
from harness import profile as hp  # noqa: E402

FIX = Path(__file__).parent / "fixtures"
RECORDED = Path(__file__).parent.parent / "harness" / "data"

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="2" tests="10"><testcase classname="tests.test_x" name="test_ok"/><testcase classname="tests.test_x"
name="test_bad"><failure message="assert 1 == 2">trace</failure></testcase></testsuite></testsuites>"""

FACTS = {"date": "2026-11-21 20:00:00", "gpu": True,
         "device": {"name": "NVIDIA H200", "compute capability": "9.0", "SMs": 132},
         "tools": {"nvcc": "13.0.88 (/usr/local/cuda/bin/nvcc)", "ncu": "2025.3.1 (/usr/local/cuda/bin/ncu)"}}


def _png(path: Path, label: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.set_title(label)
    fig.savefig(path)
    plt.close(fig)
    return path


@pytest.fixture
def build_dir(tmp_path) -> Path:
    b = tmp_path / "build"
    _png(b / "plots" / "gridstride_n500_b8_t32_sim_scatter.png", "grid")
    _png(b / "plots" / "gridstride_n500_b8_t32_sim_heatmap.png", "grid2")
    _png(b / "plots" / "odd_one.png", "other")
    k = hp.nsys_kernel_table(hp.parse_nsys_stats((RECORDED / "nsys_2025.3.1_h200_stats_grayscale.csv").read_text()))
    prof = b / "profiles" / "grayscale"
    prof.mkdir(parents=True)
    k.assign(variant="default", tool="nsys", program="grayscale").to_csv(prof / "kernels.csv", index=False)
    aprof.plot(k, prof)
    (b / "sanitize").mkdir()
    pd.DataFrame({"program": ["hello", "square"], "memcheck": ["clean", "2 errors"]}).to_csv(
        b / "sanitize" / "summary.csv", index=False)
    (b / "test-results").mkdir()
    (b / "test-results" / "junit.xml").write_text(JUNIT)
    cases = pd.DataFrame([{"program": "square", "variant": "03_vectorized", "size": "2^24", "median_ms": 0.045,
                           "p25_ms": 0.044, "p75_ms": 0.046, "iqr_ms": 0.002, "value": 2982.0, "unit": "GB/s",
                           "ceiling": "memcpy", "ceiling_value": 3350.0, "ratio": 0.8901, "target": 0.95,
                           "meets_target": False, "bytes": 1.34e8, "flops": 1.68e7, "note": ""}])
    meta = {"device": "NVIDIA H200", "driver": "13.0", "runtime": "13.0", "nvcc": "13.0.88",
            "date": "2026-11-21T20:00:00"}
    (b / "bench").mkdir()
    bench.write_csv(cases, meta, {"memcpy": bench.Ceiling("memcpy", 3350.0, "GB/s", "DtoD 256 MiB",
                                                          timing.summarize([0.16] * 10))},
                    dest=b / "bench" / "bench-h200-1.csv")
    return b


def test_report_from_fixtures(build_dir):
    out = build_dir / "report"
    md, html = report.write(out, facts=FACTS, demo={"gpu": True, "steps": [
        {"name": "build", "status": "passed", "detail": "9 programs"},
        {"name": "quick bench", "status": "passed", "detail": "1 case"}]}, build=build_dir)
    text = md.read_text()
    for title in ("## Device", "## Tests", "## compute-sanitizer", "## Benchmarks", "## Grid-stride figures",
                  "## Mandelbrot", "## Grayscale", "## Profiles", "## Other figures"):
        assert title in text, title
    assert "| compute capability | 9.0 |" in text
    assert "pytest (test-results/junit.xml): 7 passed, 1 failed, 0 errors, 2 skipped of 10." in text
    assert "tests.test_x::test_bad" in text
    assert "`invoke demo`: 2 passed, 0 failed, 0 skipped." in text
    assert "| square | 2 errors |" in text
    assert "| square | 03_vectorized | 2^24 | 0.045 | 0.002 | 2982 | GB/s | memcpy | 0.8901 | 0.95 |" in text
    assert "| memcpy | 3350 | GB/s | DtoD 256 MiB |" in text
    assert re.search(r"_not generated: run `invoke viz mandelbrot`", text)
    assert re.search(r"_not generated: run `invoke run grayscale`", text)
    assert "| default | grayscale_03_vectorized | 44 | 6 | 1.51 |" in text  # the profile's kernel table
    # Every picture is linked relatively, and the file is really there.
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    names = {Path(x).name for x in links}
    assert {"bench_ratios.png", "bench_roofline.png", "grayscale_kernel_shares.png", "plots_odd_one.png",
            "plots_gridstride_n500_b8_t32_sim_scatter.png"} <= names
    for link in links:
        assert not Path(link).is_absolute() and (out / link).exists(), link
    # The HTML holds every picture itself, and refers to nothing outside.
    h = html.read_text()
    imgs = re.findall(r"<img [^>]*src='([^']+)'", h)
    assert len(imgs) == len(links) and all(s.startswith("data:image/png;base64,") for s in imgs)
    assert base64.b64decode(imgs[0].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<table" in h and "not generated" in h


def test_pictures_left_from_an_earlier_run_are_not_shown(build_dir):
    """After a demo, a picture its passed steps did not draw, and that is older than the demo, is a
    leftover (say the mandelbrot of yesterday, whose step failed today): the report leaves it out.
    A picture drawn after the demo (`invoke viz`) is current."""
    import os
    import time

    plots = build_dir / "plots"
    stale = next(iter(sorted(plots.glob("gridstride*.png"))))
    drawn = [str(p) for p in sorted(plots.glob("gridstride*.png")) if p != stale]
    finished = time.time()
    os.utime(stale, (finished - 3600, finished - 3600))
    later = plots / "odd_one.png"
    os.utime(later, (finished + 5, finished + 5))
    md, _ = report.write(build_dir / "report2", build=build_dir, demo={"gpu": True, "finished": finished, "steps": [
        {"name": "draw gridstride", "status": "passed", "detail": "", "outputs": drawn},
        {"name": "draw mandelbrot", "status": "failed", "detail": "no GPU", "outputs": []}]})
    names = {Path(x).name for x in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md.read_text())}
    assert f"plots_{stale.name}" not in names
    assert {f"plots_{Path(d).name}" for d in drawn} <= names
    assert "plots_odd_one.png" in names


def test_report_picks_the_newest_bench_by_the_date_inside(tmp_path):
    from analysis import bench as abench

    d = tmp_path / "bench"
    d.mkdir()
    head = "program,variant,size,ratio,unit,date\n"
    (d / "a.csv").write_text(head + "square,01_naive,2^24,0.5,GB/s,2026-11-23T10:00:00\n")
    (d / "b.csv").write_text(head + "square,01_naive,2^24,0.6,GB/s,2026-11-20T10:00:00\n")
    os_time = (d / "a.csv").stat().st_mtime
    import os

    os.utime(d / "b.csv", (os_time + 100, os_time + 100))  # b was touched last, but ran earlier
    assert abench.latest_csv(d) == d / "a.csv"


def test_empty_build_lists_what_is_missing(tmp_path):
    md, html = report.write(tmp_path / "report", build=tmp_path)
    text = md.read_text()
    assert text.count("_not generated") == 8  # device, tests, sanitizer, bench, 3 picture sections, profiles
    assert "Other figures" not in text and "<img" not in html.read_text()


def test_facts_are_kept_for_the_next_report(build_dir):
    out = build_dir / "report"
    report.write(out, facts=FACTS, build=build_dir)
    md, _ = report.write(out, build=build_dir)  # no facts given: the saved ones are used
    assert "NVIDIA H200" in md.read_text()


def test_no_gpu_facts_say_so(tmp_path):
    md, _ = report.write(tmp_path / "r", facts={"gpu": False, "gpu_why": "cudaErrorNoDevice", "tools": {}},
                         build=tmp_path)
    assert "No GPU was visible when this report was written: cudaErrorNoDevice" in md.read_text()


def test_md_table_escapes():
    t = report.md_table(pd.DataFrame({"a": ["x|y"], "b": [1.23456789]}))
    assert t.splitlines()[2] == "| x\\|y | 1.235 |"

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
from analysis import report
from harness import programs  # noqa: E402
from harness.base.paths import RESULTS_DIR  # noqa: E402
from harness.measuring import bench, results_csv, timing  # noqa: E402
from harness.profiling import profile as hp  # noqa: E402

FIX = Path(__file__).parent.parent / "fixtures"
RECORDED = Path(__file__).parents[2] / "harness" / "data"

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="2" tests="10"><testcase classname="tests.test_x" name="test_ok"/><testcase classname="tests.test_x"
name="test_bad"><failure message="assert 1 == 2">trace</failure></testcase></testsuite></testsuites>"""

FACTS = {"date": "2026-11-21 20:00:00", "gpu": True,
         "device": {"name": "NVIDIA H200", "compute capability": "9.0", "SMs": 132},
         "tools": {"nvcc": "13.0.88 (/usr/local/cuda/bin/nvcc)", "ncu": "2025.3.1 (/usr/local/cuda/bin/ncu)"}}


def _write(*args, **kw):
    """report.write with the tour the tasks hand it: the registry's, in the learning path's order."""
    kw.setdefault("tour", programs.tour())
    return report.write(*args, **kw)


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
    results_csv.write(cases, meta, {"memcpy": bench.Ceiling("memcpy", 3350.0, "GB/s", "DtoD 256 MiB",
                                                          timing.summarize([0.16] * 10))},
                    dest=b / "bench" / "bench-h200-1.csv")
    return b


def test_report_from_fixtures(build_dir):
    out = build_dir / "report"
    md, html = _write(out, facts=FACTS, demo={"gpu": True, "steps": [
        {"name": "build", "status": "passed", "detail": "9 programs"},
        {"name": "quick bench", "status": "passed", "detail": "1 case"}]}, build=build_dir)
    text = md.read_text()
    titles = [ln[3:] for ln in text.splitlines() if ln.startswith("## ")]
    assert titles[:6] == ["The tour", "Tests", "Benchmarks", "Device", "compute-sanitizer", "Profiles"], titles
    assert "Other figures" in titles
    assert "| compute capability | 9.0 |" in text
    # No junit named: the newest pytest run in build/, said to be that.
    assert "pytest (the newest test run in build/): 7 passed, 1 failed, 0 errors, 2 skipped of 10." in text
    assert "tests.test_x::test_bad" in text
    assert "`invoke demo`: 2 passed, 0 failed, 0 skipped." in text
    assert "| square | 2 errors |" in text
    assert "| square | 03_vectorized | 2^24 | 0.8901 | 0.95 | False | 2982 | GB/s | memcpy | 0.045 |" in text
    assert "| memcpy | 3350 | GB/s | DtoD 256 MiB |" in text
    assert "0 of 1 current targets met" in text
    assert "the sloped roof is the memory bandwidth this run measured (memcpy 3350 GB/s)" in text
    assert "| default | grayscale_03_vectorized | 44 | 6 | 1.51 |" in text  # the profile's kernel table
    # The tour: the grid-stride picture of this build, captioned; committed pictures for the others.
    tour = text.split("## Tests")[0]
    assert "**grid_stride**: which thread squared which element" in tour
    assert "**mandelbrot**: escape counts" in tour and "(committed picture, `cuda/mandelbrot/mandelbrot_cpu.png`)" in tour
    # Every picture is linked relatively, and the file is really there.
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    names = {Path(x).name for x in links}
    assert {"bench_ratios.png", "bench_roofline.png", "grayscale_kernel_shares.png", "plots_odd_one.png",
            "plots_gridstride_n500_b8_t32_sim_scatter.png", "mandelbrot_mandelbrot_cpu.png"} <= names
    for link in links:
        assert not Path(link).is_absolute() and (out / link).exists(), link
    # The HTML holds every picture itself, and refers to nothing outside.
    h = html.read_text()
    imgs = re.findall(r"<img [^>]*src='([^']+)'", h)
    assert len(imgs) == len(links) and all(s.startswith("data:image/png;base64,") for s in imgs)
    assert base64.b64decode(imgs[0].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<table" in h and "<details>" in h and "<figcaption><b>grid_stride</b>" in h


def test_the_tests_shown_are_the_named_run(build_dir, tmp_path):
    """A junit file named by the caller (the demo's own) is the tests section, not the newest pytest file."""
    mine = tmp_path / "mine.xml"
    mine.write_text('<testsuites><testsuite name="invoke demo" tests="3" failures="0" errors="0" skipped="1" '
                    'timestamp="2026-11-25T10:00:00"><testcase classname="demo" name="a"/></testsuite></testsuites>')
    md, _ = _write(build_dir / "r", build=build_dir, junit=mine)
    text = md.read_text()
    assert "invoke demo (this run, 2026-11-25 10:00:00): 2 passed, 0 failed, 0 errors, 1 skipped of 3." in text
    assert "7 passed" not in text


def test_replaced_targets_are_not_counted(build_dir):
    """09_tuned's 0.9 is replaced by 11's 1.0 at the same size and ceiling; 02_tiled's own ceiling keeps its
    target; another size keeps 09's. Long tables fold."""
    from analysis import bench as abench

    rows = [("matmul", "09_tuned", "4096^3", "cublas", 0.95, 0.9, True),
            ("matmul", "11_splitk_tail", "4096^3", "cublas", 0.99, 1.0, False),
            ("matmul", "02_tiled-t16-vs-naive", "4096^3", "matmul_01_naive", 1.6, 1.5, True),
            ("matmul", "02_tiled-t32-vs-naive", "4096^3", "matmul_01_naive", 1.7, 1.5, True),
            ("matmul", "09_tuned", "2048^3", "cublas@2048^3", 0.93, 0.9, True)]
    cases = pd.DataFrame(rows, columns=["program", "variant", "size", "ceiling", "ratio", "target", "meets_target"])
    cur = abench.current_targets(cases)
    assert list(cur["target"].isna()) == [True, False, False, False, False]
    assert cur["meets_target"].tolist()[0] is None and cur["meets_target"].tolist()[1] is False
    assert cases["target"].notna().all()  # the input is left alone
    assert abench.rung("11_splitk_tail") == 11 and abench.rung("cublas") is None


def test_a_run_without_a_memory_ceiling_says_so(tmp_path):
    cases = pd.DataFrame([{"program": "matmul", "variant": "09_tuned", "size": "4096^3", "median_ms": 3.0,
                           "value": 45.0, "unit": "TFLOP/s", "ceiling": "cublas", "ceiling_value": 50.0, "ratio": 0.9,
                           "target": 0.9, "meets_target": True, "bytes": 2e8, "flops": 1.4e11}])
    meta = {"device": "NVIDIA H100", "driver": "13.0", "runtime": "13.0", "nvcc": "13.0.88", "date": "2026-11-21T20:00:00"}
    (tmp_path / "bench").mkdir()
    results_csv.write(cases, meta, {"cublas": bench.Ceiling("cublas", 50.0, "TFLOP/s", "SGEMM",
                                                          timing.summarize([2.7] * 10))},
                    dest=tmp_path / "bench" / "bench-h100-1.csv")
    md, _ = _write(tmp_path / "r", build=tmp_path)
    assert "this run measured no memory ceiling" in md.read_text()


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
    md, _ = _write(build_dir / "report2", build=build_dir, demo={"gpu": True, "finished": finished, "steps": [
        {"name": "draw gridstride", "status": "passed", "detail": "", "outputs": drawn},
        {"name": "draw mandelbrot", "status": "failed", "detail": "no GPU", "outputs": []}]})
    names = {Path(x).name for x in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md.read_text())}
    assert f"plots_{stale.name}" not in names
    assert {f"plots_{Path(d).name}" for d in drawn} <= names
    assert "plots_odd_one.png" in names


def test_report_picks_the_newest_bench_by_the_date_inside(tmp_path):

    d = tmp_path / "bench"
    d.mkdir()
    head = "program,variant,size,ratio,unit,date\n"
    (d / "a.csv").write_text(head + "square,01_naive,2^24,0.5,GB/s,2026-11-23T10:00:00\n")
    (d / "b.csv").write_text(head + "square,01_naive,2^24,0.6,GB/s,2026-11-20T10:00:00\n")
    os_time = (d / "a.csv").stat().st_mtime
    import os

    os.utime(d / "b.csv", (os_time + 100, os_time + 100))  # b was touched last, but ran earlier
    assert results_csv.latest(d) == d / "a.csv"


def test_empty_build_lists_what_is_missing(tmp_path):
    md, html = _write(tmp_path / "report", build=tmp_path)
    text = md.read_text()
    assert text.count("_not generated") == 5  # tests, bench, device, sanitizer, profiles
    # The tour still shows the pictures committed with the programs, and says which need a GPU.
    assert "committed picture" in text and "these need a GPU" in text
    assert "Other figures" not in text


def test_facts_are_kept_for_the_next_report(build_dir):
    out = build_dir / "report"
    _write(out, facts=FACTS, build=build_dir)
    md, _ = _write(out, build=build_dir)  # no facts given: the saved ones are used
    assert "NVIDIA H200" in md.read_text()


def test_no_gpu_facts_say_so(tmp_path):
    md, _ = _write(tmp_path / "r", facts={"gpu": False, "gpu_why": "cudaErrorNoDevice", "tools": {}},
                         build=tmp_path)
    assert "No GPU was visible when this report was written: cudaErrorNoDevice" in md.read_text()


def test_md_table_escapes():
    t = report.md_table(pd.DataFrame({"a": ["x|y"], "b": [1.23456789]}))
    assert t.splitlines()[2] == "| x\\|y | 1.235 |"


@pytest.fixture(scope="module")
def committed_report(tmp_path_factory):
    """A report written from a build folder with no bench run of its own, beside the repository's
    committed results (written once: drawing every committed run takes a while)."""
    tmp = tmp_path_factory.mktemp("committed")
    (tmp / "bench").mkdir()
    (tmp / "bench" / "results").symlink_to(RESULTS_DIR)
    build = tmp / "build"
    build.mkdir()
    md, html = _write(build / "report", build=build)
    return build, md, html


def test_without_a_run_here_every_programs_committed_results_are_shown(committed_report):
    """The bench section showed only the newest committed run (collectives); each program has its own."""
    build, md, _ = committed_report
    gpu, by_csv = report.committed_runs(build)
    taken = sorted(p for ps in by_csv.values() for p in ps)
    assert gpu == "h100" and taken == sorted(["attention", "collectives", "convolution", "gemm_tc", "grayscale",
                                              "mandelbrot", "matmul", "scan", "softmax", "square", "transpose"])
    assert {q.name: v for q, v in by_csv.items()}["bench-h100-80gb-hbm3-20261124T195859.csv"] == ["matmul"]
    bench_part = md.read_text().split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    for prog in taken:
        assert f"| {prog} |" in bench_part, prog
    assert "committed reference results of bench/results/h100/" in bench_part
    assert len(re.findall(r"!\[[^\]]*\]\(img/bench_bench-h100[^)]*_ratios\.png\)", bench_part)) == len(by_csv)


def test_wide_pictures_span_the_page_and_every_picture_links_to_its_full_size(committed_report):
    _, md, html = committed_report
    out = md.parent
    h = html.read_text()
    figures = re.findall(r"<figure( class='wide')?><a href='img/([^']+)' target='_blank'><img ", h)
    assert figures and len(figures) == h.count("<img ")
    for _, name in figures:
        assert (out / "img" / name).is_file(), name
    wide = {name for cls, name in figures if cls}
    assert {"h100_ladder_matmul-20261124T195859.png", "h100_ladder_gemm_tc-20261124T211953.png"} <= wide
    assert "mandelbrot_mandelbrot_cpu.png" not in wide
    for link, target in re.findall(r"\[!\[[^\]]*\]\(([^)]+)\)\]\(([^)]+)\)", md.read_text()):
        assert link == target and (out / target).is_file()


def test_grayscales_input_is_drawn_beside_its_grey_image(tmp_path):
    from harness.programs import grayscale as gs

    plots = tmp_path / "build" / "plots"
    plots.mkdir(parents=True)
    assert gs.cli([], out=str(plots / "grayscale.png"), cpu=True) == 0  # the CPU path saves its input too
    assert (plots / "grayscale_input.png").is_file()
    md, _ = _write(tmp_path / "build" / "report", build=tmp_path / "build", root=tmp_path)
    tour = md.read_text().split("## Tests")[0]
    assert "(img/tour_grayscale.png)" in tour and "the test picture beside its grey image" in tour
    assert "grayscale_input.png" not in tour  # one figure, not two cells that may land apart

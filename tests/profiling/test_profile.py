"""harness.profiling.profile: nsys and ncu CSV parsers on output recorded on an H200 (tests/fixtures, tool
versions in the names; profilers_2025.3.1_h200.txt says how each was made), the nvprof message,
auto-selection with fake tool results, failure diagnoses, and the profile chart's numbers.
On a GPU: `invoke profile` through nsys and through ncu for square and transformer_block."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import profile as aprof
from conftest import stand_in
from harness import programs
from harness.base.errors import NotBuilt
from harness.compile import build, toolchain
from harness.profiling import ncu, nsys
from harness.profiling import profile as hp

FIX = Path(__file__).parent.parent / "fixtures"
# The two nsys runs the demo draws live with the product's recorded data (harness/data/).
RECORDED = build.ROOT / "harness" / "data"
NSYS_GREY = RECORDED / "nsys_2025.3.1_h200_stats_grayscale.csv"
NSYS_HELLO = RECORDED / "nsys_2025.3.1_h200_stats_hello.csv"
NSYS_NO_LIBDW = FIX / "nsys_2025.3.1_h200_no_libdw_hello.txt"
NCU_GREY = FIX / "ncu_2025.3.1_h200_raw_grayscale.csv"
NCU_HELLO = FIX / "ncu_2025.3.1_h200_raw_hello.csv"
NCU_DIRECT = FIX / "ncu_2025.3.1_h200_direct_grayscale.txt"

GREY_KERNELS = ["grayscale_03_vectorized", "grayscale_01_1d", "grayscale_02_2d"]


# --- nsys stats ------------------------------------------------------------------------------------

def test_nsys_stats_three_reports_past_the_chatter():
    text = NSYS_GREY.read_text()
    assert text.startswith("Generating SQLite") and "Processing [" in text  # the chatter is really there
    r = hp.parse_nsys_stats(text)
    assert set(r) == {"cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum"}
    k = hp.nsys_kernel_table(r)
    assert [nsys.short_name(n) for n in k["kernel"]] == GREY_KERNELS
    assert k["instances"].tolist() == [6, 6, 6]
    assert k["total_ns"].tolist() == [9056, 5792, 5728]
    assert k.loc[0, "avg_ns"] == pytest.approx(1509.3)
    assert k["time_pct"].sum() == pytest.approx(99.9, abs=0.2)  # nsys rounds each share to 0.1
    api = r["cuda_api_sum"].set_index("name")
    assert api.loc["cudaMalloc", "count"] == 2 and api.loc["cudaLaunchKernel", "count"] == 18
    mem = r["cuda_gpu_mem_time_sum"].set_index("name")
    assert mem.loc["[CUDA memcpy Host-to-Device]", "count"] == 1
    assert mem.loc["[CUDA memcpy Device-to-Host]", "total_ns"] == 5152


def test_nsys_skipped_report_is_empty_not_missing():
    r = hp.parse_nsys_stats(NSYS_HELLO.read_text())
    assert r["cuda_gpu_mem_time_sum"].empty  # "SKIPPED: ... does not contain GPU memory data."
    k = hp.nsys_kernel_table(r)
    assert k.loc[0, "kernel"] == "printInts()" and len(k) == 7
    assert set(k["kernel"]) >= {"kernelA()", "kernelB()", "kernelC()", "kernelD()", "helloGPU()", "loop()"}


def test_nsys_columns_are_read_by_header_name_not_position():
    """Reorder the kernel report's columns and drop the Processing lines: same numbers come out
    (the report is then recognised by its header alone)."""
    text = NSYS_GREY.read_text()
    block = text.split("cuda_gpu_kern_sum.py]... \n")[1].split("\n\n")[0]
    df = pd.read_csv(io.StringIO(block))
    shuffled = df[list(reversed(df.columns))].to_csv(index=False)
    r = hp.parse_nsys_stats("some chatter\nmore chatter [x]\n" + shuffled)
    k = hp.nsys_kernel_table(r)
    assert k["total_ns"].tolist() == [9056, 5792, 5728]
    assert k["instances"].tolist() == [6, 6, 6]


def test_nsys_summary_from_sqlite_matches_by_hand(tmp_path):
    """The fallback for an nsys without the stats scripts: the same summary straight from SQLite."""
    db = tmp_path / "r.sqlite"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER, value TEXT);
        INSERT INTO StringIds VALUES (1, 'k_a(float*)'), (2, 'k_b(int)'), (3, 'cudaMalloc'), (4, 'cudaLaunchKernel');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, demangledName INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (0, 300, 1), (1000, 1100, 1), (2000, 2600, 2);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, nameId INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (0, 50, 3), (60, 70, 4), (80, 95, 4);
        CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INT, name TEXT, label TEXT);
        INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (1, 'HTOD', 'Host-to-Device');
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, copyKind INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (0, 40, 1);
    """)
    con.commit()
    con.close()
    r = hp.summary_from_sqlite(db)
    k = hp.nsys_kernel_table(r)
    assert k["kernel"].tolist() == ["k_b(int)", "k_a(float*)"]
    assert k["total_ns"].tolist() == [600, 400] and k["instances"].tolist() == [1, 2]
    assert k["time_pct"].tolist() == pytest.approx([60.0, 40.0])
    api = r["cuda_api_sum"].set_index("name")
    assert api.loc["cudaLaunchKernel", "count"] == 2 and api.loc["cudaLaunchKernel", "total_ns"] == 25
    assert r["cuda_gpu_mem_time_sum"]["name"].tolist() == ["[CUDA memcpy Host-to-Device]"]


# --- ncu -------------------------------------------------------------------------------------------

def test_ncu_raw_page_units_and_kernel_table():
    raw, units = hp.parse_ncu_raw(NCU_GREY.read_text())
    assert len(raw) == 18  # 3 variants x 6 launches (1 warm-up + 5 timed reps)
    assert units["gpu__time_duration.sum"] == "ns" and units["dram__bytes.sum"] == "byte"
    assert units["sm__warps_active.avg.pct_of_peak_sustained_active"] == "%"
    k = hp.ncu_kernel_table(raw, units)
    assert sorted(nsys.short_name(n) for n in k["kernel"]) == sorted(GREY_KERNELS)
    assert k["instances"].tolist() == [6, 6, 6]
    # The numbers behind the table, by hand from the per-launch rows.
    for _, row in k.iterrows():
        d = raw.loc[raw["kernel"] == row["kernel"], "gpu__time_duration.sum"]
        assert row["total_ns"] == pytest.approx(d.sum()) and row["avg_ns"] == pytest.approx(d.mean())
    assert k["time_pct"].sum() == pytest.approx(100.0)
    for col in ("dram_bytes", "achieved_occupancy_pct", "sm_throughput_pct", "memory_throughput_pct"):
        assert col in k and np.isfinite(k[col]).all()
    assert not any(c.startswith("device__attribute") for c in k.columns)  # ncu's 280 other columns stay out


def test_ncu_skips_prof_chatter_and_program_output():
    text = NCU_DIRECT.read_text()
    assert "==PROF==" in text and "result program=grayscale" in text
    raw, units = hp.parse_ncu_raw(text)
    k = hp.ncu_kernel_table(raw, units)
    assert len(k) == 1 and k.loc[0, "instances"] == 6 and k.loc[0, "time_pct"] == 100.0


def test_ncu_hello_and_user_metrics():
    raw, units = hp.parse_ncu_raw(NCU_HELLO.read_text())
    mm = hp.metric_map("dram__bytes.sum")
    assert set(mm) == {"gpu__time_duration.sum", "dram__bytes.sum"}  # the duration is always kept
    k = hp.ncu_kernel_table(raw, units, mm)
    assert list(k.columns) == hp.KERNEL_COLUMNS + ["dram_bytes"]
    assert k.loc[0, "kernel"] == "printInts()"


def test_ncu_time_units_are_scaled_to_ns():
    raw = pd.DataFrame({"kernel": ["a", "a", "b"], "gpu__time_duration.sum": [1.0, 3.0, 4.0]})
    k = hp.ncu_kernel_table(raw, {"gpu__time_duration.sum": "usecond"})
    assert k.set_index("kernel").loc["b", "total_ns"] == 4000.0
    assert k.set_index("kernel").loc["a", "avg_ns"] == 2000.0


def test_ncu_without_header_says_so():
    with pytest.raises(ValueError, match="no ncu CSV header"):
        hp.parse_ncu_raw("==PROF== Connected\n==WARNING== No kernels were profiled.\n")


# --- nvprof --------------------------------------------------------------------------------------

def test_nvprof_message_says_why_and_points_at_nsys(monkeypatch):
    monkeypatch.setattr(hp.toolchain, "find", lambda name: toolchain.Tool(name, None))
    msg = hp.nvprof_message("square", ["1000"])
    assert "CUDA 13 removed it" in msg and "compute capability >= 7.5" in msg
    assert "invoke profile square --tool nsys" in msg and "nsys nvprof build/bin/square 1000" in msg
    monkeypatch.setattr(hp.toolchain, "find", lambda name: toolchain.Tool(name, "/opt/x/nsys", "2025.3.1"))
    assert "`/opt/x/nsys nvprof build/bin/square 1000`" in hp.nvprof_message("square", ["1000"])


def test_profile_nvprof_raises_the_message_not_command_not_found():
    with pytest.raises(hp.NvprofUnavailable, match="CUDA 13 removed it"):
        hp.profile("hello", programs.profile_runs("hello"), tool="nvprof")


def test_invoke_profile_nvprof_exits_with_the_message():
    r = subprocess.run([sys.executable, "-m", "invoke", "profile", "hello", "--tool", "nvprof"], cwd=build.ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "CUDA 13 removed it" in r.stderr and "nsys" in r.stderr
    assert "command not found" not in r.stderr + r.stdout


# --- auto selection ------------------------------------------------------------------------------

HELLO = [(None, ["all"])]  # what the registry hands down for hello (checked in test_program_argument_contract)


def _fake_table(name="k(int)"):
    return pd.DataFrame([{"kernel": name, "time_pct": 100.0, "total_ns": 10.0, "instances": 1, "avg_ns": 10.0,
                          "med_ns": 10.0, "min_ns": 10.0, "max_ns": 10.0}])


def _patch_tools(monkeypatch, nsys=None, ncu=None):
    def fake(tool, result):
        def run_tool(prog, argv, outdir, tag="", **kw):
            if isinstance(result, Exception):
                raise result
            return result, {}, [], [[tool, *argv]]
        return run_tool

    monkeypatch.setattr(hp, "run_nsys", fake("nsys", nsys))
    monkeypatch.setattr(hp, "run_ncu", fake("ncu", ncu))


def test_auto_takes_the_first_tool_that_gives_a_report(monkeypatch, tmp_path):
    _patch_tools(monkeypatch, nsys=_fake_table("from_nsys()"), ncu=_fake_table("from_ncu()"))
    res = hp.profile("hello", HELLO, outdir=tmp_path)
    assert res.tool == "nsys" and res.kernels["kernel"].tolist() == ["from_nsys()"] and not res.failures
    assert (tmp_path / "kernels.csv").exists()


def test_auto_goes_on_to_ncu_and_keeps_the_reason(monkeypatch, tmp_path):
    _patch_tools(monkeypatch, nsys=hp.ToolFailure("nsys", "importer library libdw.so.1 missing"),
                 ncu=_fake_table("from_ncu()"))
    res = hp.profile("hello", HELLO, outdir=tmp_path)
    assert res.tool == "ncu" and [f.tool for f in res.failures] == ["nsys"]
    assert "libdw.so.1" in res.failures[0].reason


def test_auto_falls_back_to_event_timing(monkeypatch, tmp_path):
    _patch_tools(monkeypatch, nsys=hp.ToolFailure("nsys", "not found"), ncu=hp.ToolFailure("ncu", hp.PERM_FIX))
    seen = {}

    def fallback(prog, variants):
        seen["args"] = (prog, variants)
        return hp._with_variant(_fake_table("square 03_vectorized 2^24"), "03_vectorized")

    res = hp.profile("hello", HELLO, outdir=tmp_path, fallback=fallback)
    assert res.tool == "event timing" and seen["args"] == ("hello", [None])
    assert [f.tool for f in res.failures] == ["nsys", "ncu"]
    assert res.note.startswith("no profiler produced a report") and (tmp_path / "kernels.csv").exists()


def test_auto_with_nothing_says_why_for_each_tool(monkeypatch, tmp_path):
    _patch_tools(monkeypatch, nsys=hp.ToolFailure("nsys", "not found"), ncu=hp.ToolFailure("ncu", hp.PERM_FIX))

    def fallback(prog, variants):
        raise hp.CudalabError("hello has no bench cases to time")

    with pytest.raises(hp.NoReport) as e:
        hp.profile("hello", HELLO, outdir=tmp_path, fallback=fallback)
    lines = str(e.value).splitlines()
    assert lines[1] == "  nsys: not found"
    assert lines[2].startswith("  ncu: no permission") and "NVreg_RestrictProfilingToAdminUsers=0" in lines[2]
    assert lines[3] == "  event timing: hello has no bench cases to time"


def test_named_tool_failure_is_not_hidden(monkeypatch, tmp_path):
    _patch_tools(monkeypatch, nsys=_fake_table(), ncu=hp.ToolFailure("ncu", "not found"))
    with pytest.raises(hp.ToolFailure, match="ncu: not found"):
        hp.profile("hello", HELLO, tool="ncu", outdir=tmp_path)


# --- running the tools (fake subprocesses) ---------------------------------------------------------

@pytest.fixture
def fake_tools(monkeypatch):
    monkeypatch.setattr(hp.toolchain, "find", lambda name: toolchain.Tool(name, f"/fake/{name}", "2025.3.1"))
    monkeypatch.setattr(hp, "_exe", lambda prog: Path("/fake/bin") / prog)
    monkeypatch.setattr(hp, "nsys_env", lambda: ({}, ""))


def test_run_nsys_commands_and_table(fake_tools, tmp_path):
    calls = []

    def run(argv, env=None, timeout=None):
        calls.append(argv)
        if argv[1] == "profile":
            Path(argv[argv.index("--output") + 1] + ".nsys-rep").write_text("rep")
            return subprocess.CompletedProcess(argv, 0, "Collecting data...\n", "")
        return subprocess.CompletedProcess(argv, 0, NSYS_GREY.read_text(), "")

    k, reports, files, cmds = hp.run_nsys("grayscale", ["--variant", "all", "67", "93"], tmp_path, run=run)
    assert calls[0][:2] == ["/fake/nsys", "profile"] and "--trace=cuda,nvtx" in calls[0]
    assert calls[0][-5:] == ["/fake/bin/grayscale", "--variant", "all", "67", "93"]
    assert calls[1][1] == "stats" and "cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum" in calls[1]
    assert calls[1][calls[1].index("--format") + 1] == "csv"
    assert len(k) == 3 and set(reports) == set(hp.NSYS_REPORTS)
    assert (tmp_path / "nsys_cuda_gpu_kern_sum.csv").exists() and (tmp_path / "nsys_cuda_api_sum.csv").exists()


def test_run_nsys_without_libdw_names_the_library(monkeypatch, fake_tools, tmp_path):
    monkeypatch.setattr(hp, "nsys_env", lambda: ({}, "importer library libdw.so.1 missing (...)"))

    def run(argv, env=None, timeout=None):
        Path(argv[argv.index("--output") + 1] + ".qdstrm").write_text("raw")
        return subprocess.CompletedProcess(argv, 0, NSYS_NO_LIBDW.read_text(), "")

    with pytest.raises(hp.ToolFailure, match="libdw.so.1"):
        hp.run_nsys("hello", ["all"], tmp_path, run=run)


def test_run_ncu_clock_control_metrics_and_table(fake_tools, tmp_path):
    calls = []

    def run(argv, env=None, timeout=None):
        calls.append(argv)
        if "--export" in argv:
            Path(argv[argv.index("--export") + 1] + ".ncu-rep").write_text("rep")
            return subprocess.CompletedProcess(argv, 0, "==PROF== Disconnected\n", "")
        return subprocess.CompletedProcess(argv, 0, NCU_GREY.read_text(), "")

    k, _, files, _ = hp.run_ncu("grayscale", ["--variant", "all", "67", "93"], tmp_path, run=run)
    first = calls[0]
    assert first[first.index("--clock-control") + 1] == "none"  # measure the card as it is
    assert first[first.index("--metrics") + 1].split(",") == list(hp.DEFAULT_METRICS)
    second = calls[1]
    assert second[1] == "--import" and "--csv" in second
    assert second[second.index("--page") + 1] == "raw" and second[second.index("--print-units") + 1] == "base"
    assert len(k) == 3 and (tmp_path / "ncu_raw.csv").exists()
    calls.clear()
    hp.run_ncu("grayscale", [], tmp_path, clock_control=True, run=run)
    assert calls[0][calls[0].index("--clock-control") + 1] == "base"


def test_run_ncu_without_counter_permission(fake_tools, tmp_path):
    text = ("==PROF== Connected to process 1 (/x)\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission "
            "to access NVIDIA GPU Performance Counters on the target device 0.\n")

    def run(argv, env=None, timeout=None):
        return subprocess.CompletedProcess(argv, 0, text, "")

    with pytest.raises(hp.ToolFailure) as e:
        hp.run_ncu("hello", [], tmp_path, run=run)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in e.value.reason and "root" in e.value.reason


def test_diagnose_lines():
    assert "libdw.so.1" in hp.diagnose("nsys", NSYS_NO_LIBDW.read_text())
    assert "LibraryNotLoaded" in hp.diagnose("ncu", "==ERROR== Failed to initialize the profiler: LibraryNotLoaded")
    assert "no kernels" in hp.diagnose("ncu", "==WARNING== No kernels were profiled.")
    assert hp.diagnose("ncu", "", 3) == "exited with status 3"


# --- discovery and arguments ---------------------------------------------------------------------

def test_libdw_is_looked_for_and_put_on_the_path(monkeypatch, tmp_path):
    (tmp_path / "libdw.so.1").write_text("")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{tmp_path}:/somewhere/else")
    assert hp.find_libdw() == tmp_path
    env, missing = hp.nsys_env()
    assert missing == "" and env["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path)


def test_libdw_missing_is_said(monkeypatch, tmp_path):
    monkeypatch.setattr(nsys, "libdw_dirs", lambda: [tmp_path])
    monkeypatch.setattr(nsys, "unpack_libdw", lambda *a, **k: None)
    env, missing = hp.nsys_env()
    assert "libdw.so.1" in missing and "LD_LIBRARY_PATH" in missing


def _fake_dw(root: Path) -> Path:
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libdw.so.1").write_text("")
    for p in (root, root / "usr", root / "usr/lib", lib):
        p.chmod(0o755)
    return lib


def test_libdw_is_never_taken_from_a_shared_tmp_folder(monkeypatch, tmp_path):
    """A libdw.so.1 planted in /tmp/dw (anyone can write /tmp) is not looked at; the project's
    build/tools/dw is, and only while nobody else can write it."""
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    assert not [d for d in nsys.libdw_dirs() if Path("/tmp/dw") in d.parents or Path("/tmp/cudalab-debs") in d.parents]
    monkeypatch.setattr(nsys, "SYSTEM_DIRS", ())
    monkeypatch.setattr(nsys, "user_dw_dir", lambda: tmp_path / "nothing")
    monkeypatch.setattr(nsys, "unpack_libdw", lambda *a, **k: None)
    monkeypatch.setattr(nsys, "DW_DIR", tmp_path / "build" / "tools" / "dw")
    lib = _fake_dw(nsys.DW_DIR)
    env, note = hp.nsys_env()
    assert note == "" and env["LD_LIBRARY_PATH"].split(":")[0] == str(lib)
    for p, mode in ((nsys.DW_DIR, 0o777), (lib, 0o775), (lib / "libdw.so.1", 0o666)):
        p.chmod(mode)
        env, note = hp.nsys_env()
        assert "LD_LIBRARY_PATH" not in env and f"{p} can be written by other users" in note, note
        p.chmod(0o755 if p.is_dir() else 0o644)
    assert hp.nsys_env()[1] == ""


def test_ci_unpacks_the_debs_where_the_nsys_helper_looks():
    text = (build.ROOT / ".ci" / "gpu").read_text()
    assert "/tmp/" not in "".join(ln for ln in text.splitlines() if "dpkg" in ln or "DW_DIR" in ln)
    dw = next(ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("DW_DIR="))
    assert build.ROOT / dw == nsys.DW_DIR and 'dpkg -x "$f" "$DW_DIR"' in text


def test_program_argument_contract(monkeypatch):
    """The registry turns a program's module and the user's --variant / arguments into the runs."""
    mod = stand_in(monkeypatch, "x", variants=("01_naive", "02_flash"), profile_variants=("01_naive", "02_flash"),
                                profile_args=lambda v: ["--variant", v or "all", "64"])
    runs = programs.profile_runs
    assert runs("x", "02_flash", rec=mod) == [("02_flash", ["--variant", "02_flash", "64"])]
    assert runs("x", None, rec=mod) == [("01_naive", ["--variant", "01_naive", "64"]),
                                        ("02_flash", ["--variant", "02_flash", "64"])]  # PROFILE_VARIANTS
    assert runs("x", "02_flash", ["7"], rec=mod) == [("02_flash", ["--variant", "02_flash", "7"])]  # user args win
    assert runs("x", None, ["--variant", "a", "7"], rec=mod) == [(None, ["--variant", "a", "7"])]
    assert runs("x", "all", ["7"], rec=mod) == [("01_naive", ["--variant", "01_naive", "7"]),
                                                ("02_flash", ["--variant", "02_flash", "7"])]
    assert programs.resolve_variants("x", "all", mod) == ["01_naive", "02_flash"]
    with pytest.raises(ValueError, match="unknown variant 'nope'"):
        runs("x", "nope", rec=mod)
    plain = stand_in(monkeypatch, "x")
    assert runs("x", None, rec=plain) == [(None, [])] and runs("x", "v", rec=plain) == [("v", ["--variant", "v"])]
    with pytest.raises(ValueError, match="lists no VARIANTS"):
        runs("x", "all", rec=plain)
    assert runs("hello") == HELLO


def test_variants_this_build_cannot_run_are_left_out_with_the_reason(monkeypatch):
    """A PTX-only sm_80 build has no sm_90a kernel: the program's own choice and `all` profile what
    runs and say what was left out; a variant named alone stays, so its own refusal reaches the user."""
    no = {"05_wgmma": "needs sm_90a: this build has no sm_90a code"}
    mod = stand_in(monkeypatch, "x", variants=("01_naive", "05_wgmma"), profile_variants=("01_naive", "05_wgmma"),
                                unsupported_reason=no.get)
    refused: dict = {}
    assert programs.profile_runs("x", None, rec=mod, refused=refused) == [("01_naive", ["--variant", "01_naive"])]
    assert refused == no
    refused = {}
    assert [v for v, _ in programs.profile_runs("x", "all", ["7"], rec=mod, refused=refused)] == ["01_naive"]
    assert refused == no
    refused = {}
    assert programs.profile_runs("x", "05_wgmma", rec=mod, refused=refused) == [("05_wgmma", ["--variant", "05_wgmma"])]
    assert refused == {}
    # Nothing runs here: every variant stays, so the runs themselves say why.
    none_run = stand_in(monkeypatch, "x", variants=("05_wgmma",), profile_variants=("05_wgmma",), unsupported_reason=no.get)
    assert [v for v, _ in programs.profile_runs("x", None, rec=none_run)] == ["05_wgmma"]


def test_runs_are_profiled_as_handed_down(monkeypatch, tmp_path):
    seen = []

    def run_nsys(prog, argv, outdir, tag="", **kw):
        seen.append((prog, argv, tag))
        return _fake_table(f"k_{tag}()"), {}, [], [["nsys", *argv]]

    monkeypatch.setattr(hp, "run_nsys", run_nsys)
    res = hp.profile("p", [("01_a", ["--variant", "01_a", 5]), ("02_b", ["9"])], tool="nsys", outdir=tmp_path)
    assert seen == [("p", ["--variant", "01_a", "5"], "01_a"), ("p", ["9"], "02_b")]
    assert res.kernels["variant"].tolist() == ["01_a", "02_b"]


def test_unknown_program_and_tool():
    with pytest.raises(ValueError, match="unknown program"):
        programs.check_name("no_such_program")
    r = subprocess.run([sys.executable, "-m", "invoke", "profile", "no_such_program"], cwd=build.ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and r.stderr.strip().startswith("unknown program 'no_such_program'; programs: ")
    assert len(r.stderr.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="unknown profiler"):
        hp.profile_with("perf", "hello", HELLO)
    with pytest.raises(ValueError, match="unknown profiler"):
        hp.profile("hello", HELLO, tool="perf")


# --- the chart -------------------------------------------------------------------------------------

def test_chart_numbers_one_run(tmp_path):
    k = hp.nsys_kernel_table(hp.parse_nsys_stats(NSYS_GREY.read_text()))
    sh = aprof.shares(k)
    assert sh["kernel"].tolist() == GREY_KERNELS
    assert sh["share_pct"].tolist() == pytest.approx([100 * 9056 / 20576, 100 * 5792 / 20576, 100 * 5728 / 20576])
    fig = aprof.figure(k, "t")
    widths = [p.get_width() for p in fig.axes[0].patches]
    assert widths == pytest.approx(sh["share_pct"].tolist())
    paths = aprof.plot(k, tmp_path, title="t")
    assert paths == [tmp_path / "kernel_shares.png"] and paths[0].stat().st_size > 1000


def test_chart_naive_against_flash_side_by_side(tmp_path):
    rows = [("naive", "attn_scores(float*)", 600.0), ("naive", "softmax(float*)", 300.0),
            ("naive", "attn_out(float*)", 100.0), ("flash", "flash_attn(float*)", 150.0),
            ("flash", "layernorm(float*)", 50.0)]
    k = pd.DataFrame([{"variant": v, "kernel": n, "total_ns": t * 1e3} for v, n, t in rows])
    sh = aprof.shares(k)
    assert sh.groupby("variant")["share_pct"].sum().tolist() == pytest.approx([100.0, 100.0])
    assert sh.set_index(["variant", "kernel"]).loc[("naive", "attn_scores"), "share_pct"] == pytest.approx(60.0)
    fig = aprof.figure(k)
    assert len(fig.axes) == 3  # naive's shares, flash's shares, and the totals
    assert [p.get_width() for p in fig.axes[1].patches] == pytest.approx([75.0, 25.0])
    # The totals panel: stacked bars whose ends are each variant's GPU time (ms).
    ends = {}
    for p in fig.axes[2].patches:
        y = round(p.get_y() + p.get_height() / 2)
        ends[y] = max(ends.get(y, 0.0), p.get_x() + p.get_width())
    assert sorted(ends.values()) == pytest.approx([0.2, 1.0])
    assert aprof.plot(k, tmp_path)[0].exists()


def test_short_names():
    assert nsys.short_name("void k<float, 4>(const float *, int)") == "k<float, 4>"
    # Recorded from transformer_block under nsys: two instantiations of one template stay apart.
    assert nsys.short_name("void matmul_02_tiled<(int)16, (bool)1>(int, int, int, const float *, const float *, "
                            "float *, float, long long, long long, long long)") == "matmul_02_tiled<16, 1>"
    assert nsys.short_name("void attn_flash_fwd<(int)64>(const float *, float *, int)") == "attn_flash_fwd<64>"
    assert nsys.short_name("grayscale_01_1d(const unsigned char *, long long, unsigned char *, int)") == "grayscale_01_1d"
    assert len(nsys.short_name("x" * 100, 20)) == 20


# --- on the GPU ----------------------------------------------------------------------------------

def _inv(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=build.ROOT, capture_output=True, text=True,
                          timeout=timeout)


# End to end (minutes on a GPU): `invoke test --marker slow`, not the default run.
@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("prog", ["square", "transformer_block"])
@pytest.mark.parametrize("tool", ["nsys", "ncu"])
def test_profile_gives_a_kernel_table(prog, tool):
    if prog not in build.programs():
        pytest.fail(f"{prog} is not in cuda/ yet")
    if not toolchain.find(tool).found:
        pytest.skip(f"{tool} is not installed here")
    r = _inv("profile", prog, "--tool", tool)
    assert r.returncode == 0, r.stderr + r.stdout[-2000:]
    assert f"GPU kernels ({tool})" in r.stdout
    df = hp.load_kernels(prog)
    assert len(df) >= 1 and (df["tool"] == tool).all()
    assert (df["instances"] >= 1).all() and (df["total_ns"] > 0).all()
    assert (hp.PROFILES / prog / "kernel_shares.png").exists()
    if prog == "transformer_block":
        assert df["variant"].nunique() >= 2, "naive and flash are profiled side by side"


def test_counter_access_reads_the_driver_setting(monkeypatch, tmp_path):
    monkeypatch.setattr(ncu.os, "geteuid", lambda: 1000)
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n")
    ok, why = hp.counter_access(params)
    assert ok is False and "ERR_NVGPUCTRPERM" in why
    params.write_text("RmProfilingAdminOnly: 0\n")
    assert hp.counter_access(params)[0] is True
    assert hp.counter_access(tmp_path / "missing")[0] is None
    monkeypatch.setattr(ncu.os, "geteuid", lambda: 0)
    assert hp.counter_access(params) == (True, "running as root")


def test_variant_all_with_arguments_is_one_run_per_variant():
    """`invoke profile attention --variant all -- 1 32 4096 128` once passed `--variant all` to an
    executable that has no such variant (found on the H100): each variant is its own run."""
    from harness.programs import attention

    refused: dict = {}
    runs = programs.profile_runs("attention", "all", ["--reps", "1", "1", "32", "4096", "128"], refused=refused)
    # Without a GPU (or on a build without sm_90a) the Hopper rungs (05, 08, 09) are left out, with their reason.
    assert [v for v, _ in runs] == [v for v in attention.VARIANTS if v not in refused]
    assert set(refused) <= {"05_flash_wgmma", "08_flash_bwd_wgmma", "09_flash_bwd_ws", "03_flash_bf16",
                            "04_flash_3xtf32"}
    assert [argv[:2] for _, argv in runs] == [["--variant", v] for v, _ in runs]
    assert programs.profile_runs("attention", None, ["1", "2"]) == [(None, ["1", "2"])]
    assert programs.profile_runs("attention", "02_flash", ["1", "2"]) == [("02_flash", ["--variant", "02_flash", "1", "2"])]


def test_profilers_run_only_the_file_the_build_wrote(monkeypatch, tmp_path):
    """nsys and ncu are pointed only at the executable its build wrote (checked against its record),
    never a stray file of the same name; a missing one names the command that builds it."""
    stray = tmp_path / "square"
    stray.write_text("#!/bin/sh\nexit 0\n")
    monkeypatch.setattr(build, "bin_path", lambda prog: stray)
    with pytest.raises(NotBuilt, match=r"not verified.*invoke build --programs square"):
        hp._exe("square")
    monkeypatch.setattr(build, "bin_path", lambda prog: tmp_path / "missing")
    with pytest.raises(NotBuilt, match=r"missing: run `invoke build --programs square`"):
        hp._exe("square")

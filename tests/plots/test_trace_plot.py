"""The nsys kernel trace (harness.profiling.nsys.kernel_trace) and its timeline (analysis/trace.py),
on a small SQLite file laid out as nsys exports one: kernels, the runtime calls that launched them,
NVTX ranges. The phase of a kernel is the range its launch call started in, not where the kernel's
own time falls, so these traces put kernels well after their ranges end."""

import sqlite3
import subprocess
import sys

import pytest

from analysis import trace
from harness.profiling import nsys

PUSHPOP = 59
MAIN, OTHER = 1001, 1002  # globalTid of the launching thread, and of another thread


def _db(path, kernels, ranges, strings_in_text=True):
    """kernels: (name, k_start, k_end, api_start, tid, stream); ranges: (name, start, end, tid) in ns."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT, "
                "correlationId INT, demangledName INT, shortName INT)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT, correlationId INT, "
                "nameId INT)")
    con.execute("CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, globalTid INT, textId INT)")
    ids = {}

    def sid(s):
        if s not in ids:
            ids[s] = len(ids) + 1
            con.execute("INSERT INTO StringIds VALUES (?, ?)", (ids[s], s))
        return ids[s]

    for corr, (name, ks, ke, api, tid, stream) in enumerate(kernels, start=1):
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, ?, ?, ?, ?)",
                    (ks, ke, stream, corr, sid(name), sid(name)))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)",
                    (api, api + 5, tid, corr, sid("cudaLaunchKernel")))
    for name, s, e, tid in ranges:
        if strings_in_text:
            con.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, NULL)", (s, e, PUSHPOP, name, tid))
        else:
            con.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, NULL, ?, ?)", (s, e, PUSHPOP, tid, sid(name)))
    con.execute("INSERT INTO NVTX_EVENTS VALUES (50, 0, 34, 'a mark, no range', ?, NULL)", (MAIN,))
    con.commit()
    con.close()
    return path


def _two_steps(tmp_path, **kw):
    # Two training steps (ranges on the CPU at 0-300 and 1000-1300 ns); their kernels run later on the
    # GPU. A kernel launched from another thread inside the second step's time is in no range.
    ranges = []
    kernels = []
    for base, gpu in ((0, 10_000), (1_000, 20_000)):
        ranges += [("train_step", base, base + 300, MAIN), ("forward", base + 10, base + 100, MAIN),
                   ("backward", base + 110, base + 250, MAIN), ("sgd", base + 260, base + 290, MAIN)]
        kernels += [("fwd_a", gpu, gpu + 100, base + 20, MAIN, 7), ("fwd_b", gpu + 100, gpu + 150, base + 30, MAIN, 7),
                    ("bwd_a", gpu + 160, gpu + 460, base + 120, MAIN, 7),
                    ("step_glue", gpu + 470, gpu + 480, base + 255, MAIN, 7),
                    ("sgd", gpu + 500, gpu + 520, base + 270, MAIN, 7)]
    kernels += [("elsewhere", 30_000, 30_050, 1_150, OTHER, 9), ("before", 100, 200, -50, MAIN, 7)]
    return _db(tmp_path / "t.sqlite", kernels, ranges, **kw)


@pytest.mark.parametrize("strings_in_text", [True, False])
def test_kernels_take_the_ranges_their_launch_call_started_in(tmp_path, strings_in_text):
    t = nsys.kernel_trace(_two_steps(tmp_path, strings_in_text=strings_in_text))
    by = dict(zip(zip(t["name"], t["start_us"].round(3)), t["ranges"]))
    assert by[("before", 0.0)] == ""
    assert by[("fwd_a", 9.9)] == "train_step/forward" and by[("fwd_a", 19.9)] == "train_step/forward"
    assert by[("bwd_a", 10.06)] == "train_step/backward"
    assert by[("step_glue", 10.37)] == "train_step"  # between two phases, inside the step
    assert by[("sgd", 20.4)] == "train_step/sgd"
    assert by[("elsewhere", 29.9)] == ""  # another thread's launch is in none of MAIN's ranges
    assert list(t["start_us"]) == sorted(t["start_us"])


def test_the_window_is_the_last_step_and_its_shares_add_up(tmp_path):
    w = trace.step_window(trace.read(_two_steps(tmp_path)))
    assert list(w["name"]) == ["fwd_a", "fwd_b", "bwd_a", "step_glue", "sgd"]  # the second step only
    assert w["start_us"].iloc[0] == 0.0 and w["end_us"].max() == pytest.approx(0.52)
    s = trace.phase_shares(w).set_index("phase")
    assert list(s.index) == ["forward", "backward", "train_step", "sgd"]
    assert s.loc["forward", "kernels"] == 2 and s.loc["forward", "kernel_us"] == pytest.approx(0.15)
    assert s.loc["backward", "kernel_pct"] == pytest.approx(100 * 0.3 / 0.48)
    assert s["kernel_pct"].sum() == pytest.approx(100.0)
    # 0.52 µs span, 0.48 µs of kernels, no overlap: busy is their sum
    assert trace.busy_us(w) == pytest.approx(0.48)


def test_busy_time_counts_overlapping_kernels_once():
    import pandas as pd
    w = pd.DataFrame({"start_us": [0.0, 5.0, 20.0], "end_us": [10.0, 12.0, 21.0]})
    assert trace.busy_us(w) == pytest.approx(13.0)


def test_without_ranges_every_kernel_is_drawn_by_stream(tmp_path):
    p = _db(tmp_path / "n.sqlite", [("k", 0, 10, 0, MAIN, 3), ("k2", 20, 40, 1, MAIN, 4)], [])
    w = trace.step_window(trace.read(p))
    assert list(w["phase"]) == ["stream 3", "stream 4"]
    with pytest.raises(ValueError, match="no NVTX ranges"):
        trace.step_window(trace.read(p), "train_step")


def test_a_named_range_that_holds_no_kernel_is_refused_naming_the_ones_seen(tmp_path):
    with pytest.raises(ValueError, match="'sgd_x'.*train_step"):
        trace.step_window(trace.read(_two_steps(tmp_path)), "sgd_x")


def test_copies_between_gpus_join_the_trace_in_their_launch_range_and_local_copies_do_not(tmp_path):
    p = _two_steps(tmp_path)
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, streamId INT, "
                "correlationId INT, srcDeviceId INT, dstDeviceId INT, copyKind INT)")
    # enqueued inside the second step's backward (1110-1250 ns), run on GPU 1's copy stream 12
    for corr, (start, src, dst) in enumerate([(20_200, 1, 0), (20_300, 0, 0)], start=100):
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, 12, ?, ?, ?, 10)",
                    (start, start + 50, src, corr, src, dst))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 1)", (1_200, 1_205, MAIN, corr))
    con.commit()
    con.close()
    t = nsys.kernel_trace(p)
    peer = t[t["name"] == nsys.PEER_COPY]
    assert len(peer) == 1 and peer["device"].iloc[0] == 1 and peer["stream"].iloc[0] == 12  # the 0 -> 0 copy is left out
    assert peer["ranges"].iloc[0] == "train_step/backward" and list(t["start_us"]) == sorted(t["start_us"])
    w = trace.step_window(t)
    s = trace.phase_shares(w).set_index("phase")
    assert s.loc["backward", "kernels"] == 2 and s.loc["backward", "kernel_us"] == pytest.approx(0.35)
    labels = [t.get_text() for t in trace.figure(w).axes[0].get_legend().get_texts()]
    assert any(lb.startswith("backward: 0.000 ms in 1 kernels and 1 copies") for lb in labels), labels


def test_files_that_are_no_trace_are_refused_in_one_line(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all, just text " * 20)
    with pytest.raises(ValueError, match="no SQLite file"):
        nsys.kernel_trace(junk)
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).execute("CREATE TABLE x (a INT)").connection.commit()
    with pytest.raises(ValueError, match="no CUDA kernels"):
        nsys.kernel_trace(empty)
    with pytest.raises(FileNotFoundError):
        nsys.kernel_trace(tmp_path / "absent.sqlite")


def test_invoke_plot_trace_draws_and_a_mistyped_file_is_one_line(tmp_path):
    p = _two_steps(tmp_path)
    ok = subprocess.run([sys.executable, "-m", "invoke", "plot", "trace", "--csv", str(p), "--outdir", str(tmp_path)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    png = tmp_path / "trace_t.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "backward" in ok.stdout and "62.5%" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "invoke", "plot", "trace", "--csv", str(tmp_path / "nope.sqlite")],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert len((bad.stdout + bad.stderr).strip().splitlines()) == 1


@pytest.mark.parametrize("name,want", [
    ("void attn_flash_bwd_wgmma<128>(CUtensorMap_st, float const*)", "attn_flash_bwd_wgmma"),
    ("sgd_update(float*, float const*, int, float)", "sgd_update"),
    ("void gemm_tc::k02<(int)16, (bool)1>(int)", "gemm_tc::k02"),
    ("a_kernel_name_longer_than_the_width_allows", "a_kernel_name_longer_th…"),
])
def test_kernel_names_on_the_bars_drop_types_templates_and_parameters(name, want):
    assert trace.short_name(name) == want


@pytest.mark.parametrize("sqlite", ["transformer_block_train_step-20261128.sqlite",
                                    "transformer_block_train_step_hopper-20261128.sqlite",
                                    "transformer_block_train_step_hopper_ws-20261128.sqlite"])
def test_the_transformer_block_page_tables_are_the_ones_the_committed_traces_give(sqlite):
    from harness.base import paths
    db = paths.ROOT / "bench/results/h200" / sqlite
    page = (paths.ROOT / "cuda/transformer_block/README.md").read_text()
    want = trace.page_table(trace.step_window(trace.read(db)))
    assert want in page, "regenerate the table with `invoke plot trace --csv " + str(db) + "`"


def _overlapped(tmp_path):
    # A tensor-parallel forward in two chunks: chunk 1's all-reduce (stream 9) runs while chunk 2's
    # GEMM (stream 7) does; both launched from one thread inside the ranges that name them.
    ranges = [("tp_forward", 0, 100, MAIN), ("gemm", 1, 10, MAIN), ("allreduce", 11, 20, MAIN),
              ("gemm", 21, 30, MAIN), ("allreduce", 31, 40, MAIN)]
    kernels = [("gemm_a", 1_000, 3_000, 2, MAIN, 7), ("ar_a", 3_000, 4_500, 12, MAIN, 9),
               ("gemm_b", 3_000, 5_000, 22, MAIN, 7), ("ar_b", 5_000, 6_500, 32, MAIN, 9)]
    return _db(tmp_path / "tp.sqlite", kernels, ranges)


def test_by_stream_puts_each_stream_on_its_row_and_keeps_the_phases(tmp_path):
    t = trace.read(_overlapped(tmp_path))
    w = trace.step_window(t, by="stream")
    assert dict(zip(w["name"], w["lane"])) == {"gemm_a": "GPU 0 stream 7", "gemm_b": "GPU 0 stream 7",
                                              "ar_a": "GPU 0 stream 9", "ar_b": "GPU 0 stream 9"}
    assert dict(zip(w["name"], w["phase"])) == {"gemm_a": "gemm", "gemm_b": "gemm", "ar_a": "allreduce",
                                               "ar_b": "allreduce"}
    s = trace.phase_shares(w).set_index("phase")
    assert s.loc["allreduce", "kernel_pct"] == pytest.approx(100 * 3.0 / 7.0)
    assert trace.busy_us(w) == pytest.approx(5.5)  # 1.5 µs of all-reduce hidden under the GEMM
    fig = trace.figure(w)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["GPU 0 stream 7", "GPU 0 stream 9"]
    by_phase = trace.step_window(t)
    assert set(by_phase["lane"]) == {"gemm", "allreduce"}
    with pytest.raises(ValueError, match="by must be one of phase, stream"):
        trace.step_window(t, by="device")

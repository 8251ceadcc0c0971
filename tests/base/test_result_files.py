"""Result files are written whole and never share a name (harness.base.files): bench CSVs from two runs in
the same second, the repeat CSV, the tune JSON; a torn or NUL-filled CSV is refused in one line
naming it; a bad tune JSON is named and skipped. No GPU needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import bench as abench
from analysis import tune as atune
from harness.base import files, paths
from harness.measuring import bench, results_csv, tune

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "NVIDIA H100 80GB HBM3"
META = {"device": DEVICE, "driver": "580.0", "runtime": "13.0", "nvcc": "13.0.88", "date": "2026-01-02T03:04:05"}

WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {root!r})
    import numpy as np, pandas as pd
    from harness.base import paths
    from harness.measuring import bench, results_csv
    n, folder, go = int(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    rng = np.random.default_rng(n)
    df = pd.DataFrame({{"program": "p", "variant": [f"v{{i}}" for i in range(n)], "size": "2^20",
                       "value": rng.uniform(1, 2, n), "unit": "GB/s", "ratio": rng.uniform(0, 1, n),
                       "note": "x" * 40}})
    paths.BUILD_BENCH = folder
    meta = {meta!r}
    ceil = {{"memcpy": bench.Ceiling("memcpy", 3000.0, "GB/s", "DtoD")}}
    while time.time() < go:
        pass
    print(results_csv.write(df, meta, ceil), flush=True)
""")


def test_two_runs_in_the_same_second_keep_two_whole_csvs(tmp_path):
    """A 21,600-row and a 54-row run write at the same instant with the same date: two files, each
    whole, and a reader polling the folder meanwhile never sees a torn one."""
    script = WRITER.format(root=str(ROOT), meta=META)
    folder = tmp_path / "bench"
    folder.mkdir()
    go = time.time() + 3.0
    procs = {n: subprocess.Popen([sys.executable, "-c", script, str(n), str(folder), str(go)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (21_600, 54)}
    torn, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            for p in folder.glob("*.csv"):
                try:
                    results_csv.read(p)
                except ValueError as e:
                    torn.append(str(e))
                except FileNotFoundError:
                    pass

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        outs = {n: p.communicate(timeout=120) for n, p in procs.items()}
    finally:
        stop.set()
        reader.join()
    for n, p in procs.items():
        assert p.returncode == 0, outs[n][1]
    paths = {n: Path(out.strip()) for n, (out, _) in outs.items()}
    assert paths[21_600] != paths[54], "two runs wrote the same file"
    for n, path in paths.items():
        cases, meta, lines = results_csv.read(path)
        assert len(cases) == n and meta["device"] == DEVICE and len(lines) == 1
        assert cases["variant"].tolist() == [f"v{i}" for i in range(n)]
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in paths.values()), "a temporary file is left"
    assert not torn, torn[:3]


def test_a_torn_csv_is_refused_in_one_line_naming_it(tmp_path):
    cases = pd.DataFrame({"program": ["p"] * 30, "variant": [f"v{i}" for i in range(30)], "size": "2^20",
                          "value": np.linspace(1, 2, 30), "unit": "GB/s", "ratio": 0.5})
    good = results_csv.write(cases, META, {}, dest=tmp_path / "good.csv")
    assert len(results_csv.read(good)[0]) == 30
    data = good.read_bytes()
    # What a torn write leaves: the file's length set, its end never written (NUL bytes) ...
    nul = tmp_path / "nul.csv"
    nul.write_bytes(data[: len(data) // 2] + b"\0" * (len(data) - len(data) // 2))
    # ... a line cut short, and one writer's short file over the head of a longer one's.
    cut = tmp_path / "cut.csv"
    cut.write_bytes(data[: len(data) - 7])
    mixed = tmp_path / "mixed.csv"
    mixed.write_bytes(data + data.splitlines(keepends=True)[3][:20] + b"\n")
    for path, why in ((nul, "NUL byte"), (cut, "cut short"), (mixed, "field")):
        with pytest.raises(ValueError, match=why) as ei:
            results_csv.read(path)
        assert str(path) in str(ei.value) and "\n" not in str(ei.value)
        with pytest.raises(ValueError):
            abench.load(path)  # the plot's reader is the same one


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    dest = tmp_path / "r.json"
    files.replace(dest, '{"old": 1}\n')

    def half_then_interrupted(tmp):
        Path(tmp).write_text('{"new": ')
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        files.replace(dest, half_then_interrupted)
    assert json.loads(dest.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    # A file written whole gets a plain file's mode (0666 less the umask), not mkstemp's 0600.
    assert dest.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_create_never_writes_over_a_taken_name(tmp_path):
    first = files.create(tmp_path / "a.csv", "one\n")
    second = files.create(tmp_path / "a.csv", "two\n")
    third = files.create(tmp_path / "a.csv", "three\n")
    assert (first.name, second.name, third.name) == ("a.csv", "a-2.csv", "a-3.csv")
    assert [p.read_text() for p in (first, second, third)] == ["one\n", "two\n", "three\n"]


def test_stale_temporaries_are_cleaned_young_ones_kept(tmp_path):
    old, young = tmp_path / ".bench-x.csv.abc.tmp", tmp_path / f".bench-y.csv.p{os.getpid()}-def.tmp"
    old.write_bytes(b"")
    young.write_bytes(b"")
    os.utime(old, (time.time() - 2 * files.STALE_AFTER_S,) * 2)
    gone = subprocess.Popen(["true"])
    gone.wait()
    orphan = tmp_path / f".bench-z.csv.p{gone.pid}-ghi.tmp"  # young, but its writer is dead
    orphan.write_bytes(b"")
    assert sorted(files.clean_stale(tmp_path)) == sorted([old, orphan])
    assert not old.exists() and not orphan.exists() and young.exists()


def test_repeat_csv_of_two_runs_in_the_same_second(tmp_path, monkeypatch, capsys):
    """`invoke bench --repeat`'s report: the long table written whole, a second report in the same second
    under its own name."""
    from analysis import repeat as arepeat
    from harness.user import cli

    monkeypatch.setattr(paths, "BUILD_BENCH", tmp_path)
    monkeypatch.setattr(bench, "metadata", lambda: dict(META))
    monkeypatch.setattr(arepeat, "plot", lambda long, folder: [])
    rng = np.random.default_rng(5)
    frames = [pd.DataFrame({"program": "p", "variant": ["a", "b"], "size": "2^24", "unit": "GB/s", "ceiling": "memcpy",
                            "ratio": rng.uniform(0.8, 0.9, 2), "value": 1.0}) for _ in range(2)]
    cli.report_repeat(frames, False)
    cli.report_repeat(frames, False)
    wrote = [ln.split("wrote ", 1)[1] for ln in capsys.readouterr().out.splitlines() if ln.startswith("wrote ")]
    assert len(wrote) == 2 and wrote[0] != wrote[1]
    for p in wrote:
        long = pd.read_csv(p)
        assert len(long) == 4 and long["ratio"].tolist() == pytest.approx(
            [*frames[0]["ratio"], *frames[1]["ratio"]])


def test_tune_save_is_whole_and_replaces(results_dir, monkeypatch):
    monkeypatch.setattr(bench, "metadata", lambda: dict(META))
    calls = []
    real = os.replace
    monkeypatch.setattr(files.os, "replace", lambda a, b: (calls.append((Path(a), Path(b))), real(a, b))[1])
    table = pd.DataFrame({"config": ["a", "b"], "tflops": [1.0, 2.0], "status": "ok", "winner": [False, True]})
    path = tune.save("matmul", DEVICE, {"size": "64^3", "winner": "b"}, table)
    assert calls and calls[-1][1] == path and calls[-1][0].parent == path.parent and calls[-1][0].name.endswith(".tmp")
    assert tune.read(path)["winner"] == "b"
    assert [p.name for p in path.parent.iterdir()] == ["matmul-tune.json"]


# --- tune JSONs read defensively ---------------------------------------------------------------------

BAD_TUNE = [
    ({"device": DEVICE, "winners_by_variant": [1]}, "winners_by_variant"),
    ({"device": DEVICE, "winners_by_variant": {"03_flash_bf16": [1]}}, "winners_by_variant"),
    ({"device": DEVICE, "winners": {"64": 3}}, "winners"),
    ({"device": DEVICE, "winner": 7}, "winner"),
    ({"device": 5}, "device"),
    ([1, 2], "not a tuning result"),
]


@pytest.mark.parametrize("data,field", BAD_TUNE)
def test_a_tune_json_of_the_wrong_types_is_named_not_a_traceback(results_dir, data, field):
    from harness.programs import attention

    path = tune.cache_path("attention", DEVICE)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    with pytest.raises(tune.BadTuneFile, match=field) as ei:
        tune.read(path)
    assert str(path) in str(ei.value) and "\n" not in str(ei.value)
    winner, why = attention.tuned_choice(64, DEVICE)  # the compiled default, and the reason
    assert winner is None and str(path) in why


def test_invoke_plot_tune_skips_one_bad_file_and_draws_the_rest(tmp_path, capsys):
    good = json.loads((paths.RESULTS_DIR / "h100" / "matmul-tune.json").read_text())
    (tmp_path / "h100").mkdir()
    (tmp_path / "h200").mkdir()
    (tmp_path / "h100" / "matmul-tune.json").write_text(json.dumps(good))
    (tmp_path / "h200" / "attention-tune.json").write_text(json.dumps({**good, "winners_by_variant": [1]}))
    (tmp_path / "h200" / "matmul-tune.json").write_text('{"program": "matmul", "tab')
    skipped = []
    drawn = atune.plot_cached(tmp_path, tmp_path / "out", warn=skipped.append)
    assert [p.name for p in drawn] == ["tune_matmul_h100.png"]
    assert len(skipped) == 2 and all("\n" not in s for s in skipped)
    assert "h200/attention-tune.json" in skipped[0] and "winners_by_variant" in skipped[0]
    assert "h200/matmul-tune.json" in skipped[1]
    (tmp_path / "h100" / "matmul-tune.json").write_text("[]")
    with pytest.raises(ValueError, match="could be drawn.*3 skipped"):
        atune.plot_cached(tmp_path, tmp_path / "out", warn=lambda s: None)

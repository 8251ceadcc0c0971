"""`invoke bench --save` where bench/results cannot be written: refused in one line before anything is
timed (it used to end, after the whole run, in a PermissionError traceback)."""

from __future__ import annotations

import pytest


def test_save_into_an_unwritable_results_folder_is_refused_before_timing(monkeypatch, tmp_path):
    from invoke import Context, Exit

    import tasks
    from harness import programs as registry
    from harness.base import paths
    from harness.measuring import bench as hbench

    results = tmp_path / "results"
    results.write_text("a file where bench/results should be")  # refused to root as well as to a user
    monkeypatch.setattr(paths, "RESULTS_DIR", results)
    monkeypatch.setattr(registry, "bench_cases", lambda names, quick: ["a case"])
    monkeypatch.setattr(registry, "bench_libraries", lambda cases: [])
    monkeypatch.setattr(registry, "ceilings", lambda: {})
    monkeypatch.setattr(hbench, "check_built", lambda libs: None)
    timed = []
    monkeypatch.setattr(hbench, "run", lambda *a, **k: timed.append(1) or ("frame", {}))
    with pytest.raises(Exit) as ei:
        tasks.bench(Context(), quick=True, save=True)
    assert timed == []
    msg = ei.value.message
    assert msg.startswith("bench --save: cannot write in ") and str(results) in msg and "\n" not in msg, msg
    assert msg.endswith("nothing was timed")

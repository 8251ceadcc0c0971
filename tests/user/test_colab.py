"""notebooks/colab.ipynb, the notebook a learner opens in Colab: clone (or find the checkout), install,
`invoke doctor` (which stops it on a driver older than the toolkit), build, the tour, the pictures.

CPU: its set-up cell finds this checkout without cloning, and its doctor cell stops on doctor's line.
GPU (slow): the whole notebook under nbclient, inside this checkout (no network: nothing is cloned or
installed when the lab is already here); harness.user.notebook_run executes a copy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from harness.user import doctor

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "colab.ipynb"


def _cells() -> dict[str, str]:
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4 and nb["metadata"]["accelerator"] == "GPU"
    return {c["metadata"]["tags"][0]: "".join(c["source"]) for c in nb["cells"]
            if c["cell_type"] == "code" and c["metadata"].get("tags")}


def test_notebook_has_each_step_in_order():
    assert list(_cells()) == ["setup", "install", "doctor", "build", "tour", "pictures"]


def test_setup_cell_finds_the_checkout_without_cloning(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a) or pytest.fail(f"ran {a}"))
    cwd = os.getcwd()
    try:
        os.chdir(ROOT / "tests" / "fixtures")  # somewhere below the root: it looks upwards
        scope: dict = {}
        exec(_cells()["setup"], scope)
        assert scope["root"] == ROOT and Path.cwd() == ROOT and not calls
        # Outside any checkout it clones (here: the call is recorded, not made).
        os.chdir(tmp_path)
        with pytest.raises(pytest.fail.Exception):
            exec(_cells()["setup"], {})
        assert calls and calls[0][0][:2] == ["git", "clone"]
    finally:
        os.chdir(cwd)


def test_doctor_cell_stops_on_a_driver_older_than_the_toolkit(monkeypatch, capfd):
    line = ("the NVIDIA driver supports CUDA 12.2, older than the CUDA 13.0 these programs are built with "
            "(CUDA 13.0 needs driver 580 or newer): update the NVIDIA driver, or use a CUDA toolkit the driver "
            "supports (12.2 or older)")
    monkeypatch.setattr(doctor, "driver_problem", lambda: line)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    with pytest.raises(SystemExit) as ei:
        exec(_cells()["doctor"], {})
    assert str(ei.value) == line
    monkeypatch.setattr(doctor, "driver_problem", lambda: None)
    exec(_cells()["doctor"], {})  # a driver new enough: the notebook goes on


def check_whole_run(book: dict, root: Path | None = None) -> None:
    """The outputs of one whole run: every code cell executed once and in order with no error, the
    checkout found (at `root` when given), nothing fetched, the tour's last line with 0 failed, and
    every picture the pictures cell counted shown as an image."""
    code = [c for c in book["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1)), "not one whole run, in order"
    outputs = [o for c in code for o in c["outputs"]]
    assert not [o for o in outputs if o.get("output_type") == "error"], "a cell raised"
    texts = "".join("".join(o.get("text", "")) for o in outputs)
    assert "cudalab: " + (str(root) if root else "") in texts
    # Inside a checkout with the lab installed nothing is fetched: the install cell says the command it
    # runs when it installs. (doctor's advice may name pip too: only the install cell's lines count.)
    install = next(c for c in code if c["metadata"].get("tags") == ["install"])
    said = "".join("".join(o.get("text", "")) for o in install["outputs"]).splitlines()
    assert not [t for t in said if t.startswith("pip install")], said
    tour = [t for t in texts.splitlines() if t.startswith("demo: ") and " passed, " in t]
    assert tour and " 0 failed" in tour[-1], texts[-3000:]
    images = [o for o in outputs if o.get("output_type") == "display_data" and "image/png" in o.get("data", {})]
    shown = int(next(t for t in texts.splitlines() if t.endswith(" pictures")).split()[0])
    assert shown > 0 and len(images) == shown


def test_committed_notebook_holds_a_whole_gpu_run():
    """What a reader without a GPU sees on opening it: the outputs of one whole run on a GPU, saved by
    harness.user.notebook_run, which names the device."""
    book = json.loads(NOTEBOOK.read_text())
    assert book["metadata"]["cudalab"]["executed_on"].startswith("NVIDIA ")
    check_whole_run(book)


def test_the_whole_run_check_fails_on_a_broken_run():
    book = json.loads(NOTEBOOK.read_text())
    broken = json.loads(json.dumps(book))
    [c for c in broken["cells"] if c["cell_type"] == "code"][-1]["outputs"].append(
        {"output_type": "error", "ename": "SystemExit", "evalue": "1", "traceback": []})
    stripped = json.loads(json.dumps(book))
    for c in stripped["cells"]:
        if c["cell_type"] == "code":
            c["outputs"], c["execution_count"] = [], None
    text, n = re.subn(r"demo: (\d+) passed, 0 failed", r"demo: \1 passed, 1 failed", NOTEBOOK.read_text())
    assert n >= 1, "the saved run has no tour line to break"
    failed = json.loads(text)
    fewer = json.loads(json.dumps(book))
    pics = [c for c in fewer["cells"] if c["cell_type"] == "code"][-1]
    pics["outputs"] = [o for o in pics["outputs"] if "image/png" not in o.get("data", {})][:-1] + pics["outputs"][-1:]
    fetched = json.loads(json.dumps(book))
    cell = next(c for c in fetched["cells"] if c["metadata"].get("tags") == ["install"])
    cell["outputs"].insert(0, {"name": "stdout", "output_type": "stream", "text": ["pip install -e '.[dev]'\n"]})
    for bad in (broken, stripped, failed, fewer, fetched):
        with pytest.raises(AssertionError):
            check_whole_run(bad)


@pytest.mark.gpu
@pytest.mark.slow
def test_colab_notebook_runs_end_to_end(tmp_path):
    """The whole notebook, as Colab's Run all would, in this checkout, through harness.user.notebook_run (the
    one way a notebook's GPU outputs are saved) on a copy: every program builds and checks, every
    picture is shown. `python3 -m harness.user.notebook_run notebooks/colab.ipynb` saves them in place."""
    pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[notebook]')")
    pytest.importorskip("nbformat")
    from harness.user import notebook_run

    copy = tmp_path / "colab.ipynb"
    copy.write_text(NOTEBOOK.read_text())
    notebook_run.execute(copy)
    check_whole_run(json.loads(copy.read_text()), ROOT)

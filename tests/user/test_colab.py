"""notebooks/colab.ipynb, the notebook a learner opens in Colab: clone (or find the checkout), install,
`invoke doctor` (which stops it on a driver older than the toolkit), build, the tour, the pictures.

CPU: its set-up cell finds this checkout without cloning, and its doctor cell stops on doctor's line.
GPU (slow): the whole notebook under nbclient, inside this checkout (no network: nothing is cloned or
installed when the lab is already here); harness.user.notebook_run executes a copy.
"""

from __future__ import annotations

import json
import os
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


@pytest.mark.gpu
@pytest.mark.slow
def test_colab_notebook_runs_end_to_end(tmp_path):
    """The whole notebook, as Colab's Run all would, in this checkout, through harness.user.notebook_run (the
    one way a notebook's GPU outputs are saved) on a copy: every program builds and checks, every
    picture is shown. `python3 -m harness.user.notebook_run notebooks/colab.ipynb` saves them in place."""
    pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[notebook]')")
    nbformat = pytest.importorskip("nbformat")
    from harness.user import notebook_run

    copy = tmp_path / "colab.ipynb"
    copy.write_text(NOTEBOOK.read_text())
    book = nbformat.read(notebook_run.execute(copy), as_version=4)
    texts = "".join(o.get("text", "") for c in book.cells if c.cell_type == "code" for o in c.outputs)
    assert f"cudalab: {ROOT}" in texts
    assert "pip install" not in texts  # inside a checkout with the lab installed: nothing to fetch
    assert "demo:" in texts and " 0 failed" in texts, texts[-3000:]
    images = [o for c in book.cells if c.cell_type == "code" for o in c.outputs
              if o.get("output_type") == "display_data" and "image/png" in o.get("data", {})]
    shown = int(next(t for t in texts.splitlines() if t.endswith(" pictures")).split()[0])
    assert shown > 0 and len(images) == shown

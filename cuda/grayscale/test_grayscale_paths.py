"""`invoke run grayscale` and its files: everything refusable is refused before anything is written,
a file the command did not name is never replaced, and replacing the one it named is said."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from harness.base.errors import NoGPUError
from harness.programs import grayscale as gs


def _listing(folder):
    return sorted((p.relative_to(folder).as_posix(), p.read_bytes() if p.is_file() else None)
                  for p in folder.rglob("*"))


@pytest.fixture
def cpu_grey(monkeypatch):
    """rgb2grey through the numpy reference: the GPU path's file handling under test, without a GPU
    (the tests that take this fixture call cli with cpu=False, else cli would take the CPU path)."""
    calls = []

    def grey(x, variant=gs.DEFAULT_VARIANT, align_planes=True):
        calls.append(variant)
        return gs.reference(x)

    monkeypatch.setattr(gs, "rgb2grey", grey)
    return calls


@pytest.fixture
def no_compute(monkeypatch):
    monkeypatch.setattr(gs, "rgb2grey", lambda *a, **k: pytest.fail("computed before the output was checked"))


@pytest.mark.parametrize("out,match", [
    ("missing/dir/g.png", "the folder .*missing/dir does not exist"),
    ("g.txt", "Pillow cannot write a .txt file"),
    ("g", "Pillow cannot write a suffix-less file"),
    ("adir", "is a folder"),
])
def test_a_bad_out_is_refused_before_anything_is_written(tmp_path, no_compute, out, match):
    (tmp_path / "adir").mkdir()
    before = _listing(tmp_path)
    with pytest.raises(ValueError, match=match):
        gs.cli([], out=str(tmp_path / out))
    assert _listing(tmp_path) == before  # no folder made, no input copy, nothing


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused_first(tmp_path, no_compute):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ValueError, match="not writable"):
            gs.cli([], out=str(ro / "g.png"))
    finally:
        ro.chmod(0o700)


def test_a_failed_conversion_writes_nothing(tmp_path, monkeypatch):
    """Without a GPU the conversion fails: the input copy used to be written (over a file of the same
    name) before it did."""
    (tmp_path / "photo_input.png").write_bytes(b"the user's own file")
    before = _listing(tmp_path)

    def no_gpu(*a, **k):
        raise NoGPUError(100, "cudaErrorNoDevice", "no CUDA-capable device is detected")

    monkeypatch.setattr(gs, "rgb2grey", no_gpu)
    with pytest.raises(NoGPUError):
        gs.cli([], out=str(tmp_path / "photo.png"), cpu=False)  # the GPU path, failing
    assert _listing(tmp_path) == before


def test_a_file_the_command_did_not_name_is_kept(tmp_path, cpu_grey, capsys):
    from PIL import Image

    mine = tmp_path / "photo_input.png"
    mine.write_bytes(b"the user's own file")
    assert gs.cli([], out=str(tmp_path / "photo.png"), cpu=False) == 0
    assert mine.read_bytes() == b"the user's own file"
    text = capsys.readouterr().out
    assert f"not saved: {mine} exists" in text and "check=pass" in text
    grey = np.asarray(Image.open(tmp_path / "photo.png"))
    np.testing.assert_array_equal(grey, gs.reference(gs.planar(gs.test_image())))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photo.png", "photo_input.png"]  # no temporary left


def test_the_input_copy_goes_beside_a_fresh_output_and_a_replaced_output_is_said(tmp_path, cpu_grey, capsys):
    from PIL import Image

    out = tmp_path / "grey.png"
    assert gs.cli([], out=str(out), cpu=False) == 0
    text = capsys.readouterr().out
    assert f"saved as {tmp_path / 'grey_input.png'}" in text and "replaced" not in text
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "grey_input.png")), gs.test_image())
    out.write_bytes(b"old")
    os.chmod(out, 0o640)
    assert gs.cli([], out=str(out), variant="01_1d", cpu=False) == 0
    assert f"replaced the existing {out}" in capsys.readouterr().out
    assert out.read_bytes() != b"old" and (out.stat().st_mode & 0o777) == 0o640  # the file's own mode kept


def test_an_interrupted_write_leaves_no_half_file(tmp_path, monkeypatch):
    from PIL import Image

    out = tmp_path / "g.png"
    out.write_bytes(b"before")

    def broken_save(self, fp, format=None, **kw):
        fp.write(b"half a picture")
        raise OSError("disk full")

    monkeypatch.setattr(Image.Image, "save", broken_save)
    with pytest.raises(ValueError, match="cannot write .*disk full"):
        gs.save_image(np.zeros((4, 4), np.uint8), out, "PNG")
    assert out.read_bytes() == b"before" and [p.name for p in tmp_path.iterdir()] == ["g.png"]


def test_the_labs_own_plots_folder_is_made(tmp_path, monkeypatch, cpu_grey):
    """build/plots (the default output's folder, which the demo names too) is the lab's: made when missing."""
    from harness.base import paths

    plots = tmp_path / "build" / "plots"
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    monkeypatch.setattr(gs, "PLOTS", plots)
    monkeypatch.setattr(gs, "DEFAULT_OUT", plots / "grayscale.png")
    assert gs.cli([], cpu=False) == 0 and (plots / "grayscale.png").exists() and (plots / "grayscale_input.png").exists()
    for p in plots.iterdir():
        p.unlink()
    plots.rmdir()
    assert gs.cli([], out=str(plots / "g.png"), cpu=False) == 0 and (plots / "g.png").exists()


def _image(path):
    from PIL import Image

    Image.fromarray(gs.test_image(24, 32)).save(path)
    return path


@pytest.mark.parametrize("how", ["same", "symlink", "dotdot", "hardlink"])
def test_out_naming_the_input_image_is_refused_before_anything_runs(tmp_path, no_compute, how):
    src = _image(tmp_path / "in.png")
    (tmp_path / "sub").mkdir()
    out = {"same": src, "dotdot": tmp_path / "sub" / ".." / "in.png"}.get(how)
    if how == "symlink":
        out = tmp_path / "link.png"
        out.symlink_to(src)
    if how == "hardlink":
        out = tmp_path / "hard.png"
        os.link(src, out)
    before = _listing(tmp_path)
    for cpu in (True, False):
        with pytest.raises(ValueError, match=r"is the input image .* \(the same file\)"):
            gs.cli([], image=str(src), out=str(out), cpu=cpu)
    assert _listing(tmp_path) == before


NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


def _inv(*args, env=None):
    from harness.base.paths import ROOT

    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def test_invoke_run_grayscale_out_over_its_image_is_one_line(tmp_path):
    src = _image(tmp_path / "in.png")
    data = src.read_bytes()
    r = _inv("run", "grayscale", "--image", str(src), "--out", str(src), env=NO_GPU)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "the same file" in r.stderr
    assert src.read_bytes() == data


def test_one_rule_for_a_missing_output_folder_in_run_and_viz(tmp_path):
    """`invoke run grayscale --out` and `invoke viz -o` refuse a folder that does not exist, in the same
    words, and make none (viz used to create every folder on the way)."""
    runs = [_inv("run", "grayscale", "--out", str(tmp_path / "a" / "new" / "g.png"), env=NO_GPU),
            _inv("viz", "gridstride", "--simulate", "-n", "40", "-o", str(tmp_path / "a" / "new" / "dir"))]
    for r in runs:
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "does not exist (create it first; nothing was written)" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_output_folder_rule():
    from harness.base import paths

    paths.output_folder(paths.BUILD / "plots" / "new", "-o")  # the lab's own: made when written
    with pytest.raises(ValueError, match="-o: the folder /nonexistent/x does not exist"):
        paths.output_folder("/nonexistent/x", "-o")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        paths.output_folder(__file__, "-o")


def test_a_variant_without_a_gpu_is_refused_not_run_on_the_cpu(tmp_path):
    out = tmp_path / "g.png"
    r = _inv("run", "grayscale", "--variant", "01_1d", "--out", str(out), env=NO_GPU)
    assert r.returncode != 0 and "Traceback" not in r.stderr and not out.exists()
    assert len(r.stderr.strip().splitlines()) == 1 and "needs a GPU" in r.stderr, r.stderr
    assert "check=pass" not in r.stdout
    r = _inv("run", "grayscale", "--variant", "nosuch", env=NO_GPU)
    assert r.returncode != 0 and "unknown variant 'nosuch'" in r.stderr and "needs a GPU" not in r.stderr

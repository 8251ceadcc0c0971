"""The report's files go through the one whole-file writer (harness/base/files.py): in UTF-8 whatever the
locale says, never left half-written, and several reports into one folder at once all succeed. (Here, not
under tests/plots: what is checked is how the pages and pictures reach the disk, not what they show.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import pythonpath
from harness.base.paths import ROOT

FACTS = {"gpu": False, "gpu_why": "no GPU here: “quoted” – é ×", "tools": {}}

WRITE = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from analysis import report
    out, build = Path(sys.argv[1]), Path(sys.argv[2])
    for _ in range(int(sys.argv[3])):
        report.write(out, facts={facts!r}, build=build)
""").format(facts=FACTS)


def _picture_tree(build):
    """A build/ with pictures for the report to copy (a few hundred KB each: copying takes a while)."""
    plots = build / "plots"
    plots.mkdir(parents=True)
    png = b"\x89PNG\r\n\x1a\n" + os.urandom(300_000)
    for name in ("mandelbrot.png", "grayscale.png", "grayscale_input.png", "profile_square.png",
                 "gridstride_a_scatter.png", "ladder_matmul.png", "attention_ratios.png"):
        (plots / name).write_bytes(png)
    return build


def _writers(tmp_path, n, rounds, env_extra=None):
    script = tmp_path / "write.py"
    script.write_text(WRITE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": pythonpath(ROOT), **(env_extra or {})}
    cmd = [sys.executable, str(script), str(tmp_path / "report"), str(tmp_path / "build"), str(rounds)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              encoding="utf-8", errors="replace") for _ in range(n)]
    return [(p.wait(timeout=300), p.communicate()[1]) for p in procs]


def test_the_report_is_written_in_utf8_under_the_c_locale(tmp_path):
    """LC_ALL=C LANG=C PYTHONUTF8=0: the page was written in ASCII (UnicodeEncodeError), leaving an empty
    index.md.tmp behind."""
    _picture_tree(tmp_path / "build")
    [(rc, err)] = _writers(tmp_path, 1, 1, {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""})
    assert rc == 0, err
    out = tmp_path / "report"
    assert "“quoted” – é ×" in (out / "index.md").read_text(encoding="utf-8")
    assert "“quoted” – é ×" in (out / "facts.json").read_text(encoding="utf-8") or "\\u201c" in (out / "facts.json").read_text(encoding="utf-8")
    assert [p.name for p in out.iterdir() if ".tmp" in p.name] == []


def test_four_reports_into_one_folder_at_once_all_succeed(tmp_path):
    """Four `invoke report` at once sometimes failed (`File exists: build/report/img`, or a picture removed
    under another report's copy): each now works in a folder of its own and publishes whole files."""
    _picture_tree(tmp_path / "build")
    results = _writers(tmp_path, 4, 3)
    assert all(rc == 0 for rc, _ in results), [err[-800:] for rc, err in results if rc]
    out = tmp_path / "report"
    img = out / "img"
    md = (out / "index.md").read_text(encoding="utf-8")
    linked = {line.split("](img/", 1)[1].split(")", 1)[0] for line in md.splitlines() if "](img/" in line}
    assert linked and all((img / name).is_file() for name in linked), (linked, sorted(os.listdir(img)))
    ours = [name for name in linked if name.startswith("plots_")]  # the rest are pictures committed with programs
    plots = tmp_path / "build" / "plots"
    assert ours and all((img / name).read_bytes() == (plots / name.removeprefix("plots_")).read_bytes()
                        for name in ours)  # whole pictures
    assert [p.name for p in out.iterdir() if p.name.startswith(".") or ".tmp" in p.name] == []

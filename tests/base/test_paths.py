"""One definition of where things are: harness/base/paths.py. No other module of the product derives the
repository root from its own file, or spells build/bench or bench/results again."""

from __future__ import annotations

import re

from harness.base import paths

PRODUCT = [*sorted((paths.ROOT / "harness").rglob("*.py")), *sorted((paths.ROOT / "analysis").glob("*.py")),
           paths.ROOT / "tasks.py"]
SECOND_ROOT = re.compile(r"__file__")
SECOND_DIR = re.compile(r"""["']bench["']\s*/\s*["']results["']|["']build["']\s*/\s*["']bench["']""")


def second_definitions(files) -> list[str]:
    bad = []
    for f in files:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if f.name == "paths.py" and f.parent.name == "base":
                continue
            if SECOND_ROOT.search(line) and not line.startswith("sys.path.insert("):
                bad.append(f"{f.relative_to(paths.ROOT)}:{n}: {line.strip()}")
            elif SECOND_DIR.search(line):
                bad.append(f"{f.relative_to(paths.ROOT)}:{n}: {line.strip()}")
    return bad


def test_the_root_and_the_result_folders_are_defined_once():
    assert paths.ROOT.joinpath("cuda", "common").is_dir() and paths.ROOT.joinpath("tasks.py").is_file()
    assert paths.BUILD_BENCH == paths.BUILD / "bench" and paths.RESULTS_DIR == paths.ROOT / "bench" / "results"
    assert second_definitions(PRODUCT) == []


def test_the_check_finds_a_second_root_and_a_second_results_folder(tmp_path):
    f = paths.ROOT / "harness" / "_probe.py"  # never written: read through a stand-in below
    probe = tmp_path / "probe.py"
    probe.write_text('ROOT = Path(__file__).resolve().parents[2]\nRES = ROOT / "bench" / "results"\n')

    class Stand:
        name, parent = f.name, f.parent

        def read_text(self):
            return probe.read_text()

        def relative_to(self, root):
            return f.relative_to(root)

    assert len(second_definitions([Stand()])) == 2


def test_gpu_folder_and_slug():
    assert paths.gpu_folder("NVIDIA H100 80GB HBM3") == "h100" and paths.gpu_folder("Some GPU") == "some-gpu"
    assert paths.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"

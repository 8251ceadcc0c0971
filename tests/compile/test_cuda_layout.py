"""Programs own their folders: a file under cuda/<prog>/ includes only its own folder's files,
cuda/common (the lab's helpers) and cuda/shared (kernels that more than one program runs); a file
under cuda/shared includes only cuda/shared and cuda/common. Every quoted include resolves, the way
nvcc resolves it with the Makefile's -Icuda/common -Icuda/shared."""
import re
from pathlib import Path

from harness.compile import build

CUDA = build.CUDA_DIR
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def include_problems(cuda: Path) -> list[str]:
    """One line per quoted include that leaves its allowed places or resolves nowhere."""
    problems = []
    for f in sorted(p for p in cuda.rglob("*") if p.suffix in {".cu", ".cuh", ".h", ".c"}):
        rel = f.relative_to(cuda)
        for name in _INCLUDE.findall(f.read_text()):
            where = [f.parent, cuda / "common", cuda / "shared"]
            if ".." in Path(name).parts:
                problems.append(f"cuda/{rel}: #include \"{name}\" reaches out of its folder with ..")
                continue
            found = next((d / name for d in where if (d / name).is_file()), None)
            if found is None:
                problems.append(f"cuda/{rel}: #include \"{name}\" is in none of its folder, cuda/common, cuda/shared")
                continue
            owner = found.resolve().relative_to(cuda.resolve()).parts[0]
            if owner not in {"common", "shared", rel.parts[0]}:
                problems.append(f"cuda/{rel}: #include \"{name}\" is another program's file (cuda/{owner})")
    return problems


def test_programs_include_only_their_folder_common_and_shared():
    assert include_problems(CUDA) == []


def test_the_check_catches_a_reach_into_another_program(tmp_path):
    # The checker must fail on the two ways a program reached into another before cuda/shared existed.
    for d in ("common", "shared/fam", "alpha", "beta"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "common" / "check.cuh").write_text("")
    (tmp_path / "shared" / "fam" / "k.cuh").write_text('#include "check.cuh"\n')
    (tmp_path / "alpha" / "alpha_kernels.cuh").write_text("")
    (tmp_path / "alpha" / "alpha.cu").write_text('#include "alpha_kernels.cuh"\n#include "fam/k.cuh"\n')
    assert include_problems(tmp_path) == []
    (tmp_path / "beta" / "beta.cu").write_text('#include "../alpha/alpha_kernels.cuh"\n#include "nowhere.cuh"\n')
    (tmp_path / "shared" / "fam" / "bad.cuh").write_text('#include "alpha_kernels.cuh"\n')
    problems = include_problems(tmp_path)
    assert len(problems) == 3, problems
    assert any("beta/beta.cu" in p and ".." in p for p in problems)
    assert any("beta/beta.cu" in p and "nowhere.cuh" in p for p in problems)
    assert any("shared/fam/bad.cuh" in p for p in problems)

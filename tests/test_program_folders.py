"""A program is one folder, and its record is its contract: the checks that keep it so.

- Every program folder holds its CUDA, its Python module ending in a `RECORD = Program(...)`, its tests
  and its page; the record is valid and named after the folder.
- The registry (harness/programs/__init__.py) is the only reader of a record.
- No program module imports another: it reaches one only through the registry's `module`, and names
  it in its record's `uses`.
- No list of programs is typed anywhere else: the README's learning path is checked against the
  registry here, and a literal naming three programs or more in the product, the tests or .ci/ fails.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from harness import programs
from harness.programs import Program

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = programs.names()
REGISTRY = ROOT / "harness" / "programs" / "__init__.py"


def _module_file(prog: str, root: Path = ROOT) -> Path:
    return root / "cuda" / prog / f"{prog}.py"


@pytest.mark.parametrize("prog", PROGRAMS)
def test_every_program_is_one_whole_folder(prog):
    folder = ROOT / "cuda" / prog
    for name in (f"{prog}.cu", f"{prog}.h", "main.cu", f"{prog}.py", "README.md"):
        assert (folder / name).is_file(), f"cuda/{prog}/{name} is missing"
    assert list(folder.glob("test_*.py")), f"cuda/{prog}/ holds no test_*.py: a program's tests sit beside it"
    rec = programs.record(prog)
    assert isinstance(rec, Program) and rec.name == prog and rec.summary


def test_a_bad_record_is_one_line_naming_the_file(monkeypatch):
    import types

    fake = types.ModuleType("harness.programs.zz")
    monkeypatch.setattr(programs, "module", lambda p: fake)
    with pytest.raises(TypeError, match=r"cuda/zz/zz.py must end with RECORD = Program\(name='zz'"):
        programs.record("zz")
    fake.RECORD = Program(name="yy", summary="s")
    with pytest.raises(ValueError, match="its RECORD is named 'yy', not 'zz'"):
        programs.record("zz")
    with pytest.raises(ValueError, match="identifier"):
        Program(name="no-dash", summary="s")
    with pytest.raises(TypeError, match="bench_cases must be callable"):
        Program(name="ok", summary="s", bench_cases=[1])


# --- the registry alone reads a record ------------------------------------------------------------

def _python_files(root: Path = ROOT) -> list[Path]:
    files = [*root.glob("harness/**/*.py"), *root.glob("analysis/**/*.py"), *root.glob("cuda/*/*.py"),
             *root.glob("tests/**/*.py"), root / "tasks.py", root / "conftest.py"]
    return sorted(f for f in files if f.is_file() and "__pycache__" not in f.parts)


def record_readers(sources: dict[Path, str]) -> list[str]:
    """file:line for each use of a name RECORD other than a program module's own definition, outside
    the registry."""
    out = []
    for f, src in sources.items():
        if f == REGISTRY:
            continue
        own = f.parent.parent.name == "cuda" and f.stem == f.parent.name
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Attribute) and node.attr == "RECORD":
                out.append(f"{f.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.Name) and node.id == "RECORD" and not (own and isinstance(node.ctx, ast.Store)):
                out.append(f"{f.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.Constant) and node.value == "RECORD" and f != Path(__file__).resolve():
                out.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    return out


def test_the_registry_alone_reads_a_record():
    here = Path(__file__).resolve()
    assert record_readers({f: f.read_text() for f in _python_files() if f != here}) == []


def test_the_reader_check_catches_a_second_reader():
    probe = ROOT / "harness" / "user" / "_probe.py"
    src = "from harness.programs import matmul\nx = matmul.RECORD.bench_cases\ny = getattr(matmul, 'RECORD')\n"
    assert record_readers({probe: src}) == ["harness/user/_probe.py:2", "harness/user/_probe.py:3"]


# --- no program module imports another --------------------------------------------------------------

def program_imports(prog: str, src: str, uses: tuple[str, ...]) -> list[str]:
    """What in prog's module reaches another program other than through the registry and its `uses`."""
    others = set(PROGRAMS) - {prog}
    bad = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            base = ("harness.programs" if node.level == 1 and not node.module else node.module or "")
            if node.level == 1 and node.module:
                base = f"harness.programs.{node.module}"
            for a in node.names:
                target = f"{base}.{a.name}"
                if any(target == f"harness.programs.{o}" or target.startswith(f"harness.programs.{o}.") or
                       base == f"harness.programs.{o}" for o in others):
                    bad.append(f"line {node.lineno}: imports {target}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if any(a.name == f"harness.programs.{o}" for o in others):
                    bad.append(f"line {node.lineno}: imports {a.name}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "module"
              and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in others
              and node.args[0].value not in uses):
            bad.append(f"line {node.lineno}: fetches {node.args[0].value} without naming it in its record's uses")
    return bad


@pytest.mark.parametrize("prog", PROGRAMS)
def test_no_program_module_imports_another(prog):
    assert program_imports(prog, _module_file(prog).read_text(), programs.record(prog).uses) == []


def test_the_import_check_catches_each_way_in():
    assert len(program_imports("transformer_block", "from . import attention\n", ())) == 1
    assert len(program_imports("transformer_block", "from harness.programs import attention as a\n", ())) == 1
    assert len(program_imports("transformer_block", "import harness.programs.attention\n", ())) == 1
    assert len(program_imports("transformer_block", "from harness.programs.attention import reference\n", ())) == 1
    src = "from harness import programs\nprograms.module('attention').reference\n"
    assert len(program_imports("transformer_block", src, ())) == 1
    assert program_imports("transformer_block", src, ("attention",)) == []


# --- no list of programs anywhere else ---------------------------------------------------------------

def test_the_readme_learning_path_is_written_from_the_records():
    from harness.programs import scaffold

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert scaffold.with_table(readme, programs.learning_path()) == readme, (
        "README.md's learning path is not the records' (invoke new writes it; a record's summary, follows, "
        "order, exercises or readme_picture changed without it)")


def test_the_readme_check_fails_on_a_stale_table():
    from harness.programs import scaffold

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    recs = programs.learning_path()
    assert scaffold.with_table(readme, recs[1:]) != readme  # a program left out
    assert scaffold.with_table(readme, recs[::-1]) != readme  # out of order
    with pytest.raises(ValueError, match="lost the markers"):
        scaffold.with_table(readme.replace(scaffold.README_END, ""), recs)


def program_lists(sources: dict[Path, str]) -> list[str]:
    """file:line of each list a program's behaviour would follow: a literal list, tuple or set naming three
    programs or more assigned at a module's top level (Python), or a comma-separated list of three or
    more (a shell script's `--programs a,b,c`). A test's assertion about named programs is no such list."""
    names = set(PROGRAMS)
    out = []
    for f, src in sources.items():
        if f.suffix == ".py":
            for stmt in ast.parse(src).body:
                if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
                    continue
                for node in ast.walk(stmt.value):
                    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                        hits = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
                        if len(hits) >= 3:
                            out.append(f"{f.relative_to(ROOT)}:{node.lineno}")
        else:
            for i, line in enumerate(src.splitlines(), 1):
                for group in re.findall(r"\b\w+(?:,\w+)+\b", line):
                    if len(set(group.split(",")) & names) >= 3:
                        out.append(f"{f.relative_to(ROOT)}:{i}")
    return out


def test_no_list_of_programs_is_typed_anywhere_else():
    here = Path(__file__).resolve()
    files = [f for f in _python_files() if f != here] + sorted((ROOT / ".ci").iterdir()) + [ROOT / "Makefile"]
    assert program_lists({f: f.read_text() for f in files if f.is_file()}) == []


def test_the_list_check_catches_a_typed_list():
    probe = ROOT / "analysis" / "_probe.py"
    src = 'TOUR = ("hello", "square", "matmul")\nok = ("hello", "x")\n'
    assert program_lists({probe: src}) == ["analysis/_probe.py:1"]
    assert program_lists({ROOT / ".ci" / "_probe": "invoke bench --programs matmul,gemm_tc,attention\n"}) == [
        ".ci/_probe:1"]


# --- the grader names no exercise: everything specific is the exercise's problem ---------------------

def exercise_names_in(sources: dict[Path, str], names: set[str]) -> list[str]:
    """file:line of each string constant in `sources` that is an exercise's name."""
    out = []
    for f, src in sources.items():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                out.append(f"{f.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    return out


def test_the_grader_names_no_exercise():
    from harness.user.exercises import catalog

    names = {e.name for e in catalog.exercises()}
    grader = sorted((ROOT / "harness" / "user" / "exercises").glob("*.py"))
    assert exercise_names_in({f: f.read_text() for f in grader}, names) == []


def test_the_exercise_name_check_catches_a_branch():
    probe = ROOT / "harness" / "user" / "exercises" / "_probe.py"
    assert exercise_names_in({probe: "if name == 'matmul_tiled':\n    pass\n"}, {"matmul_tiled"}) == [
        "harness/user/exercises/_probe.py:1: 'matmul_tiled'"]

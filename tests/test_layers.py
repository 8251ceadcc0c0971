"""The import graph of the product (harness/, analysis/, tasks.py), read from the source with ast.

Every import counts, at module level or inside a function. The layers, from the bottom up, and what each
may import (ARCHITECTURE.md, "Layers"):

    harness.base        nothing first-party
    harness.compile     base
    harness.calling     base, compile
    harness.measuring   base, compile, calling            never a program module
    harness.profiling   ... measuring                      never a program module
    harness.programs    ... profiling
    analysis            base, measuring, profiling         the readers of what those layers write
    harness.user        every layer, programs, analysis
    tasks               everything

No product module imports tests/ (nor reads a path under it). One function reads the C side's
variant and configuration tables. Every "package.module:function" string (the timing child's targets)
and every `python -m package.module` resolves.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import pytest


def _repo_root() -> Path:
    here = Path(__file__).resolve().parent
    while not (here / "pyproject.toml").exists():
        if here.parent == here:
            raise RuntimeError("no pyproject.toml above this test")
        here = here.parent
    return here


ROOT = _repo_root()

RANK = {"base": 0, "compile": 1, "calling": 2, "measuring": 3, "profiling": 4, "programs": 5, "analysis": 6,
        "user": 7, "tasks": 8}
# Layers below `programs` that must never reach a program module (the rank rule says it too; this names why).
NO_PROGRAMS = {"measuring", "profiling"}
# What analysis/ may import besides itself: the layers whose files it reads.
ANALYSIS_MAY = {"base", "measuring", "profiling"}
# The one reader of the C tables (<prog>_variant_count/_name, <prog>_config_count/_name).
TABLE_READER = "harness.calling.library:read_table"
_TABLE = re.compile(r"_(variant|config)_(count|name)\b")
_TARGET = re.compile(r"^(?:harness|analysis)(?:\.\w+)+:\w+$")


@dataclass(frozen=True)
class Import:
    importer: str  # module name
    target: str  # absolute module (or module.name for `from m import name`)
    line: int
    path: str


def module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if len(parts) == 3 and parts[0] == "cuda" and parts[1] == parts[2]:
        return f"harness.programs.{parts[1]}"  # a program's module, in its own folder

    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def product_files(root: Path = ROOT) -> list[Path]:
    files = [*root.glob("harness/**/*.py"), *root.glob("analysis/**/*.py"), *program_modules(root)]
    if (root / "tasks.py").exists():
        files.append(root / "tasks.py")
    return sorted(f for f in files if "__pycache__" not in f.parts)


def program_modules(root: Path = ROOT) -> list[Path]:
    """Each program's Python module: cuda/<prog>/<prog>.py, imported as harness.programs.<prog>."""
    return sorted(d / f"{d.name}.py" for d in (root / "cuda").iterdir() if (d / f"{d.name}.py").is_file())


def layer_of(mod: str) -> str | None:
    parts = mod.split(".")
    if parts[0] == "tasks":
        return "tasks"
    if parts[0] == "analysis":
        return "analysis"
    if parts[0] == "harness" and len(parts) >= 2 and parts[1] in RANK:
        return parts[1]
    return None


def imports_of(path: Path, root: Path = ROOT, source: str | None = None) -> list[Import]:
    """Every first-party import in the file, at any depth, relative ones resolved."""
    rel = path.relative_to(root)
    mod = module_name(rel)
    pkg = mod.split(".") if rel.name == "__init__.py" else mod.split(".")[:-1]
    tree = ast.parse(source if source is not None else path.read_text(), filename=str(rel))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out.append(Import(mod, a.name, node.lineno, str(rel)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(pkg[: len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                out.append(Import(mod, f"{base}.{a.name}" if a.name != "*" else base, node.lineno, str(rel)))
    first = ("harness", "analysis", "tasks", "tests", "conftest")
    return [i for i in out if i.target.split(".")[0] in first]


def target_layer(target: str) -> str | None:
    """The layer a target lies in: harness.calling.library.Library -> calling; harness.programs -> programs."""
    if target.split(".")[0] in ("tests", "conftest"):
        return "tests"
    return layer_of(target)


def violations(root: Path = ROOT, files: list[Path] | None = None, sources: dict | None = None) -> list[str]:
    """One line per import that breaks a layer rule."""
    bad = []
    for f in files if files is not None else product_files(root):
        src = (sources or {}).get(f)
        for imp in imports_of(f, root, src):
            me, them = layer_of(imp.importer), target_layer(imp.target)
            where = f"{imp.path}:{imp.line} imports {imp.target}"
            if them == "tests":
                bad.append(f"{where}: the product never imports tests/")
            elif me is None or them is None:
                continue  # a module outside the layers: test_every_product_module_is_in_a_layer names it
            elif me in NO_PROGRAMS and them == "programs":
                bad.append(f"{where}: the {me} layer never imports a program module (programs hand their "
                           f"cases, ceilings and spaces down; the tasks wire them)")
            elif me == "analysis" and them not in ANALYSIS_MAY | {"analysis"}:
                bad.append(f"{where}: analysis reads what base/measuring/profiling write; it does not import {them}")
            elif RANK[them] > RANK[me]:
                bad.append(f"{where}: {me} imports the higher layer {them}")
    return bad


def modules_outside_layers(root: Path = ROOT) -> list[str]:
    return [str(f.relative_to(root)) for f in product_files(root)
            if layer_of(module_name(f.relative_to(root))) is None and f.relative_to(root) != Path("harness/__init__.py")]


def paths_into_tests(root: Path = ROOT) -> list[str]:
    """Product code that builds a path into tests/ (ROOT / "tests" / ...)."""
    out = []
    for f in product_files(root):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                for side in (node.left, node.right):
                    if isinstance(side, ast.Constant) and isinstance(side.value, str) and \
                            side.value.split("/")[0] == "tests":
                        out.append(f"{f.relative_to(root)}:{node.lineno} reads {side.value!r} under tests/")
    return out


def _functions(tree: ast.AST, mod: str):
    """(qualified name, node) of every function, nested ones named through their parents."""
    def walk(node, prefix):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{ch.name}" if prefix else ch.name
                yield name, ch
                yield from walk(ch, name)
            elif isinstance(ch, ast.ClassDef):
                yield from walk(ch, f"{prefix}.{ch.name}" if prefix else ch.name)
            else:
                yield from walk(ch, prefix)
    for name, node in walk(tree, ""):
        yield f"{mod}:{name}", node


def table_readers(root: Path = ROOT, sources: dict | None = None) -> set[str]:
    """The innermost functions whose own body names a C table accessor (an attribute, a string or an
    f-string part such as f"{prog}_variant_name"); code outside any function counts as `module:<top>`."""
    readers = set()
    for f in product_files(root) + list((sources or {}).keys() - set(product_files(root))):
        src = (sources or {}).get(f) or f.read_text()
        mod = module_name(f.relative_to(root))
        tree = ast.parse(src)
        owner = {}
        for qual, fn in _functions(tree, mod):
            for sub in ast.walk(fn):
                owner[id(sub)] = qual  # inner functions come later in the walk and overwrite: innermost wins
        for node in ast.walk(tree):
            text = None
            if isinstance(node, ast.Attribute):
                text = node.attr
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            if text and _TABLE.search(text) and not _is_docstring(tree, node):
                readers.add(owner.get(id(node), f"{mod}:<top>"))
    return readers


def _is_docstring(tree: ast.AST, node: ast.AST) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and first.value is node:
                return True
    return False


def _c_strings(folder: Path) -> set[str]:
    """Every string literal in a program folder's C sources."""
    out: set[str] = set()
    for f in sorted(folder.iterdir()):
        if f.suffix in (".cu", ".cuh", ".h"):
            out.update(re.findall(r'"((?:[^"\\\n]|\\.)*)"', f.read_text(errors="replace")))
    return out


# Typed lists a program may keep: the lab's own choices among the variants (what `invoke profile` runs when
# none is named, what the latency sweep compares, what `invoke tune` searches, what `bench --quick` times),
# the variants its Python module has a twin for (a fact of the Python side), and an executable's input kinds
# (no variants). What a variant *is* (bf16, an all-reduce, graph-capturable, a ladder rung) the C table says.
CHOICES = {"PROFILE_VARIANTS", "LATENCY_VARIANTS", "TUNE_KINDS", "QUICK_RUNGS", "TWINS", "INPUTS"}


def hand_typed_variants(root: Path = ROOT) -> list[str]:
    """Program modules that spell a list of their C names out at module level: `VARIANTS = ("01_naive",
    ...)`, or any other name bound to strings (literals, or module-level names bound to one) that are each
    a literal of the program's C sources: a kind of variant typed again instead of asked of the table."""
    out = []
    for f in program_modules(root):
        literals = _c_strings(f.parent)
        body = ast.parse(f.read_text()).body
        consts = {t.id: n.value.value for n in body if isinstance(n, ast.Assign)
                  and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                  for t in n.targets if isinstance(t, ast.Name)}
        for node in body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                value = node.value
                if not isinstance(value, (ast.Tuple, ast.List, ast.Set)) or not value.elts:
                    continue
                strings = [e.value if isinstance(e, ast.Constant) else consts.get(e.id) if isinstance(e, ast.Name)
                           else None for e in value.elts]
                if not all(isinstance(v, str) for v in strings) or set(names) & CHOICES:
                    continue
                if "VARIANTS" in names or (len(strings) >= 2 and all(v in literals for v in strings)):
                    out.append(f"{f.relative_to(root)}:{node.lineno}")
    return out


def string_targets(root: Path = ROOT) -> list[tuple[str, str]]:
    """(where, "module:function") for every such string in the product and the tests."""
    out = []
    here = Path(__file__).resolve()
    files = product_files(root) + sorted(f for f in root.glob("tests/**/*.py") if f.resolve() != here)
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _TARGET.match(node.value):
                out.append((f"{f.relative_to(root)}:{node.lineno}", node.value))
    return out


def dash_m_targets(root: Path = ROOT) -> list[tuple[str, str]]:
    """(where, module) for every ["-m", "module"] pair of string constants (a child process's module)."""
    out = []
    for f in product_files(root) + sorted(root.glob("tests/**/*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.List, ast.Tuple)):
                elts = node.elts
                for a, b in zip(elts, elts[1:]):
                    if isinstance(a, ast.Constant) and a.value == "-m" and isinstance(b, ast.Constant) \
                            and isinstance(b.value, str) and b.value.split(".")[0] in ("harness", "analysis"):
                        out.append((f"{f.relative_to(root)}:{node.lineno}", b.value))
    return out


# --- the rules ---------------------------------------------------------------------------------------------

def test_every_product_module_is_in_a_layer():
    assert modules_outside_layers() == []


def test_no_module_imports_a_higher_layer_or_tests():
    assert violations() == []


def test_the_product_reads_no_path_under_tests():
    assert paths_into_tests() == []


def test_one_reader_of_the_c_variant_and_config_tables():
    assert table_readers() == {TABLE_READER}


def test_no_program_types_its_variant_names_by_hand():
    assert hand_typed_variants() == []


def test_a_kind_of_variant_typed_by_hand_is_found(tmp_path):
    prog = tmp_path / "cuda" / "toy"
    prog.mkdir(parents=True)
    (prog / "toy.cu").write_text('static const char *const kVariants[] = {"01_a", "02_b", "03_c"};\n')
    (prog / "toy.py").write_text('B = "02_b"\nFAST = ("02_b", "03_c")\nSLOW = ("01_a", B)\nTWINS = ("01_a", "02_b")\n'
                                 'SIZES = ("4KiB", "1MiB")\nONE = ("01_a",)\n')
    assert hand_typed_variants(tmp_path) == ["cuda/toy/toy.py:2", "cuda/toy/toy.py:3"]


def test_every_string_target_resolves():
    found = string_targets()
    assert found, "no 'module:function' target found: the scan is broken"
    bad = []
    for where, target in found:
        mod, _, fn = target.partition(":")
        try:
            if not callable(getattr(importlib.import_module(mod), fn)):
                bad.append(f"{where}: {target} is not callable")
        except (ImportError, AttributeError) as e:
            bad.append(f"{where}: {target}: {e}")
    assert bad == []


def test_every_dash_m_module_exists():
    found = dash_m_targets()
    assert found, "no `-m harness....` child found: the scan is broken"
    bad = [f"{w}: {m}" for w, m in found if importlib.util.find_spec(m) is None]
    assert bad == []


# --- the checkers themselves fail on a wrong answer ----------------------------------------------------------

def test_the_checker_catches_an_upward_import_a_program_import_and_tests():
    f = ROOT / "harness" / "measuring" / "_probe.py"  # never written: the source is handed in
    src = ("from harness.programs import matmul\n"
           "def g():\n    from harness.user import demo\n"
           "def h():\n    from conftest import GPU_OK\n"
           "from ..calling import library\n")
    bad = violations(files=[f], sources={f: src})
    assert len(bad) == 3, bad
    assert "never imports a program module" in bad[0] and "harness/measuring/_probe.py:1" in bad[0]
    assert "higher layer user" in bad[1] and ":3 " in bad[1]
    assert "never imports tests/" in bad[2]
    # a relative import of a lower layer is resolved and allowed
    assert not any("calling" in b for b in bad)


def test_the_checker_catches_a_second_table_reader():
    f = ROOT / "harness" / "programs" / "_probe.py"
    src = 'def variants(lib, prog):\n    return [lib.ffi.string(getattr(lib, f"{prog}_variant_name")(i)) for i in range(3)]\n'
    assert "harness.programs._probe:variants" in table_readers(sources={f: src})


@pytest.mark.parametrize("mod,layer", [("harness.measuring.bench", "measuring"), ("harness.programs.matmul", "programs"),
                                       ("analysis.bench", "analysis"), ("harness.bench", None), ("tasks", "tasks")])
def test_layer_of(mod, layer):
    assert layer_of(mod) == layer

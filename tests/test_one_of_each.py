"""One of each mechanism, held by a check that fails when a second copy appears (ARCHITECTURE.md,
"One of each"). Each check reads the product's source (harness/, analysis/, the programs' modules,
tasks.py) with ast, and each is shown failing on a probe: the second copy it exists to refuse.

- One GPU query: only harness/compile/toolchain.py runs nvidia-smi (`nvidia_smi`, `gpu_query`).
- One source of the target architecture and of nvcc's flags: the Makefile. The string compiler
  (harness/compile/jit.py) reads them through `make print-nvcc`, and no Python module spells an nvcc
  code-generation or optimisation flag of its own.
- One "no GPU" type: every exception class named for a missing GPU is a harness.base.errors.NoGPUError.
- Profiling runs its tools through harness/calling/runner.py: no subprocess call of its own.
- Paths from harness/base/paths.py only: no other module derives a folder from its own `__file__` or
  defines ROOT, BUILD, ...; none reads those names off harness.compile.build.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
from test_layers import ROOT, product_files

from harness.base import errors, paths
from harness.compile import build, jit, toolchain

PATH_NAMES = frozenset(n for n, v in vars(paths).items() if isinstance(v, Path) and n.isupper())


def _rel(f: Path, root: Path = ROOT) -> str:
    return str(f.relative_to(root))


def _trees(sources: dict | None):
    """(relative path, parsed tree) of every product file, or of the probe sources handed in instead."""
    if sources is not None:
        for f, src in sources.items():
            yield _rel(f), ast.parse(src)
        return
    for f in product_files():
        yield _rel(f), ast.parse(f.read_text())


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


# --- one GPU query -------------------------------------------------------------------------------------------

GPU_QUERY_HOME = "harness/compile/toolchain.py"
_SMI = re.compile(r"^\s*nvidia-smi(\s|$)")


def nvidia_smi_runners(sources: dict | None = None) -> list[str]:
    """Calls outside toolchain.py handed nvidia-smi as a command: the word itself or a shell line starting
    with it, as an argument or an element of an argv list (a message that mentions it is prose, and a
    label such as `(version, "nvidia-smi")` is no call)."""
    bad = []
    for rel, tree in _trees(sources):
        if rel == GPU_QUERY_HOME:
            continue
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                for n in (arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]):
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and _SMI.match(n.value):
                        bad.append(f"{rel}:{n.lineno} runs {n.value!r}: ask harness.compile.toolchain.gpu_query")
    return sorted(set(bad), key=lambda b: int(b.split(":")[1].split()[0]))


def test_only_the_toolchain_runs_nvidia_smi():
    assert nvidia_smi_runners() == []


def test_the_gpu_query_check_catches_a_second_runner():
    f = ROOT / "harness" / "measuring" / "_probe.py"  # never written: the source is handed in
    src = ('import subprocess\n'
           'def physical_gpus():\n'
           '    """Counted with nvidia-smi -L."""\n'
           '    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)\n'
           '    raise ValueError("no GPU is visible here (nvidia-smi lists none)")\n'
           'def arch():\n'
           '    return subprocess.getoutput("nvidia-smi --query-gpu=compute_cap --format=csv")\n')
    bad = nvidia_smi_runners({f: src})
    assert [b.split(" runs ")[0] for b in bad] == ["harness/measuring/_probe.py:4", "harness/measuring/_probe.py:7"]


def test_gpu_query_reads_each_gpu_as_a_row(monkeypatch):
    asked = []

    def smi(*args, timeout=30):
        asked.append(args)
        return "NVIDIA H100 80GB HBM3, 9.0\nNVIDIA H200, 9.0\n\n"

    monkeypatch.setattr(toolchain, "nvidia_smi", smi)
    assert toolchain.gpu_query("name", "compute_cap") == [{"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"},
                                                          {"name": "NVIDIA H200", "compute_cap": "9.0"}]
    assert asked == [("--query-gpu=name,compute_cap", "--format=csv,noheader,nounits")]
    with pytest.raises(ValueError, match="at least one"):
        toolchain.gpu_query()


def test_without_nvidia_smi_the_query_is_empty(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert toolchain.nvidia_smi("-L") == "" and toolchain.gpu_query("name") == []


# --- one source of the architecture and of nvcc's flags: the Makefile ----------------------------------------

def _printed(root: Path = ROOT, *extra: str) -> dict[str, str]:
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(root), "print-nvcc",
                          f"NVCC={toolchain.require('nvcc').path}", *extra],
                         capture_output=True, text=True, timeout=120, check=True)
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def _absolute(words: list[str], root: Path = ROOT) -> list[str]:
    return [f"-I{root / w[2:]}" if w.startswith("-I") else w for w in words]


def _nvcc_line(text: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if " -c cuda/common/cudalab.cu" in ln)
    return line.split()


@pytest.fixture
def no_env_arch(monkeypatch):
    monkeypatch.delenv("ARCH", raising=False)
    monkeypatch.delenv("PTX_ONLY", raising=False)
    jit.default_arch.cache_clear()
    yield
    jit.default_arch.cache_clear()


def test_the_string_compiler_compiles_with_the_makefiles_flags(no_env_arch):
    make = _printed()
    assert jit.default_arch() == make["ARCH"]
    assert jit._base_flags(make["ARCH"]) == _absolute(make["NVCCFLAGS"].split())
    # What that means: host warnings are errors and both include folders are searched, as in the build.
    flags = jit._base_flags(make["ARCH"])
    assert any("-Werror" in w for w in flags)
    assert f"-I{paths.CUDA_DIR / 'shared'}" in flags and f"-I{paths.CUDA_DIR / 'common'}" in flags
    # An arch asked for by name gets the Makefile's code generation for it too.
    assert jit._base_flags("86") == _absolute(_printed(ROOT, "ARCH=86")["NVCCFLAGS"].split())


def test_the_makefiles_recipes_compile_with_the_printed_flags(no_env_arch):
    """The flags `make print-nvcc` prints are the ones the build's nvcc lines really carry, in order."""
    make = _printed()
    dry = subprocess.run(["make", "-n", "-B", "--no-print-directory", "-C", str(ROOT),
                          f"NVCC={toolchain.require('nvcc').path}", "build/obj/common/cudalab.o"],
                         capture_output=True, text=True, timeout=120, check=True)
    words, want = _nvcc_line(dry.stdout), make["NVCCFLAGS"].split()
    assert any(words[i:i + len(want)] == want for i in range(len(words))), (words, want)


def test_a_flag_changed_in_the_makefile_reaches_the_string_compiler(tmp_path, monkeypatch, no_env_arch):
    (tmp_path / "cuda").mkdir()
    text = (ROOT / "Makefile").read_text()
    host = re.search(r"^NVCC_HOST\s*:=.*$", text, re.M)
    assert host, "the Makefile has no NVCC_HOST line: the shared flags moved"
    (tmp_path / "Makefile").write_text(text.replace(host.group(0), host.group(0) + " -Xcompiler -Wshadow", 1))
    monkeypatch.setattr(build, "ROOT", tmp_path)  # jit asks build.nvcc_flags, whose default root this is
    flags = jit._base_flags("90")
    assert flags[-2:] == ["-Xcompiler", "-Wshadow"] and f"-I{tmp_path / 'cuda' / 'shared'}" in flags
    monkeypatch.setattr(build, "ROOT", ROOT)
    assert "-Wshadow" not in jit._base_flags("90")


# Words that only a compiler's flag list holds: a module that spells one builds nvcc's flags itself.
_FLAG_WORD = re.compile(r"^(-gencode|-lineinfo|-O[0-3]|--?std=c\+\+\d+|-Xptxas|arch=compute_.*|.*-Wextra.*)$")
FLAG_HOME = "harness/compile/build.py"  # reads the Makefile's (and runs make with its variables)


def nvcc_flag_spellers(sources: dict | None = None) -> list[str]:
    bad = []
    for rel, tree in _trees(sources):
        if rel == FLAG_HOME:
            continue
        docs = _docstrings(tree)
        docs |= {id(v) for j in ast.walk(tree) if isinstance(j, ast.JoinedStr) for v in j.values}  # read whole below
        for n in ast.walk(tree):
            texts = []
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
                texts = [n.value]
            elif isinstance(n, ast.JoinedStr):
                texts = ["".join(v.value for v in n.values if isinstance(v, ast.Constant)) + "X"]
            if any(_FLAG_WORD.match(t) for t in texts):
                bad.append(f"{rel}:{n.lineno} spells an nvcc flag ({texts[0]!r}): the Makefile holds them")
    return bad


def test_no_python_module_spells_nvccs_flags():
    assert nvcc_flag_spellers() == []


def test_the_flag_check_catches_a_second_flag_list():
    f = ROOT / "harness" / "compile" / "_probe.py"
    src = ('def _base_flags(arch):\n'
           '    return ["-O3", "-lineinfo", "-std=c++17", "-gencode",\n'
           '            f"arch=compute_{arch},code=[sm_{arch},compute_{arch}]",\n'
           '            "-Xcompiler", "-fPIC,-Wall,-Wextra", "-Xptxas", "-v"]\n')
    bad = nvcc_flag_spellers({f: src})
    assert len(bad) == 7 and all(b.startswith("harness/compile/_probe.py:") for b in bad), bad


# --- one "no GPU" type ---------------------------------------------------------------------------------------

_NO_GPU_NAME = re.compile(r"No(GPU|Gpu|Device|Cuda|CUDA)")


def _base_name(b: ast.expr) -> str:
    return b.attr if isinstance(b, ast.Attribute) else b.id if isinstance(b, ast.Name) else ""


def stray_no_gpu_types(sources: dict | None = None) -> list[str]:
    """Exception classes named for a missing GPU that do not derive from harness.base.errors.NoGPUError
    (bases resolved by name across the product, and the probe handed in)."""
    classes: dict[str, tuple[str, int, list[str]]] = {}
    for rel, tree in [*_trees(None), *(_trees(sources) if sources else [])]:
        for n in ast.walk(tree):
            if isinstance(n, ast.ClassDef):
                classes[n.name] = (rel, n.lineno, [_base_name(b) for b in n.bases])

    def is_no_gpu(name: str, seen=()) -> bool:
        if name == "NoGPUError":
            return True
        if name in seen or name not in classes:
            return False
        return any(is_no_gpu(b, (*seen, name)) for b in classes[name][2])

    return [f"{rel}:{line} class {name}: derive it from harness.base.errors.NoGPUError"
            for name, (rel, line, _) in sorted(classes.items()) if _NO_GPU_NAME.search(name) and not is_no_gpu(name)]


def test_every_no_gpu_error_is_a_nogpuerror():
    assert stray_no_gpu_types() == []


def test_the_no_gpu_check_catches_a_second_type():
    f = ROOT / "harness" / "user" / "_probe.py"
    src = ("from harness.base.errors import ProgramError\n"
           "class CellFailed(ProgramError):\n    pass\n"
           "class CellNoDeviceError(CellFailed):\n    pass\n")
    assert stray_no_gpu_types({f: src}) == [
        "harness/user/_probe.py:4 class CellNoDeviceError: derive it from harness.base.errors.NoGPUError"]


def test_one_except_catches_a_calls_and_a_cells_missing_gpu():
    pytest.importorskip("IPython")  # the notebook module needs it (the notebook extra)
    notebook = pytest.importorskip("harness.user.notebook")
    cell = notebook.CellNoGPUError(["./hello"], 0, "cudaGetDeviceCount: no CUDA device", "", "Hello World from the CPU!\n")
    call = errors.NoGPUError(100, "cudaErrorNoDevice", "no CUDA-capable device is detected")
    for e in (cell, call):
        try:
            raise e
        except errors.NoGPUError as caught:
            assert caught.code == 100 and caught.hint
    # Still the cell's program error: its status and output, and the one line IPython shows.
    assert isinstance(cell, errors.ProgramError) and cell.returncode == 0 and "from the CPU" in cell.stdout
    assert "ran without a GPU" in str(cell) and cell._render_traceback_()[0].startswith("NoGPUError: ")


# --- profiling runs through the runner -----------------------------------------------------------------------

# A call that starts a process other than through harness.calling.runner.
_STARTERS = {"subprocess": None, "os": {"system", "popen", "execv", "execvp", "spawnv", "spawnvp", "posix_spawn"},
             "procs": {"start", "run_bounded"}}
_STARTER_NAMES = {"Popen", "check_output", "check_call", "getoutput", "run_bounded", "system"}


def process_starters(sources: dict | None = None, under: str = "harness/profiling/") -> list[str]:
    bad = []
    for rel, tree in _trees(sources):
        if not rel.startswith(under):
            continue
        for n in ast.walk(tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in n.names] + ([n.module] if isinstance(n, ast.ImportFrom) and n.module else [])
                if any(x.split(".")[0] == "subprocess" for x in names):
                    bad.append(f"{rel}:{n.lineno} imports subprocess: run the tool through harness.calling.runner")
            elif isinstance(n, ast.Call):
                fn = n.func
                if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id in _STARTERS:
                    allowed = _STARTERS[fn.value.id]
                    if allowed is None or fn.attr in allowed:
                        bad.append(f"{rel}:{n.lineno} calls {fn.value.id}.{fn.attr}: run it through harness.calling.runner")
                elif isinstance(fn, ast.Name) and fn.id in _STARTER_NAMES:
                    bad.append(f"{rel}:{n.lineno} calls {fn.id}: run it through harness.calling.runner")
    return bad


def test_profiling_starts_no_process_but_through_the_runner():
    assert process_starters() == []


def test_the_runner_check_catches_a_second_subprocess_helper():
    f = ROOT / "harness" / "profiling" / "_probe.py"
    src = ("import subprocess\n"
           "def _run(argv, timeout):\n"
           "    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)\n"
           "def _go(argv):\n"
           "    from harness.base import procs\n"
           "    return procs.run_bounded(argv, timeout=5)\n")
    bad = process_starters({f: src})
    assert [b.split(" ")[0] for b in bad] == ["harness/profiling/_probe.py:1", "harness/profiling/_probe.py:3",
                                               "harness/profiling/_probe.py:6"], bad


def test_profiling_hands_its_runs_to_run_command():
    from harness.calling import runner
    from harness.profiling import profile, sanitize

    assert profile._run is runner.run_command and sanitize._run is runner.run_command
    res = runner.run_command(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    with pytest.raises(errors.ProgramError) as ei:
        runner.run_command(["sleep", "5"], timeout=0.2)
    assert ei.value.timed_out


# --- paths from harness/base/paths only ----------------------------------------------------------------------

PATHS_HOME = "harness/base/paths.py"
PENDING: set[str] = set()  # none: every module takes its paths from harness/base/paths


def _build_aliases(tree: ast.AST) -> set[str]:
    """The names a module binds to harness.compile.build (`from harness.compile import build as _build`)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module == "harness.compile":
            out |= {a.asname or a.name for a in n.names if a.name == "build"}
        elif isinstance(n, ast.Import):
            out |= {a.asname for a in n.names if a.name == "harness.compile.build" and a.asname}
    return out


def second_paths(sources: dict | None = None) -> list[str]:
    bad = []
    for rel, tree in _trees(sources):
        if rel == PATHS_HOME or rel in PENDING:
            continue
        aliases = _build_aliases(tree)
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and n.id == "__file__" and rel != "tasks.py":
                bad.append(f"{rel}:{n.lineno} derives a path from __file__: use harness.base.paths")
            elif isinstance(n, ast.Assign) and n in getattr(tree, "body", []):
                for t in n.targets:
                    if isinstance(t, ast.Name) and t.id in PATH_NAMES:
                        bad.append(f"{rel}:{n.lineno} defines {t.id}: import it from harness.base.paths")
            elif isinstance(n, ast.ImportFrom) and n.module == "harness.compile.build":
                for a in n.names:
                    if a.name in PATH_NAMES:
                        bad.append(f"{rel}:{n.lineno} imports {a.name} from harness.compile.build: "
                                   "import it from harness.base.paths")
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases \
                    and n.attr in PATH_NAMES:
                bad.append(f"{rel}:{n.lineno} reads {n.value.id}.{n.attr}: use harness.base.paths.{n.attr}")
    return bad


def _tasks_bootstrap_only() -> list[str]:
    """tasks.py may name __file__ once: to put the project on sys.path before anything of it imports."""
    tree = ast.parse((ROOT / "tasks.py").read_text())
    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "__file__"]
    inserts = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "insert" and any(isinstance(x, ast.Name) and x.id == "__file__" for x in ast.walk(n))]
    return [] if len(uses) <= 1 and len(inserts) == len(uses) else [f"tasks.py:{u.lineno}" for u in uses]


def test_paths_come_from_base_paths_only():
    assert second_paths() == [] and _tasks_bootstrap_only() == []


def test_the_paths_check_catches_a_second_root_and_a_path_read_off_build():
    f = ROOT / "harness" / "user" / "_probe.py"
    src = ("from pathlib import Path\n"
           "from harness.compile import build as _build\n"
           "from harness.compile.build import CUDA_DIR\n"
           "ROOT = Path(__file__).resolve().parents[2]\n"
           "REPORT = _build.BUILD / 'report'\n"
           "def lib():\n    return _build.lib_path('square')\n")  # a function of build's is not a path constant
    bad = second_paths({f: src})
    assert sorted(b.split(" ")[0] for b in bad) == ["harness/user/_probe.py:3", "harness/user/_probe.py:4",
                                                     "harness/user/_probe.py:4", "harness/user/_probe.py:5"], bad


# --- one way to start a group of processes: procs.start (its supervisor kills the group with the lab) ---

def group_starters(sources: dict | None = None) -> list[str]:
    """Each Popen of a process group of its own (start_new_session / process_group) outside procs.py:
    such a group outlives a SIGKILLed lab unless procs.start's supervisor leads it."""
    bad = []
    for rel, tree in _trees(sources):
        if rel == "harness/base/procs.py" or not rel.startswith(("harness/", "analysis/", "cuda/", "tasks.py")):
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and any(k.arg in ("start_new_session", "process_group") for k in n.keywords):
                bad.append(f"{rel}:{n.lineno} starts a process group itself: use harness.base.procs.start")
    return bad


def test_every_process_group_is_started_by_procs_start():
    assert group_starters() == []


def test_the_group_check_catches_a_popen_of_its_own_group():
    f = ROOT / "harness" / "compile" / "_probe.py"
    src = "import subprocess\np = subprocess.Popen(['make'], start_new_session=True)\n"
    assert [b.split(" ")[0] for b in group_starters({f: src})] == ["harness/compile/_probe.py:2"]

"""harness.user.notebook: the %%cuda and %%cuda_lib cell magics, and the example notebook.

IPython is optional (the `notebook` extra): the magic tests skip without it. Without a GPU they
run host-only programs and compile-only paths; with a GPU, the course's hello-GPU program, a
%%cuda_lib kernel, and the example notebook from top to bottom.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import pythonpath
from harness.base.errors import BuildError, ProgramError
from harness.calling import inline
from harness.compile import toolchain

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "grayscale_inline.ipynb"

# The Stringer course's first program (section 2.3): hello from the CPU, then from the GPU.
HELLO_GPU = r"""#include <cstdio>

__global__ void helloGPU() {
    printf("Hello World from the GPU!\n");
}

int main() {
    printf("Hello World from the CPU!\n");
    helloGPU<<<1, 1>>>();
    cudaDeviceSynchronize();
    return 0;
}
"""

HOST_ONLY = r"""#include <cstdio>
int main(int argc, char **argv) {
    printf("argc=%d", argc);
    for (int i = 1; i < argc; ++i) printf(" [%s]", argv[i]);
    printf("\n");
    fprintf(stderr, "to stderr\n");
    return 0;
}
"""


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    folder = tmp_path_factory.getbasetemp() / "inline-cache"
    monkeypatch.setenv("CUDALAB_CACHE", str(folder))
    return folder


@pytest.fixture(scope="module")
def ip(tmp_path_factory):
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    # IPython keeps its history under IPYTHONDIR; keep the tests' out of the user's ~/.ipython.
    os.environ.setdefault("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "harness.user.notebook")
    return shell


def test_importing_harness_never_imports_ipython():
    code = ("import sys, harness, harness.calling.inline, harness.calling.library, harness.calling.cudart; "
            "print('IPython' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": pythonpath(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_magics_are_registered(ip):
    cell = ip.magics_manager.magics["cell"]
    assert "cuda" in cell and "cuda_lib" in cell


def test_cuda_compile_only_and_cache(ip, capsys):
    src = HOST_ONLY + "// compile-only\n"
    ip.run_cell_magic("cuda", "--compile-only", src)
    first = capsys.readouterr().out
    assert "compiled in" in first and "sm_" in first
    ip.run_cell_magic("cuda", "--compile-only", src)
    assert "from the cache, nothing compiled" in capsys.readouterr().out


def test_cuda_compile_error_shows_cell_lines(ip, capsys):
    cell = "#include <cstdio>\nint main() {\n    return not_declared;\n}\n"
    with pytest.raises(BuildError) as ei:
        ip.run_cell_magic("cuda", "", cell)
    errors = [d for d in ei.value.diagnostics if d.severity == "error"]
    # Jupyter counts the %%cuda line as line 1, so the body's line 3 is the cell's line 4.
    assert [(d.file, d.line) for d in errors] == [("cell", 4)]
    assert "4 |     return not_declared;" in str(ei.value)
    # Through run_cell, IPython shows nvcc's messages and not a Python traceback.
    res = ip.run_cell("%%cuda\n" + cell)
    shown = capsys.readouterr()
    assert not res.success
    text = shown.out + shown.err
    assert 'cell:4: error: identifier "not_declared" is undefined' in text
    assert "Traceback" not in text


def test_cuda_runs_a_program_with_args_and_timeit(ip, capsys):
    ip.run_cell_magic("cuda", '--args "one two" --timeit 3', HOST_ONLY)
    shown = capsys.readouterr()
    assert shown.out.splitlines()[0] == "argc=3 [one] [two]"
    assert shown.out.count("argc=") == 1  # the output of the first run only
    assert "to stderr" in shown.err
    assert "timeit: 3 runs" in shown.out and "median" in shown.out
    ip.run_cell_magic("cuda", '--args "-n 5 --flag"', HOST_ONLY)  # values that start with a dash
    assert "argc=4 [-n] [5] [--flag]" in capsys.readouterr().out


def test_cuda_failing_program_fails_the_cell(ip, capsys):
    with pytest.raises(ProgramError) as ei:
        ip.run_cell_magic("cuda", "", '#include <cstdio>\nint main() { fprintf(stderr, "bad input\\n"); return 3; }\n')
    assert ei.value.returncode == 3
    assert "bad input" in capsys.readouterr().err


def test_cuda_usage_errors(ip):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="unrecognized"):
        ip.run_cell_magic("cuda", "--no-such-option", HOST_ONLY)
    with pytest.raises(UsageError, match="invalid choice"):
        ip.run_cell_magic("cuda", "--profile gprof", HOST_ONLY)
    with pytest.raises(UsageError, match="nsys"):  # nvprof: why not, and what to use instead
        ip.run_cell_magic("cuda", "--profile nvprof", HOST_ONLY)
    with pytest.raises(UsageError, match="identifier"):
        ip.run_cell_magic("cuda_lib", "not-a-name", 'extern "C" int f(void) { return 0; }')


def test_profile_without_the_profile_module_says_so(ip, capsys, monkeypatch):
    import harness.profiling

    monkeypatch.setitem(sys.modules, "harness.profiling.profile", None)  # as if the module were absent
    monkeypatch.delattr(harness.profiling, "profile", raising=False)
    ip.run_cell_magic("cuda", "--profile nsys", HOST_ONLY)
    shown = capsys.readouterr()
    assert "harness.profiling.profile" in shown.err and "not in this checkout" in shown.err
    assert "argc=1" in shown.out  # and the program still ran


@pytest.fixture
def stand_in_nsys(tmp_path, monkeypatch):
    """An `nsys` first on PATH (where harness.compile.toolchain looks first) that writes no report and says so.

    Whether a real nsys gives a report here depends on the machine: none where there is no nsys or its
    importer lacks libdw, but a kernel-less program did get one on a 2 x H200 machine whose nsys worked.
    The stand-in makes "no report" hold everywhere; the rest of the path (harness.profiling.profile's run_nsys,
    its diagnosis of the tool's output, the cell's message and the plain run) is the real one."""
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "Error: stand-in nsys, no report written" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    toolchain.find.cache_clear()  # find() caches what it found: look again, and forget the stand-in after
    assert toolchain.find("nsys").path == str(fake)
    yield fake
    toolchain.find.cache_clear()


def test_profile_without_a_report_runs_plainly(ip, capsys, stand_in_nsys):
    """When the profiler gives no report, the cell says why (the tool's own reason) and runs plainly."""
    pytest.importorskip("harness.profiling.profile")
    ip.run_cell_magic("cuda", "--profile nsys", HOST_ONLY)
    shown = capsys.readouterr()
    assert ("--profile nsys: no report: Error: stand-in nsys, no report written. The cell runs without a "
            "profiler.") in shown.err
    assert "kernel table" not in shown.out
    assert "argc=1" in shown.out


def test_cuda_lib_binds_a_module(ip, capsys):
    ip.run_cell_magic("cuda_lib", "hostlib", 'extern "C" double hyp(double a, double b) { return a * a + b * b; }\n')
    assert "hyp" in capsys.readouterr().out
    mod = ip.user_ns["hostlib"]
    assert isinstance(mod, inline.InlineModule)
    assert mod.hyp(3, 4) == 25.0
    with pytest.raises(inline.UnsupportedSignature) as ei:
        ip.run_cell_magic("cuda_lib", "bad", '\nextern "C" int r(float &x) { return 0; }\n')
    assert "line 3" in str(ei.value)  # a cell line number: the magic line is line 1


def test_example_notebook_is_committed_clean_or_with_a_whole_gpu_run():
    """Either no outputs at all, or the outputs of one whole run on a GPU (harness.user.notebook_run): every
    code cell executed once, in order, no error output, and the device named in the metadata."""
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    clean = all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    if not clean:
        assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
        assert not [o for c in code for o in c["outputs"] if o.get("output_type") == "error"]
        assert nb["metadata"].get("cudalab", {}).get("executed_on"), "a saved run names its GPU"
    sources = ["".join(c["source"]) for c in code]
    assert sources[0].startswith("%load_ext harness.user.notebook")
    assert any(s.startswith("%%cuda_lib ") for s in sources)


# --- on the GPU ---------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_cuda_runs_hello_gpu(ip, capsys):
    ip.run_cell_magic("cuda", "", HELLO_GPU)
    out = capsys.readouterr().out
    assert "Hello World from the GPU!" in out.splitlines()
    assert "Hello World from the CPU!" in out.splitlines()


@pytest.mark.gpu
@pytest.mark.profiler
@pytest.mark.parametrize("tool", ["nsys", "ncu"])
def test_cuda_profile_prints_the_kernel_table(ip, capsys, tool):
    pytest.importorskip("harness.profiling.profile")
    if not toolchain.find(tool).found:
        pytest.skip(f"{tool} is not installed here")
    ip.run_cell_magic("cuda", f"--profile {tool}", HELLO_GPU)
    shown = capsys.readouterr()
    assert f"{tool} kernel table of cell" in shown.out, shown.err
    assert "helloGPU" in shown.out


@pytest.mark.gpu
def test_cuda_lib_exposes_a_working_kernel(ip, capsys, rng):
    cell = r"""#include "check.cuh"
__global__ void add_k(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" int add(const float *a, const float *b, float *c, int n) {
    float *d = nullptr;
    size_t bytes = (size_t)n * sizeof(float);
    CUDA_TRY(cudaMalloc(&d, 3 * bytes));
    CUDA_TRY(cudaMemcpy(d, a, bytes, cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemcpy(d + n, b, bytes, cudaMemcpyHostToDevice));
    add_k<<<cdiv(n, 256), 256>>>(d, d + n, d + 2 * n, n);
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaMemcpy(c, d + 2 * n, bytes, cudaMemcpyDeviceToHost));
    CUDA_TRY(cudaFree(d));
    return 0;
}
extern "C" int add_launch(const cudalab_launch *L, const float *a, const float *b, float *c, int n) {
    add_k CUDALAB_LAUNCH(L)(a, b, c, n);
    return (int)cudaGetLastError();
}
"""
    ip.run_cell_magic("cuda_lib", "vec", cell)
    vec = ip.user_ns["vec"]
    for n in (1, 257, 100_003):
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        c = np.full(n, np.nan, np.float32)
        vec.add(a, b, c, n)
        np.testing.assert_array_equal(c, a + b)  # one float32 add: exact
        cd = inline.to_device(c)
        cd.fill_bytes(0xAB)
        vec.add_launch(inline.to_device(a), inline.to_device(b), cd, n, grid=inline.cdiv(n, 128), block=128)
        np.testing.assert_array_equal(cd.to_host(), a + b)


# End to end (minutes on a GPU): `invoke test --marker slow`, not the default run.
@pytest.mark.slow
@pytest.mark.gpu
def test_example_notebook_runs_top_to_bottom(tmp_path, capsys):
    """Under nbclient where it is installed; otherwise each code cell runs in an IPython shell, in order."""
    nb = json.loads(NOTEBOOK.read_text())
    try:
        import nbclient
        import nbformat
    except ImportError:
        nbclient = None
    if nbclient is not None:
        book = nbformat.reads(NOTEBOOK.read_text(), as_version=4)
        nbclient.NotebookClient(book, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT)}}).execute()
        outputs = "".join(o.get("text", "") for c in book.cells if c.cell_type == "code" for o in c.outputs)
        print("notebook ran under nbclient")
    else:
        pytest.importorskip("IPython")
        from IPython.core.interactiveshell import InteractiveShell

        os.environ.setdefault("MPLBACKEND", "Agg")
        shell = InteractiveShell.instance()
        for c in nb["cells"]:
            if c["cell_type"] == "code":
                res = shell.run_cell("".join(c["source"]))
                assert res.success, f"cell failed: {res.error_in_exec or res.error_before_exec}"
        outputs = capsys.readouterr().out
        print("notebook cells ran as a script in an IPython shell (nbclient is not installed)")
    assert "same bytes as the host-pointer form: True" in outputs
    assert "Hello World from the GPU!" in outputs


def test_notebook_extra_installs_what_opens_it():
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["notebook"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in extra}
    assert names & {"jupyterlab", "notebook"} and {"nbclient", "nbformat", "ipykernel"} <= names


def test_notebook_run_refuses_without_a_gpu(tmp_path, monkeypatch, capsys):
    from harness.user import notebook_run

    monkeypatch.setattr(notebook_run, "gpu_here", lambda: (False, "no GPU (test)"))
    target = tmp_path / "nb.ipynb"
    target.write_text(NOTEBOOK.read_text())
    assert notebook_run.main([str(target)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must come from a GPU run" in err
    assert target.read_text() == NOTEBOOK.read_text()  # nothing written
    assert notebook_run.main(["--help"]) == 2


# Writes the GPU run's outputs into a copy: the integrator runs `python3 -m harness.user.notebook_run` to save them.
@pytest.mark.slow
@pytest.mark.gpu
def test_notebook_run_saves_a_whole_run(tmp_path):
    pytest.importorskip("nbclient")
    from harness.user import notebook_run

    target = tmp_path / "nb.ipynb"
    target.write_text(NOTEBOOK.read_text())
    notebook_run.execute(target)
    nb = json.loads(target.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
    assert nb["metadata"]["cudalab"]["executed_on"]
    text = "".join(o.get("text", "") for c in code for o in c["outputs"])
    assert "Hello World from the GPU!" in text


# --- a bad line, a cell without main, a program without a GPU: one line each ------------------------

@pytest.mark.parametrize("line,says", [
    ("--arch abc", "%%cuda: arch 'abc' is not a compute capability"),
    ("--args \"a 'b\"", "%%cuda --args: No closing quotation"),
    ("--flags \"-O3 '\"", "%%cuda --flags: No closing quotation"),
    ("--name 'a", "the magic's line: No closing quotation"),
    ("--timeout nan", "--timeout: must be a positive number of seconds, got 'nan'"),
    ("--timeout -5", "--timeout: must be a positive number of seconds, got '-5'"),
    ("--timeout 0", "--timeout: must be a positive number of seconds"),
    ("--timeout inf", "--timeout: must be a positive number of seconds"),
    ("--timeit -1", "--timeit: must be at least 1"),
    ("--timeit x", "--timeit: must be a whole number of runs"),
])
def test_a_bad_magic_line_is_one_usage_error(ip, capsys, line, says):
    """These were ValueError tracebacks in the cell (--timeout -5 ran and said "timed out")."""
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as ei:
        ip.run_cell_magic("cuda", line, HOST_ONLY)
    assert says in str(ei.value)
    res = ip.run_cell(f"%%cuda {line}\n{HOST_ONLY}")
    shown = capsys.readouterr()
    assert not res.success and "Traceback" not in shown.out + shown.err
    assert "argc=" not in shown.out  # refused before anything ran


def test_cuda_lib_bad_arch_is_a_usage_error(ip):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="%%cuda_lib: arch 'abc' is not a compute capability"):
        ip.run_cell_magic("cuda_lib", "m --arch abc", 'extern "C" int f(void) { return 0; }\n')


def test_a_cell_without_main_points_at_cuda_lib(ip):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=r"the cell has no main\(\).*use %%cuda_lib NAME"):
        ip.run_cell_magic("cuda", "", '__global__ void k(float *x) { x[threadIdx.x] = 1.0f; }\n')


@pytest.fixture
def no_gpu(monkeypatch):
    """As on a machine without a GPU, whatever this one has: what the magic is told when it asks."""
    from harness.user import notebook

    monkeypatch.setattr(notebook, "_no_gpu", lambda: "cudaGetDeviceCount: no CUDA device (test)")


@pytest.mark.parametrize("line", ["", "--timeit 5"])
def test_a_program_that_never_reached_the_gpu_says_so(ip, capsys, no_gpu, line):
    """The README's hello cell, without a GPU: it exited 0 with nothing printed (and --timeit reported a
    median); the cell now fails with one line saying its CUDA calls could not reach a GPU."""
    from harness.user.notebook import CellNoGPUError

    with pytest.raises(CellNoGPUError, match="ran without a GPU.*no CUDA device \\(test\\)") as ei:
        ip.run_cell_magic("cuda", line, HELLO_GPU)
    shown = capsys.readouterr()
    assert "Hello World from the CPU!" in shown.out  # its host output is still shown
    assert "timeit" not in shown.out
    assert ei.value._render_traceback_()[0].startswith("NoGPUError: the cell's program ran without a GPU")


def test_a_host_only_program_runs_without_a_gpu(ip, capsys, no_gpu):
    """The check watches for the CUDA driver being loaded: a program with no CUDA calls is not refused."""
    ip.run_cell_magic("cuda", '--args "x" --timeit 2', HOST_ONLY)
    out = capsys.readouterr().out
    assert "argc=2 [x]" in out and "timeit: 2 runs" in out


# A cell's program that starts others or prints without end (host-only: runs without a GPU).
UNRULY = r"""#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "system")) {  /* a shell and its sleep, both still running at the timeout */
        char cmd[600];
        snprintf(cmd, sizeof cmd, "echo $$ > %s; sleep 45", argv[2]);
        return system(cmd);
    }
    if (!strcmp(mode, "fork")) {  /* exits 0 with a child still running */
        pid_t child = fork();
        if (child == 0) { sleep(45); return 0; }
        FILE *f = fopen(argv[2], "w");
        fprintf(f, "%d", (int)child);
        fclose(f);
        printf("parent done\n");
        return 0;
    }
    for (long i = 0; i < 4000000; ++i) printf("line %ld of a loop\n", i);  /* about 90 MB */
    return 0;
}
"""


def _gone(pid: int, within: float = 3.0) -> bool:
    import time

    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def test_a_timed_out_cell_stops_the_programs_it_started(ip, capsys, tmp_path):
    """`system("sleep 45")` under --timeout 4: the shell and its sleep are stopped with the program, and
    the cell ends at the timeout rather than when the sleep does."""
    import time

    from harness.user.notebook import CellProgramError

    pidfile = tmp_path / "shell.pid"
    t0 = time.monotonic()
    with pytest.raises(CellProgramError) as ei:
        ip.run_cell_magic("cuda", f'--timeout 4 --name unruly --args "system {pidfile}"', UNRULY)
    assert time.monotonic() - t0 < 4 + 10  # the compile (cached after the first test) and the 4 s
    assert _gone(int(pidfile.read_text())), "the cell's shell runs on"
    assert ei.value.timed_out
    assert ei.value._render_traceback_() == [
        "ProgramError: the cell's program timed out after 4 s; its process group was stopped"]


def test_a_cell_that_leaves_a_child_running_says_so_and_stops_it(ip, capsys, tmp_path):
    import time

    pidfile = tmp_path / "child.pid"
    t0 = time.monotonic()
    ip.run_cell_magic("cuda", f'--timeout 30 --name unruly --args "fork {pidfile}"', UNRULY)
    assert time.monotonic() - t0 < 20, "the cell waited for the child the program left"
    shown = capsys.readouterr()
    assert "parent done" in shown.out and "timed out" not in shown.err
    assert "exited with status 0, and left 1 process(es) running" in shown.err
    assert _gone(int(pidfile.read_text())), "the program's child runs on"


def test_a_cell_that_prints_without_end_keeps_a_bounded_head_and_tail(ip, capsys):
    from harness.base import procs

    ip.run_cell_magic("cuda", '--timeout 120 --name unruly --args "loop"', UNRULY)
    shown = capsys.readouterr()
    assert len(shown.out) < procs.OUTPUT_LIMIT + 1000
    assert shown.out.startswith("line 0 of a loop\n") and shown.out.endswith("line 3999999 of a loop\n")
    assert "bytes of output dropped here" in shown.out
    assert "bytes of its output were dropped" in shown.err

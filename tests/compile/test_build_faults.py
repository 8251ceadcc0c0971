"""The build under faults and bad input: stale flags, torn or tampered outputs, shell injection through
--arch, fat binaries, swallowed errors, and Ctrl-C. Each test builds a tiny tree (the real Makefile and
cuda/common, one or two small programs) in a temporary folder, so nothing here touches the lab's build/."""

from __future__ import annotations

import concurrent.futures
import fcntl
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import pythonpath, sigint_as_from_a_terminal
from harness.base import paths
from harness.base.errors import BuildError, NotBuilt
from harness.calling import library, runner
from harness.compile import build, toolchain

pytestmark = pytest.mark.skipif(not toolchain.find("nvcc").found, reason="needs nvcc")

KERNEL = """#include "cudalab.h"
__global__ void {name}_kernel(int *x) {{ x[threadIdx.x] += {value}; }}
extern "C" int {name}_answer(void) {{ return {value}; }}
"""


@pytest.fixture(scope="module", autouse=True)
def _default_build_env():
    """Each tiny tree checks what the default build makes for the ARCH a test names; an ARCH or
    PTX_ONLY exported for the whole suite (a PTX-only compute_75 run) would otherwise reach its make."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ARCH", raising=False)
        mp.delenv("PTX_ONLY", raising=False)
        yield


def tiny_tree(root: Path, names=("tiny",), value: int = 7) -> Path:
    """A lab of its own: the real Makefile and cuda/common, and programs that compile in seconds."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(build.ROOT / "Makefile", root / "Makefile")
    shutil.copytree(build.CUDA_DIR / "common", root / "cuda" / "common")
    for name in names:
        d = root / "cuda" / name
        d.mkdir(parents=True)
        (d / f"{name}.cu").write_text(KERNEL.format(name=name, value=value))
        (d / f"{name}.h").write_text(f'#include "cudalab.h"\nint {name}_answer(void);\n')
        (d / "main.cu").write_text(f'extern "C" int {name}_answer(void);\nint main() {{ return {name}_answer() == {value} ? 0 : 1; }}\n')
    return root


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under build/ with its size and mtime."""
    out = {}
    for dirpath, _dirs, files in os.walk(root / "build"):
        for f in files:
            p = Path(dirpath) / f
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def make(root: Path, *args, check=True, env=None) -> subprocess.CompletedProcess:
    nvcc = toolchain.find("nvcc").path
    return subprocess.run(["make", "-C", str(root), "--no-print-directory", f"NVCC={nvcc}", *args],
                          capture_output=True, text=True, check=check, env=env)


def sass_targets(root: Path, prog: str) -> set[str]:
    """The SASS targets ptxas compiled the program's kernel for (its -v report, one entry per target)."""
    log = (root / "build" / "obj" / prog / f"{prog}.log").read_text()
    return {line.rsplit("'", 2)[-2] for line in log.splitlines() if "Compiling entry function" in line}


@pytest.fixture(scope="module")
def tree80(tmp_path_factory):
    """A tiny tree built for sm_80 (module-wide: tests that change it copy it first)."""
    root = tiny_tree(tmp_path_factory.mktemp("tree80"), names=("tiny", "other"))
    build.build(arch="80", root=root)
    return root


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


# --- a build for another arch ----------------------------------------------------------------------

def test_counting_steps_writes_nothing(tree80, tmp_path):
    """Counting the pending steps (make -n, which runs outside any lock) must not touch the tree: it
    used to rewrite the flags stamp, and a build running meanwhile then looked up to date."""
    root = copy_tree(tree80, tmp_path / "t")
    before = snapshot(root)
    steps = build.pending_steps(arch="90", root=root)
    assert snapshot(root) == before
    # ...and it still sees that everything needs rebuilding for the other arch.
    assert "NVCC cuda/tiny/tiny.cu" in steps and "NVCC cuda/common/cudalab.cu" in steps
    assert "LINK build/lib/libtiny.so" in steps and "LINK build/bin/other" in steps
    make(root, "-n", "ARCH=100")
    make(root, "arch", "ARCH=sm_75")
    assert snapshot(root) == before


def test_an_arch_change_rebuilds_every_object_even_after_a_dry_run(tree80, tmp_path):
    """The race as it happened: `invoke build --arch 80` still compiling while `invoke build` counted its
    steps with make -n. The sm_80 objects finished after that count must not pass for sm_90 ones."""
    root = copy_tree(tree80, tmp_path / "t")
    build.pending_steps(arch="90", root=root)  # the second build's count, outside the lock
    time.sleep(0.05)
    now = time.time()
    for o in (root / "build" / "obj").rglob("*.o"):  # the first build's objects, finished after that count
        os.utime(o, (now, now))
    res = build.build(arch="90", root=root)
    assert "cuda/tiny/tiny.cu" in res.steps and "cuda/common/cudalab.cu" in res.steps
    assert sass_targets(root, "tiny") == {"sm_90"} and sass_targets(root, "other") == {"sm_90"}
    assert "compute_90" in (root / "build" / ".flags").read_text()
    assert build.build(arch="90", root=root).steps == []  # and then it is up to date


@pytest.mark.parametrize("arch", ["80", "75,80,90"])
def test_a_built_tree_stays_built_whatever_the_length_of_its_flags(tmp_path, monkeypatch, arch):
    """The flag stamp is compared with the flags on every make, however long they are (a fat ARCH, the
    fault build's -D, a user's EXTRA_NVCCFLAGS: over 200 bytes, past make's first expansion buffer). Read
    through `$(file <...)`, GNU make 4.3 misread the fault build's long stamp in the real tree, and every
    request for a fault twin recompiled it; that misread hangs on make's memory layout and does not show
    in this tiny tree. The GPU test of the twins (test_fault_build.py) asks the real tree the same."""
    root = tiny_tree(tmp_path / "t")
    monkeypatch.setenv("EXTRA_NVCCFLAGS", "-DCUDALAB_A_LONG_DEFINE_THAT_PUSHES_THE_STAMP_PAST_TWO_HUNDRED_BYTES=1")
    build.build(arch=arch, root=root)
    assert len((root / "build" / ".flags").read_text()) > 200
    q = make(root, "-q", f"ARCH={arch}", check=False)
    assert q.returncode == 0, make(root, "-q", "--trace", f"ARCH={arch}", check=False).stdout
    assert build.build(arch=arch, root=root).steps == []


def test_an_up_to_date_build_does_not_wait_for_anothers_lock(tree80, tmp_path):
    """A build with nothing to do answers at once while another process holds the build lock (a long
    compile in another terminal or test worker); one with work to do waits for the lock."""
    root = copy_tree(tree80, tmp_path / "t")
    (root / "build" / ".lock").touch()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                               str(root / "build" / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        assert build.build(arch="80", root=root).steps == []
        assert time.monotonic() - t0 < 20
        # With a change pending the same call queues for the lock: it has not finished 3 s later.
        future = time.time() + 5
        os.utime(root / "cuda" / "tiny" / "tiny.cu", (future, future))
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            pending = ex.submit(build.build, arch="80", root=root)
            time.sleep(3)
            assert not pending.done()
            holder.kill()
            assert "cuda/tiny/tiny.cu" in pending.result(timeout=120).steps
    finally:
        holder.kill()
        holder.wait()


def test_two_makes_in_one_tree_do_not_share_a_temporary_name(tree80, tmp_path):
    """A plain `make` beside `invoke build`: both relinking the same executable used to write
    build/bin/<prog>.tmp, and one of them failed with `mv: cannot stat`."""
    root = copy_tree(tree80, tmp_path / "t")
    nvcc = toolchain.find("nvcc").path
    for _ in range(3):
        cmd = ["make", "-C", str(root), "--no-print-directory", f"NVCC={nvcc}", "ARCH=80",
               "-W", "build/obj/tiny/main.o", "build/bin/tiny", "build/lib/libtiny.so"]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
        outs = [(p.communicate()[0], p.returncode) for p in procs]
        for out, rc in outs:
            assert rc == 0 and "cannot stat" not in out, out
    assert build.stale_reason(root / "build" / "bin" / "tiny", root) is None
    assert not [p for p in (root / "build").rglob("*") if ".tmp" in p.name]


# --- outputs trusted by their existence ------------------------------------------------------------

@pytest.fixture
def lab(tree80, tmp_path, monkeypatch):
    """A copy of the tiny tree, with the harness pointed at it (loader, runner and records)."""
    root = copy_tree(tree80, tmp_path / "t")
    monkeypatch.setattr(build, "ROOT", root)
    monkeypatch.setattr(build, "BUILD", root / "build")
    monkeypatch.setattr(build, "CUDA_DIR", root / "cuda")
    monkeypatch.setattr(paths, "CUDA_DIR", root / "cuda")  # where the loader finds a program's header
    monkeypatch.setenv("ARCH", "80")  # what the tree was built for: only the tampered file is to be redone
    library.load.cache_clear()
    yield root
    library.load.cache_clear()


def truncate(path: Path, size: int = 4096) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:size])


def test_a_truncated_library_is_refused_and_rebuilt(lab):
    lib = build.lib_path("tiny")
    assert build.stale_reason(lib) is None
    truncate(lib)  # what a full disk or a killed copy leaves: it made Python die of SIGBUS in dlopen
    with pytest.raises(NotBuilt, match=r"4096 bytes.*truncated or replaced.*run `invoke build --programs tiny`"):
        library.load("tiny")
    res = build.build(build.targets("tiny"), root=lab)
    assert "build/lib/libtiny.so" in res.steps  # not "up to date"
    assert library.load("tiny").lib.tiny_answer() == 7


def test_a_library_of_the_same_size_but_other_bytes_is_refused(lab):
    lib = build.lib_path("tiny")
    assert build.stale_reason(lib) is None  # checked once: this process remembers it, until it changes
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    st = lib.stat()
    lib.write_bytes(bytes(data))
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with its old date, which make trusts
    with pytest.raises(NotBuilt, match="SHA-256 differs"):
        library.load("tiny")
    assert build.pending_steps(build.targets("tiny"), root=lab) == []  # make alone would not see it...
    assert "build/lib/libtiny.so" in build.build(build.targets("tiny"), root=lab).steps  # ...the build does
    assert library.load("tiny").lib.tiny_answer() == 7


def test_a_truncated_executable_is_refused_and_rebuilt(lab):
    exe = build.bin_path("tiny")
    assert runner.run("tiny").returncode == 0
    truncate(exe)  # it used to run and die: "exited with status -11"
    with pytest.raises(NotBuilt, match=r"build/bin/tiny is not the file its build wrote.*invoke build --programs tiny"):
        runner.run("tiny")
    assert "build/bin/tiny" in build.build(build.targets("tiny"), root=lab).steps
    assert runner.run("tiny").returncode == 0


def test_an_output_without_its_record_is_not_trusted(lab):
    (lab / "build" / "sums" / "build" / "lib" / "libtiny.so").unlink()
    with pytest.raises(NotBuilt, match="record .* is missing"):
        library.load("tiny")
    assert "build/lib/libtiny.so" in build.build(build.targets("tiny"), root=lab).steps
    assert library.load("tiny").lib.tiny_answer() == 7


def test_an_interrupted_step_leaves_no_output_name(tree80, tmp_path):
    """Every output is written to a temporary name and renamed: a step killed mid-write leaves only
    that name (swept by the next build once its shell is gone), never a torn file under the real one."""
    root = copy_tree(tree80, tmp_path / "t")
    dry = make(root, "-n", "ARCH=80", "-W", "cuda/tiny/tiny.cu", "build/lib/libtiny.so", "build/bin/tiny").stdout
    nvcc_lines = [line for line in dry.splitlines() if " -o " in line and "nvcc" in line]
    assert nvcc_lines and all(".tmp$$" in line.split(" -o ", 1)[1].split()[0] for line in nvcc_lines), nvcc_lines
    p = subprocess.Popen(["true"])  # a PID that has certainly exited
    p.wait()
    leftover = root / "build" / "obj" / "tiny" / f"tiny.o.tmp{p.pid}"
    leftover.write_bytes(b"half an object")
    build.build(arch="80", root=root)
    assert not leftover.exists()


# --- shell injection through --arch -----------------------------------------------------------------

def test_arch_injection_runs_no_shell(tmp_path):
    pwned = tmp_path / "PWNED"
    arch = f"90'; touch {pwned}; echo '"
    env = {**os.environ, "PYTHONPATH": pythonpath(build.ROOT)}
    r = subprocess.run([sys.executable, "-m", "invoke", "build", "--arch", arch], cwd=build.ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert not pwned.exists()
    assert r.stderr.strip().count("\n") == 0 and "is not a compute capability" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_makefile_refuses_what_would_reach_the_shell(tmp_path):
    """Plain make checks ARCH and EXTRA_NVCCFLAGS itself (from the command line or the environment)."""
    root = tiny_tree(tmp_path / "t")
    pwned = tmp_path / "PWNED"
    r = make(root, f"ARCH=90'; touch {pwned}; echo '", "build/lib/libtiny.so", check=False)
    assert r.returncode != 0 and "ARCH (from the command line) holds ;" in r.stderr
    r = make(root, "build/lib/libtiny.so", check=False,
             env={**os.environ, "EXTRA_NVCCFLAGS": f"-DX=1; touch {pwned}"})
    assert r.returncode != 0 and "EXTRA_NVCCFLAGS (from the environment) holds ;" in r.stderr
    r = make(root, "ARCH=9.0", "arch", check=False)
    assert r.returncode != 0 and "not 9.0" in r.stderr
    assert not pwned.exists() and not (root / "build").exists()  # refused before anything was written


@pytest.mark.parametrize("value, want", [("90", "90"), ("sm_80", "80"), ("compute_75", "75"), (" 90 ", "90"),
                                         ("90,80,75", "90,80,75"), ("80,sm_80", "80")])
def test_parse_arch_accepts(value, want):
    assert build.parse_arch(value) == want


@pytest.mark.parametrize("value", ["12", "abc", "9.0", "90,", "90;ls", "90 80", "sm_90'", "$(ls)", "999"])
def test_parse_arch_refuses_in_one_line(value):
    with pytest.raises(BuildError) as ei:
        build.parse_arch(value)
    assert "\n" not in str(ei.value) and "75, 80" in str(ei.value)


# Each program's own variables (what its build.mk sets) reach the compile and link lines as EXTRA_NVCCFLAGS
# does: they used to go to the shell as typed.
PROGRAM_INJECTIONS = {"tiny_NVCCFLAGS": "-DX=1; touch {f}; true", "tiny_LDLIBS": "-lm; touch {f}; true",
                      "tiny_GENCODE": "-gencode arch=compute_80,code=sm_80 `touch {f}`",
                      "EXTRA_NVCCFLAGS": "-DX=$(shell touch {f})"}


@pytest.mark.parametrize("var", sorted(PROGRAM_INJECTIONS))
@pytest.mark.parametrize("how", ["environment", "command line"])
def test_plain_make_runs_no_shell_from_a_programs_variables(tmp_path, var, how):
    root = tiny_tree(tmp_path / "t")
    pwned = tmp_path / "PWNED"
    value = PROGRAM_INJECTIONS[var].format(f=pwned)
    targets = ["build/lib/libtiny.so", "build/bin/tiny"]
    if how == "environment":
        r = make(root, *targets, check=False, env={**os.environ, var: value})
    else:
        r = make(root, f"{var}={value}", *targets, check=False)
    assert r.returncode != 0 and not pwned.exists()
    assert f"{var} (from the {how}) holds" in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert not (root / "build").exists()  # refused while reading the Makefile: nothing compiled or written
    r = make(root, "-n", *targets, check=False, env={**os.environ, var: value})  # nor shown as a dry run
    assert r.returncode != 0 and "touch" not in r.stdout


def test_what_a_build_mk_adds_is_checked_too(tmp_path):
    """A program's build.mk composes its flags from other variables (NCCL_HOME, a folder found): the flags
    as the recipe will see them are checked after every build.mk is read."""
    root = tiny_tree(tmp_path / "t")
    pwned = tmp_path / "PWNED"
    (root / "cuda" / "tiny" / "build.mk").write_text("tiny_LDLIBS += -L$(TINY_LIBDIR)\n")
    r = make(root, "build/bin/tiny", check=False, env={**os.environ, "TINY_LIBDIR": f"/x;touch {pwned}"})
    assert r.returncode != 0 and not pwned.exists()
    assert "tiny_LDLIBS" in r.stderr and "holds ;" in r.stderr, r.stderr


@pytest.mark.parametrize("var", sorted(PROGRAM_INJECTIONS))
def test_invoke_build_refuses_a_programs_variables_in_one_line(tmp_path, var):
    pwned = tmp_path / "PWNED"
    env = {**os.environ, "PYTHONPATH": pythonpath(build.ROOT),
           var.replace("tiny_", "square_"): PROGRAM_INJECTIONS[var].format(f=pwned)}
    r = subprocess.run([sys.executable, "-m", "invoke", "build", "--programs", "square"], cwd=build.ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and not pwned.exists()
    name = var.replace("tiny_", "square_")
    assert r.stderr.strip().count("\n") == 0 and f"{name}=" in r.stderr and "from the environment" in r.stderr, r.stderr
    assert "NVCC    cuda/" not in r.stdout + r.stderr  # refused before any compile


def test_arch_and_flags_from_the_environment_are_checked(monkeypatch):
    monkeypatch.setenv("ARCH", "x86_64")  # set by other build systems: it used to reach nvcc
    with pytest.raises(BuildError, match="'x86_64' is not a compute capability"):
        build.make_command()
    monkeypatch.setenv("ARCH", "80")
    assert "ARCH=80" in build.make_command()
    monkeypatch.setenv("EXTRA_NVCCFLAGS", "-DA=1 `touch x`")
    with pytest.raises(BuildError, match="EXTRA_NVCCFLAGS"):
        build.make_command()


def test_toolchain_lists_the_archs_nvcc_builds_for():
    archs = toolchain.gpu_archs(toolchain.find("nvcc").path)
    assert archs and {"80", "90"} <= set(archs)
    assert [int(a) for a in archs] == sorted(int(a) for a in archs)


# --- one fat binary for several GPUs -------------------------------------------------------------------

def test_an_arch_list_builds_one_fat_binary(tmp_path):
    root = tiny_tree(tmp_path / "t")
    build.build(build.targets("tiny", root), arch="90,75,80", root=root)
    # SASS for each (ptxas compiled the kernel three times), PTX for the highest only.
    assert sass_targets(root, "tiny") == {"sm_75", "sm_80", "sm_90"}
    flags = (root / "build" / ".flags").read_text()
    assert ("-gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 "
            "-gencode arch=compute_90,code=[sm_90,compute_90]") in flags
    cuobjdump = toolchain.find("cuobjdump")
    if cuobjdump.found:
        for out in ("build/lib/libtiny.so", "build/bin/tiny"):
            elf = subprocess.run([cuobjdump.path, "--list-elf", str(root / out)], capture_output=True,
                                 text=True, check=True).stdout
            assert all(f"tiny.sm_{a}.cubin" in elf for a in (75, 80, 90)), elf
            ptx = subprocess.run([cuobjdump.path, "--list-ptx", str(root / out)], capture_output=True,
                                 text=True, check=True).stdout
            assert "sm_90.ptx" in ptx and "sm_80.ptx" not in ptx, ptx
    # The same list in another order is the same build: nothing to do.
    assert build.build(build.targets("tiny", root), arch="80,90,75", root=root).steps == []


def test_a_programs_own_gencode_still_applies(tmp_path):
    root = tiny_tree(tmp_path / "t")
    (root / "cuda" / "tiny" / "build.mk").write_text(textwrap.dedent("""\
        ifeq ($(ARCH),90)
        tiny_GENCODE := -gencode arch=compute_90a,code=[sm_90a,compute_90a]
        endif
        """))
    dry = make(root, "-n", "ARCH=90", "build/lib/libtiny.so").stdout
    tiny_cmd = next(line for line in dry.splitlines() if "-c cuda/tiny/tiny.cu" in line)
    assert "compute_90a" in tiny_cmd and "arch=compute_90," not in tiny_cmd
    common_cmd = next(line for line in dry.splitlines() if "-c cuda/common/cudalab.cu" in line)
    assert "arch=compute_90,code=[sm_90,compute_90]" in common_cmd
    dry = make(root, "-n", "ARCH=80,90", "build/lib/libtiny.so").stdout
    tiny_cmd = next(line for line in dry.splitlines() if "-c cuda/tiny/tiny.cu" in line)
    assert "arch=compute_80,code=sm_80" in tiny_cmd and "arch=compute_90,code=[sm_90,compute_90]" in tiny_cmd


# --- errors that used to be swallowed ---------------------------------------------------------------

def _failure_text(root: Path, monkeypatch=None, **kw) -> str:
    with pytest.raises(build.ProgramsFailed) as ei:
        build.build_programs(root=root, **kw)
    return str(ei.value)


def test_nvcc_fatal_is_shown_once(tmp_path, monkeypatch):
    """`nvcc fatal` (here an unknown option; an unsupported arch alike) was swallowed, and each of the
    programs said "failed (see the log above)" with no log above."""
    root = tiny_tree(tmp_path / "t", names=("tiny", "other"))
    monkeypatch.setenv("EXTRA_NVCCFLAGS", "--no-such-nvcc-flag")
    text = _failure_text(root)
    assert text.count("nvcc fatal: Unknown option '--no-such-nvcc-flag'") == 1, text
    assert "see the log above" not in text
    assert "other, tiny: failed with the error above" in text and text.splitlines()[-1] == "built: none"


def test_unsupported_arch_from_plain_make_is_parsed(tmp_path):
    root = tiny_tree(tmp_path / "t")
    r = make(root, "-k", "ARCH=12", check=False)
    diags = build.parse_diagnostics(r.stdout + r.stderr)
    assert [str(d) for d in diags] == ["nvcc fatal: Unsupported gpu architecture 'compute_12'"]


def test_an_unwritable_build_folder_says_why(tmp_path):
    """A read-only build/ (here: build/lib is a file, which stops root too) named its error nowhere."""
    root = tiny_tree(tmp_path / "t")
    (root / "build").mkdir()
    (root / "build" / "lib").write_text("not a folder")
    text = _failure_text(root, arch="80")
    line = next((x for x in text.splitlines() if x.startswith("mkdir: cannot create directory")), "")
    assert "build/lib" in line and line.endswith("File exists"), text
    assert text.count("cannot create directory") == 1 and "see the log above" not in text


@pytest.mark.parametrize("how", ["build is a file", "the lock is refused", "build/.tmp is a file", "read-only"])
def test_a_build_folder_without_room_for_the_lock_is_one_line(tmp_path, monkeypatch, how):
    """build/.lock and build/.tmp are made by the harness before make runs: a build/ that refused them
    gave a 20-line PermissionError traceback from `invoke build`."""
    root = tiny_tree(tmp_path / "t")
    if how == "build is a file":
        (root / "build").write_text("not a folder")
    elif how == "the lock is refused":  # what a build/ of another user's gives (root is never refused)
        def refused(path):
            raise PermissionError(13, "Permission denied", str(path))
        monkeypatch.setattr(build, "file_lock", refused)
    elif how == "build/.tmp is a file":
        (root / "build").mkdir()
        (root / "build" / ".tmp").write_text("not a folder")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        (root / "build").mkdir(mode=0o555)
    try:
        with pytest.raises(BuildError) as ei:
            build.build_programs(root=root, arch="80")
    finally:
        if (root / "build").is_dir():
            (root / "build").chmod(0o755)
    line = str(ei.value)
    assert "\n" not in line and line.startswith("cannot write build") and "must be a folder you can write" in line, line
    assert not isinstance(ei.value, build.ProgramsFailed)  # refused before make: nothing compiled


def test_invoke_build_says_an_unwritable_build_folder_in_one_line(tmp_path, monkeypatch):
    from invoke import Context, Exit

    import tasks
    from harness.user import doctor

    root = tiny_tree(tmp_path / "t")
    (root / "build").write_text("not a folder")
    for name, value in (("ROOT", root), ("BUILD", root / "build"), ("CUDA_DIR", root / "cuda")):
        monkeypatch.setattr(build, name, value)
    monkeypatch.setattr(doctor, "require_driver", lambda: None)
    with pytest.raises(Exit) as ei:
        tasks.build(Context(), arch="80")
    assert ei.value.message.startswith("cannot write build") and "\n" not in ei.value.message


def test_parallel_jobs_never_tear_a_line(tmp_path):
    """The make that builds runs jobs side by side; a tool that writes one line in two pieces (mkdir's
    "mkdir: " then its message) had another job's "  LINK ..." land between them, and the error line
    the build reported came out torn (seen once in CI). Here one job writes its error in two pieces
    with a pause between while the other prints: the build's make keeps the line whole."""
    (tmp_path / "Makefile").write_text(
        "all: a b\n"
        "a:\n\t@printf 'mkdir: ' >&2; sleep 0.6; printf 'cannot create directory: File exists\\n' >&2; exit 1\n"
        "b:\n\t@sleep 0.2; echo '  LINK    build/bin/b'\n")
    cmd = build.make_command(["all"], jobs=2, root=tmp_path, keep_going=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert r.returncode != 0
    lines = r.stdout.splitlines()
    assert "mkdir: cannot create directory: File exists" in lines and "  LINK    build/bin/b" in lines, r.stdout
    # The same two jobs under a make without the build's output sync: the line is torn.
    plain = [c for c in cmd if not c.startswith("--output-sync")]
    r = subprocess.run(plain, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert "mkdir: cannot create directory: File exists" not in r.stdout.splitlines(), r.stdout


def test_linker_lines_are_diagnostics():
    log = textwrap.dedent("""\
        /usr/bin/ld: cannot open output file build/bin/x.tmp77: Permission denied
        collect2: error: ld returned 1 exit status
        /bin/sh: 1: cannot create build/obj/x/x.log: Read-only file system
        make: *** [Makefile:160: build/bin/x] Error 1
        make: Target 'all' not remade because of errors.
        """)
    assert [str(d) for d in build.parse_diagnostics(log)] == [
        "/usr/bin/ld: cannot open output file build/bin/x.tmp77: Permission denied",
        "collect2: error: ld returned 1 exit status",
        "/bin/sh: 1: cannot create build/obj/x/x.log: Read-only file system"]


# --- the tools where a user keeps them -----------------------------------------------------------------

def _real_nvcc() -> str:
    """The nvcc binary itself (this machine's PATH may hold a wrapper script that execs it)."""
    real = toolchain.cuda_home() / "bin" / "nvcc"
    assert real.is_file() and not real.is_symlink(), real
    return str(real)


def _with_nvcc_at(monkeypatch, folder: Path) -> None:
    """Put `folder` first on PATH, where the harness looks for nvcc first."""
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    toolchain.find.cache_clear()


@pytest.fixture
def _fresh_toolchain():
    toolchain.find.cache_clear()
    yield
    toolchain.find.cache_clear()


def test_an_nvcc_in_a_folder_with_a_space_builds(tmp_path, monkeypatch, _fresh_toolchain):
    """Every compile used to fail with `/bin/sh: 1: /tmp/my: not found`: the recipes ran $(NVCC) unquoted."""
    folder = tmp_path / "my tools"
    folder.mkdir()
    wrapper = folder / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec "{_real_nvcc()}" "$@"\n')
    wrapper.chmod(0o755)
    _with_nvcc_at(monkeypatch, folder)
    assert toolchain.find("nvcc").path == str(wrapper)
    root = tiny_tree(tmp_path / "t")
    (root / "cuda" / "tiny" / "tiny_cpu.c").write_text("int main(void) { return 0; }\n")
    res = build.build_programs(["tiny"], arch="80", root=root)
    assert {"build/lib/libtiny.so", "build/bin/tiny", "cuda/tiny/tiny_cpu.c"} <= set(res.steps), res.log
    # plain make, with a gcc in a folder with a space as its CC, alike
    gcc = folder / "gcc"
    gcc.symlink_to(shutil.which("gcc"))
    r = make(root, "ARCH=80", f"NVCC={wrapper}", f"CC={gcc}", "-W", "cuda/tiny/tiny_cpu.c", "build/bin/tiny_cpu",
             check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_an_nvcc_reached_through_a_link_builds(tmp_path, monkeypatch, _fresh_toolchain):
    """nvcc finds its headers beside the file it was started as: through a link, every compile failed
    with `fatal error: cuda_runtime.h: No such file or directory`. The harness uses the file the link names."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "nvcc").symlink_to(_real_nvcc())
    _with_nvcc_at(monkeypatch, folder)
    tool = toolchain.find("nvcc")
    assert tool.path == _real_nvcc() and str(folder / "nvcc") in tool.how
    root = tiny_tree(tmp_path / "t")
    assert "build/lib/libtiny.so" in build.build_programs(["tiny"], arch="80", root=root).steps


def test_a_compilers_fatal_error_without_a_source_line_is_shown(tmp_path, monkeypatch):
    """What make printed when nvcc could not find its own headers (`<command-line>: fatal error: ...`) was
    not read as a diagnostic: the build said "make gave no error line" instead."""
    link = tmp_path / "nvcc"
    link.symlink_to(_real_nvcc())  # used as it is, as a plain `make NVCC=<link>` would
    monkeypatch.setattr(build.toolchain, "require", lambda name: toolchain.Tool(name, str(link)))
    root = tiny_tree(tmp_path / "t")
    text = _failure_text(root, arch="80")
    assert "fatal error: cuda_runtime.h: No such file or directory" in text, text
    assert text.count("cuda_runtime.h") == 1 and "make gave no error line" not in text, text
    assert "tiny: failed with the error above" in text


def test_a_truncated_cpu_twin_names_the_build_that_makes_it(tmp_path, monkeypatch):
    """build/bin/<prog>_cpu is built by `invoke build --programs <prog>`: the advice used to name
    `--programs <prog>_cpu`, which the build refuses."""
    root = tiny_tree(tmp_path / "t")
    (root / "cuda" / "tiny" / "tiny_cpu.c").write_text("int main(void) { return 0; }\n")
    for name, value in (("ROOT", root), ("BUILD", root / "build"), ("CUDA_DIR", root / "cuda")):
        monkeypatch.setattr(build, name, value)
    build.build_programs(["tiny"], arch="80", root=root)
    assert runner.run("tiny_cpu").returncode == 0
    truncate(build.bin_path("tiny_cpu"), 100)
    with pytest.raises(NotBuilt) as ei:
        runner.run("tiny_cpu")
    assert "`invoke build --programs tiny`" in str(ei.value), str(ei.value)
    assert "cuda/tiny/tiny_cpu.c" in build.build_programs(["tiny"], arch="80", root=root).steps  # the advice works
    assert runner.run("tiny_cpu").returncode == 0


# --- Ctrl-C ----------------------------------------------------------------------------------------

SLOW_NVCC = """#!/bin/sh
# A compile that takes a minute: records its PID, writes half an object, then sleeps (it is meant to
# be interrupted). Anything else goes to the real nvcc.
case " $* " in
  *" --dryrun "*|*" --list-gpu-"*) ;;
  *" -c "*)
    prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
    echo $$ >> "{pids}"; printf 'half an object' > "$out"; sleep 60 ;;
esac
exec "{real}" "$@"
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_a_build_stops_make_and_its_compilers(tmp_path, sig):
    root = tiny_tree(tmp_path / "t", names=("tiny", "other"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    pids = tmp_path / "pids"
    fake = bindir / "nvcc"
    fake.write_text(SLOW_NVCC.format(pids=pids, real=toolchain.find("nvcc").path))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    code = ("import sys; from pathlib import Path; from harness.compile import build\n"
            f"build.build(root=Path({str(root)!r}), jobs=2)\n")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": pythonpath(build.ROOT)}
    # In a session of its own, as a terminal would start it; the signal goes to the Python process only.
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=build.ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=sigint_as_from_a_terminal)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (pids.exists() and len(pids.read_text().split()) >= 2):
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.1)
        compilers = [int(p) for p in pids.read_text().split()]
        t0 = time.time()
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert time.time() - t0 < build.STOP_GRACE_S + 5
        time.sleep(0.5)
        assert not [p for p in compilers if _alive(p)], "compilers still running after the build was interrupted"
    finally:
        if proc.poll() is None:
            proc.kill()
        with open(pids) if pids.exists() else open(os.devnull) as f:
            for p in f.read().split():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except ProcessLookupError:
                    pass
    # Nothing half-written, no temporaries, and the lock is free for the next build.
    leftovers = [p for p in (root / "build").rglob("*") if ".tmp" in p.name]
    assert not leftovers, leftovers
    assert not list((root / "build").rglob("*.o")), "an interrupted compile left an object under its name"
    with open(root / "build" / ".lock") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)

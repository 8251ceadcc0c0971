"""cudalab's tasks: the user's whole interface. `invoke --list` is the map of the project;
`invoke --help <task>` shows each task's arguments and their valid values.

    invoke build test          build every program, then run the tests
    invoke run hello -- all    run one program's executable
    invoke doctor              what is installed, what is missing, and how to fix it

Each task reads its arguments, calls the harness and prints; the work lives in harness/ and the
pictures in analysis/. Every failure a user can cause ends in one line on stderr, not a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from invoke import Argument, Exit, Task
from invoke import task as _invoke_task

sys.path.insert(0, str(Path(__file__).resolve().parent))  # before anything of the lab is importable

from harness import programs as _registry  # noqa: E402
from harness.base import paths as _paths  # noqa: E402
from harness.base.paths import ROOT  # noqa: E402
from harness.compile import build as _hb  # noqa: E402  (the project root must be importable first)

_PROGRAMS = ", ".join(_hb.programs())


# --- short flags: one meaning each, in every task ----------------------------------------------------
# invoke's own choice (the first free letter of each option's name) gave one letter different meanings in
# different tasks (-e: viz's --iters, bench's --repeat) and took -h, which must stay help, for viz's
# --height. Only the options below have a short flag, the same in every task that has the option.
SHORT_FLAGS = {"programs": "p", "jobs": "j", "arch": "a", "gpus": "g", "marker": "m", "keyword": "k",
               "quick": "q", "variant": "v", "tool": "t", "outdir": "o", "image": "i", "rounds": "r"}


class _Task(Task):
    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, taken_names)
        short = SHORT_FLAGS.get(name)
        if short and short not in taken_names and short not in opts["names"]:
            opts["names"].append(short)
        return opts


def task(*args, **kwargs):
    """invoke's @task, with the short flags of SHORT_FLAGS instead of invoke's automatic ones."""
    kwargs.setdefault("klass", _Task)
    kwargs.setdefault("auto_shortflags", False)
    return _invoke_task(*args, **kwargs)


# --- what to type, where invoke's parser stops before a task runs -----------------------------------

def _choices(name: str) -> str:
    """For a task whose positional argument was left out: what it takes."""
    if name == "viz":
        return (f"name a picture: {', '.join(_registry.pictures())} "
                "(`invoke viz gridstride --simulate` needs no GPU)")
    if name == "plot":
        return "name what to draw: bench, profile, tune or timeline"
    if name == "exercise":
        return "name an action: list, start, check, hint or solution (`invoke exercise list` names the exercises)"
    if name == "compare":
        return "name a program with a CPU twin: square"
    if name == "tune":
        return f"name a program to tune: {', '.join(_registry.tunables())}"
    return f"name a program: {_PROGRAMS}"


_PASSES_ARGS = ("run", "profile", "sanitize")  # tasks that hand the words after `--` to the program


def _parse_hint(msg: str, ctx, argv: list[str]) -> str | None:
    """A clearer message for invoke's parse errors inside one of these tasks, or None to keep invoke's."""
    import re

    name = getattr(ctx, "name", None)
    if name not in _TASK_NAMES:
        return None
    if "did not receive required positional arguments" in msg:
        return f"invoke {name}: {_choices(name)}"
    m = re.fullmatch(r"No idea what '(.*)' is!", msg, re.S)
    if not m:
        return None
    word = m.group(1)
    help_ = f"`invoke --help {name}` lists its options"
    if name not in _PASSES_ARGS:
        return f"invoke {name}: {word!r} is neither an option of {name} nor a task; {help_}"
    # Move the words from the unknown one up to `--` behind it: what the user meant to pass on.
    words = argv[1:]
    try:
        i = words.index(word, words.index(name) + 1)
    except ValueError:
        return f"invoke {name}: arguments for the program go after `--`, as in `invoke {name} hello -- all`"
    j = words.index("--") if "--" in words[i:] else len(words)
    fixed = words[:i] + ["--"] + words[i:j] + words[j + 1:]
    if word.startswith("-"):
        return f"invoke {name}: {word!r} is not an option of {name} ({help_}); if it is the program's, type: " \
               f"invoke {shlex.join(fixed)}"
    return f"invoke {name}: arguments for the program go after `--`; type: invoke {shlex.join(fixed)}"


def _explain_parse_errors() -> None:
    """invoke parses a task's arguments after importing this file and before any task runs, so its
    own messages ("No idea what 'shapes' is!") are all a user saw: add what to type instead."""
    try:
        from invoke.parser import parser as _ip

        machine = _ip.ParseMachine
        original = machine.error
    except (ImportError, AttributeError):  # another invoke: its own messages stand
        return
    if getattr(original, "_cudalab", False):
        return

    def error(self, msg):
        try:
            better = _parse_hint(str(msg), self.context, list(sys.argv))
        except Exception:  # a hint must never hide the parse error itself
            better = None
        return original(self, better or msg)

    error._cudalab = True
    machine.error = error


# --- argument checks: one line each ----------------------------------------------------------------

def _int(value, flag: str, lo: int | None = None, hi: int | None = None) -> int | None:
    """An integer option given as text (so invoke never raises on `abc`): None when not given."""
    if value is None or value == "":
        return None
    try:
        v = int(str(value).strip())
    except ValueError:
        raise Exit(f"{flag} must be an integer, got {value!r}") from None
    if lo is not None and v < lo:
        raise Exit(f"{flag} must be at least {lo}, got {v}")
    if hi is not None and v > hi:
        raise Exit(f"{flag} must be at most {hi}, got {v}")
    return v


def _names(value: str) -> list[str]:
    """`a,b` or `a b` -> [a, b], each a known program (else one line naming the programs there are)."""
    names = [p for p in str(value or "").replace(" ", ",").split(",") if p]
    try:
        for p in names:
            _registry.check_name(p)  # the one unknown-program message
    except ValueError as e:
        raise Exit(str(e)) from None
    return names


def _help_if_asked(body):
    """For a task whose first argument is positional (`invoke plot bench`): invoke hands `invoke plot --help`
    to the task as that argument's value, so the task answered "nothing called '--help'". Print the task's
    help instead, as `invoke --help plot` does, and exit 0."""
    first = list(inspect.signature(body).parameters)[1]  # after the context

    @functools.wraps(body)
    def wrapper(c, *args, **kwargs):
        value = args[0] if args else kwargs.get(first)
        if value in ("-h", "--help"):
            r = subprocess.run([sys.executable, "-m", "invoke", "--help", body.__name__], cwd=ROOT)
            raise Exit(code=r.returncode)
        return body(c, *args, **kwargs)

    return wrapper


def _check_pytest_expression(expr: str, flag: str) -> None:
    """A -m/-k expression through pytest's own parser, so that a typo is one line here instead of about
    fifty lines of pytest INTERNALERROR."""
    if not expr:
        return
    try:
        from _pytest.mark import expression as _expr
    except ImportError:  # pytest's parser moved: pytest will still refuse a bad expression itself
        return
    # pytest 8.4 and later raise SyntaxError; earlier ones their own ParseError.
    errors = (SyntaxError, getattr(_expr, "ParseError", SyntaxError))
    try:
        _expr.Expression.compile(expr)
    except errors as e:
        why = getattr(e, "msg", None) or getattr(e, "message", None) or str(e)
        col = getattr(e, "offset", None) or getattr(e, "column", None)
        raise Exit(f"test: {flag} {expr!r} is not a pytest expression: {why}"
                   + (f" (at column {col})" if col else "")) from None


def _flag(option: str) -> str:
    return f"-{option}" if len(option) == 1 else f"--{option.replace('_', '-')}"


def _refuse_foreign_options(task_name: str, target: str, given: dict, applies, candidates: list[str],
                            kind: str) -> None:
    """One line naming each given option that `target` does not take, and the {kind}s that take it:
    an option of another picture or program was ignored without a word."""
    bad = [o for o, v in given.items() if v not in (None, False, "") and not applies(target, o)]
    if not bad:
        return
    parts = []
    for o in bad:
        others = [c for c in candidates if c != target and applies(c, o)]
        where = f"it is for {', '.join(others)}" if others else f"no {kind} takes it"
        parts.append(f"{_flag(o)} does not apply to {target} ({where})")
    raise Exit(f"{task_name} {target}: " + "; ".join(parts))


@contextlib.contextmanager
def _one_line(prefix: str):
    """Errors a user can cause (bad values, missing files, CUDA and build errors) as `prefix: message`."""
    from harness.base.errors import CudalabError

    try:
        yield
    except Exit:
        raise
    except (CudalabError, ValueError, TypeError, OSError, RuntimeError) as e:
        raise Exit(f"{prefix}: {e}") from None


def _print_table(df, title: str | None = None) -> None:
    from harness.base import console

    console.print_table(df, title)


class _LineProgress:
    """rich's Progress calls, for a stderr that cannot redraw (a log, a notebook cell, CI): a line for each
    named step as it ends ("build [3/46] NVCC cuda/square/square.cu"), and one each tenth of the way for
    counts without names, so long work shows it is moving instead of keeping quiet until the end."""

    def __init__(self, label: str):
        self.label, self.total, self.done, self.tenth = label, None, 0, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, description: str = "", total=None) -> int:
        self.total = total
        return 0

    def update(self, task: int, total=None, advance: float = 0, completed=None, description: str | None = None):
        if total is not None:
            self.total = total
        self.done = (completed if completed is not None else self.done) + advance
        of = f"{self.done:g}/{self.total:g}" if self.total else f"{self.done:g}"
        if description:
            print(f"{self.label} [{of}] {description}", file=sys.stderr, flush=True)
        elif self.total and (advance or completed is not None) and int(10 * self.done / self.total) > self.tenth:
            self.tenth = int(10 * self.done / self.total)
            print(f"{self.label} [{of}]", file=sys.stderr, flush=True)

    def stop(self) -> None:
        pass


def _progress(label: str):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    # On stderr, so that a piped stdout holds only the results: a bar where it can redraw, else lines.
    con = Console(stderr=True, highlight=False)
    if not con.is_terminal:
        return _LineProgress(label)
    return Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                    console=con, transient=True)


# --- the tasks -------------------------------------------------------------------------------------

@task(help={"jobs": "parallel compile jobs, a positive integer (default: all cores)",
            "arch": "compute capability to build for: 75, 80, 90, 120, ... (default: the visible GPU's, else 90); "
                    "a comma list (75,80,90) builds one binary for each of them, for a lab shared across GPUs",
            "programs": f"comma-separated programs to build (default: all): {_PROGRAMS}"})
def build(c, jobs="", arch="", programs=""):
    """Compile every cuda/<prog>/ with nvcc, in parallel and incrementally.

    A broken program does not stop the others: each failure is reported with its file:line and source
    line, and the ones that built are named."""
    from harness.base.errors import BuildError
    from harness.user import doctor as hd

    n_jobs = _int(jobs, "--jobs", lo=1)
    names = _names(programs)
    planned: list = []
    with _one_line("build"):
        hd.require_driver()  # a driver older than the toolkit: refuse first
        if arch:
            arch = _hb.parse_arch(arch)  # before anything runs: a mistyped --arch is one line
    with _progress("build") as bar:
        t = bar.add_task("", total=None)

        def plan(steps):
            # Counted by make -n under the build lock, just before make runs: no other build can change it.
            planned[:] = steps
            bar.update(t, total=len(steps))

        try:
            res = _hb.build_programs(names or None, jobs=n_jobs, arch=arch or None, on_plan=plan,
                                     on_step=lambda kind, target: bar.update(t, advance=1, description=f"{kind} {target}"))
        except BuildError as e:
            bar.stop()
            raise Exit(str(e)) from None
        except KeyboardInterrupt:
            bar.stop()
            raise Exit("build: interrupted; make and its compilers were stopped, and no output was left "
                       "half-written", code=130) from None
    if not res.steps:
        print("build: everything is up to date")
        return
    print(f"build: {len(res.steps)} step(s) done; outputs in build/bin and build/lib")


@task(help={"marker": "pytest -m expression: gpu, 'not gpu', slow, ...",
            "keyword": "pytest -k expression (test names)",
            "args": "extra pytest arguments, quoted: --args '-x --durations=20'",
            "jobs": "pytest-xdist workers: `auto` (default: one per CPU core, at most 16; one process where "
                    "pytest-xdist is missing) or a number; 1 runs everything in one process",
            "gpus": "`all` or GPU numbers 0,1,...: the workers take these GPUs in turn, at least one each, and "
                    "each sees only its own, so tests that need several GPUs skip (default: every worker sees "
                    "every GPU and uses the first)"})
def test(c, marker="", keyword="", args="", jobs="auto", gpus=""):
    """Run the tests with pytest, spread over pytest-xdist workers.

    Without a GPU the gpu-marked tests skip, with the reason; the profiler and slow end-to-end tests
    never overlap each other."""
    from harness.measuring import gpus as hg

    _check_pytest_expression(marker, "--marker")
    _check_pytest_expression(keyword, "--keyword")
    cmd = [sys.executable, "-m", "pytest"]
    env = None
    with _one_line("test"):
        chosen = hg.select(gpus) if gpus else []
        extra = shlex.split(args)
        auto = str(jobs).strip() == "auto"
        slow_only = "slow" in marker and "not slow" not in marker
        # The slow tests run one at a time anyway (the lock in tests/conftest.py), and a worker left
        # waiting on it for long would run into pytest-timeout: one process for them under `auto`.
        n = hg.test_workers("1" if slow_only and auto else jobs, len(chosen))
    if n == 1 and auto and not slow_only and not hg.have_xdist():
        print("test: pytest-xdist is not installed, so the tests run in one process "
              "(pip install -e '.[dev]' for one worker per core)", file=sys.stderr)
    if any(a in ("-n", "--numprocesses") or a.startswith(("-n", "--numprocesses=")) for a in extra):
        n = 1  # the user's own -n in --args wins
    if n > 1:
        # The profiler, slow and serial tests take a lock (tests/conftest.py), so never overlap each other.
        # --dist loadgroup is here for its scheduler, which hands tests out one at a time to whichever
        # worker is free: the default suite took 41 s with it and 67 s with the default `load` on the H100
        # (one run each, bench/results/h100/NOTES-tests.md). Its grouping is not relied on.
        cmd += ["-n", str(n), "--dist", "loadgroup"]
        env = hg.share_cores(n, os.environ)
    if chosen:
        env = hg.worker_env(chosen, env)
        if n == 1:  # no workers to pin themselves: this process's child sees only the one GPU
            env["CUDA_VISIBLE_DEVICES"] = chosen[0]
        print(f"test: {n} worker(s) over GPU(s) {', '.join(chosen)}")
    if marker:
        cmd += ["-m", marker]
    if keyword:
        cmd += ["-k", keyword]
    cmd += extra
    # pytest prints nothing while it starts its workers and collects every test, which on a small
    # machine is a minute or more after the build's last line: say what is happening.
    print(f"test: starting pytest ({n} worker{'s' if n > 1 else ''}); collecting the tests takes a while "
          "(a minute or more on 2 cores) before the first results", file=sys.stderr, flush=True)
    code = _run_pytest(cmd, env)
    if code == 5:
        raise Exit("pytest collected no tests: check the -m/-k filters", code=5)
    if code == 2:
        raise Exit("test: pytest stopped before the end (status 2: interrupted, or errors while collecting: "
                   "see above)", code=2)
    if code != 0:
        raise Exit(f"tests failed (pytest status {code})", code=code)


def _run_pytest(cmd: list[str], env: dict | None) -> int:
    """Run pytest in a process group of its own and return its status. The junit file, which feeds the
    test summary of `invoke report`, is written under a temporary name and published only when the run
    went to its end (status 0 or 1: every test ran), so an interrupted or empty run never replaces the
    last whole one. Ctrl-C or SIGTERM stops pytest and everything it started, then ends in one line,
    status 130."""
    from harness.base import files, procs

    results = _paths.BUILD / "test-results"
    with _one_line("test"):
        results.mkdir(parents=True, exist_ok=True)
        files.clean_stale(results)
        tmp = files.temporary(results / "junit.xml")
    cmd = [*cmd[:3], f"--junitxml={tmp}", *cmd[3:]]
    print(" ".join(shlex.quote(x) for x in cmd), flush=True)
    try:
        with procs.sigterm_as_interrupt():
            proc = subprocess.Popen(cmd, env={**os.environ, **env} if env else None, start_new_session=True)
            try:
                code = proc.wait()
            except KeyboardInterrupt:
                procs.stop_group(proc, 10.0, first=signal.SIGINT)
                raise
        if code in (0, 1) and tmp.stat().st_size:
            files.replace(results / "junit.xml", tmp.read_bytes())
        return code
    except KeyboardInterrupt:
        raise Exit("test: interrupted; pytest and its workers were stopped, and the last whole run's "
                   f"{results / 'junit.xml'} was kept", code=130) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@task(help={"prog": f"the program: {_PROGRAMS}",
            "variant": "kernel variant, where the program has several (see `invoke run <prog> -- --help`)",
            "image": "grayscale: input image, any format Pillow reads (default: a generated test picture)",
            "out": "grayscale: where the grey PNG goes",
            "ranks": "collectives: start this many processes, one rank each (RANK/WORLD_SIZE/LOCAL_RANK, NCCL); "
                     "all are stopped when one fails"})
@_help_if_asked
def run(c, prog, variant=None, image=None, out=None, ranks=""):
    """Run one program's executable: `invoke run hello -- all`.

    Arguments after `--` go to the program (`-- --help` lists them);
    `invoke run grayscale --image in.png --out g.png` converts a picture of yours."""
    from harness.calling import runner

    _names(prog)
    args = shlex.split(c.remainder or "")  # what followed a standalone `--`
    if ranks:
        _run_ranks(prog, _int(ranks, "--ranks", lo=1), variant, args)
        return
    cli = _registry.hook(prog, "cli")
    # --image and --out exist only where the program's `cli` hook names them (grayscale's).
    _refuse_foreign_options("run", prog, {"image": image, "out": out},
                            _registry.takes, _hb.programs(), "program")
    # A program with a CPU path (an on_cpu hook, or a cli that takes `cpu`) computes there when no GPU
    # can be used, but never in place of a kernel the user named with --variant.
    on_cpu = _registry.has(prog, "on_cpu")
    if ((on_cpu or _registry.takes(prog, "cpu")) and not {"-h", "--help"} & set(args)  # --help needs no GPU
            and not _registry.gpu_here()[0]):
        if variant is not None:
            _refuse_variant_without_gpu(prog, variant)
        if on_cpu:
            return _run_on_cpu(prog, args)
    with _one_line(prog):
        if cli is not None:
            status = cli(args, variant=variant, image=image, out=out)
            if status:
                raise Exit(code=int(status))
            return
        if variant is not None:
            args = ["--variant", variant] + args
        res = runner.run(prog, *args, check=False, timeout=600)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    if res.returncode != 0:
        raise Exit(f"{prog} exited with status {res.returncode}", code=res.returncode)


def _run_ranks(prog: str, n: int, variant, args: list[str]) -> None:
    """`invoke run <prog> --ranks N`: N processes of build/bin/<prog> (harness/calling/launch.py)."""
    from harness.calling import launch

    if prog != "collectives":
        raise Exit(f"--ranks starts one process per rank of a program that reads its rank from the environment: "
                   f"collectives; not {prog}")
    if variant is not None:
        args = ["--variant", variant] + args
    try:
        res = launch.run_program(prog, n, args)
    except launch.RankFailure as e:
        sys.stdout.write(e.stdout)
        raise Exit(f"{prog}: {e}") from None
    except (OSError, ValueError) as e:
        raise Exit(f"{prog}: {e}") from None
    sys.stdout.write(res.stdout)
    for r in res.ranks:
        sys.stderr.write(r.stderr)


def _refuse_variant_without_gpu(prog: str, variant: str) -> None:
    """--variant where no GPU can be used: a name the program's C table does not hold is said as such
    (read through the loader: without a built library, the line says how to build it); a real one
    needs a GPU. One line either way."""
    with _one_line(prog):
        if variant != "all":  # every variant, where the executable takes it
            _registry.check_variant(prog, variant)
    raise Exit(f"{prog}: --variant {variant} runs a CUDA kernel, which needs a GPU; without --variant, "
               f"`invoke run {prog}` computes its result on the CPU")


def _run_on_cpu(prog: str, args: list[str]) -> None:
    """`invoke run <prog>` where there is no GPU: the program's CPU twin, labelled as such."""
    with _one_line(prog):
        df, how = _registry.hook(prog, "on_cpu")(args)
    _print_table(df, f"{prog}: {_registry.cpu_label(how)}")
    print(f"{prog}: {_registry.cpu_label('see the table above')}. A GPU runs the CUDA kernels themselves.")
    if "check" in df and (df["check"] != "pass").any():
        raise Exit(f"{prog}: a CPU check failed", code=1)


@task
def doctor(c):
    """One line per item -- nvcc, gcc, driver, GPU, profilers, Python packages -- OK or missing, with a fix."""
    from harness.user import doctor as hd

    rows = hd.check_all()
    for line in hd.lines(rows):
        print(line)
    if any(not r.ok and not r.optional for r in rows):
        raise Exit("doctor: something required is missing (see the fixes above)", code=1)


@task
def clean(c):
    """Remove build outputs (build/)."""
    with _one_line("clean"):
        _hb.clean()
    print("removed build/")


@task(help={"name": "the new program's name: lower-case letters, digits and _ (a C prefix and a Python module)"})
@_help_if_asked
def new(c, name):
    """Write a working program folder, cuda/NAME/: a grid-stride kernel, its tests, bench case and page.

    With no edit anywhere else it builds, tests, benches, profiles, sanitizes, and appears in the demo,
    the report and the README's learning path: `invoke new saxpy && invoke build --programs saxpy`."""
    from harness.programs import scaffold

    with _one_line("new"):
        written = scaffold.write(name)
        readme = scaffold.write_readme(_registry.learning_path())
    for f in written:
        print(f.relative_to(ROOT))
    print(f"{readme.relative_to(ROOT)} (the learning path, from the records)")
    print(f"next: invoke build --programs {name} && invoke test --args cuda/{name}")


@task(help={"prog": "the program with a CPU twin: square",
            "n": "number of elements, a positive integer (default 100000)"})
@_help_if_asked
def compare(c, prog, n="100000"):
    """Time a program's CPU twin against its CUDA executable and kernel: `invoke compare square -n 1000000`."""
    count = _int(n, "-n", lo=1, hi=2**31 - 1)
    _names(prog)
    fn = _registry.hook(prog, "compare")
    if fn is None:
        raise Exit(f"{prog} has no CPU-vs-GPU comparison; square has")
    with _one_line(f"compare {prog}"):
        df, explanation = fn(n=count)
    _print_table(df, f"{prog}: CPU vs GPU, n={count}")
    print(explanation)


@task(help={"what": "what to draw: " + ", ".join(_registry.pictures()),
            "n": "gridstride: elements, 1..1048576 (default 500)",
            "blocks": "gridstride: blocks, a positive integer (default 8)",
            "threads": "gridstride: threads per block, 1..1024 (default 32)",
            "simulate": "gridstride: draw from the Python simulator instead of the GPU (no GPU needed)",
            "width": "mandelbrot: image width in pixels (default 1024)",
            "height": "mandelbrot: image height in pixels (default 1024)",
            "iters": "mandelbrot: max iterations, a positive integer (default 256)",
            "region": "mandelbrot: 'x0 x1 y0 y1' with x0 < x1, y0 < y1 (default '-2 1 -1.5 1.5')",
            "variant": "mandelbrot: 01_naive or 02_fast",
            "outdir": "where the PNGs go (default the project's build/plots); a folder outside build/ must "
                      "exist"})
@_help_if_asked
def viz(c, what, n="", blocks="", threads="", simulate=False, width="", height="", iters="", region=None,
        variant=None, outdir=""):
    """Draw a program's pictures: `invoke viz gridstride --simulate` (no GPU needed), `invoke viz mandelbrot`.

    Each option belongs to one picture (the help says which); `invoke viz` alone lists the pictures."""
    import importlib

    from harness.base.errors import CudalabError
    from harness.calling import cudart

    pictures = _registry.pictures()
    if what not in pictures:
        raise Exit(f"viz: nothing to draw for {what!r}; choose from {', '.join(pictures)}")
    given = dict(n=n, blocks=blocks, threads=threads, simulate=simulate, width=width, height=height, iters=iters,
                 region=region, variant=variant)
    _refuse_foreign_options("viz", what, given, _registry.picture_takes, pictures, "picture")
    opts = dict(n=_int(n, "-n", lo=1), blocks=_int(blocks, "--blocks", lo=1), threads=_int(threads, "--threads", lo=1),
                simulate=simulate or None, width=_int(width, "--width", lo=1), height=_int(height, "--height", lo=1),
                iters=_int(iters, "--iters", lo=1), region=region, variant=variant)
    with _one_line(f"viz {what}"):  # before anything is computed; run grayscale --out keeps the same rule
        outdir = _paths.output_folder(outdir or _paths.PLOTS, "-o/--outdir")
    draw = importlib.import_module(f"analysis.{what}")
    with _one_line(f"viz {what}"), _progress(f"viz {what}") as bar:
        t = bar.add_task("simulating" if simulate else "running", total=None)
        # A module whose viz_data takes `progress` reports its steps (the simulator's blocks).
        try:
            data = _registry.viz_data(what, **opts,
                                      progress=lambda done, total: bar.update(t, completed=done, total=total))
        except CudalabError:
            # The executable or the runtime failed: where that is for want of a GPU and the picture has a
            # simulator, say how to draw it without one.
            if _registry.picture_takes(what, "simulate") and not simulate and not cudart.gpu_available()[0]:
                bar.stop()
                raise Exit(f"viz {what}: no usable GPU here (`invoke doctor` says what is missing); the Python "
                           f"simulator draws it without one: invoke {shlex.join(sys.argv[1:] + ['--simulate'])}"
                           ) from None
            raise
        bar.update(t, description="drawing")
        paths = draw.plot(data, Path(outdir))
    for p in paths:
        print(p)
    if isinstance(data, dict) and data.get("computed_on"):
        print(f"viz {what}: {data['computed_on']}")


class _CompareArgument(Argument):
    """`--compare [BASE] [NEW]`: a flag that takes no, one or two values. invoke's flags take one value
    and its positional arguments are required, so the parser is told this flag still waits for a value
    (raw_value None) until it has two; a flag or the end of the line finishes it, and it then holds the
    paths given as a tuple (empty: the default pair)."""

    def set_value(self, value, cast: bool = True) -> None:
        if value is True:  # the parser's "seen with no (more) values": what was gathered is the value
            self._value = self.raw_value = tuple(getattr(self, "_given", ()))
            return
        self._given = (*getattr(self, "_given", ()), str(value))
        if len(self._given) == 2:
            self._value = self.raw_value = self._given


class _BenchTask(_Task):
    def get_arguments(self, ignore_unknown_help=None):
        args = super().get_arguments(ignore_unknown_help)
        for i, a in enumerate(args):
            if a.name == "compare":
                args[i] = _CompareArgument(names=a.names, kind=str, default=None, help=a.help, optional=True)
        return args


@task(klass=_BenchTask,
      help={"programs": "comma-separated programs (default: all with bench cases: "
                        + ", ".join(_registry.bench_programs()) + ")",
            "quick": "small sizes, 2 rounds, shorter measurements: a fast look",
            "save": "copy the CSV(s) to bench/results/<gpu>/ (the committed reference runs)",
            "rounds": "rounds of (ceiling, case, ceiling, ...) per ceiling group (default 3; 2 with --quick)",
            "repeat": "run the whole suite N times and print how far each ratio moved between runs "
                      "(writes repeat-<gpu>-<date>.csv and repeat.png)",
            "gpus": "`all` or GPU numbers 0,1,...: the ceiling groups spread over one worker process per GPU, "
                    "each GPU with its own ceilings and its own CSV",
            "compare": "[BASE] [NEW]: time nothing; compare two bench CSVs of one GPU case by case (default: the "
                       "two newest of --programs), SAME / FASTER / SLOWER from each run's p25-p75 spread; "
                       "exit status 1 when a case is SLOWER"})
def bench(c, programs="", quick=False, save=False, rounds="", repeat="", gpus="", compare=None):
    """Time every bench case as a ratio to its ceiling, in interleaved rounds on the same GPU (NVBench).

    Each row prints the median ratio over the rounds and its 25th-75th percentile spread; a row that
    ran with the SM clock under 90% of the run's highest gets a warning line. `--compare [BASE] [NEW]`
    is the regression gate: it times nothing, and exits 1 when a case of NEW is SLOWER than in BASE."""
    from harness.measuring import bench as hbench
    from harness.measuring import gpus as hg
    from harness.measuring import results_csv

    names = _names(programs) or None
    if compare is not None:
        given = {"--quick": quick, "--save": save, "--rounds": rounds, "--repeat": repeat, "--gpus": gpus}
        extra = [flag for flag, v in given.items() if v]
        if extra:
            raise Exit(f"bench --compare reads two CSVs and times nothing: leave out {', '.join(extra)}", code=2)
        _bench_compare(tuple(compare) if not isinstance(compare, str) else (compare,), names)
        return
    n_rounds = _int(rounds, "--rounds", lo=1) if rounds else None
    n_repeat = _int(repeat, "--repeat", lo=1) if repeat else 1
    if gpus and n_repeat > 1:
        raise Exit("bench: --repeat runs on one GPU; leave out --gpus")
    # The programs hand their cases and ceilings down; the bench times what it is given.
    with _one_line("bench"):
        cases = _registry.bench_cases(names, quick)
        if not cases:
            raise Exit("bench: no bench cases to run" + (f" for {', '.join(names)}" if names else ""))
        hbench.check_built(_registry.bench_libraries(cases))
        ceilings = _registry.ceilings()
        if save:  # checked before anything is timed: a refusal after the whole run loses the run
            _check_save_folders()
    done = [0, 0]  # measurements done, planned
    frames, paths = [], []
    try:
        if gpus:
            with _one_line("bench"):
                chosen = hg.select(gpus)
                paths = hbench.run_on_gpus("harness.user.bench_worker", names, quick=quick, gpus=chosen)
            frames = None
        else:
            with _one_line("bench"), _progress("bench") as bar:
                t = bar.add_task("", total=None)

                def total(k):
                    done[1] = k * n_repeat
                    bar.update(t, total=done[1])

                def step(d, tag):
                    done[0] += 1
                    bar.update(t, advance=1, description=tag + d)

                for run_no in range(1, n_repeat + 1):
                    tag = f"run {run_no}/{n_repeat}: " if n_repeat > 1 else ""
                    df, ceil = hbench.run(cases, ceilings, quick=quick, rounds=n_rounds, on_total=total,
                                          on_progress=lambda d, tag=tag: step(d, tag))
                    paths.append(results_csv.write(df, hbench.metadata(), ceil))
                    frames.append(df)
    except KeyboardInterrupt:
        # NVBench writes a session's results when the session ends: a run stopped part way has none to keep.
        kept = f"; the {len(paths)} whole run(s) before it are in {paths[0].parent}" if paths else ""
        where = f" after {done[0]} of {done[1]} measurements" if done[1] else ""
        raise Exit(f"bench: interrupted{where}; the timing session was stopped, and a session keeps its results "
                   f"only when it ends, so this run wrote none{kept}", code=130) from None
    for i, path in enumerate(paths):
        frame, meta, ceilings = results_csv.read(path)
        shown = [col for col in hbench.SHOWN if col in frame]
        _print_table(frame[shown], f"bench on {meta['device']}" + (f" (GPU {meta['gpu']})" if meta.get("gpu") else "")
                     + (f", run {i + 1} of {len(paths)}" if len(paths) > 1 else ""))
        for line in ceilings:
            print(line)
        if frames is not None:
            for line in hbench.throttle_warnings(frames[i]):
                print(line)
            for key, why in frames[i].attrs.get("errors", {}).items():
                print(f"not measured: {key}: {why}")
            cons = frames[i].attrs.get("consistency")
            if cons is not None and len(cons):
                for r in cons.itertuples():
                    flag = "" if r.diff_pct <= hbench.REPEAT_TOLERANCE_PCT else "  (more than 3% apart)"
                    print(f"same call as ceiling and row: {r.ceiling} {r.ceiling_value:.4g} vs {r.row} "
                          f"{r.row_value:.4g} {r.unit}: {r.diff_pct:.1f}% apart{flag}")
        print(f"wrote {path}")
        if save:
            print(f"saved {results_csv.save(path, meta['device'])}")
    if n_repeat > 1:
        _report_repeat(frames, save)


def _bench_compare(given: tuple, names: list[str] | None) -> None:
    """--compare: the table, the figure and the one summary line; Exit 1 when a case is SLOWER, 2 when
    the CSVs cannot be compared (missing, unreadable, none to pick, different GPUs)."""
    from analysis import compare as acompare
    from harness.measuring import compare as hc

    try:
        base, new = hc.pick(list(given), names)
        table = hc.runs(base, new, names)
    except (ValueError, OSError) as e:
        raise Exit(f"bench --compare: {e}", code=2) from None
    device = new.meta.get("device", "")
    print(f"BASE {base.path} ({base.meta.get('date', '')})\nNEW  {new.path} ({new.meta.get('date', '')})")
    for k in ("driver", "nvcc"):
        if base.meta.get(k, "") != new.meta.get(k, ""):
            print(f"note: {k} {base.meta.get(k) or '?'} in BASE, {new.meta.get(k) or '?'} in NEW")
    _print_table(hc.shown(table), f"bench --compare on {device}: ratio to the ceiling timed in each run")
    with _one_line("bench --compare"):
        print(acompare.plot(table, _paths.PLOTS, title=f"bench --compare on {device}: {base.path.name} -> "
                                                         f"{new.path.name}"))
    line = f"bench --compare: {hc.summary(table)}"
    if (table["verdict"] == hc.SLOWER).any():
        raise Exit(line, code=1)
    print(line)


def _check_save_folders() -> None:
    """`bench --save` copies each CSV to bench/results/<gpu>/: each GPU's folder there (named as
    nvidia-smi names the GPUs, so that no CUDA context is made beside the timing session's) must take
    a file. Without nvidia-smi, bench/results itself."""
    from harness.base import files
    from harness.compile import toolchain

    names = [g["name"] for g in toolchain.gpu_query("name")]
    for folder in dict.fromkeys(_paths.RESULTS_DIR / _paths.gpu_folder(n) for n in names) or [_paths.RESULTS_DIR]:
        try:
            files.check_writable(folder)
        except OSError as e:
            raise Exit(f"bench --save: {e}; nothing was timed") from None


def _report_repeat(frames, save: bool) -> None:
    """--repeat: the long table (one row per case and run), the spread per row, and its figure."""
    from analysis import repeat as arepeat
    from harness.measuring import bench as hbench
    from harness.measuring import results_csv

    meta = hbench.metadata()
    long = hbench.repeat_frame(frames, meta)
    path = results_csv.write_repeat(long, meta)
    summ = arepeat.summary(long, hbench.REPEAT_TOLERANCE_PCT)
    _print_table(summ[["program", "variant", "size", "goal", "ratio_median", "ratio_min", "ratio_max", "spread_pct",
                       "within"]], f"ratio across {len(frames)} runs (goal: within {hbench.REPEAT_TOLERANCE_PCT:g}%)")
    held = summ[summ["goal"].astype(bool)]
    print(f"rows held to the goal: {int(held['within'].sum())} of {len(held)} within "
          f"{hbench.REPEAT_TOLERANCE_PCT:g}% (largest spread {held['spread_pct'].max():.2f}%)" if len(held)
          else "no row is held to the repeatability goal in this selection")
    for p in arepeat.plot(long, path.parent):
        print(p)
    print(f"wrote {path}")
    if save:
        print(f"saved {results_csv.save(path, meta['device'])}")


@task(help={"prog": f"the program: {_PROGRAMS}",
            "tool": "auto (the first tool that gives a report), nsys, ncu, or nvprof (explains why not)",
            "variant": "kernel variant, or `all` for one run per variant (default: the program's choice)",
            "metrics": "ncu: comma-separated metrics instead of the default short list",
            "clock_control": "ncu: lock the clocks to base (default: measure the card as it is)"})
@_help_if_asked
def profile(c, prog, tool="auto", variant=None, metrics=None, clock_control=False):
    """Profile a program's kernels with nsys or ncu: `invoke profile square --tool nsys`.

    `invoke profile matmul --tool ncu -- 256 256 256` passes the words after `--` to the program. Prints a table of kernels with their share of GPU time; CSVs go to build/profiles/<prog>/,
    with a bar chart of the shares (kernel_shares.png)."""
    from analysis import profile as aprof
    from harness.profiling import profile as hp

    _names(prog)
    args = shlex.split(c.remainder or "")
    try:
        with _one_line(f"profile {prog}"):
            refused: dict[str, str] = {}
            runs = [(variant, args)] if tool == "nvprof" else _registry.profile_runs(prog, variant, args or None,
                                                                                     refused=refused)
            for v, why in refused.items():
                print(f"{prog} {v}: not profiled ({why})", file=sys.stderr)
            res = hp.profile(prog, runs, tool=tool, metrics=metrics, clock_control=clock_control,
                             bench_cases=_registry.hook(prog, "bench_cases"))
    except hp.NvprofUnavailable as e:
        raise Exit(str(e), code=1) from None
    for f in res.failures:
        print(f"{f.tool}: {f.reason}")
    if res.note:
        print(res.note)
    for title, table in hp.kernel_tables(res.kernels, f"{prog}: GPU kernels ({res.tool})"):
        _print_table(table, title)
    outdir = hp.PROFILES / prog
    with _one_line(f"profile {prog}"):
        paths = aprof.plot(res.kernels, outdir, title=f"{prog}: kernel time shares ({res.tool})")
    print(f"CSVs and reports in {outdir.relative_to(ROOT)}; chart {paths[0].relative_to(ROOT)}")


@task(help={"programs": f"comma-separated programs (default: all): {_PROGRAMS}",
            "tool": "memcheck, racecheck, initcheck, synccheck, a comma list of them, or all (default)",
            "jobs": "sanitizer runs in parallel, a positive integer (default 4)"})
def sanitize(c, programs="", tool="all", jobs=""):
    """Run compute-sanitizer over every program and variant at small sizes: `invoke sanitize -p square,matmul`.

    Arguments after `--` replace each program's own runs (`-- 1000 64`: square at another size).
    Exits non-zero when any run is not clean."""
    from harness.profiling import sanitize as hs

    names = _names(programs) or _registry.names()
    n_jobs = _int(jobs, "--jobs", lo=1)
    args = shlex.split(c.remainder or "") or None
    with _one_line("sanitize"):
        tools = hs.tools_for(tool)
        hs.find_sanitizer()
        cases = [hs.Case(p, label, argv) for p in names for label, argv in _registry.sanitize_cases(p, args=args)]
        with _progress("sanitize") as bar:
            t = bar.add_task("", total=None)
            outcomes = hs.sanitize(cases, tools, jobs=n_jobs,
                                   on_total=lambda k: bar.update(t, total=k),
                                   on_done=lambda o: bar.update(t, advance=1, description=f"{o.program} {o.label} {o.tool}"))
        if not args:  # a run of the user's own arguments is not the project's state: keep it out of the report
            hs.write_summary(outcomes)
    _print_table(hs.summary(outcomes).reset_index(), "compute-sanitizer: program x tool")
    bad = [o for o in outcomes if not o.clean]
    for o in bad:
        print(f"{o.program} {o.label} {o.tool}: {o.status} {o.detail} (log {o.log})")
    if bad:
        raise Exit(f"sanitize: {len(bad)} run(s) not clean", code=1)
    print(f"sanitize: all {len(outcomes)} run(s) clean")


@task(help={"what": "bench (ratio bars, roofline, ladders), profile (a program's kernel shares) or tune (every "
                    "cached `invoke tune` search under bench/results/)",
            "csv": "bench: the CSV to draw (default: the build/bench/*.csv with the newest date inside)",
            "prog": f"profile: the program whose build/profiles/<prog>/kernels.csv to draw: {_PROGRAMS}",
            "outdir": "where the PNGs go (default build/plots)"})
@_help_if_asked
def plot(c, what, csv=None, prog=None, outdir="build/plots"):
    """Draw from saved results (no GPU needed): bench, profile, tune or timeline.

    `invoke plot bench` (ratio bars + roofline), `invoke plot profile --prog square`, `invoke plot tune`
    (each cached parameter search), `invoke plot timeline --csv F` (one matmul launch's blocks on its
    SMs, from `matmul --timeline`)."""
    if what == "bench":
        from analysis import bench as abench

        with _one_line("plot bench"):
            path = abench.resolve_csv(csv)
            for p in abench.plot(path, Path(outdir)):
                print(p)
            from analysis import ladder as aladder

            for p in aladder.plot(path, Path(outdir)):  # the ladder figures (matmul, gemm_tc), when the CSV has rungs
                print(p)
    elif what == "profile":
        from analysis import profile as aprof
        from harness.profiling import profile as hp

        if not prog:
            raise Exit("plot profile: name the program with --prog")
        _names(prog)
        with _one_line("plot profile"):
            df = hp.load_kernels(prog)
            tool = df["tool"].iloc[0] if "tool" in df and len(df) else ""
            for p in aprof.plot(df, hp.PROFILES / prog, title=f"{prog}: kernel time shares ({tool})"):
                print(p)
    elif what == "tune":
        from analysis import tune as atune

        with _one_line("plot tune"):
            paths = atune.plot_cached(_paths.RESULTS_DIR, Path(outdir))
        if not paths:
            raise Exit(f"plot tune: no tuning results under {_paths.RESULTS_DIR} (run `invoke tune <prog>` on a GPU)")
        for p in paths:
            print(p)
    elif what == "timeline":
        from analysis import timeline as atl

        if not csv:
            raise Exit("plot timeline: name the CSV with --csv (`build/bin/matmul --timeline FILE` writes it, from a "
                       "build made with `make EXTRA_NVCCFLAGS=-DCUDALAB_TIMELINE`)")
        with _one_line("plot timeline"):
            df = atl.read_checked(csv)
            path = atl.plot(df, Path(outdir), stem=Path(csv).stem)
            s = atl.summary(df)
        print(path)
        print(f"{s['blocks']} blocks on {s['sms']} SMs: {s['makespan_us']:.1f} µs, a perfect balance "
              f"{s['ideal_us']:.1f} µs, SMs busy {100 * s['busy_fraction']:.1f}%")
        for role, r in s["roles"].items():
            print(f"  {role:6s} {r['blocks']:5d} blocks, main loop {r['mainloop_us']:8.1f} µs, after it "
                  f"{r['after_us']:6.1f} µs, {r['first_start_us']:8.1f} .. {r['last_end_us']:8.1f} µs")
    else:
        raise Exit(f"plot: nothing called {what!r}; choose bench, profile, tune or timeline")


@task(help={"prog": "the program to tune: matmul (ladder configurations for 09_tuned), gemm_tc (wgmma "
                    "schedule, stages and raster for 06_wgmma_tuned) or attention (03_flash_bf16's warps, rows "
                    "per warp, key tile and stages; 05_flash_wgmma's schedule, key tile and stages; per head size)",
            "size": "matmul and gemm_tc: m = n = k; attention: the sequence length S (default 4096)",
            "save": "cache the winner under bench/results/<gpu>/ (default on; --no-save only prints)"})
@_help_if_asked
def tune(c, prog, size="4096", save=True):
    """Search a program's tuning parameters on this GPU and cache the winner: `invoke tune matmul`.

    `invoke tune matmul` times every compiled ladder configuration and caches the fastest for this GPU (bench/results/<gpu>/matmul-tune.json), which 09_tuned then runs;
    `invoke tune attention` does the same for 03_flash_bf16's and 05_flash_wgmma's choices at each head size, and
    `invoke tune gemm_tc` for the wgmma configurations (schedule, stages, raster) that 06_wgmma_tuned runs."""
    edge = _int(size, "--size", lo=1)
    with _one_line(f"tune {prog}"):
        df, path = _registry.tuner(prog)(size=edge, save=save,
                                         on_progress=lambda name: print(f"tune {prog}: {name}", file=sys.stderr))
    _print_table(df, f"tune {prog} at size {edge}")
    won = df[df["winner"]] if "winner" in df else df.iloc[:0]
    # One winner (matmul), or one per head size (attention: a D column).
    names = [f"{r.config} (D={r.D})" if "D" in df else str(r.config) for r in won.itertuples()]
    print(f"winner: {', '.join(names) or 'none'}")
    if path is not None:
        print(f"saved {path}")
    from analysis import tune as atune
    from harness.calling import cudart

    with _one_line(f"tune {prog}"):
        gpu = _paths.gpu_folder(cudart.device_name(0))
        print(f"figure {atune.plot(df, prog, _paths.PLOTS / f'tune_{prog}_{gpu}.png')}")


@task(help={"outdir": "where index.md and index.html go (default build/report); created if missing"})
def report(c, outdir="build/report"):
    """Write build/report/index.md and a self-contained index.html from whatever build/ holds."""
    from analysis import report as arep
    from harness.user import demo as hdemo

    with _one_line("report"):
        md, html = arep.write(Path(outdir), facts=hdemo.collect_facts(), tour=_registry.tour())
    print(md)
    print(html)


@task(help={"bench": "run the quick bench (default on; --no-bench skips it)",
            "profile": "profile square and transformer_block (default on; --no-profile skips it)"})
def demo(c, bench=True, profile=True):
    """The tour, after `invoke build test`: build, run every program once, draw every picture, bench, report.

    Without a GPU it still builds, draws the simulated grid-stride figures and the recorded traces,
    writes the report, and says which steps need a GPU (exit 0)."""
    from harness.user import demo as hdemo

    with _progress("demo") as bar:
        t = bar.add_task("", total=None)
        result = hdemo.run(bench=bench, profile=profile, on_total=lambda k: bar.update(t, total=k),
                           on_step=lambda s: bar.update(t, advance=1, description=s))
    import textwrap

    from harness.base import console

    _print_table(result.table(), "demo: what happened")
    for line in result.closing_lines():
        print(textwrap.fill(line, width=console.width(), break_long_words=False, break_on_hyphens=False))
    if result.failed:
        raise Exit(f"demo: {len(result.failed)} step(s) failed", code=1)


def _exercise_arguments(args: list) -> list:
    """`invoke exercise list` takes no NAME while `invoke exercise start NAME` needs one: invoke
    requires every positional argument, so NAME counts as given when the action is `list`. (The parser
    deep-copies its contexts: the action's Argument is kept as an attribute, copied along with it.)"""
    from invoke.parser import Argument

    class NameArgument(Argument):
        @property
        def value(self):
            v = self._value if self._value is not None else self.default
            return "" if v is None and self.action_arg.value == "list" else v

        @value.setter
        def value(self, arg):
            self.set_value(arg, cast=True)

    action = next(a for a in args if a.name == "action")
    for a in args:
        if a.name == "name":
            a.__class__ = NameArgument
            a.action_arg = action
    return args


class _ExerciseTask(_Task):
    def get_arguments(self, *args, **kwargs):
        return _exercise_arguments(super().get_arguments(*args, **kwargs))


@task(klass=_ExerciseTask, positional=["action", "name"], help={"action": "list, start, check, hint or solution",
            "name": "the exercise (invoke exercise list names them)",
            "track": "python (harness.base.sim, no GPU) or cuda (default: python, or the track whose file exists)",
            "dir": "the learner's folder (default: exercises/ in the current folder)",
            "write": "solution: write the lab's solution into the learner's file (the old one is kept as .bakN)"})
@_help_if_asked
def exercise(c, action, name=None, track="", dir="", write=False):  # noqa: A002 -- the option is --dir
    """Do the courses' exercises, graded: `invoke exercise list` names them.

    `invoke exercise start square`, `invoke exercise check square [--track cuda]`, `invoke exercise hint square`,
    `invoke exercise solution square`."""
    from harness.user import exercises as hx

    actions = ("list", "start", "check", "hint", "solution")
    if action not in actions:
        raise Exit(f"exercise: no action {action!r}; choose {', '.join(actions)}")
    if action != "list" and not name:
        raise Exit(f"exercise {action}: name the exercise: invoke exercise {action} NAME (invoke exercise list names them)")
    with _one_line(f"exercise {action}"):
        if action == "list":
            import pandas as pd

            _print_table(pd.DataFrame(hx.listing(hx.folder(dir))), "exercises, in the order a learner meets them")
        elif action == "start":
            path, created = hx.start(name, track or None, dir or None)
            if created:
                print(f"wrote {path}: fill in its TODOs, then run `invoke exercise check {name}"
                      f"{' --track cuda' if path.suffix == '.cu' else ''}`")
            else:
                print(f"{path} is already there (your work is kept): edit it, or move it away to start over")
        elif action == "hint":
            k, total, text = hx.hint(name, dir or None)
            print(f"hint {k} of {total}: {text}")
        elif action == "solution":
            text, path, backup = hx.solution(name, track or None, dir or None, write=write)
            if path is None:
                sys.stdout.write(text)
                print(f"(the lab's solution; `invoke exercise solution {name} --write` puts it into your file)")
            else:
                print(f"wrote the solution into {path}" + (f"; your file was kept as {backup}" if backup else ""))
        else:
            from harness.user.exercises import check as hcheck

            try:
                v = hcheck.check(name, track or None, dir or None)
            except KeyboardInterrupt:
                raise Exit(f"exercise check: interrupted; the check's processes were stopped, and {name}'s status "
                           f"was left as it was", code=130) from None
            for line in v.report():
                print(line)
            if not v.passed:
                raise Exit(code=1)


# Every task above, for the parse-error messages (invoke parses their arguments after this import).
_TASK_NAMES = frozenset(k for k, v in list(globals().items()) if isinstance(v, Task))
_explain_parse_errors()

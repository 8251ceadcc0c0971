"""The plumbing of tasks.py: what invoke needs around the tasks, so that tasks.py holds only the tasks.

The task class and decorator with one short flag per option; the clearer messages for invoke's parse
errors; the argument checks that end in one line; the progress display; and the steps of a task too long
to read inline (pytest in its own process group, ranks, the CPU twin, `bench --compare`, `--save`'s folder
check and `--repeat`'s report). A task reads its arguments, calls the layers and prints through these.

Imported by tasks.py before every `invoke` command, `invoke --list` included: what only some tasks need
(rich, pytest's expression parser, the figures of analysis/, which load matplotlib) is imported where it
is used.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import shlex
import signal
import subprocess
import sys

from invoke import Argument, Exit, Task
from invoke import task as _invoke_task

from harness import programs as _registry
from harness.base import console, files, procs
from harness.base import paths as _paths
from harness.base.errors import CudalabError
from harness.base.paths import ROOT
from harness.calling import launch
from harness.compile import build as _hb
from harness.measuring import bench as hbench
from harness.measuring import compare as hc
from harness.measuring import gpus as _gpus
from harness.measuring import results_csv

try:  # the parser's state machine, whose error() explain_parse_errors wraps
    from invoke.parser.parser import ParseMachine as _ParseMachine
except ImportError:  # another invoke, laid out otherwise: its own messages stand
    _ParseMachine = None


# --- short flags: one meaning each, in every task ----------------------------------------------------
# invoke's own choice (the first free letter of each option's name) gave one letter different meanings in
# different tasks (-e: viz's --iters, bench's --repeat) and took -h, which must stay help, for viz's
# --height. Only the options below have a short flag, the same in every task that has the option.
SHORT_FLAGS = {"programs": "p", "jobs": "j", "arch": "a", "gpus": "g", "marker": "m", "keyword": "k",
               "quick": "q", "variant": "v", "tool": "t", "outdir": "o", "image": "i", "rounds": "r"}


class ShortFlagTask(Task):
    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, taken_names)
        short = SHORT_FLAGS.get(name)
        if short and short not in taken_names and short not in opts["names"]:
            opts["names"].append(short)
        return opts


def task(*args, **kwargs):
    """invoke's @task, with the short flags of SHORT_FLAGS instead of invoke's automatic ones."""
    kwargs.setdefault("klass", ShortFlagTask)
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
    return f"name a program: {', '.join(_hb.programs())}"


_PASSES_ARGS = ("run", "profile", "sanitize")  # tasks that hand the words after `--` to the program


def _parse_hint(msg: str, ctx, argv: list[str]) -> str | None:
    """A clearer message for invoke's parse errors inside one of these tasks, or None to keep invoke's."""
    name = getattr(ctx, "name", None)
    if name not in _task_names:
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


_task_names: set[str] = set()  # the tasks whose parse errors get a hint (explain_parse_errors fills it)


def explain_parse_errors(task_names) -> None:
    """invoke parses a task's arguments after importing tasks.py and before any task runs, so its
    own messages ("No idea what 'shapes' is!") are all a user saw: add what to type instead, for the
    tasks named (tasks.py's own, passed once they are all defined)."""
    _task_names.update(task_names)
    original = getattr(_ParseMachine, "error", None)
    if original is None:  # another invoke: its own messages stand
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
    _ParseMachine.error = error


# --- argument checks: one line each ----------------------------------------------------------------

def int_option(value, flag: str, lo: int | None = None, hi: int | None = None) -> int | None:
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


def program_names(value: str) -> list[str]:
    """`a,b` or `a b` -> [a, b], each a known program (else one line naming the programs there are)."""
    names = [p for p in str(value or "").replace(" ", ",").split(",") if p]
    try:
        for p in names:
            _registry.check_name(p)  # the one unknown-program message
    except ValueError as e:
        raise Exit(str(e)) from None
    return names


def help_if_asked(body):
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


def check_pytest_expression(expr: str, flag: str) -> None:
    """A -m/-k expression through pytest's own parser, so that a typo is one line here instead of about
    fifty lines of pytest INTERNALERROR."""
    if not expr:
        return
    try:  # deferred: pytest's modules (0.1 s) only for `invoke test -m/-k`
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


def refuse_foreign_options(task_name: str, target: str, given: dict, applies, candidates: list[str],
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
def one_line(prefix: str):
    """Errors a user can cause (bad values, missing files, CUDA and build errors) as `prefix: message`."""
    try:
        yield
    except Exit:
        raise
    except (CudalabError, ValueError, TypeError, OSError, RuntimeError) as e:
        raise Exit(f"{prefix}: {e}") from None


def print_table(df, title: str | None = None) -> None:
    console.print_table(df, title)


class LineProgress:
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


def progress(label: str):
    """A progress display on stderr for `label`'s work: rich's bar on a terminal, else LineProgress."""
    # deferred: rich's progress bars (0.1 s) only for a task that shows one, never for `invoke --list`
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    # On stderr, so that a piped stdout holds only the results: a bar where it can redraw, else lines.
    con = Console(stderr=True, highlight=False)
    if not con.is_terminal:
        return LineProgress(label)
    return Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                    console=con, transient=True)


def run_pytest(cmd: list[str], env: dict | None) -> int:
    """Run pytest in a process group of its own and return its status. The junit file, which feeds the
    test summary of `invoke report`, is written under a temporary name and published only when the run
    went to its end (status 0 or 1: every test ran), so an interrupted or empty run never replaces the
    last whole one. Ctrl-C or SIGTERM stops pytest and everything it started, then ends in one line,
    status 130."""
    results = _paths.BUILD / "test-results"
    with one_line("test"):
        results.mkdir(parents=True, exist_ok=True)
        files.clean_stale(results)
        tmp = files.temporary(results / "junit.xml")
    cmd = [*cmd[:3], f"--junitxml={tmp}", *cmd[3:]]
    print(" ".join(shlex.quote(x) for x in cmd), flush=True)
    try:
        with procs.sigterm_as_interrupt():
            # A group of its own led by the lab's supervisor: stopped whole on Ctrl-C, and gone with the lab.
            proc = procs.start(cmd, env={**os.environ, **env} if env else None)
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


def run_ranks(prog: str, n: int, variant, args: list[str], nodes: int = 1) -> None:
    """`invoke run <prog> --ranks N [--nodes K]`: N processes of build/bin/<prog>, K > 1 rehearsing K nodes
    on this host (harness/calling/launch.py)."""
    if prog != "collectives":
        raise Exit(f"--ranks starts one process per rank of a program that reads its rank from the environment: "
                   f"collectives; not {prog}")
    if variant is not None:
        args = ["--variant", variant] + args
    try:
        # Counted without CUDA (CUDA_VISIBLE_DEVICES, else nvidia-smi). A rehearsal shares these out among its
        # nodes; one node is refused only a count it surely cannot hold (where none is listed, it is not counted).
        visible = _gpus.physical_gpus()
        res = launch.run_program(prog, n, args, nodes=nodes, gpus=visible if visible or nodes > 1 else None)
    except launch.RankFailure as e:
        sys.stdout.write(e.stdout)
        raise Exit(f"{prog}: {e}") from None
    except (OSError, ValueError) as e:
        raise Exit(f"{prog}: {e}") from None
    sys.stdout.write(res.stdout)
    for r in res.ranks:
        sys.stderr.write(r.stderr)


def refuse_variant_without_gpu(prog: str, variant: str) -> None:
    """--variant where no GPU can be used: a name the program's C table does not hold is said as such
    (read through the loader: without a built library, the line says how to build it); a real one
    needs a GPU. One line either way."""
    with one_line(prog):
        if variant != "all":  # every variant, where the executable takes it
            _registry.check_variant(prog, variant)
    raise Exit(f"{prog}: --variant {variant} runs a CUDA kernel, which needs a GPU; without --variant, "
               f"`invoke run {prog}` computes its result on the CPU")


def run_on_cpu(prog: str, args: list[str]) -> None:
    """`invoke run <prog>` where there is no GPU: the program's CPU twin, labelled as such."""
    with one_line(prog):
        df, how = _registry.hook(prog, "on_cpu")(args)
    print_table(df, f"{prog}: {_registry.cpu_label(how)}")
    print(f"{prog}: {_registry.cpu_label('see the table above')}. A GPU runs the CUDA kernels themselves.")
    if "check" in df and (df["check"] != "pass").any():
        raise Exit(f"{prog}: a CPU check failed", code=1)


class CompareArgument(Argument):
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


class BenchTask(ShortFlagTask):
    def get_arguments(self, ignore_unknown_help=None):
        args = super().get_arguments(ignore_unknown_help)
        for i, a in enumerate(args):
            if a.name == "compare":
                args[i] = CompareArgument(names=a.names, kind=str, default=None, help=a.help, optional=True)
        return args


def bench_compare(given: tuple, names: list[str] | None) -> None:
    """--compare: the table, the figure and the one summary line; Exit 1 when a case is SLOWER, 2 when
    the CSVs cannot be compared (missing, unreadable, none to pick, different GPUs)."""
    from analysis import compare as acompare  # deferred: matplotlib and seaborn (1 s and more) only to draw

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
    print_table(hc.shown(table), f"bench --compare on {device}: ratio to the ceiling timed in each run")
    with one_line("bench --compare"):
        print(acompare.plot(table, _paths.PLOTS, title=f"bench --compare on {device}: {base.path.name} -> "
                                                         f"{new.path.name}"))
    line = f"bench --compare: {hc.summary(table)}"
    if (table["verdict"] == hc.SLOWER).any():
        raise Exit(line, code=1)
    print(line)


def check_save_folders() -> None:
    """`bench --save` copies each CSV to bench/results/<gpu>/: each GPU's folder there (named as
    nvidia-smi names the GPUs, so that no CUDA context is made beside the timing session's) must take
    a file. Without nvidia-smi, bench/results itself."""
    from harness.base import files
    from harness.compile import toolchain

    names = [row["name"] for row in toolchain.gpu_query("name") if row.get("name")]
    for folder in dict.fromkeys(_paths.RESULTS_DIR / _paths.gpu_folder(n) for n in names) or [_paths.RESULTS_DIR]:
        try:
            files.check_writable(folder)
        except OSError as e:
            raise Exit(f"bench --save: {e}; nothing was timed") from None


def report_repeat(frames, save: bool) -> None:
    """--repeat: the long table (one row per case and run), the spread per row, and its figure."""
    from analysis import repeat as arepeat  # deferred: matplotlib and seaborn (1 s and more) only to draw

    meta = hbench.metadata()
    long = hbench.repeat_frame(frames, meta)
    path = results_csv.write_repeat(long, meta)
    summ = arepeat.summary(long, hbench.REPEAT_TOLERANCE_PCT)
    print_table(summ[["program", "variant", "size", "goal", "ratio_median", "ratio_min", "ratio_max", "spread_pct",
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


class _NameArgument(Argument):
    """The exercise's NAME, which counts as given (empty) when the action beside it is `list`."""

    @property
    def value(self):
        v = self._value if self._value is not None else self.default
        return "" if v is None and self.action_arg.value == "list" else v

    @value.setter
    def value(self, arg):
        self.set_value(arg, cast=True)


def _exercise_arguments(args: list) -> list:
    """`invoke exercise list` takes no NAME while `invoke exercise start NAME` needs one: invoke
    requires every positional argument, so NAME counts as given when the action is `list`. (The parser
    deep-copies its contexts: the action's Argument is kept as an attribute, copied along with it.)"""
    action = next(a for a in args if a.name == "action")
    for a in args:
        if a.name == "name":
            a.__class__ = _NameArgument
            a.action_arg = action
    return args


class ExerciseTask(ShortFlagTask):
    def get_arguments(self, *args, **kwargs):
        return _exercise_arguments(super().get_arguments(*args, **kwargs))



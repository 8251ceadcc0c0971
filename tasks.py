"""cudalab's tasks: the user's whole interface. `invoke --list` is the map of the project;
`invoke --help <task>` shows each task's options.

    invoke build test          build every program, then run the tests
    invoke run hello -- all    run one program's executable
    invoke doctor              what is installed, what is missing, and how to fix it
"""

from __future__ import annotations

import importlib
import inspect
import shlex
import sys
from pathlib import Path

from invoke import Exit, task

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))


_VARIADIC_TASKS = {"sanitize"}


def _program_names() -> set[str]:
    from harness import build as hb

    return set(hb.programs())


def _accept_long_single_letter_flags() -> None:
    """invoke spells a one-letter parameter only as a short flag (-n). The documented commands say
    `--n 500`, so map `--n` (and `--n=500`) to `-n` before invoke parses the task arguments.
    Everything after a standalone `--` belongs to the program and is left alone."""
    import invoke.parser

    if getattr(invoke.parser.Parser.parse_argv, "_cudalab", False):
        return
    original = invoke.parser.Parser.parse_argv

    def parse_argv(self, argv):
        out, passthrough, programs_at = [], False, None  # programs_at: where a --programs value goes
        for a in argv:
            if passthrough or a == "--":
                passthrough = True
                out.append(a)
                continue
            if programs_at is not None and not a.startswith("-") and a in _program_names():
                # `invoke sanitize square matmul`: invoke has no optional variadic positionals, so
                # bare program names right after such a task become its --programs list.
                if programs_at == -1:
                    out += ["--programs", a]
                    programs_at = len(out) - 1
                else:
                    out[programs_at] += "," + a
                continue
            if len(a) >= 3 and a.startswith("--") and (len(a) == 3 or a[3] == "=") and a[2].isalpha():
                out += [a[1:3]] + ([a[4:]] if len(a) > 3 else [])
            else:
                out.append(a)
            programs_at = -1 if a in _VARIADIC_TASKS else None
        return original(self, out)

    parse_argv._cudalab = True
    invoke.parser.Parser.parse_argv = parse_argv


_accept_long_single_letter_flags()


def _console():
    from rich.console import Console

    return Console(highlight=False)


def _program_module(prog: str):
    from harness import build as hb

    if prog not in hb.programs():
        raise Exit(f"unknown program {prog!r}; programs: {', '.join(hb.programs())}")
    try:
        return importlib.import_module(f"harness.programs.{prog}")
    except ModuleNotFoundError:
        return None


def _call_with_accepted(fn, **opts):
    """Call fn with the options its signature names (tasks share one set of flags)."""
    sig = inspect.signature(fn)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return fn(**{k: v for k, v in opts.items() if v is not None})
    return fn(**{k: v for k, v in opts.items() if k in sig.parameters and v is not None})


def _table(df, title: str | None = None):
    import pandas as pd
    from rich.table import Table

    t = Table(title=title)
    for c in df.columns:
        t.add_column(str(c), justify="right" if pd.api.types.is_numeric_dtype(df[c]) else "left")
    for _, r in df.iterrows():
        t.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.tolist()])
    return t


@task(help={"jobs": "parallel compile jobs (default: all cores)",
            "arch": "compute capability to build for, e.g. 90 (default: the visible GPU's, else 90)",
            "programs": "comma-separated programs to build (default: all)"})
def build(c, jobs=0, arch="", programs=""):
    """Compile every cuda/<prog>/ with nvcc (incremental; a no-change build does nothing)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from harness import build as hb
    from harness.errors import BuildError

    targets = []
    for p in [s for s in programs.split(",") if s]:
        if p not in hb.programs():
            raise Exit(f"unknown program {p!r}; programs: {', '.join(hb.programs())}")
        targets += hb.targets(p)
    con = _console()
    try:
        total = hb.count_steps(targets or None, arch=arch or None)
    except BuildError as e:
        raise Exit(str(e)) from None
    if total == 0:
        con.print("build: everything is up to date")
        return
    with Progress(TextColumn("[bold]build"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  console=con, transient=False) as prog:
        t = prog.add_task("", total=total)

        def step(kind, target):
            prog.update(t, advance=1, description=f"{kind} {target}")

        try:
            res = hb.build(targets or None, jobs=jobs or None, arch=arch or None, on_step=step)
        except BuildError as e:
            prog.stop()
            raise Exit(f"build failed:\n{e}") from None
        prog.update(t, completed=total, description="done")
    con.print(f"build: {len(res.steps)} step(s) done; outputs in build/bin and build/lib")


@task(help={"marker": "pytest -m expression, e.g. gpu or 'not gpu'",
            "keyword": "pytest -k expression",
            "args": "extra pytest arguments, quoted"})
def test(c, marker="", keyword="", args=""):
    """Run the tests with pytest (gpu-marked tests skip, with the reason, without a GPU)."""
    # The junit file feeds the test summary of `invoke report`.
    cmd = [sys.executable, "-m", "pytest", f"--junitxml={ROOT / 'build' / 'test-results' / 'junit.xml'}"]
    if marker:
        cmd += ["-m", marker]
    if keyword:
        cmd += ["-k", keyword]
    cmd += shlex.split(args)
    r = c.run(" ".join(shlex.quote(x) for x in cmd), echo=True, warn=True, pty=False)
    if r.exited == 5:
        raise Exit("pytest collected no tests: check the -m/-k filters", code=5)
    if r.exited != 0:
        raise Exit(f"tests failed (pytest status {r.exited})", code=r.exited)


@task(help={"variant": "kernel variant, where the program has several",
            "image": "input image (grayscale)", "out": "output path (grayscale)"})
def run(c, prog, variant=None, image=None, out=None):
    """Run one program: `invoke run hello -- all`, `invoke run grayscale --image in.png --out g.png`."""
    from harness import runner
    from harness.errors import CudalabError

    args = shlex.split(c.remainder or "")  # what followed a standalone `--`
    mod = _program_module(prog)
    try:
        if mod is not None and hasattr(mod, "cli"):
            status = mod.cli(args, variant=variant, image=image, out=out)
            if status:
                raise Exit(code=int(status))
            return
        if variant is not None:
            args = ["--variant", variant] + args
        res = runner.run(prog, *args, check=False, timeout=600)
    except (CudalabError, FileNotFoundError, ValueError, TypeError) as e:
        raise Exit(f"{prog}: {e}") from None
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    if res.returncode != 0:
        raise Exit(f"{prog} exited with status {res.returncode}", code=res.returncode)


@task
def doctor(c):
    """One line per item -- nvcc, gcc, driver, GPU, profilers, Python packages -- OK or missing, with a fix."""
    from harness import doctor as hd

    con = _console()
    rows = hd.check_all()
    for r in rows:
        mark = "[green]OK     [/]" if r.ok else ("[yellow]WARN   [/]" if r.optional else "[red]MISSING[/]")
        fix = "" if r.ok else f"  -> {r.fix}"
        con.print(f"{mark} {r.item:<20} {r.detail}{fix}")
    if any(not r.ok and not r.optional for r in rows):
        raise Exit("doctor: something required is missing (see the fixes above)", code=1)


@task
def clean(c):
    """Remove build outputs (build/)."""
    import shutil

    shutil.rmtree(ROOT / "build", ignore_errors=True)
    print("removed build/")


@task(help={"n": "number of elements"})
def compare(c, prog, n=100000):
    """Time a program's CPU twin against its CUDA executable and its kernel (e.g. `compare square`)."""
    from harness.errors import CudalabError

    mod = _program_module(prog)
    if mod is None or not hasattr(mod, "compare"):
        raise Exit(f"{prog} has no CPU-vs-GPU comparison")
    try:
        df, explanation = mod.compare(n=n)
    except (CudalabError, FileNotFoundError, ValueError) as e:
        raise Exit(f"compare {prog}: {e}") from None
    con = _console()
    con.print(_table(df, f"{prog}: CPU vs GPU, n={n}"))
    con.print(explanation)


@task(help={"n": "elements (gridstride)", "blocks": "blocks (gridstride)", "threads": "threads per block",
            "simulate": "draw from the Python simulator instead of the GPU", "width": "image width",
            "height": "image height", "iters": "max iterations (mandelbrot)",
            "region": "'x0 x1 y0 y1' (mandelbrot)", "variant": "kernel variant",
            "outdir": "where the PNGs go (default build/plots)"})
def viz(c, what, n=None, blocks=None, threads=None, simulate=False, width=None, height=None, iters=None,
        region=None, variant=None, outdir="build/plots"):
    """Draw a program's pictures: `viz gridstride --n 500 --blocks 8 --threads 32`, `viz mandelbrot`."""
    from harness.errors import CudalabError

    try:
        mod = importlib.import_module(f"harness.programs.{what}")
        draw = importlib.import_module(f"analysis.{what}")
    except ModuleNotFoundError:
        raise Exit(f"nothing to draw for {what!r}") from None
    opts = dict(n=n and int(n), blocks=blocks and int(blocks), threads=threads and int(threads),
                simulate=simulate or None, width=width and int(width), height=height and int(height),
                iters=iters and int(iters), region=region, variant=variant)
    try:
        data = _call_with_accepted(mod.viz_data, **opts)
        paths = draw.plot(data, Path(outdir))
    except (CudalabError, FileNotFoundError, ValueError) as e:
        raise Exit(f"viz {what}: {e}") from None
    for p in paths:
        print(p)


@task(help={"programs": "comma-separated programs (default: all with bench cases)",
            "quick": "small sizes, a fast look (under a minute)",
            "save": "copy the CSV to bench/results/<gpu>/ (the committed reference runs)"})
def bench(c, programs="", quick=False, save=False):
    """Time every program's bench cases against ceilings measured in the same run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from harness import bench as hbench
    from harness.errors import CudalabError

    names = [p for p in programs.split(",") if p] or None
    con = _console()
    with Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  console=con) as prog:
        t = prog.add_task("", total=None)

        def on_total(n):
            prog.update(t, total=n)

        def on_progress(desc):
            prog.update(t, advance=0 if prog.tasks[0].description == "" else 1, description=desc)

        try:
            df, ceil = hbench.run(names, quick=quick, on_progress=on_progress, on_total=on_total)
        except CudalabError as e:
            raise Exit(f"bench: {e}") from None
        prog.update(t, completed=prog.tasks[0].total or 0)
    meta = hbench.metadata()
    path = hbench.write_csv(df, meta, ceil)
    cols = ["program", "variant", "size", "median_ms", "iqr_ms", "value", "unit", "ceiling", "ratio", "target"]
    con.print(_table(df[cols], f"bench on {meta['device']}"))
    for cl in ceil.values():
        con.print(f"ceiling {cl.name}: {cl.value:.4g} {cl.unit} ({cl.detail})")
    con.print(f"wrote {path}")
    if save:
        con.print(f"saved {hbench.save(path, meta['device'])}")


# --- orchestration: profile, sanitize, plot, report, demo (issue 6) --------------------------------

def _kernel_tables(df, title: str, width: int):
    """The kernel table the way nsys's cuda_gpu_kern_sum lists it (times in ns), and for ncu a
    second table of its metrics per kernel, so that neither is squeezed on a narrow terminal."""
    from rich.table import Table

    from analysis.profile import short_name

    multi = "variant" in df and df["variant"].nunique() > 1
    times = ["total_ns", "instances", "avg_ns"] + (["min_ns", "max_ns"] if width >= 110 else [])
    heads = {"total_ns": "Total (ns)", "instances": "Inst", "avg_ns": "Avg (ns)", "min_ns": "Min (ns)",
             "max_ns": "Max (ns)", "dram_bytes": "DRAM (B)", "achieved_occupancy_pct": "Occupancy (%)",
             "sm_throughput_pct": "SM (%)", "memory_throughput_pct": "Memory (%)"}
    metrics = [c for c in df.columns if c not in {"variant", "kernel", "time_pct", "total_ns", "instances", "avg_ns",
                                                    "med_ns", "min_ns", "max_ns", "tool", "program"}]
    t = Table(title=title)
    if multi:
        t.add_column("Variant")
    t.add_column("Time (%)", justify="right")
    for c in times:
        t.add_column(heads[c], justify="right")
    t.add_column("Name", min_width=20)
    m = Table(title="ncu metrics (mean over each kernel's launches)") if metrics else None
    if m is not None:
        if multi:
            m.add_column("Variant")
        for c in metrics:
            m.add_column(heads.get(c, c), justify="right")
        m.add_column("Name", min_width=20)
    for _, r in df.iterrows():
        lead = [str(r["variant"])] if multi else []
        name = short_name(r["kernel"], 60)
        t.add_row(*lead, f"{r['time_pct']:.1f}", *[f"{r[c]:,.0f}" if r[c] == r[c] else "" for c in times], name)
        if m is not None:
            m.add_row(*lead, *[(f"{r[c]:,.0f}" if abs(r[c]) >= 1000 else f"{r[c]:.3g}") if isinstance(r[c], float)
                               else str(r[c]) for c in metrics], name)
    return [t] + ([m] if m is not None else [])


@task(help={"tool": "auto (first tool that gives a report), nsys, ncu, or nvprof (explains why not)",
            "variant": "kernel variant, or `all` for one run per variant (default: the program's choice)",
            "metrics": "ncu: comma-separated metrics instead of the default short list",
            "clock_control": "ncu: lock the clocks to base (default: measure the card as it is)"})
def profile(c, prog, tool="auto", variant=None, metrics=None, clock_control=False):
    """Profile a program's kernels: `invoke profile square --tool nsys`, `invoke profile matmul --tool ncu -- 256 256 256`.

    Prints a table of kernels with their share of GPU time; CSVs go to build/profiles/<prog>/,
    with a bar chart of the shares (kernel_shares.png)."""
    from analysis import profile as aprof
    from harness import profile as hp
    from harness.errors import CudalabError

    args = shlex.split(c.remainder or "")
    con = _console()
    if not con.is_terminal:  # a log or a pipe: room for the whole table rather than rich's 80 columns
        from rich.console import Console

        con = Console(highlight=False, width=140)
    try:
        res = hp.profile(prog, tool=tool, variant=variant, args=args or None, metrics=metrics,
                         clock_control=clock_control)
    except hp.NvprofUnavailable as e:
        raise Exit(str(e), code=1) from None
    except (CudalabError, FileNotFoundError, ValueError) as e:
        raise Exit(f"profile {prog}: {e}") from None
    for f in res.failures:
        con.print(f"[yellow]{f.tool}[/]: {f.reason}")
    if res.note:
        con.print(res.note)
    for table in _kernel_tables(res.kernels, f"{prog}: GPU kernels ({res.tool})", con.width):
        con.print(table)
    outdir = hp.PROFILES / prog
    paths = aprof.plot(res.kernels, outdir, title=f"{prog}: kernel time shares ({res.tool})")
    con.print(f"CSVs and reports in {outdir.relative_to(ROOT)}; chart {paths[0].relative_to(ROOT)}")


@task(help={"programs": "comma-separated programs (default: all)",
            "tool": "memcheck, racecheck, initcheck, synccheck, or all (default)",
            "jobs": "sanitizer runs in parallel (default 4)"})
def sanitize(c, programs="", tool="all", jobs=0):
    """compute-sanitizer over every program at small sizes, every variant: `invoke sanitize -p square`.

    Arguments after `--` replace each program's own runs (`-- --oob` plants square's bug).
    Exits non-zero when any run is not clean."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from harness import sanitize as hs
    from harness.errors import CudalabError

    names = [p for p in programs.replace(" ", ",").split(",") if p] or None
    args = shlex.split(c.remainder or "") or None
    con = _console()
    try:
        tools = hs.tools_for(tool)
        hs.find_sanitizer()
        with Progress(TextColumn("[bold]sanitize"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.description}"), console=con) as bar:
            t = bar.add_task("", total=None)
            outcomes = hs.sanitize(names, tools, args=args, jobs=jobs or None,
                                   on_total=lambda n: bar.update(t, total=n),
                                   on_done=lambda o: bar.update(t, advance=1,
                                                                description=f"{o.program} {o.label} {o.tool}"))
    except (CudalabError, FileNotFoundError, ValueError) as e:
        raise Exit(f"sanitize: {e}") from None
    if not args:  # a planted-bug run is not the project's state: keep it out of the report
        hs.write_summary(outcomes)
    table = hs.summary(outcomes).reset_index()
    con.print(_table(table, "compute-sanitizer: program x tool"))
    bad = [o for o in outcomes if not o.clean]
    for o in bad:
        con.print(f"[red]{o.program} {o.label} {o.tool}[/]: {o.status} {o.detail} (log {o.log})")
    if bad:
        raise Exit(f"sanitize: {len(bad)} run(s) not clean", code=1)
    con.print(f"sanitize: all {len(outcomes)} run(s) clean")


@task(help={"csv": "bench: the CSV to draw (default: the newest build/bench/*.csv)",
            "prog": "profile: the program whose build/profiles/<prog>/kernels.csv to draw",
            "outdir": "where the PNGs go (default build/plots)"})
def plot(c, what, csv=None, prog=None, outdir="build/plots"):
    """Draw from saved results: `invoke plot bench` (ratio bars + roofline), `invoke plot profile --prog square`."""
    if what == "bench":
        from analysis import bench as abench

        path = Path(csv) if csv else abench.latest_csv()
        if path is None or not path.exists():
            raise Exit("plot bench: no bench CSV (run `invoke bench` first, or give --csv)")
        for p in abench.plot(path, Path(outdir)):
            print(p)
        from analysis import ladder as aladder

        for p in aladder.plot(path, Path(outdir)):  # the ladder figures (matmul, gemm_tc), when the CSV has rungs
            print(p)
    elif what == "profile":
        from analysis import profile as aprof
        from harness import profile as hp

        if not prog:
            raise Exit("plot profile: name the program with --prog")
        try:
            df = hp.load_kernels(prog)
        except FileNotFoundError as e:
            raise Exit(str(e)) from None
        tool = df["tool"].iloc[0] if "tool" in df and len(df) else ""
        for p in aprof.plot(df, hp.PROFILES / prog, title=f"{prog}: kernel time shares ({tool})"):
            print(p)
    else:
        raise Exit(f"plot: nothing called {what!r}; choose bench or profile")


@task(help={"size": "the square size m = n = k to time each configuration at (default 4096)",
            "reps": "timed repetitions per configuration (harness.timing, at least 10)",
            "save": "cache the winner under bench/results/<gpu>/ (default on; --no-save only prints)"})
def tune(c, prog, size=4096, reps=10, save=True):
    """A program's parameter search: `invoke tune matmul` times every compiled ladder configuration and
    caches the fastest for this GPU (bench/results/<gpu>/matmul-tune.json), which 09_tuned then runs."""
    from harness import tune as htune
    from harness.errors import CudalabError

    con = _console()
    try:
        df, path = htune.run(prog, size=int(size), reps=int(reps), save=save,
                             on_progress=lambda name: con.print(f"tune {prog}: {name}"))
    except (CudalabError, ValueError, RuntimeError) as e:
        raise Exit(f"tune {prog}: {e}") from None
    con.print(_table(df, f"tune {prog} at {size}^3"))
    winner = df.loc[df["winner"], "config"].iloc[0] if "winner" in df and df["winner"].any() else None
    con.print(f"winner: {winner}")
    if path is not None:
        con.print(f"saved {path}")


@task(help={"outdir": "where index.md and index.html go (default build/report)"})
def report(c, outdir="build/report"):
    """Write build/report/index.md and a self-contained index.html from whatever build/ holds."""
    from analysis import report as arep
    from harness import demo as hdemo

    facts = hdemo.collect_facts()
    md, html = arep.write(Path(outdir), facts=facts)
    print(md)
    print(html)


@task(help={"bench": "run the quick bench (default on; --no-bench skips it)",
            "profile": "profile square and transformer_block (default on)"})
def demo(c, bench=True, profile=True):
    """The first thing to run: build, run every program once, draw every picture, quick bench, report.

    Without a GPU it still builds, draws the simulated grid-stride figures and the recorded traces,
    writes the report, and says which steps need a GPU (exit 0)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from harness import demo as hdemo

    con = _console()
    with Progress(TextColumn("[bold]demo"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  console=con) as bar:
        t = bar.add_task("", total=None)
        result = hdemo.run(bench=bench, profile=profile, on_total=lambda n: bar.update(t, total=n),
                           on_step=lambda s: bar.update(t, advance=1, description=s))
    con.print(_table(result.table(), "demo: what happened"))
    for line in result.closing_lines():
        con.print(line)
    if result.failed:
        raise Exit(f"demo: {len(result.failed)} step(s) failed", code=1)

"""cudalab's tasks: the user's whole interface. `invoke --list` is the map of the project;
`invoke --help <task>` shows each task's arguments and their valid values.

    invoke build test          build every program, then run the tests
    invoke run hello -- all    run one program's executable
    invoke doctor              what is installed, what is missing, and how to fix it

Each task reads its arguments, calls the harness and prints; the work lives in harness/ and the
pictures in analysis/; what invoke needs around the tasks (the short flags, the one-line errors, the
progress display) is harness/user/cli.py. Every failure a user can cause ends in one line on stderr,
not a traceback.
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys
import textwrap
from pathlib import Path

from invoke import Exit, Task

sys.path.insert(0, str(Path(__file__).resolve().parent))  # before anything of the lab is importable

# The project root must be importable before any of these.
from analysis import report as arep  # noqa: E402
from harness import programs as _registry  # noqa: E402
from harness.base import console  # noqa: E402
from harness.base import paths as _paths  # noqa: E402
from harness.base.errors import BuildError, CudalabError  # noqa: E402
from harness.base.paths import ROOT  # noqa: E402
from harness.calling import cudart, runner  # noqa: E402
from harness.compile import build as _hb  # noqa: E402
from harness.measuring import bench as hbench  # noqa: E402
from harness.measuring import gpus as hg  # noqa: E402
from harness.measuring import results_csv  # noqa: E402
from harness.profiling import profile as hp  # noqa: E402
from harness.profiling import sanitize as hs  # noqa: E402
from harness.programs import scaffold  # noqa: E402
from harness.user import cli  # noqa: E402
from harness.user import demo as hdemo  # noqa: E402
from harness.user import doctor as hd  # noqa: E402
from harness.user import exercises as hx  # noqa: E402
from harness.user.cli import task  # noqa: E402
from harness.user.exercises import check as hcheck  # noqa: E402

_PROGRAMS = ", ".join(_hb.programs())


@task(help={"jobs": "parallel compile jobs, a positive integer (default: all cores)",
            "arch": "compute capability to build for: 75, 80, 90, 120, ... (default: the visible GPU's, else 90); "
                    "a comma list (75,80,90) builds one binary for each of them, for a lab shared across GPUs",
            "programs": f"comma-separated programs to build (default: all): {_PROGRAMS}"})
def build(c, jobs="", arch="", programs=""):
    """Compile every cuda/<prog>/ with nvcc, in parallel and incrementally.

    A broken program does not stop the others: each failure is reported with its file:line and source
    line, and the ones that built are named."""
    n_jobs = cli.int_option(jobs, "--jobs", lo=1)
    names = cli.program_names(programs)
    planned: list = []
    with cli.one_line("build"):
        hd.require_driver()  # a driver older than the toolkit: refuse first
        if arch:
            arch = _hb.parse_arch(arch)  # before anything runs: a mistyped --arch is one line
    with cli.progress("build") as bar:
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
    cli.check_pytest_expression(marker, "--marker")
    cli.check_pytest_expression(keyword, "--keyword")
    cmd = [sys.executable, "-m", "pytest"]
    env = None
    with cli.one_line("test"):
        chosen = hg.select(gpus) if gpus else []
        extra = shlex.split(args)
        auto = str(jobs).strip() == "auto"
        slow_only = "slow" in marker and "not slow" not in marker
        # The slow tests run one at a time anyway (the lock in conftest.py), and a worker left
        # waiting on it for long would run into pytest-timeout: one process for them under `auto`.
        n = hg.test_workers("1" if slow_only and auto else jobs, len(chosen))
    if n == 1 and auto and not slow_only and not hg.have_xdist():
        print("test: pytest-xdist is not installed, so the tests run in one process "
              "(pip install -e '.[dev]' for one worker per core)", file=sys.stderr)
    if any(a in ("-n", "--numprocesses") or a.startswith(("-n", "--numprocesses=")) for a in extra):
        n = 1  # the user's own -n in --args wins
    if n > 1:
        # The profiler, slow and serial tests take a lock (conftest.py), so never overlap each other.
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
    code = cli.run_pytest(cmd, env)
    if code == 5:
        raise Exit("pytest collected no tests: check the -m/-k filters", code=5)
    if code == 2:
        raise Exit("test: pytest stopped before the end (status 2: interrupted, or errors while collecting: "
                   "see above)", code=2)
    if code != 0:
        raise Exit(f"tests failed (pytest status {code})", code=code)


@task(help={"prog": f"the program: {_PROGRAMS}",
            "variant": "kernel variant, where the program has several (see `invoke run <prog> -- --help`)",
            "image": "grayscale: input image, any format Pillow reads (default: a generated test picture)",
            "out": "grayscale: where the grey PNG goes",
            "ranks": "collectives: start this many processes, one rank each (RANK/WORLD_SIZE/LOCAL_RANK, NCCL); "
                     "all are stopped when one fails",
            "nodes": "collectives, with --ranks: rehearse this many nodes on this host (the ranks split evenly, "
                     "each node its own GPUs, NCCL over sockets on loopback only)"})
@cli.help_if_asked
def run(c, prog, variant=None, image=None, out=None, ranks="", nodes=""):
    """Run one program's executable: `invoke run hello -- all`.

    Arguments after `--` go to the program (`-- --help` lists them);
    `invoke run grayscale --image in.png --out g.png` converts a picture of yours."""
    cli.program_names(prog)
    args = shlex.split(c.remainder or "")  # what followed a standalone `--`
    if nodes and not ranks:
        raise Exit(f"--nodes {nodes} rehearses nodes of the ranks --ranks starts: give --ranks too "
                   f"(e.g. invoke run collectives --ranks 4 --nodes 2)")
    if ranks:
        cli.run_ranks(prog, cli.int_option(ranks, "--ranks", lo=1), variant, args,
                      nodes=cli.int_option(nodes, "--nodes", lo=1) or 1)
        return
    own_cli = _registry.hook(prog, "cli")
    # --image and --out exist only where the program's `cli` hook names them (grayscale's).
    cli.refuse_foreign_options("run", prog, {"image": image, "out": out},
                               _registry.takes, _hb.programs(), "program")
    # A program with a CPU path (an on_cpu hook, or a cli that takes `cpu`) computes there when no GPU
    # can be used, but never in place of a kernel the user named with --variant.
    on_cpu = _registry.has(prog, "on_cpu")
    if ((on_cpu or _registry.takes(prog, "cpu")) and not {"-h", "--help"} & set(args)  # --help needs no GPU
            and not _registry.gpu_here()[0]):
        if variant is not None:
            cli.refuse_variant_without_gpu(prog, variant)
        if on_cpu:
            return cli.run_on_cpu(prog, args)
    with cli.one_line(prog):
        if own_cli is not None:
            status = own_cli(args, variant=variant, image=image, out=out)
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


@task
def doctor(c):
    """One line per item -- nvcc, gcc, driver, GPU, profilers, Python packages -- OK or missing, with a fix."""
    rows = hd.check_all()
    for line in hd.lines(rows):
        print(line)
    if any(not r.ok and not r.optional for r in rows):
        raise Exit("doctor: something required is missing (see the fixes above)", code=1)


@task
def clean(c):
    """Remove build outputs (build/)."""
    with cli.one_line("clean"):
        _hb.clean()
    print("removed build/")


@task(help={"name": "the new program's name: lower-case letters, digits and _ (a C prefix and a Python module)"})
@cli.help_if_asked
def new(c, name):
    """Write a working program folder, cuda/NAME/: a grid-stride kernel, its tests, bench case and page.

    With no edit anywhere else it builds, tests, benches, profiles, sanitizes, and appears in the demo,
    the report and the README's learning path: `invoke new saxpy && invoke build --programs saxpy`."""
    with cli.one_line("new"):
        written = scaffold.write(name)
        readme = scaffold.write_readme(_registry.learning_path())
    for f in written:
        print(f.relative_to(ROOT))
    print(f"{readme.relative_to(ROOT)} (the learning path, from the records)")
    print(f"next: invoke build --programs {name} && invoke test --args cuda/{name}")


@task(help={"prog": "the program with a CPU twin: square",
            "n": "number of elements, a positive integer (default 100000)"})
@cli.help_if_asked
def compare(c, prog, n="100000"):
    """Time a program's CPU twin against its CUDA executable and kernel: `invoke compare square -n 1000000`."""
    count = cli.int_option(n, "-n", lo=1, hi=2**31 - 1)
    cli.program_names(prog)
    fn = _registry.hook(prog, "compare")
    if fn is None:
        raise Exit(f"{prog} has no CPU-vs-GPU comparison; square has")
    with cli.one_line(f"compare {prog}"):
        df, explanation = fn(n=count)
    cli.print_table(df, f"{prog}: CPU vs GPU, n={count}")
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
@cli.help_if_asked
def viz(c, what, n="", blocks="", threads="", simulate=False, width="", height="", iters="", region=None,
        variant=None, outdir=""):
    """Draw a program's pictures: `invoke viz gridstride --simulate` (no GPU needed), `invoke viz mandelbrot`.

    Each option belongs to one picture (the help says which); `invoke viz` alone lists the pictures."""

    pictures = _registry.pictures()
    if what not in pictures:
        raise Exit(f"viz: nothing to draw for {what!r}; choose from {', '.join(pictures)}")
    given = dict(n=n, blocks=blocks, threads=threads, simulate=simulate, width=width, height=height, iters=iters,
                 region=region, variant=variant)
    cli.refuse_foreign_options("viz", what, given, _registry.picture_takes, pictures, "picture")
    opts = dict(n=cli.int_option(n, "-n", lo=1), blocks=cli.int_option(blocks, "--blocks", lo=1), threads=cli.int_option(threads, "--threads", lo=1),
                simulate=simulate or None, width=cli.int_option(width, "--width", lo=1), height=cli.int_option(height, "--height", lo=1),
                iters=cli.int_option(iters, "--iters", lo=1), region=region, variant=variant)
    with cli.one_line(f"viz {what}"):  # before anything is computed; run grayscale --out keeps the same rule
        outdir = _paths.output_folder(outdir or _paths.PLOTS, "-o/--outdir")
    draw = importlib.import_module(f"analysis.{what}")
    with cli.one_line(f"viz {what}"), cli.progress(f"viz {what}") as bar:
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


@task(klass=cli.BenchTask,
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
    names = cli.program_names(programs) or None
    if compare is not None:
        given = {"--quick": quick, "--save": save, "--rounds": rounds, "--repeat": repeat, "--gpus": gpus}
        extra = [flag for flag, v in given.items() if v]
        if extra:
            raise Exit(f"bench --compare reads two CSVs and times nothing: leave out {', '.join(extra)}", code=2)
        cli.bench_compare(tuple(compare) if not isinstance(compare, str) else (compare,), names)
        return
    n_rounds = cli.int_option(rounds, "--rounds", lo=1) if rounds else None
    n_repeat = cli.int_option(repeat, "--repeat", lo=1) if repeat else 1
    if gpus and n_repeat > 1:
        raise Exit("bench: --repeat runs on one GPU; leave out --gpus")
    # The programs hand their cases and ceilings down; the bench times what it is given.
    with cli.one_line("bench"):
        cases = _registry.bench_cases(names, quick)
        if not cases:
            raise Exit("bench: no bench cases to run" + (f" for {', '.join(names)}" if names else ""))
        hbench.check_built(_registry.bench_libraries(cases))
        ceilings = _registry.ceilings()
        if save:  # checked before anything is timed: a refusal after the whole run loses the run
            cli.check_save_folders()
    done = [0, 0]  # measurements done, planned
    frames, paths = [], []
    try:
        if gpus:
            with cli.one_line("bench"):
                chosen = hg.select(gpus)
                paths = hbench.run_on_gpus("harness.user.bench_worker", names, quick=quick, gpus=chosen)
            frames = None
        else:
            with cli.one_line("bench"), cli.progress("bench") as bar:
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
        cli.print_table(frame[shown], f"bench on {meta['device']}" + (f" (GPU {meta['gpu']})" if meta.get("gpu") else "")
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
        cli.report_repeat(frames, save)


@task(help={"prog": f"the program: {_PROGRAMS}",
            "tool": "auto (the first tool that gives a report), nsys, ncu, or nvprof (explains why not)",
            "variant": "kernel variant, or `all` for one run per variant (default: the program's choice)",
            "metrics": "ncu: comma-separated metrics instead of the default short list",
            "clock_control": "ncu: lock the clocks to base (default: measure the card as it is)"})
@cli.help_if_asked
def profile(c, prog, tool="auto", variant=None, metrics=None, clock_control=False):
    """Profile a program's kernels with nsys or ncu: `invoke profile square --tool nsys`.

    `invoke profile matmul --tool ncu -- 256 256 256` passes the words after `--` to the program. Prints a table of kernels with their share of GPU time; CSVs go to build/profiles/<prog>/,
    with a bar chart of the shares (kernel_shares.png)."""
    from analysis import profile as aprof  # deferred: matplotlib (1 s) only to draw

    cli.program_names(prog)
    args = shlex.split(c.remainder or "")
    try:
        with cli.one_line(f"profile {prog}"):
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
        cli.print_table(table, title)
    outdir = hp.PROFILES / prog
    with cli.one_line(f"profile {prog}"):
        paths = aprof.plot(res.kernels, outdir, title=f"{prog}: kernel time shares ({res.tool})")
    print(f"CSVs and reports in {outdir.relative_to(ROOT)}; chart {paths[0].relative_to(ROOT)}")


@task(help={"programs": f"comma-separated programs (default: all): {_PROGRAMS}",
            "tool": "memcheck, racecheck, initcheck, synccheck, a comma list of them, or all (default)",
            "jobs": "sanitizer runs in parallel, a positive integer (default 4)"})
def sanitize(c, programs="", tool="all", jobs=""):
    """Run compute-sanitizer over every program and variant at small sizes: `invoke sanitize -p square,matmul`.

    Arguments after `--` replace each program's own runs (`-- 1000 64`: square at another size).
    Exits non-zero when any run is not clean."""
    names = cli.program_names(programs) or _registry.names()
    n_jobs = cli.int_option(jobs, "--jobs", lo=1)
    args = shlex.split(c.remainder or "") or None
    with cli.one_line("sanitize"):
        tools = hs.tools_for(tool)
        hs.find_sanitizer()
        cases = [hs.Case(p, label, argv) for p in names for label, argv in _registry.sanitize_cases(p, args=args)]
        with cli.progress("sanitize") as bar:
            t = bar.add_task("", total=None)
            outcomes = hs.sanitize(cases, tools, jobs=n_jobs,
                                   on_total=lambda k: bar.update(t, total=k),
                                   on_done=lambda o: bar.update(t, advance=1, description=f"{o.program} {o.label} {o.tool}"))
        if not args:  # a run of the user's own arguments is not the project's state: keep it out of the report
            hs.write_summary(outcomes)
    cli.print_table(hs.summary(outcomes).reset_index(), "compute-sanitizer: program x tool")
    bad = [o for o in outcomes if not o.clean]
    for o in bad:
        print(f"{o.program} {o.label} {o.tool}: {o.status} {o.detail} (log {o.log})")
    if bad:
        raise Exit(f"sanitize: {len(bad)} run(s) not clean", code=1)
    print(f"sanitize: all {len(outcomes)} run(s) clean")


@task(help={"what": "bench (ratio bars, roofline, ladders), profile (a program's kernel shares), tune (every "
                    "cached `invoke tune` search under bench/results/), timeline, latency (all-reduce sweeps), "
                    "scaling (the tensor-parallel block on one GPU against several) or "
                    "trace (an nsys trace's kernels on a time axis, by NVTX phase)",
            "csv": "bench: the CSV to draw (default: the build/bench/*.csv with the newest date inside); timeline: "
                   "the timeline CSV; latency: the sweep CSVs, comma-separated; scaling: collectives.tp_scaling's "
                   "CSV; trace: the nsys .sqlite export",
            "outer": "trace: the NVTX range whose last instance to draw (default: the first one a kernel ran in)",
            "by": "trace: one row per phase (default) or per GPU and stream (`--by stream`, to see overlap)",
            "prog": f"profile: the program whose build/profiles/<prog>/kernels.csv to draw: {_PROGRAMS}",
            "outdir": "where the PNGs go (default build/plots)"})
@cli.help_if_asked
def plot(c, what, csv=None, prog=None, outdir="build/plots", outer=None, by="phase"):
    """Draw from saved results (no GPU needed): bench, profile, tune, timeline, latency, scaling or trace.

    `invoke plot bench` (ratio bars + roofline), `invoke plot profile --prog square`, `invoke plot tune`
    (each cached parameter search), `invoke plot timeline --csv F` (one matmul launch's blocks on its
    SMs, from `matmul --timeline`), `invoke plot latency --csv W2.csv,W4.csv` (all-reduce latency against
    NCCL with auto_allreduce's crossovers, and the collectives page's table), `invoke plot scaling --csv
    S.csv` (the tensor-parallel block's speedup over one GPU, and the page's table), `invoke plot trace --csv
    build/profiles/transformer_block/nsys_X.sqlite` (one training step's kernels by phase, from
    `invoke profile ... --tool nsys`)."""
    if what == "bench":
        from analysis import bench as abench  # deferred: matplotlib (1 s) only to draw
        from analysis import ladder as aladder  # deferred: matplotlib (1 s) only to draw

        with cli.one_line("plot bench"):
            path = abench.resolve_csv(csv)
            for p in abench.plot(path, Path(outdir)):
                print(p)
            for p in aladder.plot(path, Path(outdir)):  # the ladder figures (analysis/ladder.py), when the CSV has rungs
                print(p)
    elif what == "profile":
        from analysis import profile as aprof  # deferred: matplotlib (1 s) only to draw

        if not prog:
            raise Exit("plot profile: name the program with --prog")
        cli.program_names(prog)
        with cli.one_line("plot profile"):
            df = hp.load_kernels(prog)
            tool = df["tool"].iloc[0] if "tool" in df and len(df) else ""
            for p in aprof.plot(df, hp.PROFILES / prog, title=f"{prog}: kernel time shares ({tool})"):
                print(p)
    elif what == "tune":
        from analysis import tune as atune  # deferred: matplotlib (1 s) only to draw

        with cli.one_line("plot tune"):
            paths = atune.plot_cached(_paths.RESULTS_DIR, Path(outdir))
        if not paths:
            raise Exit(f"plot tune: no tuning results under {_paths.RESULTS_DIR} (run `invoke tune <prog>` on a GPU)")
        for p in paths:
            print(p)
    elif what == "timeline":
        from analysis import timeline as atl  # deferred: matplotlib (1 s) only to draw

        if not csv:
            raise Exit("plot timeline: name the CSV with --csv (`build/bin/matmul --timeline FILE` writes it, from a "
                       "build made with `make EXTRA_NVCCFLAGS=-DCUDALAB_TIMELINE`)")
        with cli.one_line("plot timeline"):
            df = atl.read_checked(csv)
            path = atl.plot(df, Path(outdir), stem=Path(csv).stem)
            s = atl.summary(df)
        print(path)
        print(f"{s['blocks']} blocks on {s['sms']} SMs: {s['makespan_us']:.1f} µs, a perfect balance "
              f"{s['ideal_us']:.1f} µs, SMs busy {100 * s['busy_fraction']:.1f}%")
        for role, r in s["roles"].items():
            print(f"  {role:6s} {r['blocks']:5d} blocks, main loop {r['mainloop_us']:8.1f} µs, after it "
                  f"{r['after_us']:6.1f} µs, {r['first_start_us']:8.1f} .. {r['last_end_us']:8.1f} µs")
    elif what == "latency":
        from analysis import latency as alat  # deferred: matplotlib (1 s) only to draw

        if not csv:
            raise Exit("plot latency: name the sweep CSVs with --csv A.csv,B.csv (one per world size, as "
                       "collectives.latency_sweep_processes writes them)")
        with cli.one_line("plot latency"):
            frames = [alat.read_sweep(p) for p in csv.split(",") if p]
            path = alat.plot(frames, Path(outdir) / alat.figure_name(csv.split(",")[0]))
        print(path)
        print(alat.page_table(frames))
    elif what == "scaling":
        from analysis import tp_scaling as ats  # deferred: matplotlib (1 s) only to draw

        if not csv:
            raise Exit("plot scaling: name the CSV with --csv (collectives.tp_scaling's rows, saved with .to_csv)")
        with cli.one_line("plot scaling"):
            df = ats.read(csv)
            path = ats.plot(df, Path(outdir) / f"{Path(csv).stem}.png")
        print(path)
        print(ats.page_table(df))
    elif what == "trace":
        from analysis import trace as atr  # deferred: matplotlib (1 s) only to draw

        if not csv:
            raise Exit("plot trace: name the nsys SQLite export with --csv (`invoke profile <prog> --tool nsys` "
                       "leaves build/profiles/<prog>/nsys_*.sqlite)")
        with cli.one_line("plot trace"):
            w = atr.step_window(atr.read(csv), outer, by)
            path = atr.plot(w, Path(outdir) / f"trace_{Path(csv).stem}{'' if by == 'phase' else '_' + by}.png")
        print(path)
        print(atr.page_table(w))
    else:
        raise Exit(f"plot: nothing called {what!r}; choose bench, profile, tune, timeline, latency, scaling or trace")


@task(help={"prog": "the program to tune: matmul (ladder configurations for 09_tuned), gemm_tc (wgmma "
                    "schedule, stages and raster for 06_wgmma_tuned) or attention (03_flash_bf16's warps, rows "
                    "per warp, key tile and stages; 05_flash_wgmma's schedule, key tile and stages; per head size)",
            "size": "matmul and gemm_tc: m = n = k; attention: the sequence length S (default 4096)",
            "save": "cache the winner under bench/results/<gpu>/ (default on; --no-save only prints)"})
@cli.help_if_asked
def tune(c, prog, size="4096", save=True):
    """Search a program's tuning parameters on this GPU and cache the winner: `invoke tune matmul`.

    `invoke tune matmul` times every compiled ladder configuration and caches the fastest for this GPU (bench/results/<gpu>/matmul-tune.json), which 09_tuned then runs;
    `invoke tune attention` does the same for 03_flash_bf16's and 05_flash_wgmma's choices at each head size, and
    `invoke tune gemm_tc` for the wgmma configurations (schedule, stages, raster) that 06_wgmma_tuned runs."""
    edge = cli.int_option(size, "--size", lo=1)
    with cli.one_line(f"tune {prog}"):
        df, path = _registry.tuner(prog)(size=edge, save=save,
                                         on_progress=lambda name: print(f"tune {prog}: {name}", file=sys.stderr))
    cli.print_table(df, f"tune {prog} at size {edge}")
    won = df[df["winner"]] if "winner" in df else df.iloc[:0]
    # One winner (matmul), or one per head size (attention: a D column).
    names = [f"{r.config} (D={r.D})" if "D" in df else str(r.config) for r in won.itertuples()]
    print(f"winner: {', '.join(names) or 'none'}")
    if path is not None:
        print(f"saved {path}")
    from analysis import tune as atune  # deferred: matplotlib (1 s) only to draw

    with cli.one_line(f"tune {prog}"):
        gpu = _paths.gpu_folder(cudart.device_name(0))
        print(f"figure {atune.plot(df, prog, _paths.PLOTS / f'tune_{prog}_{gpu}.png')}")


@task(help={"outdir": "where index.md and index.html go (default build/report); created if missing"})
def report(c, outdir="build/report"):
    """Write build/report/index.md and a self-contained index.html from whatever build/ holds."""
    with cli.one_line("report"):
        md, html = arep.write(Path(outdir), facts=hdemo.collect_facts(), tour=_registry.tour())
    print(md)
    print(html)


@task(help={"bench": "run the quick bench (default on; --no-bench skips it)",
            "profile": "profile square and transformer_block (default on; --no-profile skips it)"})
def demo(c, bench=True, profile=True):
    """The tour, after `invoke build test`: build, run every program once, draw every picture, bench, report.

    Without a GPU it still builds, draws the simulated grid-stride figures and the recorded traces,
    writes the report, and says which steps need a GPU (exit 0)."""
    with cli.progress("demo") as bar:
        t = bar.add_task("", total=None)
        result = hdemo.run(bench=bench, profile=profile, on_total=lambda k: bar.update(t, total=k),
                           on_step=lambda s: bar.update(t, advance=1, description=s))

    cli.print_table(result.table(), "demo: what happened")
    for line in result.closing_lines():
        print(textwrap.fill(line, width=console.width(), break_long_words=False, break_on_hyphens=False))
    if result.failed:
        raise Exit(f"demo: {len(result.failed)} step(s) failed", code=1)


@task(klass=cli.ExerciseTask, positional=["action", "name"], help={"action": "list, start, check, hint or solution",
            "name": "the exercise (invoke exercise list names them)",
            "track": "python (harness.base.sim, no GPU) or cuda (default: python, or the track whose file exists)",
            "dir": "the learner's folder (default: exercises/ in the current folder)",
            "write": "solution: write the lab's solution into the learner's file (the old one is kept as .bakN)",
            "seed": "check: the cases' seed (each check prints its own; give it to run the same cases again)"})
@cli.help_if_asked
def exercise(c, action, name=None, track="", dir="", write=False, seed=""):  # noqa: A002 -- the option is --dir
    """Do the courses' exercises, graded: `invoke exercise list` names them.

    `invoke exercise start square`, `invoke exercise check square [--track cuda]`, `invoke exercise hint square`,
    `invoke exercise solution square`."""
    actions = ("list", "start", "check", "hint", "solution")
    if action not in actions:
        raise Exit(f"exercise: no action {action!r}; choose {', '.join(actions)}")
    if action != "list" and not name:
        raise Exit(f"exercise {action}: name the exercise: invoke exercise {action} NAME (invoke exercise list names them)")
    with cli.one_line(f"exercise {action}"):
        if action == "list":
            import pandas as pd  # deferred: pandas only for the listing (tasks.py imports no heavy package)

            cli.print_table(pd.DataFrame(hx.listing(hx.folder(dir))), "exercises, in the order a learner meets them")
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

            try:
                v = hcheck.check(name, track or None, dir or None, seed=seed if seed != "" else None)
            except KeyboardInterrupt:
                raise Exit(f"exercise check: interrupted; the check's processes were stopped, and {name}'s status "
                           f"was left as it was", code=130) from None
            for line in v.report():
                print(line)
            if not v.passed:
                raise Exit(code=1)


# Every task above, for the parse-error messages (invoke parses their arguments after this import).
cli.explain_parse_errors(k for k, v in list(globals().items()) if isinstance(v, Task))

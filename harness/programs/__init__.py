"""The program registry: the one place that resolves a program's module and what it offers.

A *program* is a folder `cuda/<prog>/` holding `<prog>.cu` (what the Makefile builds). Its Python
side is the module `harness.programs.<prog>`, optional: a program without one still builds, runs
and is sanitized with no arguments. Tasks, the bench, the profilers, the sanitizer and the demo ask
this module (`module`, `variants`, `ceilings`, `profile_argv`, `sanitize_cases`, ...) and never
import a program module or probe it with hasattr themselves.

The protocol of a program module (every name is optional; a missing one means "not offered")
------------------------------------------------------------------------------------------------

Variants
    `VARIANTS: tuple[str, ...]`
        The kernel variants, in the order a learner meets them ("01_naive", "02_tiled", ...). They are
        the library's ONE table (the C side exports `int <prog>_variant_count(void)` and
        `const char *<prog>_variant_name(int i)`, both plain values) and are never typed in Python:
        the module offers `VARIANTS` through a module `__getattr__` that returns
        `harness.calling.library.read_table(prog)`, read when first asked for (CI builds every library
        before it tests). `variants()` below reads the same table.
    `PROFILE_VARIANTS: tuple[str, ...]`
        The variants `invoke profile <prog>` runs, one run each, when the user names none
        (default: one run with the program's own default).

Benchmarks (`invoke bench`, harness/measuring/bench.py)
    `bench_cases(quick: bool) -> list[harness.measuring.bench.BenchCase]`
        Sizes, bytes and FLOPs of each case. A case names its setup as a module-level function of
        this module, `setup="harness.programs.<prog>:<function>"` with JSON `kwargs` (the timing
        child process imports only that module and calls it). The function allocates, fills and MARSHALS
        everything once (cffi pointers, launch structs) and returns `Prepared(launch, close)`;
        `launch(stream)` only enqueues the kernel: the timing loop records its start event right
        before calling it, so any Python work in `launch` is timed. The way to get such a launch:
            launch = library.load(prog).prepare("<prog>_device", variant, n, x_buf, out_buf,
                                                library.STREAM)
        (`harness.calling.library.Library.prepare` checks and converts the arguments once, then each call
        is the bare cffi call; `library.STREAM` marks where the stream goes.) Under
        `invoke bench --gpus all` a case runs in a worker pinned to one GPU: use device 0.
        With `quick=True` return only the small cases (under a minute for every program together).
    `ceilings() -> dict[str, Callable[[bool], harness.measuring.bench.Ceiling | None]]`
        A HOOK, called by the bench only when a collected case names one of these ceilings
        (e.g. matmul's "cublas", attention's "sdpa_d64", device_info's "fp32"). Each callable takes
        `quick` and measures in the same run; None means "not available here" (ratio left empty).
        Do not register anything at import time. The tasks hand the cases (`bench_cases` below) and
        these hooks (`ceilings` below) down to harness.measuring.bench.run.

Profiling and sanitizing (`invoke profile`, `invoke sanitize`)
    `profile_args(variant: str | None) -> list[str]`
        argv for build/bin/<prog> for one profiled run of `variant` (None: the program's default).
    `sanitize_args() -> dict[str, list[str]]`
        label -> argv, the small runs compute-sanitizer checks (every variant, small sizes).
        Without it: one run per variant with `profile_args(v)`, else one run with no arguments.
        (A list of argv lists, or one argv, is still accepted.)

Running, checking, drawing
    `run(*args, timeout=...)`          run build/bin/<prog>, return its parsed result lines
                                       (use `harness.calling.results.run`/`parse_output`).
    `parse_output(text)`               the executable's tagged output as a DataFrame or dict.
    `reference(...)`                   numpy, float64 where rounding matters.
    `relative_error` is NOT redefined per program: use `harness.calling.results.relative_error`.
    `cli(args, variant=None, image=None, out=None) -> int`   `invoke run <prog>` hands over to it.
    `compare(n: int) -> (DataFrame, str)`                    `invoke compare <prog>`.
    `viz_data(**opts)` / `recorded_viz_data()`               data for analysis/<name>.py's `plot`
                                       (`invoke viz <name>`; `simulate=` where a simulator exists,
                                       `progress(done, total)` for long ones).
    `on_cpu(args) -> (DataFrame, str)`  what the program computes without a GPU (its numpy
                                       reference, its Python twin on harness.base.sim, or its C twin),
                                       small sizes, with a `check` column; the str says how. `invoke
                                       run <prog>` and `invoke demo` use it where there is no GPU,
                                       labelled with `cpu_label` (never silently). A `cpu=` keyword
                                       of viz_data/cli does the same for a picture.

C side of the same contract (cuda/<prog>/<prog>.h): a status return is declared `cudalab_status`
(cuda/common/cudalab.h); a plain `int` return is a value (counts, flags, limits).

Every function above must raise ValueError/TypeError for bad arguments before anything is
launched, and never print; the tasks turn those into one-line errors.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from harness.base import paths
from harness.calling import cudart, library
from harness.compile import build


def names() -> list[str]:
    """Every program: each cuda/<prog>/ that holds <prog>.cu, in name order."""
    return build.programs()


def check_name(prog: str) -> str:
    """prog itself, or ValueError naming the programs there are."""
    known = names()
    if prog not in known:
        raise ValueError(f"unknown program {prog!r}; programs: {', '.join(known)}")
    return prog


def module(prog: str) -> ModuleType | None:
    """harness.programs.<prog>, or None when the program has no Python module. An import error
    inside the module itself is raised, not hidden."""
    try:
        return importlib.import_module(f"{__name__}.{prog}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{prog}":
            raise
        return None


def _mod(prog: str, mod):
    # `mod` lets a caller (or a test) hand in a module object instead of the one resolved by name.
    return mod if mod is not None else module(prog)


def has(prog: str, attr: str, mod=None) -> bool:
    mod = _mod(prog, mod)
    return mod is not None and hasattr(mod, attr)


def hook(prog: str, attr: str, mod=None):
    """The module's attribute `attr`, or None."""
    mod = _mod(prog, mod)
    return getattr(mod, attr, None) if mod is not None else None


def variants(prog: str, mod=None) -> list[str]:
    """The program's variant names: its library's one table (harness.calling.library.read_table), for a
    program whose module offers `VARIANTS`; [] for one that offers none. A stand-in module a test hands
    in (not a real module) lists its own."""
    mod = _mod(prog, mod)
    if mod is None or not hasattr(mod, "VARIANTS"):
        return []
    if isinstance(mod, ModuleType):
        return list(library.read_table(prog))
    return [str(v) for v in mod.VARIANTS]


def check_variant(prog: str, variant: str, mod=None) -> str:
    known = variants(prog, mod)
    if known and variant not in known:
        raise ValueError(f"unknown variant {variant!r} for {prog}; variants: {', '.join(known)}")
    return variant


def profile_variants(prog: str, mod=None) -> list[str | None]:
    pv = hook(prog, "PROFILE_VARIANTS", mod)
    return list(pv) if pv else [None]


def profile_argv(prog: str, variant: str | None = None, mod=None) -> list[str]:
    """argv for one profiled run: the module's profile_args(variant), else `--variant V` or []."""
    fn = hook(prog, "profile_args", mod)
    if fn is not None:
        return [str(a) for a in fn(variant)]
    return ["--variant", variant] if variant else []


def refused_here(prog: str, names: list[str | None], mod=None) -> dict[str, str]:
    """{variant: why} for each of `names` that this build and GPU cannot run (the module's
    `unsupported_reason`, which launches nothing; {} for a program without one)."""
    why = hook(prog, "unsupported_reason", mod)
    if why is None:
        return {}
    out = {}
    for v in names:
        if v is not None and (r := why(v)) is not None:
            out[v] = r
    return out


def resolve_variants(prog: str, variant: str | None, mod=None,
                     refused: dict[str, str] | None = None) -> list[str | None]:
    """--variant V -> [V]; --variant all -> every variant; none -> profile_variants. For `all` and
    the program's own choice, variants this build or GPU cannot run are left out (a PTX-only sm_80
    build has no sm_90a kernel) and put in `refused` with the reason, unless none would be left: then
    all stay, so the run itself says why. A variant named alone stays, so its refusal reaches the user."""
    if variant == "all":
        names = variants(prog, mod)
        if not names:
            raise ValueError(f"{prog} lists no VARIANTS, so --variant all has nothing to run")
    elif variant:
        check_variant(prog, variant, mod)
        return [variant]
    else:
        names = profile_variants(prog, mod)
    no = refused_here(prog, names, mod)
    if not no or len(no) == len([v for v in names if v is not None]):
        return names
    if refused is not None:
        refused.update(no)
    return [v for v in names if v not in no]


def profile_runs(prog: str, variant: str | None = None, args: list[str] | None = None,
                 mod=None, refused: dict[str, str] | None = None) -> list[tuple[str | None, list[str]]]:
    """(variant, argv) for each profiled run of build/bin/<prog>, handed to harness.profiling.profile.
    --variant all (or one name) with the caller's args: one run per variant, each given `--variant V`
    (an executable need not know "all"); args alone: one run with the args as they are; neither: the
    module's choice (PROFILE_VARIANTS, each with profile_args(variant)). Variants left out because
    they cannot run here go into `refused` ({variant: why}; see resolve_variants)."""
    mod = _mod(prog, mod)
    args = [str(a) for a in args] if args else None
    chosen = resolve_variants(prog, variant, mod, refused) if (variant or not args) else [None]
    runs = []
    for v in chosen:
        if args:
            runs.append((v, ["--variant", v, *args] if v and "--variant" not in args else list(args)))
        else:
            runs.append((v, profile_argv(prog, v, mod)))
    return runs


def sanitize_cases(prog: str, mod=None, args: list[str] | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """(label, argv) for each small run compute-sanitizer checks; `args` replaces them with one run
    of those arguments (`invoke sanitize -p square -- 1000 64`)."""
    if args:
        return [(_label([str(a) for a in args], 0), tuple(str(a) for a in args))]
    fn = hook(prog, "sanitize_args", mod)
    if fn is not None:
        spec = fn()
        if isinstance(spec, dict):
            return [(str(k), tuple(str(a) for a in v)) for k, v in spec.items()]
        spec = list(spec)
        if not spec or all(isinstance(a, (str, int, float)) for a in spec):
            spec = [spec]
        return [(_label([str(a) for a in v], i), tuple(str(a) for a in v)) for i, v in enumerate(spec)]
    if has(prog, "profile_args", mod):
        vs = variants(prog, mod)
        if vs:
            return [(v, tuple(profile_argv(prog, v, mod))) for v in vs]
        return [("default", tuple(profile_argv(prog, None, mod)))]
    return [("default", ())]


def _label(argv: list[str], i: int) -> str:
    if "--variant" in argv:
        j = argv.index("--variant")
        if j + 1 < len(argv):
            return argv[j + 1]
    text = " ".join(argv)
    return text[:40] if text else (f"run{i}" if i else "default")


def bench_programs(selected: list[str] | None = None) -> dict[str, ModuleType]:
    """prog -> module for the programs with bench cases. Unknown names in `selected` raise ValueError."""
    if selected:
        for p in selected:
            check_name(p)
    out = {}
    for prog in selected or names():
        mod = module(prog)
        if mod is not None and hasattr(mod, "bench_cases"):
            out[prog] = mod
    return out


def bench_cases(selected: list[str] | None = None, quick: bool = False) -> list:
    """The selected programs' bench cases (every program's when None); with quick, only the quick ones.
    Unknown names raise ValueError."""
    cases = []
    for mod in bench_programs(selected).values():
        cases += [c for c in mod.bench_cases(quick) if c.quick or not quick]
    return cases


def ceilings(progs: list[str] | None = None) -> dict[str, Callable[[bool], object]]:
    """name -> measuring callable, from each module's `ceilings()` hook (every program's when None;
    the memcpy ceiling no program owns is harness.measuring.bench.BUILT_IN)."""
    return {name: fn for name, (_, fn) in _ceiling_hooks(progs).items()}


def _ceiling_hooks(progs: list[str] | None) -> dict[str, tuple[str, Callable[[bool], object]]]:
    out = {}
    for prog in progs or names():
        fn = hook(prog, "ceilings")
        if callable(fn):
            out.update({name: (prog, f) for name, f in fn().items()})
    return out


def bench_libraries(cases: list) -> list[str]:
    """The libraries a bench of `cases` needs: each case's program and the owner of each ceiling they
    name (device_info's fp32 peaks, matmul's cuBLAS, ...)."""
    owners = {name: prog for name, (prog, _) in _ceiling_hooks(None).items()}
    needed = [c.program for c in cases] + [owners[c.ceiling] for c in cases if c.ceiling in owners]
    return list(dict.fromkeys(needed))


def tunables() -> list[str]:
    """The programs with a parameter search (a `tune` function in their module)."""
    return [p for p in names() if callable(hook(p, "tune"))]


def tuner(prog: str) -> Callable:
    """The program's `tune(size, save, on_progress) -> (table, path)`, else ValueError naming the
    programs that have one. It times through harness.measuring.tune.time_and_pick and caches there."""
    have = tunables()
    if prog not in have:
        raise ValueError(f"{prog!r} has no parameter search; tunable programs: {', '.join(have) or 'none'}")
    return hook(prog, "tune")


def pictures() -> list[str]:
    """Names with both analysis/<name>.py (a `plot`) and a module with `viz_data`."""
    out = []
    for p in sorted((paths.ROOT / "analysis").glob("*.py")):
        if p.stem.startswith("_"):
            continue
        try:
            mod = importlib.import_module(f"{__name__}.{p.stem}")
        except ModuleNotFoundError:
            continue
        if hasattr(mod, "viz_data"):
            out.append(p.stem)
    return out


def viz_data(name: str, **opts):
    """`harness.programs.<name>.viz_data` called with the options it names (None = its default)."""
    import inspect

    mod = importlib.import_module(f"{__name__}.{name}")
    fn = mod.viz_data
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return fn(**{k: v for k, v in opts.items() if v is not None})
    return fn(**{k: v for k, v in opts.items() if k in params and v is not None})


# --- without a GPU ---------------------------------------------------------------------------------

ON_CPU = "computed on the CPU"


def cpu_label(how: str, no_gpu: bool = True) -> str:
    """The one wording for a result computed on the CPU: "computed on the CPU (no GPU): <how>"."""
    return f"{ON_CPU}{' (no GPU)' if no_gpu else ''}: {how}"


def gpu_here() -> tuple[bool, str]:
    """(True, "") when a CUDA device can be used, else (False, why); never raises."""
    try:
        return cudart.gpu_available()
    except Exception as e:  # libcudart itself missing
        return False, str(e)


def cpu_programs() -> list[str]:
    """The programs with an `on_cpu` hook, in name order."""
    return [p for p in names() if has(p, "on_cpu")]

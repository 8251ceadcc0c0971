"""The program registry: the one place that reads a program's record and resolves what it offers.

A *program* is a folder `cuda/<prog>/` holding `<prog>.cu` (what the Makefile builds) and, beside it, its
Python module `<prog>.py`, imported as `harness.programs.<prog>`, which ends with one
`RECORD = Program(...)` (harness/programs/record.py: the contract, field by field). Tasks, the bench,
the profilers, the sanitizer, the tour, the report and the exercise catalog ask this module (`record`,
`variants`, `ceilings`, `profile_runs`, `sanitize_cases`, `tour`, ...) and never import a program module
or read its record themselves; a program module reaches another program only through `module` here.

C side of the same contract (cuda/<prog>/<prog>.h): a status return is declared `cudalab_status`
(cuda/common/cudalab.h); a plain `int` return is a value (counts, flags, limits).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from harness.base import paths
from harness.calling import cudart, library
from harness.compile import build

from .record import Exercise, Picture, Program, Tour  # noqa: F401  (the contract, re-exported)


# A program's Python module lives in its own folder, beside its CUDA (cuda/<prog>/<prog>.py), and is
# imported as harness.programs.<prog>: each program folder that holds one joins this package's search
# path, so `from harness.programs import matmul`, `invoke run matmul` and the timing child's
# "harness.programs.<prog>:<function>" setups resolve it the ordinary way, with no second loader.
def _program_folders() -> list[str]:
    return [str(d) for d in sorted(paths.CUDA_DIR.iterdir()) if d.is_dir() and (d / f"{d.name}.py").is_file()]


__path__ = [__path__[0], *_program_folders()]


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
    for folder in _program_folders():  # a folder written since this package was imported (invoke new)
        if folder not in __path__:
            __path__.append(folder)
    try:
        return importlib.import_module(f"{__name__}.{prog}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{prog}":
            raise
        return None


def record(prog: str) -> Program:
    """The program's record: its module's RECORD, or a bare record for a folder without a module (it
    builds, runs and is sanitized with no arguments). A module whose RECORD is missing, misnamed or not
    a Program is an error of the program, said in one line."""
    mod = module(prog)
    if mod is None:
        return Program(name=prog, summary="")
    rec = mod.__dict__.get("RECORD")
    if not isinstance(rec, Program):
        raise TypeError(f"cuda/{prog}/{prog}.py must end with RECORD = Program(name={prog!r}, ...) "
                        f"(harness/programs/record.py), not {type(rec).__name__}")
    if rec.name != prog:
        raise ValueError(f"cuda/{prog}/{prog}.py: its RECORD is named {rec.name!r}, not {prog!r}")
    return rec


def _rec(prog: str, rec: Program | None) -> Program:
    # `rec` lets a caller (or a test) hand in a record instead of the one the program declares.
    return rec if rec is not None else record(prog)


def has(prog: str, what: str, rec: Program | None = None) -> bool:
    """Whether the program's record offers `what` (a Program field)."""
    return _rec(prog, rec).offers(what)


def hook(prog: str, what: str, rec: Program | None = None):
    """The record's field `what` (a hook, or None when not offered)."""
    return getattr(_rec(prog, rec), what)


def variants(prog: str, rec: Program | None = None) -> list[str]:
    """The program's variant names: its library's one table (harness.calling.library.read_table) for a
    program whose record says it has one; [] for one that has none."""
    return list(library.read_table(prog)) if _rec(prog, rec).variants else []


def check_variant(prog: str, variant: str, rec: Program | None = None) -> str:
    known = variants(prog, rec)
    if known and variant not in known:
        raise ValueError(f"unknown variant {variant!r} for {prog}; variants: {', '.join(known)}")
    return variant


def profile_variants(prog: str, rec: Program | None = None) -> list[str | None]:
    pv = _rec(prog, rec).profile_variants
    return list(pv() if callable(pv) else pv) or [None]


def profile_argv(prog: str, variant: str | None = None, rec: Program | None = None) -> list[str]:
    """argv for one profiled run: the record's profile_args(variant), else `--variant V` or []."""
    fn = _rec(prog, rec).profile_args
    if fn is not None:
        return [str(a) for a in fn(variant)]
    return ["--variant", variant] if variant else []


def refused_here(prog: str, names: list[str | None], rec: Program | None = None) -> dict[str, str]:
    """{variant: why} for each of `names` that this build and GPU cannot run (the module's
    `unsupported_reason`, which launches nothing; {} for a program without one)."""
    why = hook(prog, "unsupported_reason", rec)
    if why is None:
        return {}
    out = {}
    for v in names:
        if v is not None and (r := why(v)) is not None:
            out[v] = r
    return out


def resolve_variants(prog: str, variant: str | None, rec: Program | None = None,
                     refused: dict[str, str] | None = None) -> list[str | None]:
    """--variant V -> [V]; --variant all -> every variant; none -> profile_variants. For `all` and
    the program's own choice, variants this build or GPU cannot run are left out (a PTX-only sm_80
    build has no sm_90a kernel) and put in `refused` with the reason, unless none would be left: then
    all stay, so the run itself says why. A variant named alone stays, so its refusal reaches the user."""
    if variant == "all":
        names = variants(prog, rec)
        if not names:
            raise ValueError(f"{prog} lists no VARIANTS, so --variant all has nothing to run")
    elif variant:
        check_variant(prog, variant, rec)
        return [variant]
    else:
        names = profile_variants(prog, rec)
    no = refused_here(prog, names, rec)
    if not no or len(no) == len([v for v in names if v is not None]):
        return names
    if refused is not None:
        refused.update(no)
    return [v for v in names if v not in no]


def profile_runs(prog: str, variant: str | None = None, args: list[str] | None = None,
                 rec: Program | None = None, refused: dict[str, str] | None = None) -> list[tuple[str | None, list[str]]]:
    """(variant, argv) for each profiled run of build/bin/<prog>, handed to harness.profiling.profile.
    --variant all (or one name) with the caller's args: one run per variant, each given `--variant V`
    (an executable need not know "all"); args alone: one run with the args as they are; neither: the
    module's choice (PROFILE_VARIANTS, each with profile_args(variant)). Variants left out because
    they cannot run here go into `refused` ({variant: why}; see resolve_variants)."""
    args = [str(a) for a in args] if args else None
    chosen = resolve_variants(prog, variant, rec, refused) if (variant or not args) else [None]
    runs = []
    for v in chosen:
        if args:
            runs.append((v, ["--variant", v, *args] if v and "--variant" not in args else list(args)))
        else:
            runs.append((v, profile_argv(prog, v, rec)))
    return runs


def sanitize_cases(prog: str, rec: Program | None = None, args: list[str] | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """(label, argv) for each small run compute-sanitizer checks; `args` replaces them with one run
    of those arguments (`invoke sanitize -p square -- 1000 64`)."""
    if args:
        return [(_label([str(a) for a in args], 0), tuple(str(a) for a in args))]
    fn = hook(prog, "sanitize_args", rec)
    if fn is not None:
        spec = fn()
        if isinstance(spec, dict):
            return [(str(k), tuple(str(a) for a in v)) for k, v in spec.items()]
        spec = list(spec)
        if not spec or all(isinstance(a, (str, int, float)) for a in spec):
            spec = [spec]
        return [(_label([str(a) for a in v], i), tuple(str(a) for a in v)) for i, v in enumerate(spec)]
    if has(prog, "profile_args", rec):
        vs = variants(prog, rec)
        if vs:
            return [(v, tuple(profile_argv(prog, v, rec))) for v in vs]
        return [("default", tuple(profile_argv(prog, None, rec)))]
    return [("default", ())]


def _label(argv: list[str], i: int) -> str:
    if "--variant" in argv:
        j = argv.index("--variant")
        if j + 1 < len(argv):
            return argv[j + 1]
    text = " ".join(argv)
    return text[:40] if text else (f"run{i}" if i else "default")


def bench_programs(selected: list[str] | None = None) -> dict[str, Program]:
    """prog -> record for the programs with bench cases. Unknown names in `selected` raise ValueError."""
    if selected:
        for p in selected:
            check_name(p)
    return {prog: rec for prog in selected or names() if (rec := record(prog)).bench_cases is not None}


def bench_cases(selected: list[str] | None = None, quick: bool = False) -> list:
    """The selected programs' bench cases (every program's when None); with quick, only the quick ones.
    Unknown names raise ValueError."""
    cases = []
    for rec in bench_programs(selected).values():
        cases += [c for c in rec.bench_cases(quick) if c.quick or not quick]
    return cases


def ceilings(progs: list[str] | None = None) -> dict[str, Callable[[bool], object]]:
    """name -> measuring callable, from each module's `ceilings()` hook (every program's when None;
    the memcpy ceiling no program owns is harness.measuring.bench.BUILT_IN)."""
    return {name: fn for name, (_, fn) in _ceiling_hooks(progs).items()}


def _ceiling_hooks(progs: list[str] | None) -> dict[str, tuple[str, Callable[[bool], object]]]:
    out = {}
    for prog in progs or names():
        fn = record(prog).ceilings
        if fn is not None:
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
    return [p for p in names() if record(p).tune is not None]


def tuner(prog: str) -> Callable:
    """The program's `tune(size, save, on_progress) -> (table, path)`, else ValueError naming the
    programs that have one. It times through harness.measuring.tune.time_and_pick and caches there."""
    have = tunables()
    if prog not in have:
        raise ValueError(f"{prog!r} has no parameter search; tunable programs: {', '.join(have) or 'none'}")
    return hook(prog, "tune")


def _pictures() -> dict[str, Picture]:
    out = {}
    for prog in names():
        pic = record(prog).picture
        if pic is not None:
            if pic.name in out:
                raise ValueError(f"two programs draw the picture {pic.name!r}")
            out[pic.name] = pic
    return out


def pictures() -> list[str]:
    """The names `invoke viz` draws: each record's picture that has analysis/<name>.py (its `plot`)."""
    return sorted(n for n in _pictures() if (paths.ROOT / "analysis" / f"{n}.py").is_file())


def picture(name: str) -> Picture:
    """The record's picture called `name`, else ValueError naming those there are."""
    pics = _pictures()
    if name not in pics:
        raise ValueError(f"unknown picture {name!r}; pictures: {', '.join(pictures())}")
    return pics[name]


def picture_owner(name: str) -> str:
    """The program whose record draws the picture `name` (gridstride is grid_stride's)."""
    picture(name)
    return next(p for p in names() if (pic := record(p).picture) is not None and pic.name == name)


def picture_takes(name: str, option: str) -> bool:
    return option in picture(name).options


def viz_data(name: str, **opts):
    """The picture's data, called with the options it declares (None = its default)."""
    pic = picture(name)
    return pic.data(**{k: v for k, v in opts.items() if k in pic.options and v is not None})


def takes(prog: str, option: str) -> bool:
    """Whether the program's `cli` hook takes `option` (--image, --out, cpu=): declared in its record."""
    rec = record(prog)
    return rec.cli is not None and option in rec.cli_options


def tour() -> list[tuple[str, Tour]]:
    """(prog, its Tour) for each program in the tour, in the order a learner meets them."""
    recs = sorted((record(p) for p in names()), key=lambda r: (r.order, r.name))
    return [(r.name, r.tour) for r in recs if r.tour is not None]


def learning_path() -> list[Program]:
    """Every program's record in the order a learner meets them (the README's learning path)."""
    return sorted((record(p) for p in names()), key=lambda r: (r.order, r.name))


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
    return [p for p in names() if record(p).on_cpu is not None]

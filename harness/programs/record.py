"""The contract between a program and the lab, in code: one `Program` record per program.

A program is one folder, `cuda/<prog>/`: its CUDA (`<prog>.cu`, `<prog>.h`, `main.cu`, `build.mk`), its
Python module (`<prog>.py`, imported as `harness.programs.<prog>`), its tests (`test_*.py`), its recorded
output (`fixtures/`) and its page (`README.md`). The module ends with

    RECORD = Program(name="square", summary="...", bench_cases=bench_cases, ...)

and the registry (`harness/programs/__init__.py`) is the only code that reads it: tasks, the bench, the
profilers, the sanitizer, the tour, the report and the exercise catalog ask the registry, never the
module. A field left at its default means "not offered". Every callable must raise ValueError or
TypeError for bad arguments before anything is launched, and never print; the tasks turn those into
one-line errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Tour:
    """The program's place in the tour and the report: what its picture shows, the pictures a run draws
    (globs under build/), the picture committed in the repository for a run that drew none, and what
    each drawn picture is where a program draws several."""
    shows: str
    drawn: tuple[str, ...] = ()
    committed: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Picture:
    """`invoke viz <name>`: `data(**opts)` computes what analysis/<name>.py's `plot` draws (`simulate=`
    where a simulator exists, `cpu=` where a numpy twin does, `progress(done, total)` for long ones);
    `recorded()` gives data recorded on a GPU, for a machine without one."""
    name: str
    data: Callable
    recorded: Callable | None = None
    options: tuple[str, ...] = ()  # the keyword options `data` takes, as `invoke viz` names them


@dataclass(frozen=True)
class Exercise:
    """One exercise a program offers: `invoke exercise start <name>`. Its blanks are marked in the
    program's sources (harness/user/exercises/markers.py reads the markers); its problem (a
    harness.programs.exercise.Problem, written in cuda/<prog>/<prog>_exercises.py) says what the check
    runs. The grader reads everything else from here.

    origin, writes, block
        The course and section it follows; what the learner writes; the launch shape, for messages.
    tracks
        "python" (the kernel in Python on harness.base.sim) and/or "cuda" (the kernel in CUDA C).
    py_entry, py_source
        Python track: the function (or, for a ValueProblem, the name) the check reads from the learner's
        file, and the file its blanks are marked in ("" : the program's own module).
    cu_source, cu_kernels, glue, cu_includes
        CUDA track: the file its blanks are marked in (relative to the repository), the kernels whose
        names and parameters the check relies on, the file in the program's folder that is the learner's
        file's fixed end (the extern "C" entry points the check calls), and the #include lines it starts with.
    hints
        Given one at a time by `invoke exercise hint`.
    """
    name: str
    origin: str = ""
    writes: str = ""
    tracks: tuple[str, ...] = ("python", "cuda")
    problem: object = None
    py_entry: str | None = None
    py_source: str = ""
    cu_source: str | None = None
    cu_kernels: tuple[str, ...] = ()
    glue: str = ""
    cu_includes: str = ""
    hints: tuple[str, ...] = ()
    block: str = ""
    title: str = ""

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"an exercise's name is a Python identifier, not {self.name!r}")
        bad = set(self.tracks) - {"python", "cuda"}
        if bad or not self.tracks:
            raise ValueError(f"exercise {self.name}: tracks are 'python' and/or 'cuda', not {self.tracks!r}")
        if "cuda" in self.tracks and not (self.cu_source and self.cu_kernels and self.glue):
            raise ValueError(f"exercise {self.name}: the cuda track needs cu_source, cu_kernels and glue")
        if "python" in self.tracks and not self.py_entry:
            raise ValueError(f"exercise {self.name}: the python track needs py_entry")


@dataclass(frozen=True)
class Program:
    """Everything the lab may ask of one program. Only `name` and `summary` are required: a program
    that only prints builds, runs and is sanitized with no arguments.

    name, summary, follows, order, readme_picture
        The folder's name; the idea it teaches (one line); the course or lecture it follows; its place in
        the learning path (the tour's order); the README's picture cell. The README's learning-path
        table is written from these (harness/programs/scaffold.py).
    variants
        True when its library exports the one variant table (`<prog>_variant_count()` and
        `<prog>_variant_name(i)`): the names are read from C by `harness.calling.library.read_table`
        and never typed in Python.
    uses
        The other programs whose modules this one calls (fetched through the registry's `module`).
    profile_variants, profile_args(variant), sanitize_args()
        `invoke profile`: the variants run when the user names none (one run each), and the argv of one
        profiled run of build/bin/<prog>. `invoke sanitize`: label -> argv of the small runs
        compute-sanitizer checks (without it: one run per variant with profile_args, else no arguments).
    unsupported_reason(variant)
        Why this build or GPU cannot run `variant` (None when it can); launches nothing.
    bench_cases(quick), ceilings()
        `invoke bench`: a list of harness.measuring.bench.BenchCase, whose setup is named as
        "harness.programs.<prog>:<function>" (the timing child imports only that module); and
        name -> callable(quick) measuring a ceiling in the same run (None: not available here).
    tune(size, save, on_progress)
        `invoke tune`: the parameter search; times through harness.measuring.tune.
    run, parse_output, reference
        Run build/bin/<prog> and return its parsed result lines; read the executable's tagged output;
        the numpy reference.
    cli(args, variant=, image=, out=, cpu=), compare(n), on_cpu(args)
        `invoke run <prog>` hands over to cli; `invoke compare <prog>`; what the program computes without
        a GPU, as (DataFrame with a `check` column, how), labelled "computed on the CPU".
    picture, tour, exercises
        `invoke viz`; its place in the tour and the report; the exercises it offers.
    doctor()
        A line of `invoke doctor`'s, as (ok, what, advice).
    """
    name: str
    summary: str
    follows: str = ""
    order: int = 1000  # a new program comes after the lab's own
    readme_picture: str = "text"  # the README's picture cell: a markdown link to a committed figure, or "text"
    variants: bool = False
    uses: tuple[str, ...] = ()
    profile_variants: tuple[str, ...] | Callable = ()  # or a function reading them from the C table
    profile_args: Callable | None = None
    sanitize_args: Callable | None = None
    unsupported_reason: Callable | None = None
    bench_cases: Callable | None = None
    ceilings: Callable | None = None
    tune: Callable | None = None
    run: Callable | None = None
    parse_output: Callable | None = None
    reference: Callable | None = None
    cli: Callable | None = None
    cli_options: tuple[str, ...] = ()  # what cli takes besides args: variant, image, out, cpu
    compare: Callable | None = None
    on_cpu: Callable | None = None
    picture: Picture | None = None
    tour: Tour | None = None
    exercises: tuple[Exercise, ...] = ()
    doctor: Callable | None = None

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"a program's name is a Python identifier, not {self.name!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "Callable | None" and v is not None and not callable(v):
                raise TypeError(f"{self.name}: Program.{f.name} must be callable or None, not {type(v).__name__}")

    def offers(self, what: str) -> bool:
        """Whether the field `what` is set (a hook given, a tuple not empty)."""
        v = getattr(self, what)
        return bool(v) if isinstance(v, (tuple, bool)) else v is not None

"""`invoke demo`: the newcomer's tour, as steps that each pass, fail or are skipped with the reason.

    build everything -> run every program once (small sizes, every variant) and check it ->
    compute on the CPU what has a CPU twin -> draw every picture -> quick bench ->
    profile square and transformer_block -> write the report

Without a GPU the build, the CPU twins (square's C twin, the simulated matmul and attention kernels,
Mandelbrot's twins), the pictures that have a CPU path (the Mandelbrot set from its numpy twin,
grayscale of the test picture through the numpy reference, the grid-stride trace from the
simulator), the profiles recorded on a GPU (harness/data/) and the report still run, each labelled
"computed on the CPU (no GPU)"; every step that needs a device is listed as skipped with what a GPU
adds, and the demo ends by saying so (status 0). The tasks layer only shows progress and the table.

Hooks read from each program's record (all optional; see harness/programs/record.py):
    on_cpu(args)             the program's result without a GPU: a step "<prog> on the CPU"
    viz_data(...)            with analysis/<name>.py's plot(data, outdir): a picture; called with
                             simulate=True (a simulator) or cpu=True (a numpy twin) when there is
                             no GPU and viz_data accepts it
    cli(args, image=, out=, cpu=)  an image program (grayscale): run on its test picture, writing
                             build/plots/<prog>.png; cpu=True without a GPU
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from analysis import report as arep
from harness import programs
from harness.base import files, paths
from harness.base.errors import BuildError, CudalabError
from harness.base.paths import PLOTS
from harness.calling import cudart, parse, runner
from harness.compile import build as _build
from harness.compile import toolchain
from harness.measuring import bench, results_csv
from harness.profiling import profile as hp
from harness.profiling.sanitize import Case
from harness.programs import cpu_label

REPORT = paths.BUILD / "report"
RECORDED = paths.ROOT / "harness" / "data"  # output recorded on a GPU that the demo draws without one
JUNIT = REPORT / "demo-junit.xml"  # the demo's own steps as a test report: what its report shows as tests
PROFILED = ("square", "transformer_block")  # a first kernel, and naive attention against flash
NOT_PICTURES = {"profile", "bench", "report", "__init__"}


@dataclass
class Step:
    name: str
    status: str = "passed"  # passed | failed | skipped
    detail: str = ""
    needs_gpu: bool = False
    outputs: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cpu_of: str = ""  # the program this step computed on the CPU in place of its kernels, if any


@dataclass
class DemoResult:
    steps: list[Step]
    gpu: bool
    gpu_why: str = ""
    report: str = ""
    finished: float | None = None  # when the drawing steps ended (epoch s): the report's cut-off for pictures

    @property
    def failed(self) -> list[Step]:
        return [s for s in self.steps if s.status == "failed"]

    @property
    def skipped_for_gpu(self) -> list[Step]:
        return [s for s in self.steps if s.status == "skipped" and s.needs_gpu]

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([{"step": s.name, "status": s.status, "detail": s.detail} for s in self.steps],
                            columns=["step", "status", "detail"])

    def closing_lines(self) -> list[str]:
        n = {k: sum(1 for s in self.steps if s.status == k) for k in ("passed", "failed", "skipped")}
        lines = [f"demo: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped"]
        if not self.gpu:
            names = ", ".join(s.name for s in self.skipped_for_gpu) or "none"
            lines.append(f"No GPU here ({self.gpu_why.split(' -- ')[0]}). These steps need a GPU and were "
                         f"skipped: {names}. Run `invoke demo` on a machine with an NVIDIA GPU to do them.")
        if self.failed:
            lines.append("failed: " + "; ".join(f"{s.name}: {s.detail}" for s in self.failed))
        if self.report:
            lines.append(f"report: {self.report}")
        return lines

    def write_junit(self, path: Path) -> Path:
        """The steps as a JUnit XML test suite (one test case per step), written atomically."""
        n = {k: sum(1 for s in self.steps if s.status == k) for k in ("failed", "skipped")}
        suite = ET.Element("testsuite", name="invoke demo", tests=str(len(self.steps)), failures=str(n["failed"]),
                           errors="0", skipped=str(n["skipped"]), timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"),
                           time=f"{sum(s.seconds for s in self.steps):.2f}")
        for s in self.steps:
            case = ET.SubElement(suite, "testcase", classname="demo", name=s.name, time=f"{s.seconds:.2f}")
            if s.status == "failed":
                ET.SubElement(case, "failure", message=s.detail)
            elif s.status == "skipped":
                ET.SubElement(case, "skipped", message=s.detail)
        root = ET.Element("testsuites")
        root.append(suite)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return files.replace(path, lambda tmp: ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True))

    def to_json(self) -> dict:
        return {"gpu": self.gpu, "gpu_why": self.gpu_why, "finished": self.finished,
                "steps": [asdict(s) for s in self.steps]}


# --- facts for the report --------------------------------------------------------------------------

def gpu_state() -> tuple[bool, str]:
    """(True, "") with a usable GPU, else (False, why). A machine with no NVIDIA driver at all gets the
    runtime's "driver version is insufficient" (code 35), as one with a driver too old does; there
    cudaDriverGetVersion says 0, and the reason given is that there is no driver and so no GPU."""
    try:
        ok, why = cudart.gpu_available()
    except Exception as e:  # libcudart itself missing
        return False, str(e)
    if not ok:
        try:
            if cudart.driver_version() == 0:
                return False, "no GPU: no NVIDIA driver is installed here"
        except Exception:  # the runtime's own words stand
            pass
    return ok, why


def collect_facts() -> dict:
    """The device summary and the toolchain, for the report (no kernel is launched)."""
    facts: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "tools": {}}
    for name, t in toolchain.tools().items():
        facts["tools"][name] = f"{t.version or '?'} ({t.path})" if t.found else "not found"
    ok, why = gpu_state()
    facts["gpu"] = ok
    if not ok:
        facts["gpu_why"] = why
        return facts

    s = cudart.summary()
    facts["device"] = {"name": s.name, "compute capability": s.cc, "SMs": s.sm_count, "driver": s.driver,
                       "runtime": s.runtime, "memory (GiB)": round(s.memory_gib, 1)}
    try:
        d = programs.module("device_info").query(0)
        facts["device"].update({"L2 (MiB)": round(d["l2_bytes"] / 2**20, 1), "FP32 peak (TFLOP/s)": d["fp32_tflops"],
                                "DRAM peak (GB/s)": d["mem_bandwidth_gbs"]})
    except Exception as e:  # the library may not be built yet
        facts["device"]["peaks"] = f"not available ({e})"
    return facts


# --- the steps -------------------------------------------------------------------------------------

def gpu_adds(step: str, prog: str = "") -> str:
    """The detail of a step skipped for want of a GPU: what a GPU would add."""
    if step == "run":  # what ran on the CPU instead is added once it has run (say_what_ran_instead)
        return f"needs a GPU: runs {prog}'s CUDA kernels (every variant, small sizes) and checks each"
    if step == "bench":
        return ("needs a GPU: times the kernels against their ceilings (memcpy, cuBLAS, SDPA, the FP32 "
                "instruction limit) and draws the ratios and the roofline")
    if step == "profile":
        return f"needs a GPU: profiles {prog} with nsys or ncu (each kernel's share of GPU time)"
    return f"needs a GPU: draws {prog} from the kernel's own output"


def say_what_ran_instead(steps: list[Step]) -> None:
    """Add to each run step skipped for want of a GPU the steps that really computed its program on
    the CPU, and where they are in the table (above or below): worded from what ran, never assumed."""
    for i, st in enumerate(steps):
        if not (st.status == "skipped" and st.needs_gpu and st.name.startswith("run ")):
            continue
        prog = st.name[len("run "):]
        ran = [(j, t.name) for j, t in enumerate(steps) if t.cpu_of == prog and t.status == "passed"]
        if ran:
            where = "above" if all(j < i for j, _ in ran) else "below" if all(j > i for j, _ in ran) else "in this table"
            st.detail += f"; computed on the CPU instead: {', '.join(repr(n) for _, n in ran)} ({where})"


def picture_names() -> list[str]:
    """Names with both analysis/<name>.py (plot) and harness.programs.<name>.viz_data."""
    return [n for n in programs.pictures() if n not in NOT_PICTURES]


def image_programs() -> list[str]:
    """Programs whose cli takes an input image and an output path (grayscale)."""
    return [p for p in _build.programs() if programs.takes(p, "image") and programs.takes(p, "out")]


def step_build(on_step: Callable[[str, str], None] | None = None) -> tuple[Step, list[str]]:
    """Build everything with make -k, so that one broken program does not hide the others.
    Returns the step and the programs that built."""
    progs = _build.programs()
    try:
        _build.build_programs(on_step=on_step)
        return Step("build", "passed", f"{len(progs)} programs"), progs
    except _build.ProgramsFailed as e:
        bad = [f"{p} ({str(d[0]) if d else 'see the build log'})" for p, d in e.failed.items()]
        bad += [str(d) for d in e.other[:3]]
        return Step("build", "failed", "did not build: " + "; ".join(bad)), e.built
    except BuildError as e:
        return Step("build", "failed", str(e).splitlines()[0]), []


def step_run(prog: str) -> Step:
    """Every sanitizer case of the program (small sizes, every variant), without the sanitizer:
    each must exit 0 and print no check=fail."""
    st = Step(f"run {prog}", needs_gpu=True)
    results, refused = [], []
    for c in (Case(prog, label, argv) for label, argv in programs.sanitize_cases(prog)):
        try:
            r = runner.run(prog, *c.argv, check=False, timeout=300)
        except CudalabError as e:
            st.status, st.detail = "failed", f"{c.label}: {e}"
            return st
        # A variant this build or GPU has no code for (sm_90a off Hopper, sm_80 on a T4) is refused
        # before any launch with status 2 and the reason: not run, and not a failure of the tour.
        m = re.search(r"cannot run here: (needs sm_\S+?:[^\n]*)", r.stderr) if r.returncode == 2 else None
        if m:
            refused.append(f"{c.label} ({m.group(1).strip()})")
            continue
        checks = [rec.get("check") for rec in parse.records(r.stdout, "result")]
        if r.returncode != 0 or "fail" in checks:
            tail = runner.tail(r.stderr, 3) or runner.tail(r.stdout, 3)
            st.status, st.detail = "failed", f"`{prog} {' '.join(c.argv)}` exited {r.returncode}: {tail}"
            return st
        results.append(checks.count("pass"))
    passes = sum(results)
    st.detail = f"{len(results)} run(s)" + (f", {passes} check=pass line(s)" if passes else ", exit status 0")
    if refused:
        st.detail += f"; {len(refused)} not run here: " + ", ".join(refused[:3]) + (" ..." if len(refused) > 3 else "")
    return st


def step_picture(name: str, gpu: bool, outdir: Path = PLOTS) -> list[Step]:
    """A picture from the GPU; without one, from the simulator (simulate=True) or a numpy twin
    (cpu=True) where viz_data offers either, labelled as such; else skipped."""
    draw = importlib.import_module(f"analysis.{name}")
    off_gpu = next((o for o in ("simulate", "cpu") if programs.picture_takes(name, o)), None)
    st = Step(f"draw {name}", needs_gpu=off_gpu is None)
    if gpu or off_gpu:
        try:
            data = programs.viz_data(name) if gpu else programs.viz_data(name, **{off_gpu: True})
            st.outputs = [str(p) for p in draw.plot(data, outdir)]
            if gpu:
                how = "from the GPU"
            elif off_gpu == "simulate":
                how = cpu_label("the Python simulator (titled as simulated)")
            else:
                how = data.get("computed_on") or cpu_label("a numpy twin")
            if not gpu:
                st.cpu_of = programs.picture_owner(name)  # gridstride is grid_stride's picture
            st.detail = f"{how}: {len(st.outputs)} figure(s)"
        except Exception as e:
            st.status, st.detail = "failed", f"{type(e).__name__}: {e}"
    else:
        st.status, st.detail = "skipped", gpu_adds("draw", name)
    return [st]


def step_image(prog: str, gpu: bool, outdir: Path = PLOTS) -> Step:
    """An image program on its test picture: on the GPU, or without one through its CPU path."""
    cli = programs.hook(prog, "cli")
    off_gpu = programs.takes(prog, "cpu")
    st = Step(f"draw {prog}", needs_gpu=not off_gpu)
    if not gpu and not off_gpu:
        st.status, st.detail = "skipped", gpu_adds("draw", prog)
        return st
    out = outdir / f"{prog}.png"
    try:
        with contextlib.redirect_stdout(io.StringIO()) as said:
            status = cli([], out=str(out), **({} if gpu else {"cpu": True}))
        if status:
            st.status, st.detail = "failed", f"cli returned {status}: {said.getvalue().strip()[-300:]}"
        else:
            st.outputs = [str(p) for p in sorted(outdir.glob(f"{prog}*.png"))]
            st.detail = f"the test picture and its {prog} output" + (
                "" if gpu else f", {cpu_label('the numpy reference')}")
            st.cpu_of = "" if gpu else prog
    except Exception as e:
        st.status, st.detail = "failed", f"{type(e).__name__}: {e}"
    return st


def step_cpu(prog: str, gpu: bool) -> Step:
    """The program's `on_cpu` hook: its result computed on the CPU, every check passing."""
    st = Step(f"{prog} on the CPU", cpu_of="" if gpu else prog)
    try:
        df, how = programs.hook(prog, "on_cpu")([])
        bad = df[df["check"] != "pass"] if "check" in df else df.iloc[:0]
        st.detail = f"{programs.cpu_label(how, no_gpu=not gpu)}; {len(df)} check(s)"
        if len(bad):
            st.status = "failed"
            st.detail += f", failed: {'; '.join(str(v) for v in bad.iloc[:, 0])}"
        else:
            st.detail += " passed"
    except Exception as e:
        st.status, st.detail = "failed", f"{type(e).__name__}: {e}"
    return st


def recorded_profiles() -> list[Path]:
    return sorted(RECORDED.glob("nsys_*_stats_*.csv"))


def step_recorded_profiles(outdir: Path = PLOTS) -> Step:
    """The kernel-share charts of the nsys runs recorded on a GPU (harness/data/; no GPU needed)."""
    from analysis import profile as aprof  # deferred: matplotlib (1 s) only when the tour draws

    st = Step("draw recorded profiles")
    try:
        for f in recorded_profiles():
            # nsys_<version>_<device>_stats_<prog>.csv
            parts = f.stem.split("_")
            prog = parts[-1]
            device = parts[2] if len(parts) > 2 else "a GPU"
            kernels = hp.nsys_kernel_table(hp.parse_nsys_stats(f.read_text()))
            st.outputs += [str(p) for p in aprof.plot(kernels, outdir, name=f"profile_recorded_{prog}",
                                                      title=f"{prog}: kernel time shares, nsys recorded on "
                                                            f"{device.upper()}")]
        st.detail = f"{len(st.outputs)} chart(s) from nsys runs recorded on a GPU (harness/data)"
        if not st.outputs:
            st.status, st.detail = "skipped", "no recorded nsys runs in harness/data"
    except Exception as e:
        st.status, st.detail = "failed", f"{type(e).__name__}: {e}"
    return st


def step_bench(gpu: bool) -> Step:
    st = Step("quick bench", needs_gpu=True)
    if not gpu:
        st.status, st.detail = "skipped", gpu_adds("bench")
        return st
    try:
        from analysis import bench as abench  # deferred: matplotlib (1 s) only when the tour draws

        cases = programs.bench_cases(None, quick=True)
        if not cases:
            st.status, st.detail = "skipped", "no program has bench cases"
            return st
        bench.check_built(programs.bench_libraries(cases))
        df, ceil = bench.run(cases, programs.ceilings(), quick=True)
        meta = bench.metadata()
        path = results_csv.write(df, meta, ceil)
        st.outputs = [str(path)] + [str(p) for p in abench.plot(path, PLOTS)]
        met = abench.current_targets(df)["meets_target"].dropna()
        st.detail = f"{len(df)} case(s); {int(met.sum())}/{len(met)} current targets met; {path.name}"
    except Exception as e:
        st.status, st.detail = "failed", f"{type(e).__name__}: {e}"
    return st


def step_profile(prog: str, gpu: bool) -> Step:
    st = Step(f"profile {prog}", needs_gpu=True)
    if not gpu:
        st.status, st.detail = "skipped", gpu_adds("profile", prog)
        return st
    try:
        from analysis import profile as aprof  # deferred: matplotlib (1 s) only when the tour draws

        refused: dict[str, str] = {}
        res = hp.profile(prog, programs.profile_runs(prog, refused=refused), tool="auto",
                         bench_cases=programs.hook(prog, "bench_cases"))
        st.outputs = [str(p) for p in aprof.plot(res.kernels, hp.PROFILES / prog,
                                                  title=f"{prog}: kernel time shares ({res.tool})")]
        why = "; ".join(f"{f.tool}: {f.reason}" for f in res.failures)
        st.detail = f"{res.tool}: {len(res.kernels)} kernel row(s)" + (f" (tried first: {why})" if why else "")
        if refused:
            st.detail += "; not profiled here: " + "; ".join(f"{v} ({r})" for v, r in refused.items())
    except Exception as e:
        st.status, st.detail = "failed", f"{type(e).__name__}: {e}"
    return st


def run(bench: bool = True, profile: bool = True, on_step: Callable[[str], None] | None = None,
        on_total: Callable[[int], None] | None = None) -> DemoResult:
    gpu, why = gpu_state()
    progs = _build.programs()
    cpu_progs = programs.cpu_programs()
    pictures = picture_names()
    images = [p for p in image_programs() if p not in pictures]
    profiled = [p for p in PROFILED if p in progs] if profile else []
    total = 1 + len(progs) + len(cpu_progs) + len(pictures) + len(images) + 1 + int(bench) + len(profiled) + 1
    if on_total:
        on_total(total)
    steps: list[Step] = []

    def done(st: Step | list[Step], t0: float):
        for s in (st if isinstance(st, list) else [st]):
            s.seconds = round(time.perf_counter() - t0, 2)
            steps.append(s)
        if on_step:
            last = st[-1] if isinstance(st, list) else st
            on_step(f"{last.name}: {last.status}")

    t0 = time.perf_counter()
    st, built = step_build()
    done(st, t0)
    for p in progs:
        t0 = time.perf_counter()
        if p not in built:
            done(Step(f"run {p}", "failed", "not built", needs_gpu=True), t0)
        elif not gpu:
            done(Step(f"run {p}", "skipped", gpu_adds("run", p), needs_gpu=True), t0)
        else:
            done(step_run(p), t0)
    for p in cpu_progs:
        t0 = time.perf_counter()
        done(step_cpu(p, gpu), t0)
    for name in pictures:
        t0 = time.perf_counter()
        done(step_picture(name, gpu), t0)
    for p in images:
        t0 = time.perf_counter()
        done(step_image(p, gpu), t0)
    t0 = time.perf_counter()
    done(step_recorded_profiles(), t0)
    if bench:
        t0 = time.perf_counter()
        done(step_bench(gpu), t0)
    for p in profiled:
        t0 = time.perf_counter()
        done(step_profile(p, gpu), t0)
    say_what_ran_instead(steps)
    result = DemoResult(steps, gpu, why, finished=time.time())
    t0 = time.perf_counter()
    st = Step("report", detail="build/report/index.html")
    steps.append(st)  # listed in the report it writes; marked failed below if writing fails
    try:
        REPORT.mkdir(parents=True, exist_ok=True)
        # The report's tests are this run's steps, written first as the demo's own test report (the
        # report step itself counts as passed there: a failure below is recorded afterwards).
        junit = result.write_junit(REPORT / JUNIT.name)

        md, html = arep.write(REPORT, facts=collect_facts(), demo=result.to_json(), junit=junit,
                              tour=programs.tour())
        st.outputs = [str(md), str(html)]
        result.report = str(html)
    except Exception as e:
        st.status, st.detail = "failed", f"{type(e).__name__}: {e}"
    st.seconds = round(time.perf_counter() - t0, 2)
    if st.status == "failed":
        result.write_junit(REPORT / JUNIT.name)
    if on_step:
        on_step(f"report: {st.status}")
    (REPORT / "demo.json").write_text(json.dumps(result.to_json(), indent=1))
    return result

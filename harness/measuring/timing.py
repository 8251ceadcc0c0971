"""The one timing engine: NVIDIA's NVBench, through its Python package `cuda-bench` (ARCHITECTURE.md).

Why NVBench and not our own event loop: the old loop (3 warm-up launches, an L2-flush memset, a host
synchronisation after every repetition) let the short, fast calls swing by 40% between runs: the GPU
drained between repetitions, so the start event fired before the host had queued the launch, and the
clocks fell between bursts. NVBench's cold measurement holds the stream with a blocking kernel while
the launch is queued (no host latency inside the timed span), flushes the L2 before each sample,
discards samples taken while the SM clock is throttled, and stops on a noise criterion (relative
standard deviation under `max_noise_pct`, after at least `min_time_s` of GPU time) instead of a fixed
count. Its statistics (median, first and third quartiles) are what a Timing holds.

NVBench runs its registered benchmarks once per process (`run_all_benchmarks` refuses a second call),
so every measurement session runs in a child process, `python -m harness.measuring.timing PLAN OUTDIR`. A plan
is a list of Items, run in order: that order is how the bench interleaves a ceiling with its cases. An
Item names its setup by import path, `"package.module:function"` with JSON keyword arguments, because
closures cannot cross the process boundary; the function returns an object with `launch(stream)`
(enqueue one run on `stream`, no synchronisation), `close()`, and optionally `work` and `note`
(harness.measuring.bench.Prepared). A setup used by several Items is built once, at its first Item, and closed
after its last. While each Item is timed, harness.measuring.conditions samples the SM clock, power and
temperature through NVML.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from harness.base import files, paths, procs
from harness.base.errors import TOOL_FIXES, CudalabError, ToolMissing
from harness.calling import cudart
from harness.measuring import conditions

PROGRESS = "cudalab-timing:"  # the child's progress lines on stdout: PROGRESS <index> <key>
INSTALL_HINT = TOOL_FIXES["cuda-bench"]


class TimingError(CudalabError):
    """A measurement session failed. `timings` holds what was measured before the failure, `log` the
    tail of NVBench's own output."""

    def __init__(self, message: str, timings: dict | None = None, log: str = ""):
        self.timings = dict(timings or {})
        self.log = log
        super().__init__(message)


@dataclass(frozen=True)
class Options:
    """NVBench's knobs, the same for every Item of a plan unless an Item overrides warmup_s."""

    min_time_s: float = 0.1  # GPU time accumulated before the noise criterion may stop a measurement
    max_noise_pct: float = 0.5  # stop once the relative standard deviation is under this (NVBench's default)
    warmup_s: float = 0.1  # time-based warm-up: cold runs until this much walltime has passed
    timeout_s: float = 10.0  # per Item, walltime; a measurement that hits it is flagged timed_out
    # NVBench drops a sample taken below this fraction of the default SM clock. Its own default, 0.75, is
    # where a power-capped H200 sits for a whole 8192^3 GEMM (1455-1500 of 1980 MHz): 07's row there kept
    # no sample at all, and rows near the line kept only their faster samples. The bench records the
    # clock of every row and flags the throttled ones instead; 0.5 drops only the samples of a card that
    # is badly wrong (bench/results/h100/NOTES-bench.md, section 5).
    throttle: float = 0.5


QUICK = Options(min_time_s=0.03, warmup_s=0.05, timeout_s=5.0)
# For tests of a flow (tuning, profiling fallbacks) that need a number, not a trustworthy one.
SMOKE = Options(min_time_s=0.002, warmup_s=0.005, timeout_s=2.0)


@dataclass(frozen=True)
class Item:
    key: str  # unique within a plan
    target: str  # "package.module:function" -> a Prepared
    kwargs: dict = field(default_factory=dict)
    warmup_s: float | None = None  # None: the plan's Options.warmup_s


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p25_ms: float
    p75_ms: float
    samples_ms: tuple = field(repr=False, default=())
    samples: int = 0  # how many cold samples NVBench kept
    noise: float = float("nan")  # NVBench's relative standard deviation of the GPU times (fraction)
    walltime_s: float = float("nan")
    sm_clock_mhz: float = float("nan")  # NVBench's mean SM clock over the kept samples
    timed_out: bool = False
    conditions: dict = field(default_factory=dict, repr=False)  # harness.measuring.conditions.Sampler.summary()
    work: float | None = None  # Prepared.work, when the setup knew it only at run time
    note: str = ""

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms

    def rate(self, amount: float) -> float:
        """amount per second at the median time (bytes -> B/s, FLOPs -> FLOP/s, ...)."""
        return amount / (self.median_ms * 1e-3)


def summarize(samples_ms) -> Timing:
    """Median and quartiles of raw samples (the CPU tests' and the round statistics' arithmetic)."""
    s = np.asarray(list(samples_ms), dtype=np.float64)
    if s.size == 0:
        raise ValueError("no samples to summarize")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"timing samples must be finite and non-negative, got {s}")
    p25, med, p75 = np.percentile(s, [25, 50, 75])
    return Timing(float(med), float(p25), float(p75), tuple(float(x) for x in s), samples=int(s.size))


# --- the parent side ---------------------------------------------------------------------------------

def engine_version() -> str | None:
    """cuda-bench's version when it is installed, without importing it (it loads the CUDA bindings)."""
    try:
        if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bench") is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        from importlib.metadata import version

        return version("cuda-bench")
    except Exception:
        return "unknown"


def require_engine() -> str:
    v = engine_version()
    if v is None:
        raise ToolMissing("cuda-bench", "timing needs NVIDIA's NVBench for Python, which is not installed here")
    return v


def require_gpu() -> None:
    """NoGPUError, with what is missing, unless a CUDA device can be used. Every measurement session
    passes here before its child starts: NVBench's extension needs the driver (libcuda), and without
    one the child died in an ImportError traceback instead of saying that there is no GPU."""
    cudart.device_count()


def run_plan(items: list[Item], options: Options | None = None, *, on_progress: Callable[[int, str], None] | None = None,
             timeout: float | None = None, workdir: Path | None = None,
             errors: dict | None = None) -> dict[str, Timing]:
    """Time every Item, in order, in one NVBench session (a child process). Returns key -> Timing.
    Raises TimingError (with the partial results) when the child fails or runs past `timeout`. An Item
    whose setup raised, or that gave no samples, raises too, unless an `errors` dict is passed: then
    its key and reason go there and the others are returned."""
    if not items:
        return {}
    keys = [it.key for it in items]
    if len(set(keys)) != len(keys):
        raise ValueError("plan keys must be unique")
    require_engine()
    require_gpu()
    opts = options or Options()
    base = paths.BUILD / "timing"
    base.mkdir(parents=True, exist_ok=True)
    out = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="session-", dir=base))
    out.mkdir(parents=True, exist_ok=True)
    plan = out / "plan.json"
    plan.write_text(json.dumps({"options": asdict(opts), "items": [asdict(it) for it in items]}, indent=1))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(paths.ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONUNBUFFERED"] = "1"
    limit = timeout if timeout is not None else 120.0 + sum(
        (it.warmup_s if it.warmup_s is not None else opts.warmup_s) + opts.timeout_s for it in items)
    log: list[str] = []
    # Its own process group: an interrupt here (Ctrl-C, a notebook's stop) stops the session and
    # whatever it started at once, instead of waiting for it to finish its plan.
    # Led by procs' supervisor: the session dies with this process even when it is SIGKILLed.
    proc = procs.start([sys.executable, "-m", "harness.measuring.timing", str(plan), str(out)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, cwd=paths.ROOT)
    # A watchdog, not a check between lines: a child that hangs (a deadlocked launch) prints nothing.
    fired = threading.Event()

    def kill():
        fired.set()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    watchdog = threading.Timer(limit, kill)
    watchdog.daemon = True
    watchdog.start()
    try:
        # A SIGTERM (a timeout around the bench) unwinds too: the session would otherwise run on alone.
        with procs.sigterm_as_interrupt():
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(PROGRESS):
                    _, idx, key = line.rstrip("\n").split(" ", 2)
                    if on_progress:
                        on_progress(int(idx), key)
                else:
                    log.append(line.rstrip("\n"))
    except BaseException:
        watchdog.cancel()
        procs.stop_group(proc)
        raise
    finally:
        rc = proc.wait()
        watchdog.cancel()
    timed_out = fired.is_set()
    files.replace(out / "child.log", "\n".join(log) + "\n")
    timings, setup_errors = read_session(out)
    tail = "\n".join(log[-15:])
    if timed_out:
        raise TimingError(f"the timing session ran past {limit:.0f} s and was stopped; {len(timings)} of {len(items)} "
                          f"measurements done (logs in {out})", timings, tail)
    if rc != 0:
        raise TimingError(f"the timing session failed (status {rc}) after {len(timings)} of {len(items)} "
                          f"measurements (logs in {out}):\n{tail}", timings, tail)
    missing = [k for k in keys if k not in timings and k not in setup_errors]
    if errors is not None:
        errors.update(setup_errors)
        errors.update({k: f"NVBench kept no sample (it drops those taken under {opts.throttle:.0%} of the default "
                          f"SM clock; its report: {out / 'nvbench.md'})" for k in missing})
        return timings
    if setup_errors:
        first = next(iter(setup_errors.items()))
        raise TimingError(f"{len(setup_errors)} measurement(s) could not be set up; first: {first[0]}: {first[1]}",
                          timings, tail)
    if missing:
        raise TimingError(f"NVBench returned no samples for {len(missing)} measurement(s), first {missing[0]!r} "
                          f"(logs in {out}):\n{tail}", timings, tail)
    return timings


def time_one(target: str, options: Options | None = None, **kwargs) -> Timing:
    """One setup, timed alone (a session of one Item)."""
    return run_plan([Item("only", target, kwargs)], options)["only"]


# --- reading a session's results (CPU-tested on a recorded H100 session) -----------------------------------

def summaries(state: dict) -> dict[str, dict]:
    """tag -> {name: value} for one NVBench JSON state."""
    out = {}
    for s in state.get("summaries") or []:
        out[s["tag"]] = {d["name"]: d.get("value") for d in s.get("data", [])}
    return out


def timing_from_state(state: dict, timeout_s: float | None = None) -> Timing | None:
    """A Timing from NVBench's cold-measurement summaries (seconds -> ms); None without samples."""
    s = summaries(state)

    def num(tag, default=float("nan")):
        v = s.get(tag, {}).get("value")
        return float(v) if v is not None else default

    n = int(num("nv/cold/sample_size", 0))
    if n == 0 or "nv/cold/time/gpu/median" not in s:
        return None
    wall = num("nv/cold/walltime")
    return Timing(median_ms=num("nv/cold/time/gpu/median") * 1e3, p25_ms=num("nv/cold/time/gpu/q1") * 1e3,
                  p75_ms=num("nv/cold/time/gpu/q3") * 1e3, samples=n, noise=num("nv/cold/time/gpu/stdev/relative"),
                  walltime_s=wall, sm_clock_mhz=num("nv/cold/sm_clock_rate/mean") / 1e6,
                  timed_out=bool(timeout_s is not None and np.isfinite(wall) and wall >= timeout_s))


def read_session(out: Path) -> tuple[dict[str, Timing], dict[str, str]]:
    """(key -> Timing, key -> setup error) from a session folder: NVBench's JSON (benchmarks named
    m<index>) joined with the child's side file (keys, conditions, work, notes, errors)."""
    out = Path(out)
    plan = json.loads((out / "plan.json").read_text())
    side = json.loads((out / "side.json").read_text()) if (out / "side.json").exists() else {}
    errors = {k: v["error"] for k, v in side.items() if isinstance(v, dict) and v.get("error")}
    path = out / "nvbench.json"
    if not path.exists():
        return {}, errors
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return {}, errors
    timeout_s = plan["options"]["timeout_s"]
    timings = {}
    for bm in data.get("benchmarks", []):
        name = bm.get("name", "")
        if not name.startswith("m") or not name[1:].isdigit():
            continue
        i = int(name[1:])
        if i >= len(plan["items"]):
            continue
        key = plan["items"][i]["key"]
        for st in bm.get("states", []):
            if st.get("is_skipped"):
                continue
            t = timing_from_state(st, timeout_s)
            if t is None:
                continue
            extra = side.get(key) or {}
            timings[key] = Timing(**{**asdict(t), "conditions": extra.get("conditions") or {},
                                     "work": extra.get("work"), "note": extra.get("note") or ""})
    return timings, errors


# --- the child side: python -m harness.measuring.timing PLAN OUTDIR ------------------------------------------------

def resolve(target: str) -> Callable:
    mod, _, fn = target.partition(":")
    if not mod or not fn:
        raise ValueError(f"a setup target is 'package.module:function', got {target!r}")
    return getattr(importlib.import_module(mod), fn)


def _ident(item: dict) -> str:
    return item["target"] + " " + json.dumps(item["kwargs"], sort_keys=True)


def _child(plan_path: str, outdir: str) -> int:
    import cuda.bench as nvb

    out = Path(outdir)
    plan = json.loads(Path(plan_path).read_text())
    opts = Options(**plan["options"])
    items = plan["items"]
    last_use = {_ident(it): i for i, it in enumerate(items)}
    live: dict[str, object] = {}
    side: dict[str, dict] = {}

    def save_side():
        tmp = out / "side.json.tmp"
        tmp.write_text(json.dumps(side, default=float))
        tmp.replace(out / "side.json")

    def make(i: int, it: dict):
        ident = _ident(it)

        def body(state):
            try:
                prep = live.get(ident)
                if prep is None:
                    prep = live[ident] = resolve(it["target"])(**it["kwargs"])
            except Exception as e:  # reported by the parent with the Item's key; the session goes on
                side[it["key"]] = {"error": f"{type(e).__name__}: {e}"}
                save_side()
                state.skip(f"setup failed: {type(e).__name__}")
                return
            launch = prep.launch
            cast = [None, None]  # NVBench's stream as a cudaStream_t, converted once per stream

            def run(launch_ctx):
                s = launch_ctx.get_stream().addressof()
                if cast[0] != s:
                    cast[0], cast[1] = s, cudart.ffi.cast("cudaStream_t", s)
                launch(cast[1])

            with conditions.Sampler(0) as sampler:
                state.exec(run, batched=False)  # cold measurements only: L2 flushed, blocking kernel
            side[it["key"]] = {"conditions": sampler.summary(), "work": getattr(prep, "work", None),
                               "note": getattr(prep, "note", "") or ""}
            if last_use[ident] == i:
                live.pop(ident, None)
                prep.close()
            save_side()
            print(f"{PROGRESS} {i} {it['key']}", flush=True)

        body.__name__ = f"m{i:05d}"
        return body

    for i, it in enumerate(items):
        bm = nvb.register(make(i, it))
        bm.set_stopping_criterion("stdrel")
        bm.set_criterion_param_float64("min-time", opts.min_time_s)
        bm.set_criterion_param_float64("max-noise", opts.max_noise_pct)
        warm = it.get("warmup_s")
        bm.set_cold_warmup_runs(1_000_000)  # bounded by the walltime below: a time-based warm-up
        bm.set_cold_max_warmup_walltime(opts.warmup_s if warm is None else warm)
        bm.set_timeout(opts.timeout_s)
        bm.set_throttle_threshold(opts.throttle)
    nvb.run_all_benchmarks(["cudalab", "--json", str(out / "nvbench.json"), "--md", str(out / "nvbench.md"),
                            "--devices", "0"])
    save_side()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m harness.measuring.timing PLAN.json OUTDIR")
    sys.exit(_child(sys.argv[1], sys.argv[2]))

"""Shared test set-up: the `gpu` marker's skip (summarised one line per reason), seeds, and the build
the tests load from."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from harness.compile import build
from harness.measuring import gpus

# Under `invoke test --gpus ...` each pytest-xdist worker takes one GPU: set before CUDA starts below.
gpus.pin_worker()

from harness.calling import cudart  # noqa: E402

SEEDS = (0, 1, 2)


def _gpu_state() -> tuple[bool, str]:
    try:
        return cudart.gpu_available()
    except Exception as e:  # libcudart missing altogether
        return False, str(e)


GPU_OK, GPU_WHY = _gpu_state()


def pytest_sessionstart(session):
    """Under pytest-xdist with a GPU, the controller builds the fault twins the GPU tests load (tests/
    fault_build.py) in one make before any worker starts, its -j compiling them side by side while the
    cores are free. Left to the workers, each twin was built by the first test to need it, while a
    dozen other workers' tests ran, and every test needing it waited. A failed build is left for those
    tests to report, each with the build's line."""
    config = session.config
    if hasattr(config, "workerinput") or not GPU_OK or not getattr(config.option, "numprocesses", None):
        return
    try:
        from fault_build import build_all
    except ImportError:  # this conftest under a suite without the lab's tests/ (a test's own tiny suite)
        return
    from harness.base.errors import CudalabError

    with contextlib.suppress(CudalabError):
        build_all()


def pytest_collection_modifyitems(config, items):
    # Longest first: pytest-xdist hands tests out in this order, so the long ones start while every
    # worker is free and the run ends on short tests, not on one worker finishing a long one alone
    # (a stable sort: everything else keeps its order).
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    if GPU_OK:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {GPU_WHY}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pythonpath(*first, env=None) -> str:
    """PYTHONPATH for a test's subprocess: `first` (the project, a stand-in package) ahead of every entry
    the caller's environment (`env`, default os.environ) already has. Extend, never replace: what was
    installed through PYTHONPATH (a pip --target folder holding cffi and invoke, say) must stay importable."""
    env = os.environ if env is None else env
    keep = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([str(p) for p in first] + keep)


def sigint_as_from_a_terminal() -> None:
    """preexec_fn for an interrupt test's child: SIGINT back to its default, so that Python raises
    KeyboardInterrupt on it. A shell that starts pytest in the background (`cmd &`, nohup, some CI
    runners) ignores SIGINT in everything it starts, and Python keeps an ignored SIGINT ignored: the
    test would then see its Ctrl-C do nothing and fail for a reason outside the code it checks."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def pids_mentioning(marker: str) -> list[int]:
    """Processes other than this one whose command line mentions `marker` (a test's own folder or tag):
    how the interrupt tests find the children that must not outlive what started them."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass  # gone meanwhile, or not ours to read
    return [p for p in pids if p != os.getpid()]


def skip_reasons(reports) -> list[tuple[int, str]]:
    """(count, reason) for each distinct skip reason, most frequent first."""
    counts: dict[str, int] = {}
    for rep in reports:
        lr = getattr(rep, "longrepr", None)
        reason = str(lr[2]) if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
        reason = reason.removeprefix("Skipped: ")
        counts[reason] = counts.get(reason, 0) + 1
    return sorted(((n, r) for r, n in counts.items()), key=lambda t: (-t[0], t[1]))


# Each test's time, written as it finishes, to the file this variable names (CSV: seconds, phase, outcome,
# when it finished, the worker, test): a run stopped at a deadline (a device lent ten minutes a call) still says where its time went,
# which --durations prints only at the very end. Written once, by the process that reports (pytest-xdist's
# controller, not each worker). A worker is told by its config, not by PYTEST_XDIST_WORKER in the
# environment, which a pytest started from inside a worker's test inherits.
TIMES_ENV = "CUDALAB_TEST_TIMES"
_REPORTS = {"here": True}


def pytest_configure(config):
    _REPORTS["here"] = not hasattr(config, "workerinput")


def pytest_runtest_logreport(report):
    path = os.environ.get(TIMES_ENV)
    if not path or not _REPORTS["here"]:
        return
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as f:
        # The worker and the time it finished, for a timeline of the run; the test's id last (it may hold commas).
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "-")
        f.write(f"{report.duration:.3f},{report.when},{report.outcome},{getattr(report, 'stop', 0):.1f},{worker},"
                f"{report.nodeid}\n")


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Skips as one line per reason, not one per test or per file (a run without a GPU skips a hundred
    tests for the same reason). -ra still lists every failure and error in the short summary."""
    tr = terminalreporter
    skipped = tr.stats.get("skipped", [])
    if "s" not in tr.reportchars or not skipped:
        return
    tr.reportchars = tr.reportchars.replace("s", "")  # the short summary below then leaves skips out
    tr.write_sep("=", "skipped, one line per reason", cyan=True)
    for n, reason in skip_reasons(skipped):
        tr.write_line(f"SKIPPED {n} test{'s' if n != 1 else ''}: {reason}")


# Tests that must not overlap with each other under `invoke test --jobs N`: a profiler owns the GPU's
# counters while it replays a kernel, the slow tests time and profile whole programs, and `serial` ones
# share some state of the tree. Each holds this machine-wide lock while it runs, whichever worker it is
# on. (pytest-xdist's own grouping, --dist loadgroup with xdist_group marks, silently stopped working
# with pytest 9.2: pytest-dev/pytest-xdist#1386.)
SERIAL_MARKS = ("serial", "profiler", "slow")
SERIAL_LOCK = Path(tempfile.gettempdir()) / f"cudalab-serial-tests-{os.getuid()}.lock"  # one per user


@pytest.fixture(autouse=True)
def _one_at_a_time(request):
    if not any(m in request.node.keywords for m in SERIAL_MARKS):
        yield
        return
    with build.file_lock(SERIAL_LOCK):
        yield


@pytest.fixture(params=SEEDS, ids=[f"seed{s}" for s in SEEDS])
def rng(request) -> np.random.Generator:
    """Random inputs from several seeds (never zeros)."""
    return np.random.default_rng(request.param)


def poison(shape, dtype) -> np.ndarray:
    """An output array whose every element is obviously unwritten: NaN for floats, 0xAB bytes else."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.full(shape, np.nan, dtype=dt)
    return np.full(int(np.prod(shape)) * dt.itemsize, 0xAB, dtype=np.uint8).view(dt).reshape(shape)


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """bench/results/ moved to a temporary folder: the tuning caches and bench CSVs a test writes or
    reads there never touch the committed ones."""
    from harness.base import paths

    monkeypatch.setattr(paths, "RESULTS_DIR", tmp_path)
    return tmp_path


def write_json(path, **data):
    """A JSON file (a tuning cache, say) with `data`, its folder created."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))



# --- the build the tests load from --------------------------------------------------------------------
# Tests build what they load, on demand, through the harness's one build (incremental; its file lock
# keeps pytest-xdist workers from racing), rather than skipping when `invoke build` was not run first:
# a GPU run must never be green with skips for want of a build. GPU tests reach these only once they
# run, so where there is no GPU they are skipped (by the marker, above) before anything is built.

_BUILT: set[str] = set()  # programs this process has built (or found up to date) once already


def build_error_line(prog: str, e: Exception) -> str:
    """One line for a failed build: its first compiler diagnostic, else the last line make printed."""
    from harness.base.errors import BuildError

    if isinstance(e, BuildError) and e.diagnostics:
        return f"building {prog} failed: {e.diagnostics[0]}"
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"building {prog} failed: {lines[-1] if lines else type(e).__name__}"


def ensure_built(prog: str, kind: str = "lib") -> Path:
    """`prog`'s library (kind "lib") or executable ("exe"), built first if it is missing or stale. A
    build that fails fails the calling test with the build's one line, never skips it. Call it from a
    test or a fixture, never at collection (parametrize lists: built_names below)."""
    from harness.base.errors import CudalabError, NotBuilt

    if prog in _BUILT:
        try:
            return build.require(prog, kind)
        except NotBuilt:
            _BUILT.discard(prog)  # changed since (a test replaced it): build again
    try:
        build.build(build.targets(prog))
    except CudalabError as e:  # BuildError, ToolMissing (no nvcc)
        pytest.fail(build_error_line(prog, e), pytrace=False)
    _BUILT.add(prog)
    return build.require(prog, kind)


def refuse_loads_after_the_table(monkeypatch, *progs: str) -> None:
    """For a test that bad sizes are refused before any launch. Naming a variant reads lib<prog>.so's
    variant table (a load, never a launch, cached for the process): read each named program's here
    first (a block that checks its own table and attention's names both), then make every later
    library.load fail the test. Without the first read the test would pass or fail by whether
    something earlier in the same process had read the table."""
    from harness.calling import library

    for prog in progs:
        ensure_built(prog)
        library.read_table(prog)
        with contextlib.suppress(AttributeError):  # the kinds of variant, where the table tags them
            library.read_table(prog, "tags")

    def refuse(*a, **kw):
        raise AssertionError("reached the library: the sizes were not refused before any launch")

    monkeypatch.setattr(library, "load", refuse)


def built_names(names, prog: str) -> list:
    """A parametrize list read from a program's built library (its one C table): `names` is a callable.
    With a GPU, the program is built first (the list is what the GPU tests run). Without one, nothing
    is built at collection: before `invoke build` the list is one placeholder that skips with the
    reason, so that collecting never needs a build (CI counts the GPU tests before it builds). A failed
    build gives a placeholder that fails with the build's line."""
    from harness.base.errors import CudalabError, NotBuilt

    if GPU_OK and prog not in _BUILT:
        try:
            build.build(build.targets(prog))
            _BUILT.add(prog)
        except CudalabError as e:
            return [pytest.param("build-failed", marks=pytest.mark.build_failed(build_error_line(prog, e)))]
    try:
        return list(names())
    except NotBuilt as e:
        return [pytest.param("not-built", marks=pytest.mark.skip(reason=f"{prog}'s variant table: {e}"))]


@pytest.fixture(autouse=True)
def _failed_build(request):
    """A parametrize list's placeholder for a build that failed at collection fails here, with its line."""
    mark = request.node.get_closest_marker("build_failed")
    if mark is not None:
        pytest.fail(mark.args[0], pytrace=False)


def stand_in(monkeypatch, prog: str, variants=(), **fields):
    """A program record for a program that does not exist, as the registry's callers receive one: its
    variant table (read from C for a real program) is `variants`, through the one table reader."""
    from harness.calling import library
    from harness.programs import Program

    if variants:
        real = library.read_table

        def read_table(p, kind="variant"):
            return tuple(variants) if (p, kind) == (prog, "variant") else real(p, kind)

        monkeypatch.setattr(library, "read_table", read_table)
    return Program(name=prog, summary="a stand-in", variants=bool(variants), **fields)

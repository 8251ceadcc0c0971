"""`invoke exercise`: the courses' exercises, made from the lab's own solutions and graded.

    list                      every exercise, its tracks, where it comes from, the learner's status
    start NAME [--track T]    write the learner's file (never over one that exists)
    check NAME [--track T]    compile or import it, run the checks, end with one verdict line
    hint NAME                 the next hint, one at a time, remembered
    solution NAME [--write]   show the lab's solution; --write puts it in the learner's file (with a backup)

Each exercise's blanks are marked in the lab's sources (harness/user/exercises/markers.py), so the
learner's file and the solution are made from the same text. The learner's files and a small
progress file live in the project's `exercises/` (in `exercises/` of the current folder when run from
outside the project; --dir to choose another).
See harness/user/exercises/README.md.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from harness.base import files, paths
from harness.base.errors import CudalabError
from harness.base.paths import ROOT
from harness.user.exercises import catalog, markers
from harness.user.exercises.catalog import Exercise

TRACKS = ("python", "cuda")
DEFAULT_DIR = "exercises"
PROGRESS = ".progress.json"
MAX_SOURCE_BYTES = 1 << 20  # a learner's file: the lab's largest exercise is under 10 kB
_TAG = re.compile(r"cudalab exercise (?P<name>[A-Za-z0-9_]+) \((?P<track>python|cuda) track\)")


class ExerciseError(CudalabError, ValueError):
    """Bad input from the learner: one line that names the fix."""


def exercise(name: str) -> Exercise:
    ex = catalog.by_name().get(str(name))
    if ex is None:
        raise ExerciseError(f"no exercise called {name!r}; the exercises: {', '.join(e.name for e in catalog.exercises())} "
                            f"(invoke exercise list)")
    return ex


def track_of(ex: Exercise, track: str | None, folder: Path | None = None) -> str:
    """The track asked for, else the one whose file exists (python when both or neither do)."""
    if track:
        if track not in TRACKS:
            raise ExerciseError(f"--track must be python or cuda, got {track!r}")
        if track not in ex.tracks:
            raise ExerciseError(f"{ex.name} has only the {' and '.join(ex.tracks)} track")
        return track
    if folder is not None and "cuda" in ex.tracks and not learner_path(folder, ex, "python").exists() \
            and learner_path(folder, ex, "cuda").exists():
        return "cuda"
    return "python"


# --- texts ---------------------------------------------------------------------------------------

def _source(ex: Exercise, track: str) -> tuple[str, str]:
    rel = ex.py_source if track == "python" else ex.cu_source
    return rel, (ROOT / rel).read_text()


def spans(ex: Exercise, track: str) -> list[markers.Span]:
    rel, text = _source(ex, track)
    out = markers.parse(text, ex.name, rel)
    if not out:
        raise markers.MarkerError(f"{rel}: no copy span for exercise {ex.name}")
    if track == "cuda" and ex.cu_glue:
        out += markers.parse(f"// EXERCISE {ex.name}: copy\n{ex.cu_glue.strip()}\n// EXERCISE {ex.name}: end copy\n",
                             ex.name, f"the entry point of {ex.name}")
    return out


def _header(ex: Exercise, track: str) -> str:
    rel = ex.py_source if track == "python" else ex.cu_source
    flag = "" if track == "python" else " --track cuda"
    if track == "python":
        what = (f"The check imports this file and reads {ex.py_entry}: keep its name."
                if ex.py_entry and ex.py_entry.isupper() else
                f"The check imports this file and runs {ex.py_entry} on harness.base.sim: keep its name and parameters.")
        return (f"# cudalab exercise {ex.name} (python track): {ex.writes}.\n"
                f"# Made from {rel}, the lab's own code, with the parts to write replaced by TODOs.\n"
                f"# Fill in every TODO, then run: invoke exercise check {ex.name}{flag}\n# {what}\n"
                "from __future__ import annotations\n\nimport math  # noqa: F401\n\nimport numpy as np  # noqa: F401\n\n"
                "from harness.base import sim  # noqa: F401\nfrom harness.base.sim import dim3  # noqa: F401\n\n\n")
    kernels = ", ".join(ex.cu_kernels)
    return (f"// cudalab exercise {ex.name} (cuda track): {ex.writes}.\n"
            f"// Made from {rel}, the lab's own code, with the parts to write replaced by TODOs.\n"
            f"// Fill in every TODO, then run: invoke exercise check {ex.name}{flag}\n"
            f"// The check compiles this file on its own (nvcc with the lab's flags, cuda/common on the include path)\n"
            f"// and calls the entry point at the end: keep {kernels}'s name and parameters, and the entry point.\n"
            f"{ex.cu_includes}#include \"check.cuh\"\n\n")


def learner_text(ex: Exercise, track: str) -> str:
    comment = "#" if track == "python" else "//"
    return _header(ex, track) + markers.render(spans(ex, track), ex.name, comment, "todo")


def solution_text(ex: Exercise, track: str) -> str:
    comment = "#" if track == "python" else "//"
    return _header(ex, track) + markers.render(spans(ex, track), ex.name, comment, "solution")


# --- the learner's folder and files --------------------------------------------------------------

def default_folder() -> Path:
    """Where the learner's files go without --dir: exercises/ in the current folder, except anywhere
    inside the project, where it is the project's own exercises/ (ignored by git), so that a command
    run from cuda/ or harness/ never makes a second, untracked exercises/ there."""
    here = Path.cwd().resolve()
    root = paths.ROOT.resolve()
    return paths.ROOT / DEFAULT_DIR if here == root or root in here.parents else Path(DEFAULT_DIR)


def folder(dir_: str | os.PathLike | None) -> Path:
    d = Path(dir_).expanduser() if dir_ not in (None, "") else default_folder()
    if d.exists() and not d.is_dir():
        raise ExerciseError(f"--dir {d} is a file, not a folder: name a folder (default: ./{DEFAULT_DIR})")
    return d


def learner_path(d: Path, ex: Exercise, track: str) -> Path:
    return d / f"{ex.name}.{'py' if track == 'python' else 'cu'}"


def read_learner(d: Path, ex: Exercise, track: str) -> tuple[Path, str]:
    """The learner's file, checked: it exists, is not empty, and is this exercise's (one line each)."""
    path = learner_path(d, ex, track)
    flag = "" if track == "python" else " --track cuda"
    if not path.exists():
        raise ExerciseError(f"no file {path}: run `invoke exercise start {ex.name}{flag}` first"
                            + (f" (with --dir {d})" if d.resolve() != default_folder().resolve() else ""))
    if path.is_dir():
        raise ExerciseError(f"{path} is a folder: move it away, then `invoke exercise start {ex.name}{flag}`")
    size = path.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise ExerciseError(f"{path} is {size:,} bytes, over the check's limit of {MAX_SOURCE_BYTES:,}: an exercise's "
                            f"file is a few kilobytes; keep your solution and cut what was pasted in")
    text = path.read_text(errors="replace")
    if not text.strip():
        raise ExerciseError(f"{path} is empty: write your solution there, or delete it and run "
                            f"`invoke exercise start {ex.name}{flag}` for a fresh copy")
    m = _TAG.search("\n".join(text.splitlines()[:5]))
    if m and m.group("name") != ex.name:
        raise ExerciseError(f"{path} is the file of exercise {m.group('name')}, not {ex.name}: check it with "
                            f"`invoke exercise check {m.group('name')}`, or move it away and run "
                            f"`invoke exercise start {ex.name}{flag}`")
    if m and m.group("track") != track:
        raise ExerciseError(f"{path} is the {m.group('track')} track's file: check it with --track {m.group('track')}")
    return path, text


# --- progress ------------------------------------------------------------------------------------

def load_progress(d: Path) -> dict:
    p = d / PROGRESS
    if not p.exists():
        return {}
    try:
        data = json.loads(p.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # a damaged progress file costs the record, never the learner's work


def update_progress(d: Path, name: str, **changes) -> dict:
    """track_status=(track, status, ratio): the status is the last check's (a pass, then a failing
    check, reads failed; "passed_once" keeps that it passed), "started" changes only a track never
    checked; ratio keeps the best."""
    data = load_progress(d)
    entry = data.setdefault(name, {})
    for key, value in changes.items():
        if key == "track_status":
            track, status, ratio = value
            t = entry.setdefault(track, {})
            if status != "started" or t.get("status") in (None, "started"):
                t["status"] = status
            if status == "passed":
                t["passed_once"] = True
            if ratio is not None and (t.get("best_ratio") is None or ratio > t["best_ratio"]):
                t["best_ratio"] = round(float(ratio), 3)
        else:
            entry[key] = value
    d.mkdir(parents=True, exist_ok=True)
    files.replace(d / PROGRESS, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


# --- the actions (check is in harness/user/exercises/check.py) ----------------------------------------

def _status(prog: dict, d: Path, ex: Exercise, track: str) -> str:
    if track not in ex.tracks:
        return "-"
    s = prog.get(ex.name, {}).get(track, {})
    st = s.get("status") or ("started" if learner_path(d, ex, track).exists() else "not started")
    if st != "passed" and s.get("passed_once"):
        st += " (passed before)"
    if s.get("best_ratio") is not None:
        st += f", best {s['best_ratio']:.2f}x"
    return st


def listing(d: Path) -> list[dict]:
    """A row per exercise: its name and each track's status (the last check's; `best` is the speed
    against the lab's solution). Narrow enough for 80 columns: where each comes from is in the README."""
    prog = load_progress(d) if d.is_dir() else {}
    return [{"exercise": ex.name, **{t: _status(prog, d, ex, t) for t in TRACKS}} for ex in catalog.exercises()]


def start(name: str, track: str | None = None, dir_=None) -> tuple[Path, bool]:
    """(path, created). An existing file is never overwritten: created is False and the path is its."""
    ex = exercise(name)
    d = folder(dir_)
    track = track_of(ex, track)
    path = learner_path(d, ex, track)
    if path.exists():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    path = files.create(path, learner_text(ex, track))  # never over a file that appeared meanwhile
    update_progress(d, ex.name, track_status=(track, "started", None))
    return path, True


def hint(name: str, dir_=None) -> tuple[int, int, str]:
    """(number, total, text) of the next hint; after the last, the last again."""
    ex = exercise(name)
    d = folder(dir_)
    seen = int(load_progress(d).get(ex.name, {}).get("hints", 0)) if d.is_dir() else 0
    k = min(seen + 1, len(ex.hints))
    update_progress(d, ex.name, hints=k)
    return k, len(ex.hints), ex.hints[k - 1]


def solution(name: str, track: str | None = None, dir_=None, write: bool = False) -> tuple[str, Path | None, Path | None]:
    """(the solution's text, the file written or None, the backup of what it replaced or None)."""
    ex = exercise(name)
    d = folder(dir_)
    track = track_of(ex, track, d)
    text = solution_text(ex, track)
    if not write:
        return text, None, None
    path = learner_path(d, ex, track)
    backup = None
    if path.exists():
        if path.is_dir():
            raise ExerciseError(f"{path} is a folder: move it away first")
        k = 1
        while (path.parent / f"{path.name}.bak{k}").exists():
            k += 1
        backup = path.parent / f"{path.name}.bak{k}"
        backup = files.create(backup, path.read_bytes())  # the learner's bytes as they are; never over a file
    path.parent.mkdir(parents=True, exist_ok=True)
    files.replace(path, text)
    update_progress(d, ex.name, track_status=(track, "started", None), solution_written=True)
    return text, path, backup

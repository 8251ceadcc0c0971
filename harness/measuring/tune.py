"""`invoke tune <prog>`: a program's small parameter search, timed with harness.measuring.timing and cached per
GPU under bench/results/<gpu>/ (the program decides the file and what "the winner" means).

A program that can be tuned offers `tune(size, save, on_progress) -> (table, path)` in its module
(the registry finds it, harness.programs.tuner: this module never imports a program); matmul times
its compiled ladder configurations and caches the fastest for "09_tuned"; attention times 03_flash_bf16's choices (warps, rows per warp, key tile, stages) per head size; gemm_tc
times its wgmma configurations (schedule, stages, raster) for "06_wgmma_tuned". The cache is one JSON file
per program and GPU model, bench/results/<gpu>/<prog>-tune.json, read and written only here.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd

from harness.base import files, paths
from harness.calling import cudart, library, runner
from harness.measuring import bench, timing

# --- the cache: bench/results/<gpu>/<prog>-tune.json -------------------------------------------------

def cache_path(prog: str, device: str) -> Path:
    return paths.RESULTS_DIR / paths.gpu_folder(device) / f"{prog}-tune.json"


# A program's name as the registry spells it (cuda/<prog>/): the only form a tune JSON's "program" may
# take, because readers build file names from it (a "zz/../../evil" would name a file anywhere).
_PROGRAM_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


class BadTuneFile(ValueError):
    """A tune JSON that is not one `save` wrote: unreadable, or a field of the wrong type. Its message
    is one line naming the file."""


def _check_str_map(path: Path, field: str, value) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise BadTuneFile(f"{path}: {field!r} must map names to configuration names, got {value!r:.60}")


def read(path: Path) -> dict:
    """The one reader of a tune JSON: the parsed object with every field this project reads checked for
    its type (winner: a name; winners: {D: name}; winners_by_variant: {variant: {D: name}}; table: a
    list of rows; device, program, size, date: text). BadTuneFile, one line naming the file, otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BadTuneFile(f"{path}: not a tuning result ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None
    if not isinstance(data, dict):
        raise BadTuneFile(f"{path}: not a tuning result (a JSON {type(data).__name__}, not an object)")
    for field in ("device", "program", "size", "date", "winner"):
        if field in data and not isinstance(data[field], str):
            raise BadTuneFile(f"{path}: {field!r} must be text, got {data[field]!r:.60}")
    if "program" in data and not _PROGRAM_NAME.fullmatch(data["program"]):
        raise BadTuneFile(f"{path}: 'program' must be a program's name (lower-case letters, digits and _), "
                          f"got {data['program']!r:.60}")
    if "winners" in data:
        _check_str_map(path, "winners", data["winners"])
    if "winners_by_variant" in data:
        by = data["winners_by_variant"]
        if not isinstance(by, dict):
            raise BadTuneFile(f"{path}: 'winners_by_variant' must map variants to {{D: name}}, got {by!r:.60}")
        for variant, winners in by.items():
            _check_str_map(path, f"winners_by_variant[{variant!r}]", winners)
    if "table" in data and not (isinstance(data["table"], list) and all(isinstance(r, dict) for r in data["table"])):
        raise BadTuneFile(f"{path}: 'table' must be a list of rows, got {data['table']!r:.60}")
    return data


def cached(prog: str, device: str) -> tuple[dict | None, str]:
    """(the cached search, why) when `prog` was tuned on this exact device, else (None, the reason the
    program's compiled default applies: no file, a bad file named, another device). The caller checks
    that what it names exists in this build."""
    path = cache_path(prog, device)
    if not path.exists():
        return None, f"no tuning result at {path} (run `invoke tune {prog}`)"
    try:
        data = read(path)
    except BadTuneFile as e:
        return None, f"{e}; the compiled default runs (run `invoke tune {prog}` again)"
    if data.get("device") != device:
        return None, f"{path} was tuned on {data.get('device')!r}, not {device!r}"
    return data, f"tuned on this device ({path})"


def cached_winner(prog: str, device: str | None, valid) -> tuple[str | None, str]:
    """(winner, why) for a program whose search has one winner (matmul's 09_tuned, gemm_tc's
    06_wgmma_tuned): the cached "winner" when `invoke tune <prog>` ran on this exact device and names
    one of `valid()` (the configurations this build has; asked only when there is a cache to check),
    else (None, why the compiled default runs)."""
    if device is None:
        device = cudart.device_name(0)
    data, why = cached(prog, device)
    if data is None:
        return None, why
    winner = data.get("winner")
    if winner not in valid():
        return None, f"{cache_path(prog, device)} names {winner!r}, which this build does not have"
    return winner, why


def save(prog: str, device: str, result: dict, table) -> Path:
    """Write the search's `result` (the winner(s)) with the device, toolchain, date and whole table."""
    meta = bench.metadata()
    path = cache_path(prog, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"program": prog, "device": device, **result, "driver": meta["driver"], "nvcc": meta["nvcc"],
               "date": meta["date"], "timing": "harness.measuring.timing: NVBench cold measurements (L2 flushed), median, stopped on noise",
               "table": json.loads(table.to_json(orient="records"))}
    # Whole or not at all: a run interrupted while writing, or two at once, never leave a torn cache.
    return files.replace(path, json.dumps(payload, indent=1) + "\n")


def pick_winner(df, prog: str) -> str:
    """The fastest configuration of a single-winner search whose status is "ok" (highest TFLOP/s);
    RuntimeError naming every status when none was timed."""
    ok = df[(df["status"] == "ok") & df["tflops"].notna()] if "tflops" in df else df.iloc[:0]
    if ok.empty:
        raise RuntimeError(f"no {prog} configuration was timed: " + "; ".join(map(str, df["status"])))
    return str(ok.loc[ok["tflops"].idxmax(), "config"])


def time_and_pick(prog: str, device: str, rows: list[dict], items: list, size: int, options, on_progress,
                  cache: bool):
    """The second half of a single-winner search (matmul, gemm_tc) at size^3: one NVBench session
    (harness.measuring.timing) over `items`, the times put into `rows` (the checked configurations; the refused
    and wrong ones keep their status), the fastest picked and, with `cache`, cached for this GPU and
    handed to the library, so that the tuned rung runs it from now on in this process too (apply_tuned
    reads the cache only while the library still runs its compiled default). Returns (table, path or None)."""
    got = timing.run_plan(items, options, on_progress=(lambda i, key: on_progress(key)) if on_progress else None)
    for r in rows:
        t = got.get(r["config"])
        if t is not None:
            r.update({"ms": t.median_ms, "iqr_ms": t.iqr_ms, "tflops": t.rate(2.0 * size**3) / 1e12})
    df = pd.DataFrame(rows)
    winner = pick_winner(df, prog)
    df["winner"] = df["config"] == winner
    path = None
    if cache:
        path = save(prog, device, {"size": f"{size}^3", "winner": winner}, df)
        set_tuned(prog, library.table_index(prog, "config", winner))
    return df, path


def set_tuned(prog: str, index: int) -> None:
    """What a program's tuned rung runs in this process from now on: a configuration's index in its
    table, or -1 for the compiled default as in a fresh process (nothing chosen: the next apply_tuned
    reads the cache again)."""
    getattr(library.load(prog), f"{prog}_set_tuned")(index)


def tuned_is_set(prog: str) -> bool:
    """Whether a set has chosen what the tuned rung runs in this process (False: the compiled default)."""
    return bool(getattr(library.load(prog), f"{prog}_tuned_is_set")())


def apply_tuned(prog: str, tuned_choice) -> str:
    """Point a program's tuned rung (matmul's 09_tuned, gemm_tc's 06_wgmma_tuned) at this GPU's cached
    winner unless a set has already chosen it in this process. The library is the one holder of the
    choice (<prog>_set_tuned, <prog>_tuned_config, <prog>_tuned_is_set): this asks it each time and
    keeps no copy; `tuned_choice()` says why the cache was or was not used. Without a usable cache
    nothing is set (setting matmul's default would check it against the device, where a launch's own
    check says more), so a later call looks at the cache again. Returns the configuration the rung runs."""
    lib = library.load(prog)
    if not tuned_is_set(prog):
        winner, _why = tuned_choice()
        if winner is not None:
            set_tuned(prog, library.table_index(prog, "config", winner))
    return library.read_table(prog, "config")[getattr(lib, f"{prog}_tuned_config")()]


def run_with_tuned(prog: str, args: list[str], variant: str | None, tuned_variant: str, tuned_choice,
                   default_note: str) -> int:
    """The `invoke run <prog>` hook of a program with a tuned rung (matmul's 09_tuned, gemm_tc's
    06_wgmma_tuned): build/bin/<prog> with the cached winner passed as --config when the run includes
    the tuned rung (the executable cannot read the JSON cache itself); without one, a line on stderr
    says which configuration runs and why. Returns the exit status."""
    argv = list(args)
    if variant is not None:
        argv = ["--variant", variant] + argv
    chosen = argv[argv.index("--variant") + 1] if "--variant" in argv[:-1] else None
    if "--config" not in argv and chosen in (tuned_variant, "all"):
        try:
            winner, why = tuned_choice()
        except Exception as e:  # no GPU, library missing: the executable will say so itself
            winner, why = None, str(e)
        if winner is not None:
            argv = ["--config", winner] + argv
        else:
            print(f"{tuned_variant}: {default_note} ({why})", file=sys.stderr)
    res = runner.run(prog, *argv, check=False, timeout=600)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    return res.returncode


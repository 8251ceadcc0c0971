"""build/report/index.md and a self-contained build/report/index.html from whatever build/ holds.

The report opens with the tour: each program in the order a learner meets it, its picture and one
line on what the picture shows, captioned with where it came from (this run, computed on the CPU, or
the picture committed with the program). Then the tests of the run that wrote the report (the junit
file the caller names: `invoke demo` writes its own steps as one), the bench as ratios against the
targets still in force (long tables folded), a roofline, the device, the sanitizer, the profiles and
any other figure. A section with nothing behind it says "not generated" and how to generate it.
index.md links the pictures relatively (copied into build/report/img/); index.html embeds them as
base64, so either the folder or the one HTML file can be shared. Nothing here launches anything.
"""

from __future__ import annotations

import base64
import contextlib
import html as _html
import json
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.base import files
from harness.base.paths import BUILD, RESULTS_DIR, ROOT
from harness.measuring import results_csv

BENCH_COLUMNS = ["program", "variant", "size", "ratio", "target", "meets_target", "value", "unit", "ceiling",
                 "median_ms"]
IMG = "img"  # outdir/img/: the pictures index.md links
FOLD_ROWS = 12  # a table longer than this is folded (<details>) under its one-line summary


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)  # paragraphs (plain text, may hold `code`)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    captions: dict = field(default_factory=dict)  # image path -> caption (else its file name)
    folded: set = field(default_factory=set)  # table names, and "images", shown folded under a summary
    grid: bool = False  # images side by side (the tour)
    missing: str = ""  # "not generated: ..." when there is nothing

    @property
    def empty(self) -> bool:
        return not (self.text or self.tables or self.images)


# --- gathering -------------------------------------------------------------------------------------

def _glob(folder: Path, *patterns: str) -> list[Path]:
    out: list[Path] = []
    for pat in patterns:
        out += sorted(p for p in folder.glob(pat) if p.is_file())
    return list(dict.fromkeys(out))


def _step_details(demo: dict | None) -> dict[Path, str]:
    """picture path -> the detail of the demo step that drew it (says "computed on the CPU" where so)."""
    out = {}
    for st in (demo or {}).get("steps", []):
        if st.get("status") == "passed":
            for o in st.get("outputs", []):
                out[Path(o).resolve()] = st.get("detail", "")
    return out


def _source(details: dict[Path, str], p: Path) -> str:
    """Where a picture of this run came from, in a few words, from the demo step that drew it."""
    how = details.get(p.resolve())
    if how is None:
        return "drawn in this build folder"
    if "recorded" in how:
        return "recorded on a GPU, drawn by this run"
    if "computed on the CPU" in how:
        return "this run, " + how[how.index("computed on the CPU"):].split(":")[0]
    return "this run, on the GPU"


def side_by_side(pictures: list[Path], labels: tuple[str, ...], dest: Path, title: str = "") -> Path:
    """The pictures drawn one beside the other in one figure, each under its label (a program's input
    and its output: grayscale's colour test picture and its grey image), written to `dest`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(pictures), figsize=(5 * len(pictures), 3.2), squeeze=False)
    for ax, p, label in zip(axes[0], pictures, labels):
        pixels = plt.imread(p)
        ax.imshow(pixels, cmap="gray" if pixels.ndim == 2 else None, vmin=0, vmax=1 if pixels.dtype.kind == "f" else 255)
        ax.set_title(label, fontsize=10)
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=110)
    plt.close(fig)
    return dest


def tour_section(build: Path, demo: dict | None, keep, root: Path = ROOT, img: Path | None = None,
                 tour=()) -> Section:
    """Each program's picture from this run, else the one committed with it, captioned. `tour` is
    (program, entry) in the order a learner meets them, each entry with `shows`, `drawn` (globs under
    build/), `committed` (paths in the repository) and `labels`: the programs' records give it. A
    program whose run draws several labelled pictures (an input and its output) shows them side by
    side in one figure, drawn into `img`, so that the two are compared at a glance."""
    s = Section("The tour", grid=True)
    s.text.append("Each program in the order a learner meets it, with its picture and what the picture shows. "
                  "Each caption says where the picture came from: this run (on the GPU, or computed on the CPU "
                  "where there is none) or the picture committed with the program.")
    details = _step_details(demo)
    missing = []
    for prog, t in tour:
        drawn = [(p, t.labels[i] if i < len(t.labels) else "") for i, pat in enumerate(t.drawn)
                 for p in _glob(build, pat) if keep(p)]
        if drawn and img is not None and len(t.labels) > 1 and len(drawn) == len(t.labels):
            pair = side_by_side([p for p, _ in drawn], t.labels, img / f"tour_{prog}.png")
            s.images.append(pair)
            s.captions[pair] = (f"**{prog}**: {t.shows}: {' beside '.join(t.labels)}. "
                                f"({_source(details, drawn[-1][0])})")
            continue
        if drawn:
            for p, label in drawn:
                s.images.append(p)
                s.captions[p] = f"**{prog}**: {t.shows}{': ' + label if label else ''}. ({_source(details, p)})"
            continue
        committed = [root / c for c in t.committed if (root / c).is_file()]
        for p in committed:
            s.images.append(p)
            s.captions[p] = f"**{prog}**: {t.shows}. (committed picture, `{p.relative_to(root).as_posix()}`)"
        if not committed:
            missing.append(f"`{prog}` ({t.shows})")
    if missing:
        s.text.append("No picture in this run for " + "; ".join(missing) + ": these need a GPU "
                      "(`invoke demo` on one draws them).")
    return s


def device_section(facts: dict | None) -> Section:
    s = Section("Device")
    if not facts:
        s.missing = "not generated: run `invoke report` (or `invoke demo`) to record the device and toolchain"
        return s
    if facts.get("device"):
        s.tables.append(("", pd.DataFrame([{"property": k, "value": v} for k, v in facts["device"].items()])))
    else:
        s.text.append(f"No GPU was visible when this report was written: {facts.get('gpu_why', 'unknown reason')}")
    if facts.get("tools"):
        s.tables.append(("toolchain", pd.DataFrame([{"tool": k, "version": v} for k, v in facts["tools"].items()])))
        s.folded.add("toolchain")
    if facts.get("date"):
        s.text.append(f"Written {facts['date']}.")
    return s


def junit_summary(path: Path) -> tuple[dict, pd.DataFrame]:
    """Totals and the failing tests from a pytest --junitxml file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tot = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    tot["passed"] = tot["tests"] - tot["failures"] - tot["errors"] - tot["skipped"]
    tot["name"] = suites[0].get("name", "") if suites else ""
    tot["timestamp"] = suites[0].get("timestamp", "") if suites else ""
    bad = []
    for case in root.iter("testcase"):
        for tag in ("failure", "error"):
            el = case.find(tag)
            if el is not None:
                bad.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": tag,
                            "message": (el.get("message") or "")[:160]})
    return tot, pd.DataFrame(bad, columns=["test", "outcome", "message"])


def latest_junit(build: Path) -> Path | None:
    """The newest pytest junit file under build/ (by its own timestamp, else the file's time)."""
    xmls = _glob(build, "test-results/*.xml", "junit*.xml", "pytest*.xml")

    def when(p: Path) -> str:
        try:
            root = ET.parse(p).getroot()
            suite = root if root.tag == "testsuite" else next(root.iter("testsuite"), root)
            return suite.get("timestamp") or ""
        except (ET.ParseError, OSError):
            return ""

    return max(xmls, key=lambda p: (when(p), p.stat().st_mtime), default=None)


def tests_section(build: Path, demo: dict | None, junit: Path | None = None) -> Section:
    """The tests of the run that wrote the report: the junit file it names (the demo's steps). Without
    one (`invoke report` alone), the newest pytest junit file, said to be that and when it ran."""
    s = Section("Tests")
    path, whose = (Path(junit), "this run") if junit else (latest_junit(build), "the newest test run in build/")
    if path is not None:
        try:
            tot, bad = junit_summary(path)
            label = tot["name"] or "pytest"
            when = f", {tot['timestamp'].replace('T', ' ')}" if tot["timestamp"] else ""
            s.text.append(f"{label} ({whose}{when}): {tot['passed']} passed, {tot['failures']} failed, "
                          f"{tot['errors']} errors, {tot['skipped']} skipped of {tot['tests']}.")
            if len(bad):
                s.tables.append(("failing tests", bad))
        except (ET.ParseError, OSError) as e:
            s.text.append(f"{path.name}: unreadable ({e})")
    if demo and demo.get("steps"):
        steps = pd.DataFrame(demo["steps"])[["name", "status", "detail"]].rename(columns={"name": "step"})
        counts = steps["status"].value_counts().to_dict()
        s.text.append("`invoke demo`: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "skipped"))
                      + ("" if demo.get("gpu") else " (no GPU: the skipped steps say what a GPU adds)") + ".")
        s.tables.append(("demo steps", steps))
        s.folded.add("demo steps")
    if s.empty:
        s.missing = ("not generated: run `invoke test --args \"--junitxml=build/test-results/junit.xml\"` "
                     "and/or `invoke demo`")
    return s


def sanitize_section(build: Path) -> Section:
    s = Section("compute-sanitizer")
    p = build / "sanitize" / "summary.csv"
    if p.exists():
        s.tables.append(("program x tool", pd.read_csv(p)))
    else:
        s.missing = "not generated: run `invoke sanitize`"
    return s


def _latest_bench(build: Path) -> tuple[Path | None, str]:
    p = results_csv.latest(build / "bench")
    return (p, "this machine's latest run") if p is not None else (None, "")


def committed_runs(build: Path) -> tuple[str, dict[Path, list[str]]]:
    """The committed reference results beside build/ (bench/results/<gpu>/*.csv, the files in front):
    the GPU folder that covers the most programs (the newer runs breaking a tie) and, in it, for each
    program, the newest run (by the date written inside) that measured it. Returns (the folder's name,
    {CSV: the programs taken from it}); ("", {}) when there is none. A file that does not read is left out."""
    results = build.parent / RESULTS_DIR.relative_to(ROOT)
    best: tuple = ((0, ""), "", {})
    for gpu_dir in sorted(p for p in results.glob("*") if p.is_dir()):
        newest: dict[str, tuple[str, str, Path]] = {}  # program -> (date, name, CSV)
        for q in gpu_dir.glob("*.csv"):
            try:
                df = results_csv.read_checked(q, required=("program", "date"))
            except (ValueError, OSError):
                continue
            date = str(df["date"].astype(str).max())
            for prog in set(df["program"].astype(str)) - {"ceiling"}:
                newest[prog] = max(newest.get(prog, ("", "", q)), (date, q.name, q))
        if not newest:
            continue
        score = (len(newest), max(d for d, _, _ in newest.values()))
        if score > best[0]:
            by_csv: dict[Path, list[str]] = {}
            for prog, (_, _, q) in sorted(newest.items()):
                by_csv.setdefault(q, []).append(prog)
            best = (score, gpu_dir.name, by_csv)
    return best[1], best[2]


def bench_section(build: Path, img: Path, csv: Path | None = None) -> Section:
    path, what = (csv, "given") if csv else _latest_bench(build)
    if path is None:
        return committed_bench_section(build, img)
    return run_bench_section(path, what, img)


def run_bench_section(path: Path, what: str, img: Path) -> Section:
    """One bench run: every case against the targets still in force, the ceilings, the ratios and the roofline."""
    from analysis import bench as abench

    s = Section("Benchmarks")
    cases, ceil = abench.load(path)
    cases = abench.current_targets(cases)
    meta = {k: cases[k].iloc[0] for k in ("device", "driver", "nvcc", "date") if k in cases and len(cases)}
    s.text.append(f"From `{path.name}` ({what})" + (": " + ", ".join(f"{k} {v}" for k, v in meta.items()) if meta else "")
                  + ". Every figure is a ratio to a ceiling measured in the same run; only ratios compare across runs.")
    met = cases["meets_target"].dropna() if "meets_target" in cases else pd.Series(dtype=object)
    if len(met):
        s.text.append(f"{int(met.astype(bool).sum())} of {len(met)} current targets met. A rung whose target a "
                      "later rung of the same ladder took over is shown without a target.")
    table = cases[[c for c in BENCH_COLUMNS if c in cases.columns]]
    s.tables.append((f"every case ({len(table)} rows)", table))
    if len(table) > FOLD_ROWS:
        s.folded.add(f"every case ({len(table)} rows)")
    if len(ceil):
        s.tables.append(("ceilings", ceil[[c for c in ("variant", "value", "unit", "size") if c in ceil.columns]]
                         .rename(columns={"variant": "ceiling", "size": "how"})))
        s.folded.add("ceilings")
    ratios, roofline = abench.plot((cases, ceil), img, prefix="bench")
    s.images += [ratios, roofline]
    s.captions[ratios] = "each case's ratio to its ceiling; a dashed tick is a target still in force"
    memory = abench.roofs(ceil, set(cases["program"]) if len(cases) else ())["memory"]
    s.captions[roofline] = ("roofline: the sloped roof is the memory bandwidth this run measured ("
                            + ", ".join(f"{n} {v:.0f} GB/s" for n, v in memory) + ")" if memory else
                            "roofline: this run measured no memory ceiling, so it has only flat compute roofs "
                            "(a run with square or grayscale measures memcpy's bandwidth)")
    if len(table) > FOLD_ROWS:
        s.folded.add("images:" + ratios.name)
    return s


def committed_bench_section(build: Path, img: Path) -> Section:
    """Without a bench run on this machine: each program's committed reference results (committed_runs),
    one table and one ratio figure per run, each naming its file, device and date."""
    from analysis import bench as abench

    s = Section("Benchmarks")
    gpu, by_csv = committed_runs(build)
    if not by_csv:
        s.missing = "not generated: run `invoke bench --quick` (needs a GPU)"
        return s
    progs = sorted(p for ps in by_csv.values() for p in ps)
    s.text.append(f"No bench run on this machine (`invoke bench --quick` on a GPU makes one), so these are the "
                  f"committed reference results of bench/results/{gpu}/ for {', '.join(progs)}: for each program, "
                  "the newest run that measured it. Every figure is a ratio to a ceiling measured in the same run; "
                  "only ratios compare across runs.")
    for path, taken in sorted(by_csv.items(), key=lambda kv: kv[1]):
        name = f"{', '.join(taken)}: `{path.name}`"
        try:
            cases, ceil = abench.load(path)
            cases = abench.current_targets(cases[cases["program"].astype(str).isin(taken)])
            device = str(cases["device"].iloc[0]) if "device" in cases and len(cases) else gpu
            date = str(cases["date"].iloc[0])[:10] if "date" in cases and len(cases) else ""
            label = f"{name} ({device}, {date}, {len(cases)} rows)"
            s.tables.append((label, cases[[c for c in BENCH_COLUMNS if c in cases.columns]]))
            s.folded.add(label)
            ratios = abench.plot((cases, ceil), img, prefix=f"bench_{path.stem}")[0]
            s.images.append(ratios)
            s.captions[ratios] = f"{', '.join(taken)}: each case's ratio to its ceiling ({device}, `{path.name}`)"
        except Exception as e:  # one unreadable run costs only its own part
            s.text.append(f"{name}: could not be shown ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
    return s


def images_section(title: str, paths: list[Path], how: str) -> Section:
    s = Section(title, images=paths)
    if not paths:
        s.missing = f"not generated: {how}"
    return s


def profile_section(build: Path, keep=lambda p: True, shown=frozenset()) -> Section:
    s = Section("Profiles")
    for d in sorted(p for p in (build / "profiles").glob("*") if p.is_dir()):
        k = d / "kernels.csv"
        if k.exists():
            df = pd.read_csv(k)
            tool = df["tool"].iloc[0] if "tool" in df and len(df) else "?"
            from analysis.profile import short_name

            t = pd.DataFrame({"variant": df.get("variant", "default"), "kernel": df["kernel"].map(short_name),
                              "share (%)": df["time_pct"].round(1), "instances": df["instances"],
                              "avg (us)": (df["avg_ns"] / 1e3).round(2)})
            s.tables.append((f"{d.name} ({tool})", t.head(12)))
        s.images += [p for p in _glob(d, "*.png") if keep(p) and p.resolve() not in shown]
    s.images += [p for p in _glob(build / "plots", "profile_*.png") if keep(p) and p.resolve() not in shown]
    if s.empty:
        s.missing = "not generated: run `invoke profile <prog>` (needs a GPU; `invoke demo` draws recorded ones)"
    return s


def current_pictures(demo: dict | None):
    """A filter for pictures: after a demo, only what its passed steps drew, and anything drawn since
    it finished (by `invoke viz`, `plot`, `profile`). A picture left from an earlier run whose step
    failed or was skipped this time is not shown as if it were current."""
    if not demo:
        return lambda p: True
    passed = {Path(o).resolve() for st in demo.get("steps", []) if st.get("status") == "passed"
              for o in st.get("outputs", [])}
    finished = demo.get("finished")

    def keep(p: Path) -> bool:
        if p.resolve() in passed:
            return True
        # Drawn since the demo finished, or (an older demo record without its time) not known to be stale.
        return finished is None or p.stat().st_mtime > float(finished)

    return keep


def gather(build: Path, img: Path, facts: dict | None = None, demo: dict | None = None,
           bench_csv: Path | None = None, junit: Path | None = None, root: Path = ROOT, tour=()) -> list[Section]:
    plots = build / "plots"
    keep = current_pictures(demo)
    tour = tour_section(build, demo, keep, root, img, tour)
    try:
        bench = bench_section(build, img, bench_csv)
    except Exception as e:  # a malformed CSV must not stop the rest of the report
        bench = Section("Benchmarks", missing=f"not generated: the bench CSV could not be read ({e})")
    shown = {p.resolve() for p in tour.images}
    grid = [p for p in _glob(plots, "gridstride*.png", "grid_stride*.png") if keep(p) and p.resolve() not in shown]
    sections = [
        tour,
        tests_section(build, demo, junit),
        bench,
        device_section(facts),
        sanitize_section(build),
        profile_section(build, keep, shown),
    ]
    if grid:
        sections.append(Section("More grid-stride figures", images=grid))
    shown = {p.resolve() for s in sections for p in s.images}
    # bench_*.png in build/plots are the same pictures the bench section draws afresh from its CSV.
    other = [p for p in _glob(plots, "*.png")
             if p.resolve() not in shown and not p.name.startswith("bench_") and keep(p)]
    if other:
        sections.append(Section("Other figures", images=other))
    return sections


# --- writing ---------------------------------------------------------------------------------------

def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if v != v else f"{v:.4g}"
    if v is None:
        return ""
    return str(v)


def md_table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    esc = [[_fmt(v).replace("|", "\\|").replace("\n", " ") for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines)


def _img_name(p: Path) -> str:
    """A picture's name in the report's img/ folder: the folder keeps profiles/<prog>/kernel_shares.png
    apart; one drawn into img/ itself, or into the private folder a report draws in before it publishes
    img/, keeps its name."""
    drawn_there = p.parent.name == IMG or p.parent.name.startswith(f".{IMG}.")  # img/, or the draft of it
    return p.name if drawn_there else f"{p.parent.name}_{p.name}"


def _copy_image(p: Path, img: Path) -> Path:
    img.mkdir(parents=True, exist_ok=True)
    if p.resolve().parent == img.resolve():
        return p
    dest = img / _img_name(p)
    shutil.copyfile(p, dest)
    return dest


def _is_wide(p: Path) -> bool:
    """Whether a PNG is at least 1.8 times as wide as high (a ladder of many rungs): shown across the
    whole page rather than in a half-width cell, where its labels could not be read."""
    try:
        with open(p, "rb") as f:
            head = f.read(24)
        w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        return head[:8] == b"\x89PNG\r\n\x1a\n" and h > 0 and w >= 1.8 * h
    except OSError:
        return False


def _caption(s: Section, p: Path) -> str:
    return s.captions.get(p, p.stem.replace("_", " "))


def to_markdown(sections: list[Section], outdir: Path, img: Path) -> str:
    """index.md's text. Each picture is copied into `img` (the run's own folder of pictures, published as
    outdir/img/ once the page is written) and linked as img/<name>."""
    out = ["# cudalab report", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        if s.empty:
            out += [f"_{s.missing or 'not generated'}_", ""]
            continue
        for t in s.text:
            out += [t, ""]
        for name, df in s.tables:
            if name in s.folded:
                out += [f"<details><summary>{name}</summary>", "", md_table(df), "", "</details>", ""]
                continue
            if name:
                out += [f"**{name}**", ""]
            out += [md_table(df), ""]
        for p in s.images:
            rel = Path(IMG) / _copy_image(p, img).name
            cap = _caption(s, p)
            alt = cap.replace("*", "").replace("[", "(").replace("]", ")")
            # The picture links to itself: a click opens it at full size.
            body = [f"[![{alt}]({rel.as_posix()})]({rel.as_posix()})", "", f"_{cap}_" if not cap.startswith("**") else cap,
                    ""]
            if "images:" + p.name in s.folded:
                out += [f"<details><summary>{alt}</summary>", "", *body, "</details>", ""]
            else:
                out += body
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #ddd;margin:.4em 0}
.missing{color:#888;font-style:italic}code{background:#f4f4f4;padding:0 .2em}
figure{margin:.6em 0}figcaption{font-size:.9em;color:#333}
.tour{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:1em 1.4em}
.tour img{width:100%;height:360px;object-fit:contain;background:#fff}
.tour figure.wide{grid-column:1/-1}.tour figure.wide img{height:auto;max-height:560px}
details{margin:.5em 0}summary{cursor:pointer;color:#225}"""


def _inline(text: str) -> str:
    """Plain text with `code` and **bold** as HTML."""
    parts = _html.escape(text).split("`")
    out = []
    for i, p in enumerate(parts):
        if i % 2:
            out.append(f"<code>{p}</code>")
        else:
            bold = p.split("**")
            out.append("".join(f"<b>{b}</b>" if j % 2 else b for j, b in enumerate(bold)))
    return "".join(out)


def _html_table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0)


def to_html(sections: list[Section]) -> str:
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>cudalab report</title>",
           f"<style>{_CSS}</style></head><body><h1>cudalab report</h1>"]
    for s in sections:
        out.append(f"<h2>{_html.escape(s.title)}</h2>")
        if s.empty:
            out.append(f"<p class='missing'>{_inline(s.missing or 'not generated')}</p>")
            continue
        for t in s.text:
            out.append(f"<p>{_inline(t)}</p>")
        for name, df in s.tables:
            if name in s.folded:
                out.append(f"<details><summary>{_html.escape(name)}</summary>{_html_table(df)}</details>")
                continue
            if name:
                out.append(f"<h4>{_html.escape(name)}</h4>")
            out.append(_html_table(df))
        if s.images:
            out.append("<div class='tour'>" if s.grid else "<div>")
            for p in s.images:
                data = base64.b64encode(p.read_bytes()).decode("ascii")
                cap = _caption(s, p)
                # Each picture links to its full-size copy in img/ beside this page (index.md's folder).
                wide = " class='wide'" if _is_wide(p) else ""
                fig = (f"<figure{wide}><a href='img/{_html.escape(_img_name(p))}' target='_blank'>"
                       f"<img alt='{_html.escape(cap.replace('*', ''))}' src='data:image/png;base64,{data}'></a>"
                       f"<figcaption>{_inline(cap)}</figcaption></figure>")
                if "images:" + p.name in s.folded:
                    fig = f"<details><summary>{_html.escape(cap)}</summary>{fig}</details>"
                out.append(fig)
            out.append("</div>")
    out.append("</body></html>")
    return "\n".join(out)


def write(outdir: Path | None = None, facts: dict | None = None, demo: dict | None = None,
          build: Path | None = None, bench_csv: Path | None = None, junit: Path | None = None,
          root: Path | None = None, tour=()) -> tuple[Path, Path]:
    """Write index.md (+ img/) and a self-contained index.html into outdir; returns both paths.
    `facts` (device, tools) and `demo` (steps) default to facts.json / demo.json found in outdir;
    `junit` is the test report of the run writing this one (else the newest under build/, said so).

    Several reports may be written into one outdir at once (a demo and a user's `invoke report`): each
    draws and copies its pictures into a folder of its own, then publishes them into img/ one whole file
    at a time, and the two pages last, each whole (harness/base/files.py). Nothing is written in the
    locale's encoding: the files are UTF-8 whatever LANG says."""
    import time

    build = Path(build or BUILD)
    outdir = Path(outdir or build / "report")
    outdir.mkdir(parents=True, exist_ok=True)
    files.clean_stale(outdir)  # the picture folders of reports that were killed part way
    started = time.time()
    if facts is not None:
        files.replace(outdir / "facts.json", json.dumps(facts, indent=1, default=str))
    elif (outdir / "facts.json").exists():
        facts = json.loads((outdir / "facts.json").read_text(encoding="utf-8"))
    if demo is None and (outdir / "demo.json").exists():
        demo = json.loads((outdir / "demo.json").read_text(encoding="utf-8"))
        demo.setdefault("finished", (outdir / "demo.json").stat().st_mtime)
    work = files.temporary_dir(outdir, IMG)
    try:
        sections = gather(build, work, facts, demo, bench_csv, junit, Path(root or ROOT), tour)
        md_text, html_text = to_markdown(sections, outdir, work), to_html(sections)
        _publish_images(work, outdir / IMG, started)
        md = files.replace(outdir / "index.md", md_text)
        html = files.replace(outdir / "index.html", html_text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return md, html


def _publish_images(work: Path, img: Path, started: float) -> None:
    """Each picture of `work` into `img`, whole (a page being read meanwhile links an old picture or a new
    one, never half of one); then the pictures that no report has written since `started` go (a program
    or plot that is gone), while those of a report running beside this one stay."""
    img.mkdir(exist_ok=True)
    names = set()
    for p in sorted(work.iterdir()):
        if p.is_file():
            files.replace(img / p.name, p.read_bytes())
            names.add(p.name)
    for p in img.iterdir():
        with contextlib.suppress(OSError):
            if p.name not in names and not p.name.startswith(".") and p.is_file() and p.stat().st_mtime < started:
                p.unlink()

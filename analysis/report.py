"""build/report/index.md and a self-contained build/report/index.html from whatever build/ holds.

Sections: device summary, test summary (pytest's junit XML and the demo's steps), sanitizer summary,
bench table and plots, grid-stride figures, Mandelbrot and grayscale images, profile charts, other
figures. A section with nothing behind it says "not generated" and how to generate it.
index.md links the pictures relatively (copied into build/report/img/); index.html embeds them as
base64, so either the folder or the one HTML file can be shared. Nothing here launches anything.
"""

from __future__ import annotations

import base64
import html as _html
import json
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"

BENCH_COLUMNS = ["program", "variant", "size", "median_ms", "iqr_ms", "value", "unit", "ceiling", "ratio", "target"]


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)  # paragraphs (plain text, may hold `code`)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
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
    if facts.get("date"):
        s.text.append(f"Written {facts['date']}.")
    return s


def junit_summary(path: Path) -> tuple[dict, pd.DataFrame]:
    """Totals and the failing tests from a pytest --junitxml file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tot = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    tot["passed"] = tot["tests"] - tot["failures"] - tot["errors"] - tot["skipped"]
    bad = []
    for case in root.iter("testcase"):
        for tag in ("failure", "error"):
            el = case.find(tag)
            if el is not None:
                bad.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": tag,
                            "message": (el.get("message") or "")[:160]})
    return tot, pd.DataFrame(bad, columns=["test", "outcome", "message"])


def tests_section(build: Path, demo: dict | None) -> Section:
    s = Section("Tests")
    xmls = _glob(build, "test-results/*.xml", "junit*.xml", "pytest*.xml")
    for x in xmls:
        try:
            tot, bad = junit_summary(x)
        except (ET.ParseError, OSError) as e:
            s.text.append(f"{x.name}: unreadable ({e})")
            continue
        s.text.append(f"pytest ({x.relative_to(build)}): {tot['passed']} passed, {tot['failures']} failed, "
                      f"{tot['errors']} errors, {tot['skipped']} skipped of {tot['tests']}.")
        if len(bad):
            s.tables.append(("failing tests", bad))
    if demo and demo.get("steps"):
        steps = pd.DataFrame(demo["steps"])[["name", "status", "detail"]].rename(columns={"name": "step"})
        counts = steps["status"].value_counts().to_dict()
        s.text.append("`invoke demo`: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "skipped"))
                      + ("" if demo.get("gpu") else " (no GPU: the skipped steps need one)") + ".")
        s.tables.append(("demo steps", steps))
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
    from analysis.bench import latest_csv

    p = latest_csv(build / "bench")
    if p is not None:
        return p, "this machine's latest run"
    # The project's committed reference runs sit beside build/ (bench/results/<gpu>/): the newest by
    # the date written inside each (a checkout gives every file the same mtime).
    from analysis.bench import csv_date

    dated = [(d, q.name, q) for q in (build.parent / "bench" / "results").glob("*/*.csv")
             if (d := csv_date(q)) is not None]
    if dated:
        return max(dated)[2], "a committed reference run (bench/results)"
    return None, ""


def bench_section(build: Path, img: Path, csv: Path | None = None) -> Section:
    from analysis import bench as abench

    s = Section("Benchmarks")
    path, what = (csv, "given") if csv else _latest_bench(build)
    if path is None:
        s.missing = "not generated: run `invoke bench --quick` (needs a GPU)"
        return s
    cases, ceil = abench.load(path)
    meta = {k: cases[k].iloc[0] for k in ("device", "driver", "nvcc", "date") if k in cases and len(cases)}
    s.text.append(f"From `{path.name}` ({what})" + (": " + ", ".join(f"{k} {v}" for k, v in meta.items()) if meta else "")
                  + ". Every figure is a ratio to a ceiling measured in the same run; only ratios compare across runs.")
    s.tables.append(("cases", cases[[c for c in BENCH_COLUMNS if c in cases.columns]]))
    if len(ceil):
        s.tables.append(("ceilings", ceil[[c for c in ("variant", "value", "unit", "size") if c in ceil.columns]]
                         .rename(columns={"variant": "ceiling", "size": "how"})))
    s.images += abench.plot((cases, ceil), img, prefix="bench")
    return s


def images_section(title: str, paths: list[Path], how: str) -> Section:
    s = Section(title, images=paths)
    if not paths:
        s.missing = f"not generated: {how}"
    return s


def profile_section(build: Path, keep=lambda p: True) -> Section:
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
        s.images += [p for p in _glob(d, "*.png") if keep(p)]
    s.images += [p for p in _glob(build / "plots", "profile_*.png") if keep(p)]
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
           bench_csv: Path | None = None) -> list[Section]:
    plots = build / "plots"
    keep = current_pictures(demo)
    grid = [p for p in _glob(plots, "gridstride*.png", "grid_stride*.png") if keep(p)]
    mandel = [p for p in _glob(plots, "mandelbrot*.png") if keep(p)]
    grey = [p for p in _glob(plots, "grayscale*.png") if keep(p)]
    try:
        bench = bench_section(build, img, bench_csv)
    except Exception as e:  # a malformed CSV must not stop the rest of the report
        bench = Section("Benchmarks", missing=f"not generated: the bench CSV could not be read ({e})")
    sections = [
        device_section(facts),
        tests_section(build, demo),
        sanitize_section(build),
        bench,
        images_section("Grid-stride figures", grid, "run `invoke viz gridstride` (or `--simulate` without a GPU)"),
        images_section("Mandelbrot", mandel, "run `invoke viz mandelbrot` (needs a GPU)"),
        images_section("Grayscale", grey, "run `invoke run grayscale` (needs a GPU)"),
        profile_section(build, keep),
    ]
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
    return str(v)


def md_table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    esc = [[_fmt(v).replace("|", "\\|").replace("\n", " ") for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines)


def _copy_image(p: Path, img: Path) -> Path:
    img.mkdir(parents=True, exist_ok=True)
    if p.resolve().parent == img.resolve():
        return p
    dest = img / f"{p.parent.name}_{p.name}"  # the folder keeps profiles/<prog>/kernel_shares.png apart
    shutil.copyfile(p, dest)
    return dest


def to_markdown(sections: list[Section], outdir: Path, img: Path) -> str:
    out = ["# cudalab report", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        if s.empty:
            out += [f"_{s.missing or 'not generated'}_", ""]
            continue
        for t in s.text:
            out += [t, ""]
        for name, df in s.tables:
            if name:
                out += [f"**{name}**", ""]
            out += [md_table(df), ""]
        for p in s.images:
            rel = _copy_image(p, img).relative_to(outdir)
            out += [f"![{p.stem}]({rel.as_posix()})", ""]
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #ddd;margin:.4em 0}
.missing{color:#888;font-style:italic}code{background:#f4f4f4;padding:0 .2em}"""


def _inline_code(text: str) -> str:
    parts = _html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def to_html(sections: list[Section]) -> str:
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>cudalab report</title>",
           f"<style>{_CSS}</style></head><body><h1>cudalab report</h1>"]
    for s in sections:
        out.append(f"<h2>{_html.escape(s.title)}</h2>")
        if s.empty:
            out.append(f"<p class='missing'>{_inline_code(s.missing or 'not generated')}</p>")
            continue
        for t in s.text:
            out.append(f"<p>{_inline_code(t)}</p>")
        for name, df in s.tables:
            if name:
                out.append(f"<h4>{_html.escape(name)}</h4>")
            out.append(df.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0))
        for p in s.images:
            data = base64.b64encode(p.read_bytes()).decode("ascii")
            out.append(f"<figure><img alt='{_html.escape(p.stem)}' src='data:image/png;base64,{data}'>"
                       f"<figcaption>{_html.escape(p.name)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)


def write(outdir: Path | None = None, facts: dict | None = None, demo: dict | None = None,
          build: Path | None = None, bench_csv: Path | None = None) -> tuple[Path, Path]:
    """Write index.md (+ img/) and a self-contained index.html into outdir; returns both paths.
    `facts` (device, tools) and `demo` (steps) default to facts.json / demo.json found in outdir."""
    build = Path(build or BUILD)
    outdir = Path(outdir or build / "report")
    outdir.mkdir(parents=True, exist_ok=True)
    img = outdir / "img"
    if img.exists():
        shutil.rmtree(img)
    img.mkdir()
    if facts is not None:
        (outdir / "facts.json").write_text(json.dumps(facts, indent=1, default=str))
    elif (outdir / "facts.json").exists():
        facts = json.loads((outdir / "facts.json").read_text())
    if demo is None and (outdir / "demo.json").exists():
        demo = json.loads((outdir / "demo.json").read_text())
        demo.setdefault("finished", (outdir / "demo.json").stat().st_mtime)
    sections = gather(build, img, facts, demo, bench_csv)
    md = outdir / "index.md"
    md.write_text(to_markdown(sections, outdir, img))
    html = outdir / "index.html"
    html.write_text(to_html(sections))
    return md, html

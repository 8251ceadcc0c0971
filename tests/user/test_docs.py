"""The README, the program pages, the docs and the result NOTES: every relative link and file path they
give resolves (files, and headings for #anchors; `file.py::test_name` names a test that exists), external
links are well formed, the README stays a front page (at most 1,500 words), every program has its page,
and no issue or run number reaches a reader. In the NOTES, a result file named bare (`bench-...csv`,
`history/ladder_...png`) is looked up beside the NOTES file, so a move into history/ that forgets the
NOTES fails here."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from harness.compile import build

ROOT = build.ROOT
README_WORDS = 1500
PAGES = sorted((ROOT / "cuda").glob("*/README.md"))
DOCS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *PAGES, *sorted((ROOT / "docs").glob("*.md"))]
NOTES = sorted((ROOT / "bench" / "results").rglob("*.md"))
# Programs whose page another branch writes: the test asks for it once it exists.
PAGE_PENDING = {"collectives"}

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`([^`\n]+)`")
TOP = ("cuda/", "harness/", "analysis/", "bench/", "tests/", "notebooks/", "docs/", ".ci/")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# A result file named bare in the NOTES: a date stamp (20261124T195859) or a tuning cache, optionally under
# history/; resolved from the NOTES file's folder.
RESULT_FILE = re.compile(r"^(?:history/)?[\w.-]*(?:\d{8}T\d{6}[\w.-]*|-tune)\.(?:csv|png|json)$")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces to -."""
    text = heading.strip().replace("`", "").replace("**", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(md: Path) -> set[str]:
    text = FENCE.sub("", md.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def problems(md: Path, root: Path = ROOT) -> list[str]:
    """Every link or path in `md` that does not resolve, one line each."""
    text = md.read_text()
    out = []
    for target in LINK.findall(text):
        url = urlparse(target)
        if url.scheme in ("http", "https"):
            if not url.netloc or "." not in url.netloc:
                out.append(f"{md.name}: malformed external link {target}")
            continue
        if url.scheme:
            out.append(f"{md.name}: unsupported link {target}")
            continue
        path = (md.parent / unquote(url.path)).resolve() if url.path else md
        if not path.exists():
            out.append(f"{md.name}: link to a missing file {target}")
        elif url.fragment and (path.suffix != ".md" or url.fragment not in anchors(path)):
            out.append(f"{md.name}: link to a missing heading {target}")
    # Paths given in `code` from the repository root: committed files must exist (build/ is generated).
    prose = FENCE.sub("", text)
    for token in CODE.findall(prose):
        token = token.strip()
        if " " in token or any(c in token for c in "<>*…{}"):
            continue
        if RESULT_FILE.match(token):
            if not (md.parent / token).exists():
                out.append(f"{md.name}: result file {token} is not beside it")
            continue
        if not token.startswith(TOP):
            continue
        path, _, test = token.partition("::")
        if not (root / path.rstrip("/")).exists():
            out.append(f"{md.name}: path {token} does not exist")
        elif test and not re.search(rf"^\s*(?:async\s+)?def {re.escape(test.split('[')[0])}\(",
                                    (root / path).read_text(), re.M):
            out.append(f"{md.name}: {path} has no test {test}")
    return out


@pytest.mark.parametrize("md", DOCS + NOTES, ids=[str(p.relative_to(ROOT)) for p in DOCS + NOTES])
def test_every_link_and_path_resolves(md):
    assert problems(md) == []


def test_every_gpu_folder_has_its_results_in_front_and_its_history_behind():
    """Each bench/results/<gpu>/ folder keeps in front only its NOTES, its page, its tuning caches and the
    reference results its page quotes; every other CSV or figure is under history/."""
    for gpu in sorted(p for p in (ROOT / "bench" / "results").iterdir() if p.is_dir()):
        page = gpu / "README.md"
        assert page.exists(), f"{page.relative_to(ROOT)} is missing: it names the reference results"
        quoted = set(re.findall(r"[\w.-]+\.(?:csv|png)", page.read_text()))
        for f in gpu.iterdir():
            if f.is_file() and f.suffix in (".csv", ".png"):
                assert f.name in quoted, f"{f.relative_to(ROOT)} is in front but its README does not quote it: move it to history/"


def test_the_checker_finds_what_is_broken(tmp_path):
    """A page with one of each fault: each is reported, and the good links are not."""
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "x.cu").write_text("")
    (tmp_path / "other.md").write_text("# Other page\n\n## A heading, with `code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok anchor](other.md#a-heading-with-code) [ok web](https://github.com/gpu-mode/lectures)\n"
        "[gone](missing.md) [bad anchor](other.md#no-such-heading) [bad web](https://nodot)\n"
        "![picture](missing.png) `cuda/x.cu` `cuda/y.cu` `build/plots/generated.png`\n"
        "`bench-20261124T000000.csv` `history/bench-20261124T111111.csv` `tests/t.py::test_here` `tests/t.py::test_gone`\n"
        "```\n[inside a fence is still a link](fenced.md) `cuda/fenced-path-is-ignored.cu`\n```\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("def test_here():\n    pass\n")
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "bench-20261124T111111.csv").write_text("")
    found = problems(page, tmp_path)
    assert len(found) == 8, found
    for bad in ("missing.md", "#no-such-heading", "https://nodot", "missing.png", "cuda/y.cu", "fenced.md",
                "bench-20261124T000000.csv", "test_gone"):
        assert any(bad in f for f in found), bad
    assert not any("cuda/x.cu" in f or "generated" in f or "fenced-path" in f or "111111" in f or "test_here" in f
                   for f in found)


def test_slugs_follow_github():
    assert slug("Benchmarks and profiles") == "benchmarks-and-profiles"
    assert slug("CUDA from a Python string") == "cuda-from-a-python-string"
    assert slug("gemm_tc: the tensor-core ladder") == "gemm_tc-the-tensor-core-ladder"


def words(md: Path) -> int:
    return len(md.read_text().split())


def test_readme_is_a_front_page():
    n = words(ROOT / "README.md")
    assert n <= README_WORDS, f"README.md has {n} words (at most {README_WORDS}): move detail to a page or the NOTES"
    text = (ROOT / "README.md").read_text()
    # CI runs these two commands exactly as the README gives them.
    assert 'pip install -e ".[dev]"' in text and "invoke build test" in text


def test_every_program_has_a_page_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for prog in build.programs():
        if prog in PAGE_PENDING and not (ROOT / "cuda" / prog / "README.md").exists():
            continue
        assert (ROOT / "cuda" / prog / "README.md").exists(), f"cuda/{prog}/README.md is missing"
        assert f"(cuda/{prog}/README.md)" in readme, f"the README does not link cuda/{prog}/README.md"


@pytest.mark.parametrize("md", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_or_run_numbers_where_a_user_reads(md):
    hits = re.findall(r"(?i)\b(?:issue|run)s? #?\d+", md.read_text())
    assert hits == [], hits


def layout_block(md: Path) -> str:
    text = md.read_text()
    section = text[text.index("## Layout"):]
    return FENCE.search(section).group(0)


def layout_problems(block: str, root: Path = ROOT) -> list[str]:
    """What a layout block misses (a top-level folder, a harness layer) or names that is not there."""
    out = []
    named = {m.group(1).rstrip("/") for m in re.finditer(r"^(\S+)", block, re.M) if not m.group(1).startswith("```")}
    top = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
           and p.name not in ("build",) and not p.name.endswith(".egg-info")}
    layers = {f"harness/{p.parent.name}" for p in (root / "harness").glob("*/__init__.py")}
    for want in sorted(layers):
        if want not in named:
            out.append(f"layout: {want}/ is not listed")
    for want in sorted(top):
        if not any(n == want or n.startswith(want + "/") for n in named):
            out.append(f"layout: {want}/ is not listed")
    for n in sorted(named):
        if "<" not in n and not (root / n).exists():
            out.append(f"layout: {n} does not exist")
    return out


@pytest.mark.parametrize("md", [ROOT / "README.md", ROOT / "ARCHITECTURE.md"], ids=lambda p: p.name)
def test_the_layout_matches_the_tree(md):
    assert layout_problems(layout_block(md)) == []


def test_the_layout_checker_finds_a_missing_and_a_stale_folder(tmp_path):
    for d in ("harness/base", "harness/newlayer", "cuda", "docs"):
        (tmp_path / d).mkdir(parents=True)
    for d in ("harness/base", "harness/newlayer"):
        (tmp_path / d / "__init__.py").write_text("")
    block = "```\nharness/base/  x\ncuda/<prog>/  y\ngone/  z\n```"
    found = layout_problems(block, tmp_path)
    assert sorted(found) == ["layout: docs/ is not listed", "layout: gone does not exist",
                             "layout: harness/newlayer/ is not listed"], found

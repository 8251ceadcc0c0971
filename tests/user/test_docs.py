"""The README and the program pages: every relative link and file path they give resolves (files, and
headings for #anchors), external links are well formed, the README stays a front page (at most 1,500
words), every program has its page, and no issue or run number reaches a reader."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from harness.compile import build

ROOT = build.ROOT
README_WORDS = 1500
PAGES = sorted((ROOT / "cuda").glob("*/README.md"))
DOCS = [ROOT / "README.md", *PAGES, *sorted((ROOT / "docs").glob("*.md"))]
# Programs whose page another branch writes: the test asks for it once it exists.
PAGE_PENDING = {"collectives"}

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`([^`\n]+)`")
TOP = ("cuda/", "harness/", "analysis/", "bench/", "tests/", "notebooks/", "docs/", ".ci/")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


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
        if " " in token or not token.startswith(TOP) or any(c in token for c in "<>*…{}"):
            continue
        if not (root / token.rstrip("/")).exists():
            out.append(f"{md.name}: path {token} does not exist")
    return out


@pytest.mark.parametrize("md", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_link_and_path_resolves(md):
    assert problems(md) == []


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
        "```\n[inside a fence is still a link](fenced.md) `cuda/fenced-path-is-ignored.cu`\n```\n")
    found = problems(page, tmp_path)
    assert len(found) == 6, found
    for bad in ("missing.md", "#no-such-heading", "https://nodot", "missing.png", "cuda/y.cu", "fenced.md"):
        assert any(bad in f for f in found), bad
    assert not any("cuda/x.cu" in f or "generated" in f or "fenced-path" in f for f in found)


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

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


def committed(folder: Path) -> list[Path] | None:
    """The files git tracks under `folder` that are there (None outside a git checkout): a run a user
    has just saved with `invoke bench --save` is theirs to place, and is checked once it is committed; a
    tracked file that is gone (a move not yet committed, or a copy whose git metadata lags its files, as
    the GPU machine's can) is no longer in front."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", str(folder)], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [ROOT / f for f in out.split("\0") if f and (ROOT / f).exists()]


def test_every_gpu_folder_has_its_results_in_front_and_its_history_behind():
    """Each bench/results/<gpu>/ folder keeps in front only its NOTES, its page, its tuning caches and the
    reference results its page quotes; every other committed CSV or figure is under history/."""
    results = ROOT / "bench" / "results"
    files = committed(results)
    if files is None:  # a copy without git (the GPU machine's): what is committed cannot be told from what a run left
        pytest.skip("not a git checkout: the committed results cannot be listed")
    for gpu in sorted({f.parent for f in files if f.parent.parent == results}):
        page = gpu / "README.md"
        assert page.exists(), f"{page.relative_to(ROOT)} is missing: it names the reference results"
        quoted = set(re.findall(r"[\w.-]+\.(?:csv|png)", page.read_text()))
        for f in (f for f in files if f.parent == gpu):
            if f.suffix in (".csv", ".png"):
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
    # Folders under cuda/ that are not a program (common/, a shared-kernels folder) are each listed.
    layers |= {f"cuda/{d.name}" for d in (root / "cuda").glob("*/") if d.is_dir() and not (d / f"{d.name}.cu").exists()}
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
    for d in ("harness/base", "harness/newlayer", "cuda/shared", "docs"):
        (tmp_path / d).mkdir(parents=True)
    for d in ("harness/base", "harness/newlayer"):
        (tmp_path / d / "__init__.py").write_text("")
    block = "```\nharness/base/  x\ncuda/<prog>/  y\ngone/  z\n```"
    found = layout_problems(block, tmp_path)
    assert sorted(found) == ["layout: cuda/shared/ is not listed", "layout: docs/ is not listed",
                             "layout: gone does not exist", "layout: harness/newlayer/ is not listed"], found


# --- what the code cites ----------------------------------------------------------------------------
# A reader of the code has the repository and nothing else: a comment that cites an issue or a run
# number, or a file the repository does not hold, points at nothing. Variant numbers are zero-padded
# (`runs 08's stores`), so a run number is one that does not start with 0.
# The tests are code a reader reads too; this file alone is left out, for the citations it plants to
# show the checker failing.
CODE_DIRS = ("cuda", "harness", "analysis", ".ci", "tests")
CODE_FILES = ("tasks.py", "Makefile")
THIS_FILE = Path(__file__).resolve()
# An issue by number, or "the issue('s)" / "this issue" with at most one word between: either way a
# reader without the issue tracker is pointed at nothing.
# Or one in a name (`test_issue20_...`, `ISSUE20_TARGETS`).
CITES_ISSUE = re.compile(r"(?i)\bissue #?\d+|\bissues #?\d+\s*(?:-|,|and)\s*\d+|\b(?:the|this|that)\s+(?:[\w-]+\s+)?issue(?:'s)?\b"
                         r"|(?:\b|(?<=_))issue_?\d+")
CITES_RUN = re.compile(r"(?i)\b(?:device |NOTES(?:-\w+)? )?runs? [1-9]\d*(?:\s*-\s*\d+)?(?:'s)?(?![\w.])")
CITES_MD = re.compile(r"(?<![\w/.'\"-])((?:\.\./|[\w-]+/)*[\w.-]+\.md)\b")
# Files the code writes, not files it cites: the report's page (build/report/index.md).
WRITTEN = {"index.md"}


def code_files(root: Path = ROOT) -> list[Path]:
    files = [root / f for f in CODE_FILES if (root / f).exists()]
    for d in CODE_DIRS:
        files += sorted(p for p in (root / d).rglob("*") if p.is_file() and p.suffix in
                        ("", ".py", ".cu", ".cuh", ".h", ".c", ".mk", ".sh") and "__pycache__" not in p.parts
                        and "fixtures" not in p.parts and p.resolve() != THIS_FILE)
    return files


def citation_problems(path: Path, root: Path = ROOT) -> list[str]:
    """Each line of `path` that cites an issue or run number, or a .md file the repository lacks."""
    known = {p.name for p in root.rglob("*.md") if ".git" not in p.parts and "build" not in p.parts}
    out = []
    rel = path.relative_to(root)
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        for rx in (CITES_ISSUE, CITES_RUN):
            if m := rx.search(line):
                out.append(f"{rel}:{n}: cites {m.group(0)!r}: say why instead")
        for md in CITES_MD.findall(line):
            if md.startswith("build/") or Path(md).name in WRITTEN:
                continue
            if not (root / md).exists() and not (path.parent / md).exists() and Path(md).name not in known:
                out.append(f"{rel}:{n}: cites {md}, which is not in the repository")
    return out


def test_the_code_cites_no_issue_run_or_missing_file():
    found = [p for f in code_files() for p in citation_problems(f)]
    assert found == [], "\n".join(found)


def test_the_citation_checker_finds_each_kind(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "NOTES-x.md").write_text("")
    src = tmp_path / "k.cu"
    src.write_text("// issue 18: goal\n// runs 13-15 measured\n# NOTES-matmul run 14\n// see DESIGN.md\n"
                   "// (Issue 20's goals)\n# the issue's size\n# (the orchestration issue's runner)\n"
                   "def test_issue20_rungs(): ISSUE20_TARGETS\n"
                   "// fine: 136 runs 08's stores; 05 runs 2.0x faster; a warp issues 8 ldmatrix\n"
                   "// fine: NOTES-x.md and bench/NOTES-x.md exist\n")
    found = citation_problems(src, tmp_path)
    assert [f.split(":")[1] for f in found] == ["1", "2", "3", "4", "5", "6", "7", "8"], found


DOTTED = re.compile(r"\b(harness(?:\.[A-Za-z_]\w*)+)")


def unresolved_names(text: str) -> list[str]:
    """Each dotted `harness.…` name in `text` that names no module or attribute of one."""
    import importlib

    out = []
    for name in sorted(set(DOTTED.findall(text))):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                out.append(name)
            break
        else:
            out.append(name)
    return out


@pytest.mark.parametrize("md", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_module_the_docs_name_exists(md):
    """After a module moves, a page that still names its old place fails here."""
    assert unresolved_names(FENCE.sub("", md.read_text())) == []


def test_the_module_checker_finds_a_stale_name():
    assert unresolved_names("`harness.base.sim` and harness.bench.run and harness.base.sim.no_such") == [
        "harness.base.sim.no_such", "harness.bench.run"]


def _section(md: str, title: str) -> str:
    start = md.index(f"## {title}")
    end = md.find("\n## ", start + 1)
    return md[start:end if end > 0 else len(md)]


def test_the_set_up_is_a_newcomers_path():
    """What to have first, then a virtual environment, then the commands, and how long the first run takes."""
    setup = _section((ROOT / "README.md").read_text(), "Set up")
    block = FENCE.search(setup).group(0)
    assert setup.index("You need Python") < setup.index("```"), "the prerequisites come before the commands"
    lines = [ln.split("#")[0].strip() for ln in block.splitlines()[1:-1]]
    assert "venv" in lines[0] and "activate" in lines[0], "the first command makes and enters a virtual environment"
    assert lines.index('pip install -e ".[dev]"') > 0 and "invoke build test" in lines
    after = setup[setup.index(block) + len(block):]
    assert "several minutes" in after and "2 cores" in after


def test_the_readme_and_invoke_list_agree_on_what_to_run_first():
    import tasks

    readme = (ROOT / "README.md").read_text()
    first = re.findall(r"^(invoke [^#\n]*?)\s*# the first thing to run", readme, re.M)
    assert len(first) == 1, "the README's set-up names the one first command"
    commands = first[0].split()[1:]
    for name, obj in vars(tasks).items():
        if isinstance(obj, tasks.Task) and "first thing to run" in (obj.__doc__ or "").lower():
            assert name in commands, f"`invoke --list` calls {name} the first thing to run; the README: {first[0]}"
    assert "invoke build test" in tasks.demo.__doc__.splitlines()[0]  # the tour says what comes before it


def test_the_tour_marks_what_needs_a_gpu_and_names_only_inputs_it_makes():
    tour = FENCE.search(_section((ROOT / "README.md").read_text(), "The tour").split("one program at a time")[1]).group(0)
    made = set()
    for line in tour.splitlines()[1:-1]:
        cmd, _, note = line.partition("#")
        for needs_gpu in ("run hello", "compare "):  # no CPU path: these need a GPU
            if needs_gpu in cmd:
                assert "(GPU)" in note, f"{cmd.strip()} needs a GPU and is not marked"
        image = re.search(r"--image (\S+)", cmd)
        if image:
            assert image.group(1) in made or (ROOT / image.group(1)).exists(), \
                f"{image.group(1)} is neither shipped nor made by an earlier command of the tour"
        made |= set(re.findall(r"saved as (\S+?)\)", note)) | set(re.findall(r"--out (\S+)", cmd))
        out = re.search(r"--out (\S+)", cmd)
        if out and "--image" not in cmd:  # without --image, grayscale saves its test picture beside --out
            made.add(out.group(1).replace(".png", "_input.png"))


def test_the_readme_links_every_exercise_command_and_the_exercises_page():
    readme = (ROOT / "README.md").read_text()
    assert "(harness/user/exercises/README.md)" in readme
    for action in ("list", "start", "check", "hint", "solution"):
        assert re.search(rf"`(invoke exercise )?{action}\b", readme), f"the README does not name `exercise {action}`"

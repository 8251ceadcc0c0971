"""`invoke new NAME`: write a working program folder, and the README's learning path from the records.

The folder comes from the templates beside this file (template/*.tmpl, with @PROG@ for the name): a
grid-stride elementwise kernel with its variant table and entry points, its executable, its Python
module ending in its record, its tests and its page. It is written under a temporary name and renamed
into place whole, so an interrupted `invoke new` leaves nothing half-written. With no edit anywhere
else the new program builds, tests, benches, profiles, sanitizes, and appears in the demo, the report
and the README's learning path (regenerated here from the records).
"""

from __future__ import annotations

import keyword
import re
import shutil
from pathlib import Path

from harness.base import files, paths

TEMPLATES = paths.ROOT / "harness" / "programs" / "template"
# Each template, and where it goes in the new folder.
LAYOUT = {"prog.cu.tmpl": "{p}.cu", "prog.h.tmpl": "{p}.h", "main.cu.tmpl": "main.cu", "prog.py.tmpl": "{p}.py",
          "test_prog.py.tmpl": "test_{p}.py", "README.md.tmpl": "README.md"}
# Names a program folder cannot take: the lab's own folders under cuda/, and modules of this package.
TAKEN = {"common", "shared", "record", "scaffold", "template"}
README_START = "<!-- the learning path: written by `invoke new` from the programs' records -->"
README_END = "<!-- end of the learning path -->"


def check_name(name: str, root: Path = paths.ROOT) -> str:
    """The name, or ValueError saying in one line why a program cannot be called that."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
        raise ValueError(f"{name!r} is not a program name: lower-case letters, digits and _, starting with a "
                         "letter (it names a C prefix, a library and a Python module)")
    if keyword.iskeyword(name) or name in TAKEN or len(name) > 40:
        raise ValueError(f"{name!r} cannot name a program (a Python keyword, a name the lab uses, or over 40 "
                         "characters)")
    if (root / "cuda" / name).exists():
        raise ValueError(f"cuda/{name} exists already; choose another name")
    return name


def write(name: str, root: Path = paths.ROOT) -> list[Path]:
    """Write cuda/<name>/ from the templates, whole, and the README's learning path with it. Returns the
    files written."""
    check_name(name, root)
    dest = root / "cuda" / name
    tmp = files.temporary_dir(root / "cuda", f"new-{name}")
    try:
        for src, out in LAYOUT.items():
            text = (TEMPLATES / src).read_text(encoding="utf-8")
            text = text.replace("@PROG_UPPER@", name.upper()).replace("@PROG@", name)
            (tmp / out.format(p=name)).write_text(text, encoding="utf-8")
        tmp.chmod(0o777 & ~files._umask())  # a plain new folder's mode, not the temporary one's 0700
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(dest.iterdir())


def readme_table(records) -> str:
    """The README's learning path: one row per record, in the order a learner meets them."""
    rows = ["| program | the idea | follows | page | exercise | picture |", "| --- | --- | --- | --- | --- | --- |"]
    for r in records:
        ex = ", ".join(f"`{e.name}`" for e in r.exercises)
        cells = [f"`{r.name}`", r.summary, r.follows, f"[{r.name}](cuda/{r.name}/README.md)", ex, r.readme_picture]
        rows.append("| " + " | ".join(c for c in cells).replace("|  |", "| |") + " |")
    return "\n".join(rows)


def with_table(readme: str, records) -> str:
    """The README's text with the learning path between its two markers replaced by `readme_table`."""
    i, j = readme.find(README_START), readme.find(README_END)
    if i < 0 or j < i:
        raise ValueError("README.md has lost the markers around the learning path: "
                         f"{README_START!r} ... {README_END!r}")
    return readme[: i + len(README_START)] + "\n" + readme_table(records) + "\n" + readme[j:]


def write_readme(records, root: Path = paths.ROOT) -> Path:
    path = root / "README.md"
    files.replace(path, with_table(path.read_text(encoding="utf-8"), records))
    return path

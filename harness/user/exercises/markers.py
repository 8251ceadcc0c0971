"""The exercise markers in the lab's own sources, and the two texts made from them.

A marker is a comment on a line of its own (so merges and diffs of the lab's code stay easy):

    // EXERCISE square: copy          the lines up to `end copy` go into the learner's file
    // EXERCISE square: begin TEXT    a blank: the lines up to `end` are the solution, and the
    //                                learner's file gets `TODO (square): TEXT` in their place
    // EXERCISE square: stub CODE     inside a blank, optional: CODE stays in the learner's file
    //                                (a placeholder that keeps the rest compiling)
    // EXERCISE square: end
    // EXERCISE square: end copy
    // EXERCISE square: lab [CODE]    the next line is the lab's own (a switch of the tests' fault
    //                                build): both texts have CODE in its place, or nothing

`#` instead of `//` in Python. TEXT may go on over following marker lines `// EXERCISE square: todo TEXT`.
Several copy spans of one file are joined in order. `learner()` and `solution()` make the two texts
of one exercise from one file, so an exercise and its solution cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_MARK = re.compile(r"^(?P<indent>[ \t]*)(?://|#)\s*EXERCISE\s+(?P<name>[A-Za-z0-9_]+)\s*:\s*"
                   r"(?P<kw>end copy|copy|begin|end|stub|todo|lab)\b[ \t]?(?P<rest>.*)$")


class MarkerError(ValueError):
    """Markers that do not pair up (a lab source edited without care): names the file and line."""


@dataclass
class Blank:
    todo: str
    solution: list[str]
    stub: list[str]
    indent: str
    line: int  # 1-based line of the `begin` marker in the source


@dataclass
class Span:
    """One copy span: a list of plain lines (str) and blanks, in order."""
    items: list = field(default_factory=list)
    line: int = 0


def _indent_of(lines: list[str], default: str) -> str:
    for ln in lines:
        if ln.strip():
            return ln[:len(ln) - len(ln.lstrip())]
    return default


def parse(text: str, name: str, where: str = "<source>") -> list[Span]:
    """The copy spans of exercise `name` in `text`. Other exercises' markers are dropped from the
    copied lines. Raises MarkerError for unbalanced, nested or misplaced markers."""
    spans: list[Span] = []
    span: Span | None = None
    blank: Blank | None = None
    lab: str | None = None  # what replaces the next line (a `lab` marker), "" to drop it
    for no, raw in enumerate(text.splitlines(), 1):
        m = _MARK.match(raw)
        if m and m.group("name") != name:
            continue  # another exercise's marker: never part of this one's texts
        if not m and lab is not None:
            raw, lab = lab, None
            if not raw:
                continue
        if not m:
            if blank is not None:
                blank.solution.append(raw)
            elif span is not None:
                span.items.append(raw)
            continue
        kw, rest = m.group("kw"), m.group("rest").strip()
        if lab is not None:
            raise MarkerError(f"{where}:{no}: a `lab` marker for {name} must be followed by the line it replaces")
        if kw == "lab":
            if span is None:
                raise MarkerError(f"{where}:{no}: `lab` for {name} outside a copy span")
            lab = m.group("indent") + rest if rest else ""
            continue
        if kw == "copy":
            if span is not None:
                raise MarkerError(f"{where}:{no}: `copy` for {name} inside another copy span (opened at line {span.line})")
            span = Span(line=no)
        elif kw == "end copy":
            if span is None:
                raise MarkerError(f"{where}:{no}: `end copy` for {name} without a `copy`")
            if blank is not None:
                raise MarkerError(f"{where}:{no}: `end copy` for {name} inside a blank opened at line {blank.line}")
            spans.append(span)
            span = None
        elif kw == "begin":
            if span is None:
                raise MarkerError(f"{where}:{no}: blank for {name} outside a copy span")
            if blank is not None:
                raise MarkerError(f"{where}:{no}: blank for {name} inside another blank (line {blank.line})")
            if not rest:
                raise MarkerError(f"{where}:{no}: blank for {name} without a TODO text")
            blank = Blank(rest, [], [], m.group("indent"), no)
        elif kw == "todo":
            if blank is None or blank.solution or blank.stub:
                raise MarkerError(f"{where}:{no}: `todo` for {name} must follow its `begin` line")
            blank.todo += " " + rest
        elif kw == "stub":
            if blank is None:
                raise MarkerError(f"{where}:{no}: `stub` for {name} outside a blank")
            blank.stub.append(rest)
        elif kw == "end":
            if blank is None:
                raise MarkerError(f"{where}:{no}: `end` for {name} without a `begin`")
            if not any(s.strip() for s in blank.solution):
                raise MarkerError(f"{where}:{no}: the blank for {name} opened at line {blank.line} holds no solution")
            blank.indent = _indent_of(blank.solution, blank.indent)
            span.items.append(blank)
            blank = None
    if blank is not None:
        raise MarkerError(f"{where}:{blank.line}: blank for {name} never ends")
    if span is not None:
        raise MarkerError(f"{where}:{span.line}: copy span for {name} never ends")
    return spans


def names_in(text: str) -> set[str]:
    return {m.group("name") for m in map(_MARK.match, text.splitlines()) if m}


def _wrap(text: str, width: int = 96) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, break_long_words=False) or [""]


def render(spans: list[Span], name: str, comment: str, blanks: str) -> str:
    """The copied lines with each blank as its solution (blanks='solution') or as its TODO and stub
    (blanks='todo')."""
    out: list[str] = []
    for k, span in enumerate(spans):
        if k:
            out.append("")
        for item in span.items:
            if isinstance(item, str):
                out.append(item)
            elif blanks == "solution":
                out.extend(item.solution)
            else:
                lines = _wrap(item.todo)
                out.append(f"{item.indent}{comment} TODO ({name}): {lines[0]}")
                out.extend(f"{item.indent}{comment}   {ln}" for ln in lines[1:])
                out.extend(f"{item.indent}{s}" for s in item.stub)
                if comment == "#" and not item.stub:
                    out.append(f"{item.indent}pass")  # a Python block may not be empty
    return "\n".join(out).rstrip("\n") + "\n"


def blanks(spans: list[Span]) -> list[Blank]:
    return [it for s in spans for it in s.items if isinstance(it, Blank)]

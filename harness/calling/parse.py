"""Parsers for the tagged lines programs print: `<tag> key=value key="a value with spaces" ...`.

Every executable's machine-readable output uses this one format (ARCHITECTURE.md, Data flow), e.g.
    result program=matmul variant=02_tiled m=4096 n=4096 k=4096 ms=1.23 check=pass
    device_info name="NVIDIA H100 80GB HBM3"
Lines that are not tagged with the wanted tag are ignored, so human text can sit beside them.
"""

from __future__ import annotations

import shlex

import pandas as pd


def _convert(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def parse_line(line: str) -> tuple[str, dict] | None:
    """Split one line into (tag, fields); None for lines that are not `tag k=v ...`."""
    line = line.strip()
    if not line or "=" not in line:
        return None
    try:
        tokens = shlex.split(line)
    except ValueError:
        return None
    if not tokens or "=" in tokens[0]:
        return None
    fields = {}
    for tok in tokens[1:]:
        if "=" not in tok:
            return None
        k, v = tok.split("=", 1)
        if not k:
            return None
        fields[k] = _convert(v)
    return tokens[0], fields


def records(text: str, tag: str | None = None) -> list[dict]:
    out = []
    for line in text.splitlines():
        p = parse_line(line)
        if p and (tag is None or p[0] == tag):
            out.append(p[1] if tag else {"tag": p[0], **p[1]})
    return out


def tagged(text: str, tag: str | None = None, columns: list[str] | None = None) -> pd.DataFrame:
    """All `tag k=v` lines as a DataFrame, one row a line, numbers converted."""
    rows = records(text, tag)
    df = pd.DataFrame(rows)
    if columns is not None:
        for c in columns:
            if c not in df:
                df[c] = pd.NA
        df = df[columns + [c for c in df.columns if c not in columns]]
    return df


def tagged_dict(text: str, tag: str) -> dict:
    """Merge all `tag k=v` lines into one dict (later lines win): for one-property-per-line output."""
    merged: dict = {}
    for r in records(text, tag):
        merged.update(r)
    return merged


def results(text: str, program: str) -> pd.DataFrame:
    """A program's `result program=<program> ... check=pass|fail` lines, the summary every executable
    ends with. Raises ValueError when there is none: a run that printed no result did not finish."""
    df = tagged(text, "result")
    if df.empty or "program" not in df or not (df["program"] == program).any():
        raise ValueError(f"no `result program={program} ...` line in the output")
    return df[df["program"] == program].reset_index(drop=True)

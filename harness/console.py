"""Text tables for the tasks' output (bench, sanitize, demo, profile): readable in an 80-column
terminal and when piped into a file or `less`, never with a name cut short.

A table that fits the width is printed as a grid. One that does not is *stacked*: one block per
row, its key columns (the leading text columns) on the first line, then `column value` pairs
wrapped to the width. An empty or missing value (NaN, None, pd.NA) is an empty cell, never `nan`.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import textwrap

import pandas as pd

DEFAULT_WIDTH = 80


def width(stream=None) -> int:
    """The terminal's width, else $COLUMNS, else 80 (a pipe or a log file)."""
    stream = stream or sys.stdout
    try:
        if stream.isatty():
            return max(40, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)
    except (AttributeError, ValueError, OSError):
        pass
    env = os.environ.get("COLUMNS", "")
    return int(env) if env.isdigit() and int(env) >= 40 else DEFAULT_WIDTH


def cell(v) -> str:
    """One value as text: empty for missing, 4 significant digits for floats, as-is otherwise."""
    if v is None or v is pd.NA or v is pd.NaT:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return f"{v:.4g}"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _is_number(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def grid_lines(df: pd.DataFrame) -> list[str]:
    """The table as aligned lines: numbers right-aligned, text left-aligned, two spaces apart."""
    cols = [str(c) for c in df.columns]
    cells = [[cell(v) for v in row] for row in df.itertuples(index=False, name=None)]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    right = [_is_number(df[c]) for c in df.columns]

    def fmt(values):
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [fmt(cols), rule] + [fmt(r) for r in cells]


def stacked_lines(df: pd.DataFrame, key_columns: int | None = None, line_width: int = DEFAULT_WIDTH) -> list[str]:
    """One block per row: its key columns joined on a line, then `name value` pairs wrapped."""
    cols = [str(c) for c in df.columns]
    if key_columns is None:
        key_columns = 0
        for c in df.columns:
            if _is_number(df[c]) or key_columns >= 3:
                break
            key_columns += 1
        key_columns = max(1, key_columns)
    out = []
    for row in df.itertuples(index=False, name=None):
        values = [cell(v) for v in row]
        out.append(" ".join(v for v in values[:key_columns] if v) or "-")
        pairs = [f"{c} {v}" for c, v in zip(cols[key_columns:], values[key_columns:], strict=True) if v != ""]
        out += textwrap.wrap("   ".join(pairs), width=line_width, initial_indent="    ", subsequent_indent="    ",
                             break_long_words=False, break_on_hyphens=False) or []
    return out


def table_lines(df: pd.DataFrame, title: str | None = None, line_width: int | None = None,
                key_columns: int | None = None) -> list[str]:
    """The grid when it fits `line_width` (default: the terminal's, else 80), else the stacked form."""
    line_width = line_width or width()
    head = [title] if title else []
    if df.empty:
        return head + ["(no rows)"]
    grid = grid_lines(df)
    if max(len(x) for x in grid) <= line_width:
        return head + grid
    return head + stacked_lines(df, key_columns, line_width)


def print_table(df: pd.DataFrame, title: str | None = None, file=None, key_columns: int | None = None) -> None:
    file = file or sys.stdout
    for line in table_lines(df, title, width(file), key_columns):
        print(line, file=file)

"""Text tables for the tasks' output (bench, sanitize, demo, profile): readable in an 80-column
terminal and when piped into a file or `less`, never with a name cut short.

A table that fits the width is printed as a grid. One that is too wide but fits once its widest text
column is wrapped onto extra lines is printed so (a demo's long `detail`). Any other is *stacked*: one
block per row, its key columns (the leading text columns) on the first line, then `column value`
pairs packed below, never split. An empty or missing value (NaN, None, pd.NA) is an empty cell, never `nan`.
"""

from __future__ import annotations

import math
import os
import re
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


def _right_aligned(series: pd.Series, cells: list[str]) -> bool:
    """Numbers, and text that is all numbers (a pre-formatted `1,234`), are right-aligned."""
    if _is_number(series):
        return True
    return bool(cells) and all(re.fullmatch(r"[-+]?[\d,.]*(?:e[-+]?\d+)?%?", c) for c in cells)


def grid_lines(df: pd.DataFrame, line_width: int | None = None) -> list[str] | None:
    """The table as aligned lines, two spaces apart: numbers right-aligned, text left-aligned. When it
    is wider than `line_width`, one text column is wrapped onto extra lines (never cut); None when
    even that does not fit."""
    cols = [str(c) for c in df.columns]
    cells = [[cell(v) for v in row] for row in df.itertuples(index=False, name=None)]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    right = [_right_aligned(df[c], [r[i] for r in cells]) for i, c in enumerate(df.columns)]
    wrap_col, room = None, None
    total = sum(widths) + 2 * (len(cols) - 1)
    if line_width is not None and total > line_width:
        text_cols = [i for i in range(len(cols)) if not right[i]]
        if not text_cols:
            return None
        wrap_col = max(text_cols, key=lambda i: (widths[i], i))
        room = widths[wrap_col] - (total - line_width)
        longest_word = max([len(w) for r in cells for w in r[wrap_col].split()] + [len(cols[wrap_col])])
        if room < max(16, min(longest_word, 40)):
            return None
        widths[wrap_col] = room

    def fmt(values):
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)]
        return "  ".join(parts).rstrip()

    out = [fmt(cols), "  ".join("-" * w for w in widths)]
    for r in cells:
        if wrap_col is None:
            out.append(fmt(r))
            continue
        pieces = textwrap.wrap(r[wrap_col], width=room, break_long_words=False, break_on_hyphens=False) or [""]
        out.append(fmt([*r[:wrap_col], pieces[0], *r[wrap_col + 1:]]))
        for more in pieces[1:]:
            out.append(fmt([""] * wrap_col + [more] + [""] * (len(cols) - wrap_col - 1)))
    return out


def _pack(tokens: list[str], line_width: int, indent: str = "    ", sep: str = "   ") -> list[str]:
    """Tokens (each `name value`, never split) packed greedily into lines of at most line_width."""
    lines, cur = [], ""
    for t in tokens:
        if cur and len(indent) + len(cur) + len(sep) + len(t) > line_width:
            lines.append(indent + cur)
            cur = t
        else:
            cur = f"{cur}{sep}{t}" if cur else t
    if cur:
        lines.append(indent + cur)
    return lines


def stacked_lines(df: pd.DataFrame, key_columns: int | None = None, line_width: int = DEFAULT_WIDTH) -> list[str]:
    """One block per row: its key columns joined on a line, then `name value` pairs packed below."""
    cols = [str(c) for c in df.columns]
    if key_columns is None:
        key_columns = 0
        for c in df.columns:
            if _is_number(df[c]) or key_columns >= 3:
                break
            key_columns += 1
        key_columns = max(1, min(key_columns, len(cols) - 1))
    out = []
    for row in df.itertuples(index=False, name=None):
        values = [cell(v) for v in row]
        head = " ".join(v for v in values[:key_columns] if v) or "-"
        out += textwrap.wrap(head, width=line_width, subsequent_indent="  ", break_long_words=False) or [head]
        pairs = [f"{c} {v}" for c, v in zip(cols[key_columns:], values[key_columns:], strict=True) if v != ""]
        out += _pack(pairs, line_width)
    return out


def table_lines(df: pd.DataFrame, title: str | None = None, line_width: int | None = None,
                key_columns: int | None = None) -> list[str]:
    """The grid when it fits `line_width` (default: the terminal's, else 80), else the stacked form."""
    line_width = line_width or width()
    head = [title] if title else []
    if df.empty:
        return head + ["(no rows)"]
    grid = grid_lines(df, line_width)
    if grid is not None and max(len(x) for x in grid) <= line_width:
        return head + grid
    return head + stacked_lines(df, key_columns, line_width)


def print_table(df: pd.DataFrame, title: str | None = None, file=None, key_columns: int | None = None) -> None:
    file = file or sys.stdout
    for line in table_lines(df, title, width(file), key_columns):
        print(line, file=file)

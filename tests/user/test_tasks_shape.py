"""tasks.py holds the tasks and nothing else: every function defined at its top level is an invoke task,
with at most a couple of small constants beside them (the plumbing around the tasks is
harness/user/cli.py), and an import inside a task says on its line, or the line above, why it waits
(a heavy package that `invoke --list` must not pay for)."""

from __future__ import annotations

import ast
import inspect
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_CONSTANTS = 2  # module-level assignments tasks.py may keep (the program list in the help texts)


def _is_task_decorator(d: ast.expr) -> bool:
    """`@task` or `@task(...)`, as imported from harness.user.cli (or `@cli.task`)."""
    target = d.func if isinstance(d, ast.Call) else d
    return (isinstance(target, ast.Name) and target.id == "task") or \
        (isinstance(target, ast.Attribute) and target.attr == "task")


def shape_faults(src: str) -> list[str]:
    """What in a tasks.py source is not a task: a function without @task, a class, more than
    MAX_CONSTANTS assignments, or any other statement than an import, a docstring or a call."""
    faults, assigns = [], []
    for i, stmt in enumerate(ast.parse(src).body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not any(_is_task_decorator(d) for d in stmt.decorator_list):
                faults.append(f"line {stmt.lineno}: {stmt.name} is not a task")
        elif isinstance(stmt, ast.ClassDef):
            faults.append(f"line {stmt.lineno}: class {stmt.name} (plumbing belongs in harness/user/cli.py)")
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            assigns.append(stmt.lineno)
        elif isinstance(stmt, ast.Expr) and (isinstance(stmt.value, ast.Call)
                                             or (i == 0 and isinstance(stmt.value, ast.Constant))):
            continue  # the docstring, sys.path's first entry, the parse-error hook
        elif not isinstance(stmt, (ast.Import, ast.ImportFrom)):
            faults.append(f"line {stmt.lineno}: a {type(stmt).__name__} statement at the top level")
    if len(assigns) > MAX_CONSTANTS:
        faults.append(f"lines {', '.join(map(str, assigns))}: {len(assigns)} module-level assignments "
                      f"(at most {MAX_CONSTANTS})")
    return faults


def unexplained_local_imports(src: str) -> list[str]:
    """Each import inside a function with no comment on its own lines, nor on the line above where that
    line is a comment alone or a `try:` (another import's comment on the line above is not this one's)."""
    text = src.splitlines()
    commented = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(src).readline)
                 if tok.type == tokenize.COMMENT}
    heads = {n for n in commented if text[n - 1].lstrip().startswith(("#", "try:"))}
    out = []
    for fn in ast.walk(ast.parse(src)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                own = set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
                if not (own & commented or node.lineno - 1 in heads):
                    out.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(set(out), key=lambda s: int(s.split(":")[0].split()[1]))


def test_tasks_py_defines_only_tasks():
    assert shape_faults((ROOT / "tasks.py").read_text()) == []


def test_every_top_level_function_of_tasks_is_an_invoke_task():
    """The same, asked of the imported module: a helper defined in tasks.py would be a plain function."""
    import tasks

    plain = [n for n, v in vars(tasks).items() if inspect.isfunction(v) and v.__module__ == tasks.__name__]
    assert plain == []


def test_every_import_inside_a_task_says_why_it_waits():
    assert unexplained_local_imports((ROOT / "tasks.py").read_text()) == []


PROBE = '''"""doc"""
import sys

from harness.user.cli import task

A = 1
B = 2
C = 3
sys.path.insert(0, ".")


def _helper(x):
    from harness.base import console

    return x


class _Argument:
    pass


@task
def build(c):
    # deferred: pandas only for the table
    import pandas as pd

    from analysis import tune  # deferred: matplotlib only to draw
    from harness.measuring import (
        gpus,
    )
    return pd, tune, gpus


@task(help={})
def run(c):
    import numpy
    return numpy


if True:
    D = 4
'''


def test_the_checks_catch_a_helper_a_class_constants_and_a_silent_import():
    assert shape_faults(PROBE) == [
        "line 12: _helper is not a task",
        "line 18: class _Argument (plumbing belongs in harness/user/cli.py)",
        "line 40: a If statement at the top level",
        "lines 6, 7, 8: 3 module-level assignments (at most 2)",
    ]
    assert unexplained_local_imports(PROBE) == [
        "line 13: from harness.base import console",
        "line 28: from harness.measuring import gpus",
        "line 36: import numpy",
    ]

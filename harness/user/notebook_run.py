"""Execute a notebook on this machine's GPU and save its outputs in place, so that readers without a
GPU see what the cells produce:

    python3 -m harness.user.notebook_run [notebooks/grayscale_inline.ipynb]

Every code cell runs in order under nbclient (the `notebook` extra), from the repository root, with a
ten-minute limit per cell. A cell that raises stops the run and nothing is written. The notebook's
metadata records the device and the date of the run (`metadata.cudalab`), and the file is replaced
atomically. Without a GPU, or without nbclient, it says so in one line and writes nothing.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from harness.base import files, paths
from harness.programs import gpu_here

DEFAULT = paths.ROOT / "notebooks" / "grayscale_inline.ipynb"
CELL_TIMEOUT_S = 600


def execute(path: Path = DEFAULT) -> Path:
    """Run every cell of `path` on the GPU and save the outputs into it; returns the path."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    ok, why = gpu_here()
    if not ok:
        raise RuntimeError(f"the saved outputs must come from a GPU run, and there is none here ({why.split(' -- ')[0]})")
    try:
        import nbclient
        import nbformat
    except ImportError:
        raise RuntimeError("nbclient is not installed: pip install -e '.[notebook]'") from None
    from harness.calling import cudart

    book = nbformat.read(path, as_version=4)
    os.environ.setdefault("MPLBACKEND", "Agg")
    nbclient.NotebookClient(book, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(paths.ROOT)}}).execute()
    book.metadata["cudalab"] = {"executed_on": cudart.device_name(0), "date": time.strftime("%Y-%m-%d")}
    return files.replace(path, lambda tmp: nbformat.write(book, tmp))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: python3 -m harness.user.notebook_run [NOTEBOOK]", file=sys.stderr)
        return 2
    try:
        path = execute(Path(args[0]) if args else DEFAULT)
    except Exception as e:  # one line, never a traceback: a cell error is nbclient's CellExecutionError
        print(f"notebook_run: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
              file=sys.stderr)
        return 1
    print(f"saved the outputs of a GPU run in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""transpose's exercises: wrong solutions the checker must fail, with the cause it must (and must not)
name, and a right solution written differently that it must pass, for both tracks of transpose_naive,
transpose_tiled and transpose_padded (tests/wrong_solutions.py makes the tests from the tables). The
Python track's run here; the CUDA track's are gpu-marked, and here their patches are checked to apply.
Beside them: the padded tile's bank counting on its own, and an output copied from one check failing
the next."""

from __future__ import annotations

import pytest
import wrong_solutions

from harness.user import exercises as hx
from harness.user.exercises import check as hcheck

BOUNDS = wrong_solutions.BOUNDS
NOT_BOUNDS = "the index is wrong, not the bounds"
NO_RACE = "a missing barrier"
NOT_TILE = "did not go through the shared tile"
DIVERGENT = "every thread of a block must reach each barrier"
PY_COL = "    col = ctx.blockIdx.x * t + ctx.threadIdx.x  # column of x = row of out\n"
PY_ROW = "    row = ctx.blockIdx.y * t + ctx.threadIdx.y  # row of x = column of out\n"
PY_TILE_AT = "    col = ctx.blockIdx.x * t + tx\n    row = ctx.blockIdx.y * t + ty\n"

# The lines of the Python twins the mistakes are made in (each occurs once in its exercise's solution).
PY_NAIVE_IF = "    if row < rows and col < cols:\n        out[col * rows + row] = x[row * cols + col]\n"
PY_LOAD_IF = "    if row < rows and col < cols:\n        tile[ty, tx] = x[row * cols + col]\n"
PY_STORE_IF = "    if row < cols and col < rows:\n        out[row * rows + col] = tile[tx, ty]\n"
PY_BARRIER = "    yield  # every thread writes an element another thread loaded: all loads first\n"
PY_OUT_AT = ("    col = ctx.blockIdx.y * t + tx  # column of out = row of x\n"
             "    row = ctx.blockIdx.x * t + ty  # row of out = column of x\n")
PY_PAD_LOAD = "        smem[ty * pitch + tx] = x[row * cols + col]\n"
PY_PAD_STORE = "out[row * rows + col] = smem[tx * pitch + ty]"

# ... and of the CUDA kernels.
CU_NAIVE_IF = "    if (row < rows && col < cols) out[(long long)col * rows + row] = in[(long long)row * cols + col];\n"
CU_LOAD_IF = "    if (row < rows && col < cols) tile[threadIdx.y][threadIdx.x] = in[(long long)row * cols + col];\n"
CU_STORE_IF = ("    if (row < cols && col < rows) out[(long long)row * rows + col] = "
               "tile[threadIdx.x][threadIdx.y];\n")
CU_TILED_BARRIER = ("    // Every thread writes out an element that ANOTHER thread loaded: all loads must be done first.\n"
                    "    // The barrier is outside the guard, so threads past a ragged edge reach it too.\n"
                    "    __syncthreads();\n")
CU_TILED_OUT_AT = ("    col = blockIdx.y * kTile + threadIdx.x;  // column of out = row of in\n"
                   "    row = blockIdx.x * kTile + threadIdx.y;  // row of out = column of in\n")

# (what the mistake is, [(old, new), ...], text the thing to fix must hold, text it must not hold)
WRONG = {("transpose_naive", "python"): [
    ("no bounds check", [(PY_NAIVE_IF, "    out[col * rows + row] = x[row * cols + col]\n")], BOUNDS, None),
    ("a bound on the row only", [(PY_NAIVE_IF, PY_NAIVE_IF.replace(" and col < cols", ""))], BOUNDS, None),
    ("the bounds of out", [(PY_NAIVE_IF, PY_NAIVE_IF.replace("row < rows and col < cols", "row < cols and col < rows"))],
     BOUNDS, None),
    ("the partial tiles skipped", [(PY_NAIVE_IF, PY_NAIVE_IF.replace("row < rows and col < cols",
                                                                     "row < rows // t * t and col < cols // t * t"))],
     BOUNDS, None),
    ("out's row length from x", [("out[col * rows + row]", "out[col * cols + row]")], NOT_BOUNDS, BOUNDS),
    ("x's row length from out", [("x[row * cols + col]", "x[row * rows + col]")], "outputs wrong", BOUNDS),
    ("a copy, not a transpose", [("out[col * rows + row]", "out[row * cols + col]")], "outputs wrong", BOUNDS),
    ("the column without its tile", [("    col = ctx.blockIdx.x * t + ctx.threadIdx.x", "    col = ctx.blockIdx.x + ctx.threadIdx.x")],
     NOT_BOUNDS, BOUNDS),
    ("the row from threadIdx.x", [("    row = ctx.blockIdx.y * t + ctx.threadIdx.y", "    row = ctx.blockIdx.y * t + ctx.threadIdx.x")],
     NOT_BOUNDS, BOUNDS),
    ("bounds with <=", [(PY_NAIVE_IF, PY_NAIVE_IF.replace("row < rows and col < cols", "row <= rows and col <= cols"))],
     BOUNDS, None),
    ("or for and in the bounds", [(PY_NAIVE_IF, PY_NAIVE_IF.replace(" and ", " or "))], BOUNDS, None),
    ("the column bounded by rows", [(PY_NAIVE_IF, PY_NAIVE_IF.replace("col < cols", "col < rows"))], "never written", None),
    ("the row bounded by cols", [(PY_NAIVE_IF, PY_NAIVE_IF.replace("row < rows", "row < cols"))], BOUNDS, None),
    ("the grid's axes swapped", [(PY_COL, "    col = ctx.blockIdx.y * t + ctx.threadIdx.x\n"),
                                 (PY_ROW, "    row = ctx.blockIdx.x * t + ctx.threadIdx.y\n")], "never written", None),
    ("the tile's edge written as 8", [("    t = ctx.blockDim.x\n", "    t = 8\n")], NOT_BOUNDS, BOUNDS),
    ("gridDim for blockDim", [(PY_COL, "    col = ctx.blockIdx.x * ctx.gridDim.x + ctx.threadIdx.x\n")], NOT_BOUNDS, BOUNDS),
    ("written both ways", [(PY_NAIVE_IF, PY_NAIVE_IF + "        out[row * cols + col] = x[row * cols + col]\n")],
     "both wrote", BOUNDS),
    ("out's index with its axes swapped", [("out[col * rows + row]", "out[row * rows + col]")], NOT_BOUNDS, BOUNDS),
    ("x written in place", [(PY_NAIVE_IF, PY_NAIVE_IF + "        x[row * cols + col] = 0\n")], "x is the input", BOUNDS),
], ("transpose_naive", "cuda"): [
    ("no bounds check", [(CU_NAIVE_IF, CU_NAIVE_IF.replace("if (row < rows && col < cols) ", ""))],
     "wrote past the end", None),
    ("a bound on the row only", [(CU_NAIVE_IF, CU_NAIVE_IF.replace(" && col < cols", ""))], "wrote past the end", None),
    ("the bounds of out", [(CU_NAIVE_IF, CU_NAIVE_IF.replace("row < rows && col < cols", "row < cols && col < rows"))],
     "never written", None),
    ("out's row length from in", [("out[(long long)col * rows + row]", "out[(long long)col * cols + row]")],
     "wrote past the end", None),
    ("in's row length from out", [("in[(long long)row * cols + col]", "in[(long long)row * rows + col]")],
     "outputs wrong", "wrote past the end"),
    ("a copy, not a transpose", [("out[(long long)col * rows + row]", "out[(long long)row * cols + col]")],
     "outputs wrong", "wrote past the end"),
    ("the column without its tile", [("    const int col = blockIdx.x * kTile + threadIdx.x;",
                                      "    const int col = blockIdx.x + threadIdx.x;")], "never written", None),
    ("the row from threadIdx.x", [("    const int row = blockIdx.y * kTile + threadIdx.y;",
                                   "    const int row = blockIdx.y * kTile + threadIdx.x;")], "never written", None),
], ("transpose_tiled", "python"): [
    ("no barrier", [(PY_BARRIER, "")], "the barrier after the loads", None),
    ("the barrier inside the load's if", [(PY_LOAD_IF + PY_BARRIER, PY_LOAD_IF + "        yield\n")],
     "every thread of a block must reach each barrier", BOUNDS),
    ("the tile read along its row", [("out[row * rows + col] = tile[tx, ty]", "out[row * rows + col] = tile[ty, tx]")],
     "the cell its element was loaded into", NO_RACE),
    ("the tile left in place in out", [(PY_OUT_AT, "    col = ctx.blockIdx.x * t + tx\n    row = ctx.blockIdx.y * t + ty\n")],
     "the cell its element was loaded into", NO_RACE),
    ("no bound on the load", [(PY_LOAD_IF, "    tile[ty, tx] = x[row * cols + col]\n")], BOUNDS, None),
    ("no bound on the store", [(PY_STORE_IF, "    out[row * rows + col] = tile[tx, ty]\n")], BOUNDS, None),
    ("the store bounded by x's shape", [(PY_STORE_IF, PY_STORE_IF.replace("row < cols and col < rows",
                                                                          "row < rows and col < cols"))], BOUNDS, NO_RACE),
    ("out's row length from x", [("out[row * rows + col] = tile[tx, ty]", "out[row * cols + col] = tile[tx, ty]")],
     NOT_BOUNDS, BOUNDS),
    ("an early return before the barrier", [(PY_LOAD_IF, "    if row >= rows or col >= cols:\n        return\n"
                                                         "    tile[ty, tx] = x[row * cols + col]\n")], DIVERGENT, None),
    ("the store reads x, not the tile", [("out[row * rows + col] = tile[tx, ty]", "out[row * rows + col] = x[col * cols + row]")],
     NOT_TILE, BOUNDS),
    ("the tile's edge written as 8", [("    t = ctx.blockDim.x\n", "    t = 8\n")], NOT_BOUNDS, BOUNDS),
    ("the store bounded on the row only", [(PY_STORE_IF, PY_STORE_IF.replace(" and col < rows", ""))], BOUNDS, None),
    ("the store bounded on the column only", [(PY_STORE_IF, PY_STORE_IF.replace("row < cols and ", ""))], BOUNDS, None),
    ("the tile transposed on the load and read so", [("        tile[ty, tx] = x", "        tile[tx, ty] = x")],
     "the cell its element was loaded into", NO_RACE),
    ("the barrier after the store", [(PY_BARRIER, ""), ("= tile[tx, ty]\n", "= tile[tx, ty]\n    yield\n")],
     "the barrier after the loads", None),
    ("the load's column from ty", [(PY_TILE_AT, "    col = ctx.blockIdx.x * t + ty\n    row = ctx.blockIdx.y * t + tx\n")],
     "the cell its element was loaded into", NO_RACE),
    ("x's row length from out", [("tile[ty, tx] = x[row * cols + col]", "tile[ty, tx] = x[row * rows + col]")],
     "outputs wrong", BOUNDS),
    ("the store's blocks not swapped", [(PY_OUT_AT, "    col = ctx.blockIdx.x * t + tx\n    row = ctx.blockIdx.y * t + ty\n"),
                                        ("out[row * rows + col] = tile[tx, ty]", "out[col * rows + row] = tile[ty, tx]")],
     NOT_BOUNDS, BOUNDS),
], ("transpose_tiled", "cuda"): [
    ("no barrier", [(CU_TILED_BARRIER, "")], "racecheck", None),
    ("no bound on the load", [(CU_LOAD_IF, CU_LOAD_IF.replace("if (row < rows && col < cols) ", ""))], "memcheck", None),
    ("no bound on the store", [(CU_STORE_IF, CU_STORE_IF.replace("if (row < cols && col < rows) ", ""))],
     "wrote past the end", None),
    ("the store bounded by in's shape", [(CU_STORE_IF, CU_STORE_IF.replace("row < cols && col < rows",
                                                                           "row < rows && col < cols"))],
     "never written", "racecheck"),
    ("the tile read along its row", [("= tile[threadIdx.x][threadIdx.y];", "= tile[threadIdx.y][threadIdx.x];")],
     "outputs", "wrote past the end"),
    ("the tile left in place in out", [(CU_TILED_OUT_AT, "    col = blockIdx.x * kTile + threadIdx.x;\n"
                                                         "    row = blockIdx.y * kTile + threadIdx.y;\n")],
     "never written", "racecheck"),
    ("out's row length from in", [("out[(long long)row * rows + col]", "out[(long long)row * cols + col]")],
     "wrote past the end", None),
], ("transpose_padded", "python"): [
    ("no padding", [("    pitch = t + 1\n", "    pitch = t\n")], "32-way bank conflict", None),
    ("transposed on the load, no padding", [("    pitch = t + 1\n", "    pitch = t\n"),
                                            (PY_PAD_LOAD, "        smem[tx * pitch + ty] = x[row * cols + col]\n"),
                                            (PY_PAD_STORE, "out[row * rows + col] = smem[ty * pitch + tx]")],
     "the store into the tile before the barrier", None),
    ("rows that overlap", [("    pitch = t + 1\n", "    pitch = t - 1\n")], "the tile's rows overlap", NO_RACE),
    ("rows too far apart", [("    pitch = t + 1\n", "    pitch = 2 * t\n")], "outside the block's", BOUNDS),
    ("no barrier", [(PY_BARRIER, "")], "the barrier after the loads", None),
    ("the tile read along its row", [(PY_PAD_STORE, "out[row * rows + col] = smem[ty * pitch + tx]")],
     "the word its element was loaded into", NO_RACE),
    ("the store without the padding", [(PY_PAD_STORE, "out[row * rows + col] = smem[tx * t + ty]")],
     "the word its element was loaded into", NO_RACE),
    ("no bound on the store", [("    if row < cols and col < rows:\n        out[row * rows + col] = smem",
                                "    if True:\n        out[row * rows + col] = smem")], BOUNDS, None),
    ("a pitch of t + 2", [("    pitch = t + 1\n", "    pitch = t + 2\n")], "outside the block's", BOUNDS),
    ("the load without the padding", [(PY_PAD_LOAD, "        smem[ty * t + tx] = x[row * cols + col]\n")],
     "the word its element was loaded into", NO_RACE),
    ("an early return before the barrier", [("    if row < rows and col < cols:\n        smem",
                                             "    if row >= rows or col >= cols:\n        return\n    if True:\n        smem")],
     DIVERGENT, None),
    ("the store reads x, not the tile", [(PY_PAD_STORE, "out[row * rows + col] = x[col * cols + row]")], NOT_TILE, BOUNDS),
    ("or for and in the load's bounds", [("    if row < rows and col < cols:\n        smem",
                                          "    if row < rows or col < cols:\n        smem")], BOUNDS, None),
    ("the store bounded by x's shape", [("    if row < cols and col < rows:\n        out", "    if row < rows and col < cols:\n        out")],
     BOUNDS, None),
    ("out's row length from x", [(PY_PAD_STORE, "out[row * cols + col] = smem[tx * pitch + ty]")], NOT_BOUNDS, BOUNDS),
    ("the store's blocks not swapped", [(PY_OUT_AT, "    col = ctx.blockIdx.x * t + tx\n    row = ctx.blockIdx.y * t + ty\n")],
     "the word its element was loaded into", NO_RACE),
], ("transpose_padded", "cuda"): [
    ("no barrier", [("    __syncthreads();\n", "")], "racecheck", None),
    ("no bound on the store", [(CU_STORE_IF, CU_STORE_IF.replace("if (row < cols && col < rows) ", ""))],
     "wrote past the end", None),
    ("the tile read along its row", [("= tile[threadIdx.x][threadIdx.y];", "= tile[threadIdx.y][threadIdx.x];")],
     "outputs", "wrote past the end"),
    ("transposed on the load and the store", [("tile[threadIdx.y][threadIdx.x] = in", "tile[threadIdx.x][threadIdx.y] = in")],
     "outputs", "wrote past the end"),
    ("the load bounded by out's shape", [(CU_LOAD_IF, CU_LOAD_IF.replace("row < rows && col < cols",
                                                                         "row < cols && col < rows"))],
     "outputs", "wrote past the end"),
    ("out's row length from in", [("out[(long long)row * rows + col]", "out[(long long)row * cols + col]")],
     "wrote past the end", None),
]}

RIGHT = {
    ("transpose_naive", "python"): [(PY_NAIVE_IF, "    if row >= rows or col >= cols:\n        return  # past the edge\n"
                                                  "    out[col * rows + row] = x[row * cols + col]\n")],
    ("transpose_naive", "cuda"): [(CU_NAIVE_IF, "    if (row >= rows || col >= cols) return;\n"
                                                "    out[(long long)col * rows + row] = in[(long long)row * cols + col];\n")],
    # The swap made on the way in: the tile holds x's tile transposed, and the store reads along a row.
    ("transpose_tiled", "python"): [("        tile[ty, tx] = x[row * cols + col]\n", "        tile[tx, ty] = x[row * cols + col]\n"),
                                    ("out[row * rows + col] = tile[tx, ty]", "out[row * rows + col] = tile[ty, tx]")],
    ("transpose_tiled", "cuda"): [("tile[threadIdx.y][threadIdx.x] = in", "tile[threadIdx.x][threadIdx.y] = in"),
                                  ("= tile[threadIdx.x][threadIdx.y];", "= tile[threadIdx.y][threadIdx.x];")],
    # Padded and swapped on the way in: a column written, a row read, both conflict-free at a pitch of 33.
    ("transpose_padded", "python"): [(PY_PAD_LOAD, "        smem[tx * pitch + ty] = x[row * cols + col]\n"),
                                     (PY_PAD_STORE, "out[row * rows + col] = smem[ty * pitch + tx]")],

    ("transpose_padded", "cuda"): [("    __shared__ float tile[kTile][kTile + 1];\n",
                                    "    __shared__ float tile[kTile][33];  // 32 cells and one unused word a row\n"),
                                   ("tile[threadIdx.y][threadIdx.x] = in", "tile[threadIdx.x][threadIdx.y] = in"),
                                   ("= tile[threadIdx.x][threadIdx.y];", "= tile[threadIdx.y][threadIdx.x];")],
}

globals().update(wrong_solutions.tests_for("transpose", WRONG, RIGHT))


def test_a_swizzled_tile_without_padding_passes_the_padded_exercise(tmp_path):
    """No padding, the columns swizzled instead (cell (r, c) at word r * t + (c ^ r)): conflict-free too,
    so right."""
    text = wrong_solutions.patched("transpose_padded", "python", [
        ("    pitch = t + 1\n", "    pitch = t\n"),
        (PY_PAD_LOAD, "        smem[ty * t + (tx ^ ty)] = x[row * cols + col]\n"),
        (PY_PAD_STORE, "out[row * rows + col] = smem[tx * t + (ty ^ tx)]")])
    wrong_solutions.write(tmp_path, "transpose_padded", "python", text)
    v = hcheck.check("transpose_padded", "python", tmp_path)
    assert v.passed, v.lines


def test_every_transpose_exercise_has_six_wrong_solutions_a_track():
    for (name, track), rows in WRONG.items():
        assert len(rows) >= 6, (name, track)
    assert {k[0] for k in WRONG} == {"transpose_naive", "transpose_tiled", "transpose_padded"}


def test_the_bank_count_sees_the_conflict_the_padding_removes():
    from harness.programs import transpose_exercises as tx

    def column_read(pitch):  # warp ty = 0 of block (0, 0): lane tx reads cell (tx, 0)
        return [((0, 0), lane, "read", 0, [lane * pitch]) for lane in range(32)]

    assert tx.bank_conflicts(column_read(33)) == (1, "")
    ways, where = tx.bank_conflicts(column_read(32))
    assert ways == 32 and "bank 0" in where and "read of the tile after the barrier" in where
    assert tx.bank_conflicts(column_read(34))[0] == 2
    broadcast = [((0, 0), lane, "read", 0, [5]) for lane in range(32)]  # one word for all: a broadcast
    assert tx.bank_conflicts(broadcast) == (1, "")


def test_an_output_copied_from_one_check_fails_the_next(tmp_path):
    """Every input comes from the check's seed: a kernel that writes the outputs of seed 1's cases,
    looked up by shape, passes seed 1 and fails seed 2."""
    from harness.user.exercises import catalog

    answers = {}
    for case in catalog.cases("transpose_naive", "python", 1):
        inp = catalog.inputs("transpose_naive", case)
        answers[(case.params["rows"], case.params["cols"])] = catalog.reference("transpose_naive", case, inp).tolist()
    text = hx.solution_text(hx.exercise("transpose_naive"), "python")
    start = text.index("def naive_k")
    text = (text[:start] + f"ANSWERS = {answers!r}\n\n\ndef naive_k(ctx, x, out, rows, cols):\n"
            "    t = ctx.blockDim.x\n    col = ctx.blockIdx.x * t + ctx.threadIdx.x\n"
            "    row = ctx.blockIdx.y * t + ctx.threadIdx.y\n    if row < rows and col < cols:\n"
            "        out[col * rows + row] = np.float32(ANSWERS[(rows, cols)][col * rows + row])\n")
    wrong_solutions.write(tmp_path, "transpose_naive", "python", text)
    assert hcheck.check("transpose_naive", "python", tmp_path, seed=1).passed
    v = hcheck.check("transpose_naive", "python", tmp_path, seed=2)
    assert not v.passed and "outputs wrong" in v.first_fix


@pytest.mark.parametrize("name", ["transpose_naive", "transpose_tiled", "transpose_padded"])
def test_each_exercise_has_a_non_square_fresh_case_and_one_sanitizer_case(name):
    from harness.user.exercises import catalog

    for track in ("python", "cuda"):
        a, b = catalog.cases(name, track, 7), catalog.cases(name, track, 8)
        assert [c.params for c in a[:-1]] == [c.params for c in b[:-1]]  # the fixed cases, then a fresh one
        fresh = a[-1].params
        assert fresh["rows"] != fresh["cols"]
        assert any(c.exact_multi for c in a) and any(c.ragged for c in a)
    small = [c for c in catalog.cases(name, "cuda") if c.small]
    assert len(small) == 1 and small[0].ragged and small[0].params["rows"] > 32  # two tiles down: a real race
    assert any(c.params["rows"] * c.params["cols"] > 1 << 23 for c in catalog.cases(name, "cuda"))  # one large case

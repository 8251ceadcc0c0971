"""The exercise checker's evidence, piece by piece: fresh seeded cases that replay, two poisons where
the poison is a legal answer, the bounds-check hint only on evidence, the Python reference of
mandelbrot without the built library, the zoom region's shape, the CUDA counting build, and the CUDA
file a beginner starts from without the tests' fault switch."""

from __future__ import annotations

import numpy as np
import pytest

from harness.user import exercises as hx
from harness.user.exercises import catalog, markers, worker
from harness.user.exercises import check as hcheck


def test_each_check_draws_fresh_cases_and_a_seed_replays_them():
    a, b = catalog.cases("square", "python", 1), catalog.cases("square", "python", 2)
    assert a != b  # the fresh case's size, and every input
    assert all(not np.array_equal(catalog.inputs("square", x)["a"], catalog.inputs("square", y)["a"])
               for x, y in zip(a[:3], b[:3]))
    again = catalog.cases("square", "python", 1)
    assert again == a and np.array_equal(catalog.inputs("square", a[-1])["a"], catalog.inputs("square", again[-1])["a"])
    assert catalog.new_seed() != catalog.new_seed() or catalog.new_seed() != catalog.new_seed()


def test_a_hard_coded_output_passes_only_the_seed_it_was_copied_from(tmp_path):
    seed = 4242
    table = {}
    for case in catalog.cases("square", "python", seed):
        inp = catalog.inputs("square", case)
        table[case.params["n"]] = catalog.reference("square", case, inp).tolist()
    text = hx.solution_text(hx.exercise("square"), "python")
    old = "        v = int(a[i]) & 0xFFFFFFFF\n        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n"
    text = text.replace(old, "        a[i] = HARD[n][i]\n") + f"\nHARD = {table!r}\n"
    path = hx.learner_path(tmp_path, hx.exercise("square"), "python")
    path.write_text(text)
    assert hcheck.check("square", "python", tmp_path, seed=seed).passed
    v = hcheck.check("square", "python", tmp_path)
    assert not v.passed and v.seed != seed
    with pytest.raises(hx.ExerciseError, match="--seed must be a whole number"):
        hcheck.check("square", "python", tmp_path, seed="abc")


def test_a_legal_value_equal_to_the_poison_is_not_called_never_written():
    """Grey bytes: every value is legal, so the poison 0xAB is one. Two runs with two poisons tell an
    unwritten pixel (each run's poison) from a pixel computed as 171 (the same in both)."""
    ref = np.array([10, 20, 30, 40], dtype=np.uint8)
    outs = {False: np.array([10, 171, 30, 0xAB], dtype=np.uint8), True: np.array([10, 171, 30, 0x54], dtype=np.uint8)}
    got = worker.outputs("grayscale", lambda alt: (outs[alt].copy(), None))
    assert got["unwritten"].tolist() == [False, False, False, True]
    msg = worker.compare("grayscale", got["out"], ref, unwritten=got["unwritten"])
    assert "1 of 4 outputs never written (first at index 3" in msg
    outs[True][3] = 0xAB  # index 3 computed as 171 in both runs: wrong, not unwritten
    got = worker.outputs("grayscale", lambda alt: (outs[alt].copy(), None))
    msg = worker.compare("grayscale", got["out"], ref, unwritten=got["unwritten"])
    assert "never written" not in msg and msg.startswith("2 of 4 outputs wrong, first at index 1")


def _result(label, ok, ragged, exact_multi=False, tail_only=None, message="3 of 9 outputs never written"):
    return {"label": label, "ok": ok, "ragged": ragged, "exact_multi": exact_multi, "tail_only": tail_only,
            "message": None if ok else message}


def test_the_bounds_check_is_blamed_only_when_whole_blocks_pass_and_the_ragged_fail_at_their_edge():
    fits = _result("32x48", True, False, exact_multi=True)
    edge = _result("31x61", False, True, tail_only=True)
    assert "look at the bounds check" in worker.summarize("grayscale_2d", [fits, edge])
    # a size that fits one block only is no evidence: a mistake in blockIdx leaves block 0 right
    one_block = _result("16x16", True, False)
    assert worker.summarize("grayscale_2d", [one_block, edge]) is None
    # wrong elements away from the partial blocks: not the bounds check
    inside = _result("31x61", False, True, tail_only=False)
    assert worker.summarize("grayscale_2d", [fits, inside]) is None


def test_the_tail_is_the_partial_blocks():
    c = catalog.Case("x", {"h": 20, "w": 18})
    t = catalog.tail("grayscale_2d", c).reshape(20, 18)
    assert not t[:16, :16].any() and t[16:, :].all() and t[:, 16:].all()
    assert catalog.tail("matmul_tiled", catalog.Case("x", {"m": 8, "n": 8, "k": 6, "tw": 4})) is None


def test_every_multi_block_exercise_has_sizes_that_fit_the_block_and_sizes_that_do_not():
    for ex in catalog.EXERCISES:
        if ex.name in ("mandelbrot_zoom", "grid_stride"):
            continue
        for track in ex.tracks:
            cs = catalog.cases(ex.name, track, 7)
            assert any(c.exact_multi for c in cs) and any(c.ragged for c in cs), (ex.name, track)


def test_the_edges_the_mistakes_live_on_are_in_the_cases():
    # |z|^2 exactly 4: c = -2 in a full view of even height, and the square (-2, 2, -2, 2)
    from harness.programs import mandelbrot as mb

    for track in ("python", "cuda"):
        regions = [c.params for c in catalog.cases("mandelbrot", track, 0)]
        assert any(p["region"] == (-2.0, 2.0, -2.0, 2.0) for p in regions)
        assert any(p["region"][0] == -2.0 and p["height"] % 2 == 0 for p in regions)
    cr, ci = mb.coordinates(32, 32, (-2.0, 2.0, -2.0, 2.0), np.dtype(np.float32))
    assert cr[0] == -2 and ci[16] == 0 and cr[16] == 0 and ci[0] == -2
    # grey pixels whose byte depends on the rounding
    case = next(c for c in catalog.cases("grayscale", "python", 3) if c.params.get("edge"))
    x = catalog.inputs("grayscale", case)["x"].reshape(3, -1).astype(np.float64)
    f64 = np.floor(0.2989 * x[0] + 0.5870 * x[1] + 0.1140 * x[2]).astype(np.uint8)
    from harness.programs import grayscale as gs

    assert (gs.reference(catalog.inputs("grayscale", case)["x"]).ravel() != f64).sum() >= 5
    # softmax scores that overflow exp without the running max
    for track, limit, tile in (("python", 709.8, 4), ("cuda", 88.8, 64)):
        case = next(c for c in catalog.cases("flash_softmax", track, 5) if c.wide)
        inp = catalog.inputs("flash_softmax", case)
        s = np.einsum("bid,bjd->bij", inp["q"].astype(np.float64), inp["k"].astype(np.float64)) / np.sqrt(case.params["D"])
        assert s.max() > limit and (s.max(axis=-1) - s[..., :tile].max(axis=-1)).max() > limit


def test_mandelbrot_python_track_needs_no_built_library(monkeypatch):
    """A fresh clone: the reference and the zoom check are numpy, never the library's variant table."""
    from harness.calling import library

    def not_built(*a, **k):
        raise AssertionError("the built library was asked for")

    monkeypatch.setattr(library, "load", not_built)
    case = catalog.cases("mandelbrot", "python", 0)[1]
    assert catalog.reference("mandelbrot", case, {}).size == case.params["width"] * case.params["height"]
    assert catalog.verdict("mandelbrot_zoom", (-0.7469, -0.7449, 0.1049, 0.1069))[0]


@pytest.mark.parametrize("region, says", [((-0.7469, -0.7449, 0.1049, 0.104900001), "a sliver"),
                                          ((-0.7459, -0.7458999999999995, 0.1059, 0.1059000000000005), "too small")])
def test_a_zoom_region_of_the_wrong_shape_fails(region, says):
    ok, msg, _ = catalog.verdict("mandelbrot_zoom", region)
    assert not ok and says in msg


def test_the_beginners_cuda_file_has_no_fault_switch():
    for which in (hx.learner_text, hx.solution_text):
        text = which(hx.exercise("square"), "cuda")
        assert "CUDALAB_FAULT" not in text and "skip_every" not in text and "fault" not in text.lower()
    src = (hx.ROOT / "cuda/square/square.cu").read_text()
    assert "CUDALAB_FAULT(skip_every)" in src  # the lab's own kernel keeps it


def test_a_lab_marker_replaces_or_drops_the_next_line():
    src = ("// EXERCISE a: copy\n// EXERCISE a: lab int f(int x) {\nint f(int x, int fault) {\n// EXERCISE a: lab\n"
           "    if (fault) return 0;\n    return x;\n}\n// EXERCISE a: end copy\n")
    assert markers.render(markers.parse(src, "a"), "a", "//", "solution") == "int f(int x) {\n    return x;\n}\n"
    with pytest.raises(markers.MarkerError, match="must be followed by the line it replaces"):
        markers.parse("// EXERCISE a: copy\n// EXERCISE a: lab\n// EXERCISE a: end copy\n", "a")


def test_the_matmul_hint_names_the_python_matrices_and_the_cuda_sizes():
    hint = hx.exercise("matmul").hints[1]
    assert "m is h x k" in hint and "A is m x k" in hint and "CUDA" in hint


def test_the_grid_stride_counting_build_rewrites_only_the_kernels_output():
    sol = hx.solution_text(hx.exercise("grid_stride"), "cuda")
    built = catalog.check_source("grid_stride", sol)
    assert "cudalab_counted_out out, long long n)" in built and "exercise_count_writes" in built
    assert catalog.check_source("grid_stride", sol.replace("float *__restrict__ out", "float *__restrict__ y")) is None
    sq = catalog.check_source("square", hx.solution_text(hx.exercise("square"), "cuda"))
    assert "#define cudaFree cudalab_counted_free" in sq and "exercise_live_allocations" in sq


@pytest.mark.parametrize("body", ["*(out + i) = x[i] * x[i];", "out[i] = x[i]; out[i] *= x[i];"])
def test_the_grid_stride_counting_build_compiles_other_ways_of_writing_out(body, tmp_path, monkeypatch):
    from harness.calling import inline

    monkeypatch.setenv("CUDALAB_CACHE", str(tmp_path))
    sol = hx.solution_text(hx.exercise("grid_stride"), "cuda")
    text = sol.replace("out[i] = x[i] * x[i];", "{ " + body + " }")
    mod = inline.load(catalog.check_source("grid_stride", text), name="exercise_grid_stride_check")
    assert "exercise_count_writes" in mod.functions


@pytest.mark.gpu
def test_gpu_the_counting_build_counts_threads_not_writes(tmp_path, monkeypatch):
    """blockDim-only stride: every element written by every block; one thread writing twice is fine."""
    from harness.calling import inline

    monkeypatch.setenv("CUDALAB_CACHE", str(tmp_path))
    sol = hx.solution_text(hx.exercise("grid_stride"), "cuda")
    case = catalog.Case("x", {"n": 1000, "blocks": 3, "threads": 64}, run=1)
    inp = catalog.inputs("grid_stride", case)
    twice = sol.replace("out[i] = x[i] * x[i];", "{ out[i] = x[i]; out[i] *= x[i]; }")
    mod = inline.load(catalog.check_source("grid_stride", twice), name="exercise_grid_stride_check")
    got = catalog.run_cuda("grid_stride", mod, case, inp)
    assert np.allclose(got["out"], inp["x"] * inp["x"]) and "others" in got and catalog.counted_problem("grid_stride", got) is None
    wrong = sol.replace("const long long stride = (long long)gridDim.x * blockDim.x;",
                        "const long long stride = blockDim.x;")
    mod = inline.load(catalog.check_source("grid_stride", wrong), name="exercise_grid_stride_check")
    assert "more than one thread" in catalog.counted_problem("grid_stride", catalog.run_cuda("grid_stride", mod, case, inp))


def _cuda_outcome(name: str, cases: list, arrays_of) -> object:
    """The records a CUDA worker would send: loaded, each case's arrays (arrays_of(case)), done."""
    from harness.user.exercises import child

    recs = [({"loaded": True}, {})] + [({"case": k}, arrays_of(c)) for k, c in enumerate(cases)]
    return child.Outcome(0, child.Output(), records=recs + [({"done": True}, {})])


def test_the_checker_reads_the_cuda_counting_builds_arrays_and_the_second_poison():
    """The CUDA track's extra runs come back as arrays; the checker's judge() reads them (no GPU
    needed to check that side): a second writer, a leak, the managed program's result, two poisons."""
    ex = hx.exercise("grid_stride")
    cases = catalog.cases("grid_stride", "cuda", 4)[:3]

    def grid(case, others=0):
        inp = catalog.inputs("grid_stride", case)
        n = case.params["n"]
        extra = np.zeros(n + catalog.GUARD, dtype=np.uint32)
        extra[n // 2] = others
        return {"out": catalog.reference("grid_stride", case, inp), "guard": catalog.poisoned(catalog.GUARD, np.float32),
                "others": extra}

    assert all(r["ok"] for r in hcheck.judge(ex, "cuda", cases, _cuda_outcome("grid_stride", cases, grid))["results"])
    bad = hcheck.judge(ex, "cuda", cases, _cuda_outcome("grid_stride", cases, lambda c: grid(c, 2)))["results"]
    assert not any(r["ok"] for r in bad) and "written by 3 threads" in bad[0]["message"]

    ex = hx.exercise("square")
    cases = catalog.cases("square", "cuda", 4)[:3]

    def square(case, leaked=0, managed_off=False):
        inp = catalog.inputs("square", case)
        ref = catalog.reference("square", case, inp)
        managed = ref.copy()
        if managed_off:
            managed[0] += 1
        return {"out": ref, "guard": catalog.poisoned(catalog.GUARD, np.int32), "managed": managed,
                "leaked": np.array([leaked], dtype=np.int64)}

    assert all(r["ok"] for r in hcheck.judge(ex, "cuda", cases, _cuda_outcome("square", cases, square))["results"])
    leak = hcheck.judge(ex, "cuda", cases, _cuda_outcome("square", cases, lambda c: square(c, 1)))["results"]
    assert "1 allocation(s) never freed" in leak[0]["message"]
    off = hcheck.judge(ex, "cuda", cases, _cuda_outcome("square", cases, lambda c: square(c, 0, True)))["results"]
    assert "exercise_managed" in off[0]["message"] and "different result" in off[0]["message"]

    ex = hx.exercise("grayscale")
    cases = [c for c in catalog.cases("grayscale", "cuda", 4) if c.params["h"] * c.params["w"] > 4][:2]

    def grey(case, legal_poison):
        inp = catalog.inputs("grayscale", case)
        ref = catalog.reference("grayscale", case, inp).ravel()
        out, alt = ref.copy(), ref.copy()
        out[3], alt[3] = 0xAB, (0xAB if legal_poison else 0x54)
        g = catalog.poisoned(catalog.GUARD, np.uint8)
        return {"out": out, "guard": g, "out_alt": alt, "guard_alt": catalog.poisoned(catalog.GUARD, np.uint8, True)}

    unwritten = hcheck.judge(ex, "cuda", cases, _cuda_outcome("grayscale", cases, lambda c: grey(c, False)))
    assert "never written" in unwritten["results"][0]["message"]
    wrong = hcheck.judge(ex, "cuda", cases, _cuda_outcome("grayscale", cases, lambda c: grey(c, True)))
    assert "never written" not in wrong["results"][0]["message"] and "outputs wrong" in wrong["results"][0]["message"]
    missing = hcheck.judge(ex, "cuda", cases, _cuda_outcome("grayscale", cases, lambda c: {
        k: v for k, v in grey(c, False).items() if k != "out_alt"}))
    assert "second run" in missing["results"][0]["message"]

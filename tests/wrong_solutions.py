"""The machinery of the wrong-solution tables: each exercise's wrong solutions, which the checker must
fail naming their cause (and not naming another), and a right solution written differently, which it
must pass. A table lives beside the program that offers the exercise (cuda/<prog>/test_<prog>_exercises.py)
and makes its tests with `tests_for`:

    WRONG = {("softmax_row", "python"): [(what, [(old, new), ...], says, never), ...], ...}
    RIGHT = {("softmax_row", "python"): [(old, new), ...], ...}
    globals().update(wrong_solutions.tests_for("softmax", WRONG, RIGHT))

Each entry is a small patch over the lab's solution (old text -> new text, old found exactly once).
The Python track runs on the CPU; the CUDA track's runs are gpu-marked, and their patches are checked
to apply on the CPU. A row's text is looked for in what the learner reads: the verdict's thing to fix
and, on the CUDA track, every failing line. `not_named` holds the CUDA rows whose cause the grader does
not name yet: a strict xfail, which turns into a failure the day it does, so the table is then corrected.
"""

from __future__ import annotations

import pytest

from harness.user import exercises as hx
from harness.user.exercises import catalog
from harness.user.exercises import check as hcheck

BOUNDS = "look at the bounds check"
BARRIER = "barrier"
MIN_WRONG = 5


def patched(name, track, patches):
    text = hx.solution_text(hx.exercise(name), track)
    for old, new in patches:
        assert text.count(old) == 1, f"{name} ({track}): {old!r} occurs {text.count(old)} times in the solution"
        text = text.replace(old, new)
    return text


def write(d, name, track, text):
    path = hx.learner_path(d, hx.exercise(name), track)
    d.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def wrong_params(wrong, track, graded: bool = False, not_named=frozenset(), replay: bool = False):
    """The table's rows for one track as pytest params (name, patches, says, never), and with `replay`
    a fifth, whether the test checks the row a second time with the seed its verdict named (see
    replays)."""
    for (name, t), rows in wrong.items():
        if t == track:
            for i, (what, patches, says, never) in enumerate(rows):
                marks = [pytest.mark.xfail(strict=True, reason="the CUDA track fails it without naming this cause")
                         ] if graded and track == "cuda" and (name, what) in not_named else []
                extra = (replays(i, says),) if replay else ()
                yield pytest.param(name, patches, says, never, *extra, id=f"{name}-{what.replace(' ', '_')}",
                                   marks=marks)


# Words of a cause whose failure hangs on the order the simulated threads run in.
_ORDER_WORDS = ("barrier", "race", "sync")


def replays(i: int, says) -> bool:
    """Whether a Python row is checked again with its verdict's seed, to show the failure replays the
    same: each exercise's first row, and every row whose cause hangs on the threads' order (a missing
    barrier, a race), where a seed that did not fix the order would show. The second check doubled the
    tables' time (about half the default suite's work) for rows whose replay runs the same code."""
    text = " ".join(says) if isinstance(says, tuple) else says
    return i == 0 or any(w in text.lower() for w in _ORDER_WORDS)


def right_params(right, track):
    for (name, t), patches in right.items():
        if t == track:
            yield pytest.param(name, patches, id=name)


def check_fails(name, track, patches, says, never, tmp_path, **kw):
    write(tmp_path, name, track, patched(name, track, patches))
    v = hcheck.check(name, track, tmp_path, timing=False, **kw)
    assert not v.passed, v.lines
    # What the learner reads: the thing to fix (the pattern over the cases, where one names a cause) and,
    # on the CUDA track, every failing line (a case's own message, a sanitizer's report).
    text = v.first_fix if track == "python" else "\n".join([*(t for ok, t in v.lines if ok is False), v.first_fix or ""])
    # `says` may be a tuple: the causes a mistake can be named by, by which case of the seed's fails first
    assert any(t in text for t in ((says,) if isinstance(says, str) else says)), text
    if never:
        assert never not in text, text
    return v


def tests_for(program: str, wrong: dict, right: dict, not_named=frozenset()) -> dict:
    """The test functions for one program's table, to put into the test module's globals."""
    mine = [e for e in catalog.exercises() if e.program == program]

    def test_every_exercise_here_has_five_wrong_solutions_and_a_different_right_one():
        assert mine, f"{program} offers no exercise"
        for ex in mine:
            for track in ex.tracks:
                assert len(wrong.get((ex.name, track), ())) >= MIN_WRONG, (ex.name, track)
                assert (ex.name, track) in right, (ex.name, track)

    @pytest.mark.parametrize("name, patches, says, never, replay", list(wrong_params(wrong, "python", replay=True)))
    def test_python_wrong_solution_fails_naming_its_cause(name, patches, says, never, replay, tmp_path):
        v = check_fails(name, "python", patches, says, never, tmp_path)
        # the failure can be replayed: the verdict says its seed, and (see replays) the same seed fails the same way
        assert any(ok is None and f"--seed {v.seed}" in t for ok, t in v.lines)
        if replay:
            assert hcheck.check(name, "python", tmp_path, seed=v.seed).first_fix == v.first_fix

    @pytest.mark.parametrize("name, patches", list(right_params(right, "python")))
    def test_python_right_solution_written_differently_passes(name, patches, tmp_path):
        write(tmp_path, name, "python", patched(name, "python", patches))
        v = hcheck.check(name, "python", tmp_path)
        assert v.passed, v.lines

    @pytest.mark.parametrize("name, patches, says, never", list(wrong_params(wrong, "cuda")))
    def test_cuda_wrong_solution_patches_apply(name, patches, says, never):
        """The CPU half of the GPU test: each mistake is put into the solution's text."""
        assert patched(name, "cuda", patches) != hx.solution_text(hx.exercise(name), "cuda")

    @pytest.mark.parametrize("name, patches", list(right_params(right, "cuda")))
    def test_cuda_right_solution_patches_apply(name, patches):
        assert patched(name, "cuda", patches) != hx.solution_text(hx.exercise(name), "cuda")

    @pytest.mark.long
    @pytest.mark.gpu
    @pytest.mark.grader
    @pytest.mark.parametrize("name, patches, says, never",
                             list(wrong_params(wrong, "cuda", graded=True, not_named=not_named)))
    def test_gpu_cuda_wrong_solution_fails_naming_its_cause(name, patches, says, never, tmp_path):
        check_fails(name, "cuda", patches, says, never, tmp_path)

    @pytest.mark.long
    @pytest.mark.gpu
    @pytest.mark.grader
    @pytest.mark.parametrize("name, patches", list(right_params(right, "cuda")))
    def test_gpu_cuda_right_solution_written_differently_passes(name, patches, tmp_path):
        write(tmp_path, name, "cuda", patched(name, "cuda", patches))
        v = hcheck.check(name, "cuda", tmp_path, timing=False)
        assert v.passed, v.lines

    return {k: v for k, v in locals().items() if k.startswith("test_")}

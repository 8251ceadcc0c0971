"""hello on a GPU: the launch shapes print exactly the lines they imply."""

from __future__ import annotations

import pytest

from conftest import ensure_built
from harness.base.errors import ProgramError
from harness.calling import cudart, runner
from harness.programs import hello

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def built():
    ensure_built("hello")


def test_shapes_print_exact_sets():
    df = hello.run("shapes")
    for kernel, (b, t) in hello.SHAPES.items():
        rows = df[df.kernel == kernel]
        assert len(rows) == b * t, kernel
        assert {(int(r.block), int(r.thread)) for r in rows.itertuples()} == hello.expected_shape(b, t)
    assert len(df) == 1 + 10 + 10 + 100


def test_gpu_and_ints():
    df = hello.run("gpu")
    assert df["kernel"].tolist() == ["helloGPU"]
    df = hello.run("ints")
    assert df["value"].astype(int).tolist() == list(range(10))


@pytest.mark.parametrize("blocks,threads", [(1, 1), (2, 5), (7, 33), (3, 1000), (64, 1024)])
def test_loop_covers_each_global_index_once(blocks, threads):
    df = hello.run("loop", blocks, threads)
    assert len(df) == blocks * threads
    assert sorted(df["global"].astype(int)) == list(range(blocks * threads))
    assert (df["global"] == df["block"] * threads + df["thread"]).all()


def test_invalid_launch_exits_nonzero_with_a_clear_message():
    too_many = cudart.attribute("max_threads_per_block") + 1
    with pytest.raises(ProgramError) as ei:
        runner.run("hello", "loop", 1, too_many)
    assert ei.value.returncode != 0
    assert "THREADS must be at most" in ei.value.stderr_tail

"""transformer_block: the numpy reference against direct loops (CPU), the parser on recorded
output, validation; the CUDA block against the reference (GPU). Tolerance 1e-4 relative, as for
attention (whose error dominates: the projections are float32 sums of E=256 terms, ~1e-6, and
LayerNorm divides by a standard deviation of order 1, which doesn't amplify it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import built_names, ensure_built, poison, refuse_loads_after_the_table
from harness.calling import library
from harness.programs import attention as att
from harness.programs import transformer_block as tb

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [1, 2, 4])
def test_reference_matches_loops(heads, causal, rng):
    p = tb.make_params(8, seed=int(rng.integers(1000)))
    x = rng.uniform(-1, 1, (2, 5, 8)).astype(np.float32)
    np.testing.assert_allclose(tb.reference(x, p, heads, causal), tb.loop_reference(x, p, heads, causal),
                               rtol=1e-10, atol=1e-10)


def test_reference_output_is_normalised(rng):
    p = tb.make_params(16, 0)
    p.gamma[:] = 1
    p.beta[:] = 0
    y = tb.reference(rng.uniform(-1, 1, (3, 7, 16)).astype(np.float32), p, 4)
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1, rtol=1e-3)  # var/(var + eps)


def test_validation():
    p = tb.make_params(64, 0)
    x = np.zeros((2, 3, 64), np.float32)
    with pytest.raises(TypeError):
        tb.forward(x.astype(np.float64), p)
    with pytest.raises(ValueError):
        tb.forward(x, p, heads=3)  # 64 % 3
    with pytest.raises(ValueError, match="head size"):
        tb.forward(x, p, heads=8, variant="02_flash")  # D = 8
    with pytest.raises(ValueError):
        tb.forward(x, tb.make_params(32, 0))  # weights of another E
    with pytest.raises(ValueError, match="unknown variant"):
        tb.forward(x, p, variant="flash_skip_last_tile")
    with pytest.raises(ValueError):
        tb.forward(np.zeros((2, 3), np.float32), p)


def test_parse_recorded_output():
    path = FIXTURES / "transformer_block_gpu.txt"
    if not path.exists():
        pytest.skip(f"{path.name} not recorded yet")
    text = path.read_text()
    assert "device=" in text.splitlines()[0]  # the fixture names the GPU it came from
    df = tb.parse_output(text)
    assert len(df) >= 2 and set(df["seq"]) >= {100, 1000}
    assert (df["check"] == "pass").all() and (df["ms"] > 0).all()
    assert set(df["variant"]) <= {"01_naive", "02_flash"}


def test_parse_rejects_other_text():
    with pytest.raises(ValueError):
        tb.parse_output("hello kernel=x\n")


def _exe():
    return ensure_built("transformer_block", "exe")


@pytest.mark.parametrize("argv", [["--batch", "0"], ["--variant", "x"], ["--embed", "100", "--heads", "3"],
                                  ["--variant", "flash", "--heads", "1"], ["--seq"], ["extra"], ["--dtype", "x"],
                                  ["--dtype", "bf16", "--heads", "8"]])
def test_executable_rejects_bad_argv(argv):
    p = subprocess.run([str(_exe()), *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr


# --- GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: tb.VARIANTS, "transformer_block"))
@pytest.mark.parametrize("B, S, E, H", [(2, 1, 64, 2), (2, 7, 64, 1), (3, 100, 256, 4), (1, 333, 256, 2),
                                        (2, 1000, 256, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_block_matches_reference(variant, B, S, E, H, causal):
    why = tb.unsupported_reason(variant)
    if why:
        pytest.skip(f"{variant}: {why}")
    ds = att.head_sizes(variant)
    if ds is not None and E // H not in ds:
        pytest.skip(f"{variant} needs D in {ds}")
    rng = np.random.default_rng(S + E)
    p = tb.make_params(E, seed=S)
    x = rng.uniform(-1, 1, (B, S, E)).astype(np.float32)
    out = tb.forward(x, p, H, variant, causal)
    ref = tb.reference(x, p, H, causal)
    assert att.rel_error(out, ref) <= tb.TOLERANCES[variant]


@pytest.mark.gpu
def test_output_fully_written():
    # The host entry point copies into the caller's array: poison it first and look for leftovers.
    p = tb.make_params(128, 1)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 65, 128)).astype(np.float32)
    out = poison(x.shape, np.float32)
    from harness.calling import library

    lib = library.load("transformer_block")
    lib.transformer_block_forward(lib.ffi.new("char[]", b"02_flash"), 2, 65, 128, 2, 0, x, p.w_qkv, p.b_qkv,
                                  p.gamma, p.beta, out)
    assert np.isfinite(out).all()


def test_variant_table_matches_library():
    ensure_built("transformer_block")
    lib = library.load("transformer_block")
    names = [lib.ffi.string(lib.transformer_block_variant_name(i)).decode()
             for i in range(lib.transformer_block_variant_count())]
    assert tb.VARIANTS == tuple(names) and tb.PROFILE_VARIANTS == tb.VARIANTS
    assert names[:2] == ["01_naive", "02_flash"]


def test_bf16_validation():
    p = tb.make_params(64, 0)
    x = np.ones((2, 3, 64), np.float32)
    with pytest.raises(ValueError, match="head size"):
        tb.forward(x, p, heads=2, dtype="bf16")  # D = 32
    with pytest.raises(ValueError, match="dtype"):
        tb.forward(x, p, dtype="fp16")
    with pytest.raises(ValueError, match="unknown transformer_block variant '04_flash_3xtf32'; valid: 01_naive, 02_flash"):
        tb.forward(x, p, variant="04_flash_3xtf32")  # attention's, not this block's


def test_bf16_fallback_checks_the_bf16_rules_before_falling_back(monkeypatch, capsys):
    """Where no bf16 path runs (sm_75), dtype="bf16" falls back to the float32 block, but only after
    the bf16 block's checks (its head sizes): 02_flash would take D = 32."""
    monkeypatch.setattr(tb, "bf16_variant", lambda: None)
    monkeypatch.setattr(tb, "unsupported_reason", lambda v: pytest.fail(f"{v} got past validation"))
    p = tb.make_params(64, 0)
    with pytest.raises(ValueError, match="head size"):
        tb.forward(np.ones((2, 3, 64), np.float32), p, heads=2, dtype="bf16")
    assert "no bf16 path runs here" not in capsys.readouterr().err  # refused before the fallback's note


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["naive", "flash", "bf16"])
def test_executable_defaults_check_themselves(variant):
    argv = ["--dtype", "bf16"] if variant == "bf16" else ["--variant", variant]
    p = subprocess.run([str(_exe()), *argv, "--batch", "4", "--reps", "1"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    df = tb.parse_output(p.stdout)
    assert list(df["seq"]) == [100, 1000] and (df["check"] == "pass").all()
    if variant == "bf16":
        # Where no bf16 path runs (sm_75: a T4, or a build for compute_75), the float32 block runs
        # instead and stderr says so once; elsewhere the bf16 block runs and nothing is said.
        fell_back = tb.bf16_variant() is None
        assert p.stderr.count("no bf16 path runs here") == (1 if fell_back else 0), p.stderr
        assert set(df["dtype"]) == {"f32" if fell_back else "bf16"}


@pytest.mark.gpu
def test_bf16_default_falls_back_where_no_bf16_path_runs(capfd):
    """dtype='bf16' runs the fastest bf16 block that runs here; where none does, the float32 block,
    with one note for the whole process."""
    p = tb.make_params(128, 3)
    x = np.random.default_rng(3).uniform(-1, 1, (2, 65, 128)).astype(np.float32)
    chosen = tb.bf16_variant()
    tb._fallback_said = False
    for _ in range(2):
        out = tb.forward(x, p, heads=2, dtype="bf16")
        want = tb.TOLERANCES[chosen or tb.BF16_FALLBACK]
        assert att.rel_error(out, tb.reference(x, p, 2)) <= want
    err = capfd.readouterr().err
    assert err.count("no bf16 path runs here") == (0 if chosen else 1), err
    if chosen is None:
        assert "needs sm_80" in err


@pytest.mark.gpu
def test_gpu_executable_seed_0_checks_itself():
    p = subprocess.run([str(_exe()), "--seed", "0", "--batch", "2", "--seq", "33", "--embed", "128", "--heads", "2",
                        "--reps", "1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    df = tb.parse_output(p.stdout)
    assert list(df["seq"]) == [33] and (df["check"] == "pass").all()


@pytest.mark.parametrize("shape,heads,rule", [
    ((65536, 1, 64), 4, r"B\*H must be at most 65535 .*65536\*4"),  # attention's grid-axis limit
    ((1, att.MAX_S + 1, 64), 4, f"S must be at most {att.MAX_S}"),
    ((16385, 2, 64), 4, r"B\*H must be at most"),  # just past the limit: 16385*4 = 65540
])
def test_attention_limits_are_refused_before_any_launch(monkeypatch, shape, heads, rule):
    """The block's attention limits are attention's own rules: a too-large batch or sequence is one
    ValueError naming the rule, and past attention's variant table no library is loaded (it came back as a
    CUDA invalid argument)."""
    refuse_loads_after_the_table(monkeypatch, "attention", "transformer_block")
    p = tb.make_params(64, 0)
    with pytest.raises(ValueError, match=rule):
        tb.forward(np.zeros(shape, np.float32), p, heads=heads, variant="01_naive")


def test_the_limits_are_shared_not_copied(monkeypatch):
    """One rule: moving attention's limit moves the block's (a copy of the numbers would not follow)."""
    refuse_loads_after_the_table(monkeypatch, "attention", "transformer_block")
    monkeypatch.setattr(att, "MAX_S", 8)
    with pytest.raises(ValueError, match="S must be at most 8"):
        tb.forward(np.zeros((1, 9, 64), np.float32), tb.make_params(64, 0), heads=1, variant="01_naive")


def test_bf16_dtype_falls_back_to_float32_once_where_no_bf16_path_runs(monkeypatch, capsys):
    """Stand in for a T4: the library names no bf16 variant; dtype='bf16' then runs the float32 block
    and says why, once per process."""
    monkeypatch.setattr(tb, "bf16_variant", lambda: None)
    monkeypatch.setattr(tb, "unsupported_reason", lambda v: "needs sm_80: this GPU is sm_75")
    monkeypatch.setattr(tb, "_fallback_said", False)
    assert tb._variant_for("01_naive", "bf16") == tb.BF16_FALLBACK == "02_flash"
    assert tb._variant_for("01_naive", "bf16") == "02_flash"
    assert tb._variant_for("01_naive", "f32") == "01_naive"
    err = capsys.readouterr().err
    assert err.count("no bf16 path runs here (needs sm_80: this GPU is sm_75)") == 1, err
    monkeypatch.setattr(tb, "bf16_variant", lambda: "03_flash_bf16")
    assert tb._variant_for("01_naive", "bf16") == "03_flash_bf16"

"""grayscale: the pinned formula, the Python twins, image loading, and every GPU variant (exact bytes)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import built_names, poison
from harness.programs import grayscale as gs

RAGGED = [(1, 1), (1, 17), (17, 1), (3, 5), (15, 17), (31, 33), (127, 129), (61, 97), (1023, 1025), (1066, 1600)]


def rand_image(rng, h, w):
    return rng.integers(0, 256, size=(3, h, w), dtype=np.uint8)


def all_colours() -> np.ndarray:
    """Every one of the 2^24 RGB colours, as a (3, 256, 65536) planar image."""
    r, g, b = np.meshgrid(np.arange(256), np.arange(256), np.arange(256), indexing="ij")
    return np.ascontiguousarray(np.stack([r, g, b]).reshape(3, 256, 65536).astype(np.uint8))


# --- the formula and its rounding (CPU) -----------------------------------------------------------

def test_reference_known_pixels():
    x = np.array([[255, 0, 0, 255, 0, 100]], dtype=np.uint8)  # R plane
    g = np.array([[0, 255, 0, 255, 0, 150]], dtype=np.uint8)
    b = np.array([[0, 0, 255, 255, 0, 200]], dtype=np.uint8)
    out = gs.reference(np.stack([x, g, b]))
    # 0.2989*255 = 76.2, 0.5870*255 = 149.7, 0.1140*255 = 29.07, white 254.97, black 0,
    # and 29.89 + 88.05 + 22.8 = 140.74 truncates to 140 (rounding would give 141).
    assert out.tolist() == [[76, 149, 29, 254, 0, 140]]


def test_float32_rounding_moves_at_most_one_level():
    rep = gs.rounding_report(all_colours())
    assert rep["pixels"] == 2**24
    assert rep["max_abs"] == 1  # float32 vs float64 never differs by more than one level...
    assert 0 < rep["differ"] < 1000  # ...and only on a few hundred of the 16.7M colours (302)


def test_reference_accepts_non_contiguous(rng):
    x = rand_image(rng, 9, 11)
    view = np.asfortranarray(x)
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(gs.reference(view), gs.reference(x))


def test_checker_fails_on_wrong_answer(rng):
    x = rand_image(rng, 20, 30)
    ref = gs.reference(x)
    assert gs.check(ref.copy(), ref) == (True, 0)
    wrong = ref.copy()
    wrong[7, 11] ^= 1
    assert gs.check(wrong, ref) == (False, 1)
    swapped = gs.reference(np.ascontiguousarray(x[::-1]))  # BGR read as RGB
    ok, bad = gs.check(swapped, ref)
    assert not ok and bad > 0
    assert gs.check(ref[:, :-1], ref)[0] is False


# --- Python twins (CPU) ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (17, 23), (16, 16)])
@pytest.mark.parametrize("twin", [gs.rgb2grey_py, gs.rgb2grey_pyk, gs.rgb2grey_pybk, gs.rgb2grey_pybk2d])
def test_twins_match_reference_exactly(twin, shape, rng):
    x = rand_image(rng, *shape)
    np.testing.assert_array_equal(twin(x), gs.reference(x))


def test_twin_blocks_cover_ragged_image():
    # 2-D blocks of 4x4 over 5x7 overhang both edges; the guards keep them inside.
    x = rand_image(np.random.default_rng(5), 5, 7)
    np.testing.assert_array_equal(gs.rgb2grey_pybk2d(x, tw=4), gs.reference(x))
    np.testing.assert_array_equal(gs.rgb2grey_pybk(x, threads=8), gs.reference(x))


# --- arguments (CPU) --------------------------------------------------------------------------------

def test_validation_before_launch():
    with pytest.raises(TypeError, match="uint8"):
        gs.rgb2grey(np.zeros((3, 4, 4), dtype=np.float32))
    with pytest.raises(ValueError, match=r"\(3, H, W\).*planar"):
        gs.rgb2grey(np.zeros((4, 4, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="3-D"):
        gs.rgb2grey(np.zeros((4, 4), dtype=np.uint8))
    with pytest.raises(TypeError, match="numpy array"):
        gs.rgb2grey([[[1]]])
    with pytest.raises(ValueError, match="01_1d, 02_2d, 03_vectorized"):
        gs.rgb2grey(np.zeros((3, 4, 4), dtype=np.uint8), variant="04_magic")
    with pytest.raises(ValueError, match="plane_stride"):
        gs.rgb2grey_device("01_1d", 4, 4, 15, None, None)


def test_planar_layout():
    hwc = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    chw = gs.planar(hwc)
    assert chw.shape == (3, 2, 3) and chw.flags.c_contiguous
    # Pixel i's R, G and B sit n apart in the flattened planes, as the kernels read them.
    flat, n = chw.ravel(), 6
    for i in range(n):
        assert (flat[i], flat[i + n], flat[i + 2 * n]) == tuple(hwc.reshape(n, 3)[i])
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        gs.planar(np.zeros((2, 3, 4), dtype=np.uint8))


def test_aligned_stride():
    assert gs.aligned_stride(1, 1) == 16
    assert gs.aligned_stride(4, 4) == 16
    assert gs.aligned_stride(1066, 1600) == 1066 * 1600
    assert gs.aligned_stride(3, 7) == 32


def test_empty_image_needs_no_gpu():
    assert gs.rgb2grey(np.zeros((3, 0, 5), dtype=np.uint8)).shape == (0, 5)


# --- the generated test image and image files (CPU) -------------------------------------------------

def test_test_image_shape_and_shapes():
    img = gs.test_image()
    assert img.shape == (1066, 1600, 3) and img.dtype == np.uint8
    np.testing.assert_array_equal(img, gs.test_image())  # deterministic
    for name, ((r, c), rgb) in gs.TEST_SHAPES.items():
        assert tuple(img[r, c]) == rgb, name
    # The gradients: R rises to the right, G downwards, B falls along the diagonal.
    assert img[0, 0, 0] == 0 and img[0, -1, 0] == 255
    assert img[0, 0, 1] == 0 and img[-1, 0, 1] == 255
    assert img[0, 0, 2] == 255 and img[-1, -1, 2] == 0


def test_test_image_shows_channel_order():
    img = gs.test_image()
    grey = gs.reference(gs.planar(img))
    levels = {n: int(grey[r, c]) for n, ((r, c), _) in gs.TEST_SHAPES.items()}
    assert (levels["red_disc"], levels["green_square"], levels["blue_triangle"]) == (76, 149, 29)
    bgr = gs.reference(gs.planar(np.ascontiguousarray(img[..., ::-1])))
    (r, c), _ = gs.TEST_SHAPES["red_disc"]
    assert bgr[r, c] == 29  # a swapped order turns the red disc into the blue triangle's level


def test_test_image_other_sizes():
    small = gs.test_image(53, 80)
    assert small.shape == (53, 80, 3)
    with pytest.raises(ValueError):
        gs.test_image(0, 10)


@pytest.fixture
def images(tmp_path):
    from PIL import Image

    rgb = np.random.default_rng(0).integers(0, 256, size=(13, 21, 3), dtype=np.uint8)
    paths = {}
    paths["RGB"] = tmp_path / "rgb.png"
    Image.fromarray(rgb, "RGB").save(paths["RGB"])
    rgba = np.dstack([rgb, np.full((13, 21), 7, np.uint8)])
    paths["RGBA"] = tmp_path / "rgba.png"
    Image.fromarray(rgba, "RGBA").save(paths["RGBA"])
    paths["L"] = tmp_path / "l.png"
    Image.fromarray(rgb[..., 0], "L").save(paths["L"])
    paths["LA"] = tmp_path / "la.png"
    Image.fromarray(np.dstack([rgb[..., 1], rgb[..., 2]]), "LA").save(paths["LA"])
    pal = Image.fromarray(rgb, "RGB").quantize(colors=16)
    paths["P"] = tmp_path / "p.png"
    pal.save(paths["P"])
    paths["CMYK"] = tmp_path / "cmyk.tif"
    Image.fromarray(rgb, "RGB").convert("CMYK").save(paths["CMYK"])
    paths["I;16"] = tmp_path / "deep.png"
    Image.fromarray(rgb[..., 0].astype(np.uint16) * 257).save(paths["I;16"])
    return rgb, pal, paths


def test_load_rgb_as_is(images):
    rgb, _, paths = images
    arr, note = gs.load_image(paths["RGB"])
    np.testing.assert_array_equal(arr, rgb)
    assert note == ""


def test_load_converts_and_says_so(images):
    rgb, pal, paths = images
    arr, note = gs.load_image(paths["RGBA"])
    np.testing.assert_array_equal(arr, rgb)
    assert "alpha" in note
    arr, note = gs.load_image(paths["L"])
    np.testing.assert_array_equal(arr, np.dstack([rgb[..., 0]] * 3))
    assert "grey" in note
    arr, note = gs.load_image(paths["LA"])
    np.testing.assert_array_equal(arr, np.dstack([rgb[..., 1]] * 3))
    assert "alpha" in note and "grey" in note
    arr, note = gs.load_image(paths["P"])
    np.testing.assert_array_equal(arr, np.asarray(pal.convert("RGB")))
    assert "palette" in note
    arr, note = gs.load_image(paths["CMYK"])
    assert arr.shape == rgb.shape and "CMYK" in note


def test_load_errors(tmp_path, images):
    with pytest.raises(FileNotFoundError, match="not found"):
        gs.load_image(tmp_path / "nope.png")
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"this is not a picture")
    with pytest.raises(ValueError, match="cannot read"):
        gs.load_image(junk)
    with pytest.raises(ValueError, match="not a file"):
        gs.load_image(tmp_path)
    with pytest.raises(ValueError, match="not supported"):
        gs.load_image(images[2]["I;16"])


def test_cli_argument_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        gs.cli([], image=str(tmp_path / "missing.png"), out=str(tmp_path / "o.png"))
    with pytest.raises(ValueError, match="extra arguments"):
        gs.cli(["--bogus"])
    with pytest.raises(ValueError, match="valid"):
        gs.cli([], variant="nope")


# --- executable and bench cases (CPU) -----------------------------------------------------------------

def test_parse_recorded_output():
    from pathlib import Path

    text = (Path(__file__).parent / "fixtures" / "grayscale_h200.txt").read_text()
    df = gs.parse_output(text)
    assert set(df["variant"]) == set(gs.VARIANTS)
    assert (df["check"] == "pass").all() and (df["mismatches"] == 0).all()
    assert (df["gbs"] > 0).all()
    with pytest.raises(ValueError):
        gs.parse_output("nothing here\n")


def test_bench_cases_describe_the_goal():
    cases = {c.variant: c for c in gs.bench_cases(quick=False)}
    assert set(cases) == set(gs.VARIANTS)
    c = cases["03_vectorized"]
    assert c.size == "16384x16384" and c.ceiling == "memcpy" and c.target == 0.90
    assert c.amount == 4.0 * 16384 * 16384 and c.unit == "GB/s"
    assert cases["01_1d"].target is None


# --- the GPU -----------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: gs.VARIANTS, "grayscale"))
@pytest.mark.parametrize("align", [True, False])
def test_gpu_test_image(variant, align):
    x = gs.planar(gs.test_image())
    np.testing.assert_array_equal(gs.rgb2grey(x, variant, align_planes=align), gs.reference(x))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: gs.VARIANTS, "grayscale"))
@pytest.mark.parametrize("shape", RAGGED)
def test_gpu_random_ragged(variant, shape, rng):
    x = rand_image(rng, *shape)
    ref = gs.reference(x)
    for align in (True, False):  # packed planes: misaligned G/B whenever h*w % 16 != 0
        out = gs.rgb2grey(x, variant, align_planes=align)
        ok, bad = gs.check(out, ref)
        assert ok, f"{variant} {shape} align={align}: {bad} pixels differ"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: gs.VARIANTS, "grayscale"))
def test_gpu_all_colours(variant):
    # All 2^24 colours, including those where float32 and float64 disagree: the GPU must follow float32.
    x = all_colours()
    np.testing.assert_array_equal(gs.rgb2grey(x, variant), gs.reference(x))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: gs.VARIANTS, "grayscale"))
@pytest.mark.parametrize("shape", [(1, 1), (7, 9), (33, 47), (256, 256), (1001, 999)])
@pytest.mark.parametrize("packed", [False, True])
def test_gpu_device_form_poisoned(variant, shape, packed, rng):
    """Device pointers, output poisoned with 0xAB beyond the image too: every pixel written, none past n."""
    from harness.calling import cudart

    h, w = shape
    n = h * w
    x = rand_image(rng, h, w)
    stride = n if packed else gs.aligned_stride(h, w)
    host_in = np.zeros(3 * stride, dtype=np.uint8)
    for p in range(3):
        host_in[p * stride:p * stride + n] = x[p].ravel()
    out = poison((n + 64,), np.uint8)
    with cudart.DeviceBuffer.from_array(host_in) as dx, cudart.DeviceBuffer.from_array(out) as dout:
        gs.rgb2grey_device(variant, h, w, stride, dx.ptr, dout.ptr)
        cudart.synchronize()
        dout.to_host(out)
    np.testing.assert_array_equal(out[:n].reshape(h, w), gs.reference(x))
    assert (out[n:] == 0xAB).all(), "wrote past the end of the image"


@pytest.mark.gpu
def test_gpu_large_image():
    rng = np.random.default_rng(11)
    x = rand_image(rng, 4099, 4097)
    ref = gs.reference(x)
    for v in gs.VARIANTS:
        assert gs.check(gs.rgb2grey(x, v), ref)[0], v


@pytest.mark.gpu
def test_gpu_cli_generated_and_rgba(tmp_path, images, capsys):
    from PIL import Image

    out = tmp_path / "grey.png"
    assert gs.cli([], out=str(out)) == 0
    text = capsys.readouterr().out
    assert "generated" in text and "check=pass" in text
    grey = np.asarray(Image.open(out))
    assert grey.shape == (1066, 1600)
    np.testing.assert_array_equal(grey, gs.reference(gs.planar(gs.test_image())))
    assert (tmp_path / "grey_input.png").exists()

    out2 = tmp_path / "rgba_grey.png"
    assert gs.cli([], variant="01_1d", image=str(images[2]["RGBA"]), out=str(out2)) == 0
    assert "alpha channel dropped" in capsys.readouterr().out
    np.testing.assert_array_equal(np.asarray(Image.open(out2)), gs.reference(gs.planar(images[0])))


@pytest.mark.gpu
def test_gpu_executable_checks_itself():
    df = gs.run("--variant", "all", "257", "333")
    assert list(df["variant"]) == list(gs.VARIANTS)
    assert (df["check"] == "pass").all()

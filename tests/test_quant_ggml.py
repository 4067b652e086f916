"""Our quantizers against ggml's own C reference (libggml-base from llama-cpp-python).

`test_golden_digests` always runs: it pins our K-quant bytes on a fixed, platform-exact input to
SHA-256 digests that were taken from ggml's `ggml_quantize_chunk` (no importance matrix, so
`quantize_row_q*_K_ref`). Where llama_cpp is importable, the other tests recompute those digests
with ggml and compare bytes on several distributions, so the fixture regenerates itself. The
ggml_blocks tests (always run) compare every type's dequantization with ggml's own on ggml-written
bytes, and our quantizers with ggml's bytes.
"""
from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from oxigpu.quant import QUANTIZABLE, TYPES, QuantType, dequantize, quantize

K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
LEGACY = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")

GOLDEN_SHA256 = {  # ggml_quantize_chunk(type, golden_input(), ...) from llama-cpp-python 0.3.36
    "Q2_K": "7223cd4c8df3b2a29d98b83a85c23dc98af696a812983398f8e08f7b6ac64206",
    "Q3_K": "9f9af39dfe5f726817fe64cfe81e326c46b77cccd34f6c037cee2d8115116b4b",
    "Q4_K": "0364ccc478180e2f005426647be2b18737456f8badb29a16b93011ef8e381fe6",
    "Q5_K": "6764b0bbfe5fa0b2cced43752d10f8d7785283bda411d21cccfe529c430e4bf0",
    "Q6_K": "a00df974f87b62e36a47c888cb3676177d7296bacea776568f2c3af1bc2f94ea",
}


def golden_input() -> np.ndarray:
    """8 x 1024 float32 from an integer hash, using only exactly-rounded float32 operations,
    with the cases the quantizers branch on: a zero super-block, scattered zeros, a constant
    super-block, a group below GROUP_MAX_EPS, and rows scaled over 2**0 .. 2**-7."""
    k = np.arange(8 * 1024, dtype=np.uint64)
    h = ((k * np.uint64(2654435761) + np.uint64(12345)) & np.uint64(0xFFFFFFFF)) >> np.uint64(8)
    u = h.astype(np.float32) / np.float32(2**24) - np.float32(0.5)
    x = (u * u * u * np.float32(8)).reshape(8, 1024)
    x *= (np.float32(2) ** -np.arange(8, dtype=np.float32))[:, None]
    x[0, :256] = 0
    x[1, ::7] = 0
    x[2, 256:512] = np.float32(0.3)
    x[3, 16:32] = np.float32(1e-20)
    return x


@pytest.mark.parametrize("name", K_QUANTS)
def test_golden_digests(name):
    assert hashlib.sha256(quantize(golden_input(), name).tobytes()).hexdigest() == GOLDEN_SHA256[name]


@pytest.fixture(scope="module")
def ggml_quantize():
    """ggml_quantize_chunk from llama-cpp-python's bundled libggml-base, via ctypes."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (ggml oracle)")
    libs = glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so*"))
    if not libs:
        pytest.skip("llama_cpp has no bundled libggml-base")
    lib = ctypes.CDLL(libs[0])
    fn = lib.ggml_quantize_chunk
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_int64, ctypes.c_void_p]

    def run(x: np.ndarray, qt: QuantType) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        out = np.zeros((x.shape[0], qt.row_bytes(x.shape[1])), np.uint8)
        fn(qt.ggml_type, x.ctypes.data, out.ctypes.data, 0, x.shape[0], x.shape[1], None)
        return out
    return run


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shape = (32, 4096)
    sparse = rng.standard_normal(shape) * (rng.random(shape) < 0.1)
    sparse[0, :256] = 0
    sparse[1, 16:32] = 1.5
    return {
        "normal": rng.standard_normal(shape) * 0.02,
        "heavy": rng.standard_t(3, shape) * 0.05,
        "positive": rng.random(shape),
        "sparse": sparse,
        "huge": rng.standard_normal(shape) * 1e4,
        "tiny": rng.standard_normal(shape) * 1e-6,
    }


@pytest.mark.parametrize("name", K_QUANTS)
def test_kquants_byte_identical_to_ggml(name, ggml_quantize):
    qt = TYPES[name]
    for label, x in _inputs().items():
        x = x.astype(np.float32)
        np.testing.assert_array_equal(quantize(x, qt), ggml_quantize(x, qt), err_msg=f"{name} on {label}")
    assert hashlib.sha256(ggml_quantize(golden_input(), qt).tobytes()).hexdigest() == GOLDEN_SHA256[name]


@pytest.mark.parametrize("name", LEGACY)
def test_legacy_quantize_agrees_with_ggml(name, ggml_quantize):
    """The gguf package's legacy quantizers give ggml's bytes, except that where a block's scale or
    minimum is zero it may store -0.0 where ggml stores +0.0; the decoded values are equal."""
    qt = TYPES[name]
    for label, x in _inputs().items():
        x = x.astype(np.float32)
        ours, ref = quantize(x, qt), ggml_quantize(x, qt)
        if label != "sparse":
            np.testing.assert_array_equal(ours, ref, err_msg=f"{name} on {label}")
        np.testing.assert_array_equal(dequantize(ours, qt), dequantize(ref, qt), err_msg=f"{name} on {label}")


# ---------------------------------------------------------------- ggml-written blocks of every type
# tests/fixtures/quants/ggml_blocks.npz (dev/make_quant_fixtures.py blocks): a fixed matrix quantized by
# ggml to every type (with an importance matrix where ggml needs one) and the SHA-256 of ggml's own
# dequantization of those bytes. Always runs: no llama.cpp needed.

BLOCKS = Path(__file__).parent / "fixtures" / "quants" / "ggml_blocks.npz"


@pytest.fixture(scope="module")
def ggml_blocks():
    data = np.load(BLOCKS)
    return data, json.loads(str(data["meta"]))["types"]


def test_blocks_fixture_covers_every_type(ggml_blocks):
    _, meta = ggml_blocks
    assert set(meta) == set(TYPES) - {"F32"}


@pytest.mark.parametrize("name", [t for t in TYPES if t != "F32"])
def test_dequantize_bit_exact_with_ggml(name, ggml_blocks):
    """Our dequantization of ggml's bytes is ggml's, bit for bit (subnormal f16 scales included)."""
    data, meta = ggml_blocks
    ours = dequantize(data[f"q_{name}"], name)
    assert ours.shape == data["source"].shape
    assert hashlib.sha256(ours.tobytes()).hexdigest() == meta[name]["dequant_sha256"]


@pytest.mark.parametrize("name", [t for t in TYPES if t in QUANTIZABLE and t != "F32"])
def test_quantize_matches_ggml_blocks(name, ggml_blocks):
    """Our quantizers give ggml's bytes on the fixture's rows (the legacy types up to the sign of a
    zero scale, as test_legacy_quantize_agrees_with_ggml says)."""
    data, _ = ggml_blocks
    ours, ref = quantize(data["source"], name), data[f"q_{name}"]
    if name in LEGACY:
        np.testing.assert_array_equal(dequantize(ours, name), dequantize(ref, name))
    else:
        np.testing.assert_array_equal(ours, ref)

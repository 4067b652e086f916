"""oxigpu.quant: registry facts, bit-exact dequantization vs gguf.quants, row gathers, quantizers."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

from oxigpu.errors import GGUFError, InvalidParameterError, UnsupportedQuantTypeError
from oxigpu.quant import (
    QUANTIZABLE,
    SUPPORTED,
    TYPES,
    QuantType,
    codec,
    dequantize,
    dequantize_rows,
    get_type,
    quantize,
)
from oxigpu.quant.samples import MAGNITUDES, SCALE_FIELDS, random_blocks

FLOAT_TYPES = ("F32", "F16", "BF16")
BLOCK_TYPES = tuple(t for t in SUPPORTED if t not in FLOAT_TYPES)
K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
GGUF_QUANTIZED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16", "F16", "F32", "TQ1_0", "TQ2_0")
DEQUANT_ONLY = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")


def random_raw(qt: QuantType, n_rows: int, n_cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random valid tensor bytes (n_rows, row_bytes): random quants, finite f16 scales (a few zero)."""
    return random_blocks(qt, n_rows, n_cols, rng)


def reference(raw: np.ndarray, qt: QuantType) -> np.ndarray:
    return gguf_quants.dequantize(raw, GGMLQuantizationType(qt.ggml_type))


def assert_bit_equal(ours: np.ndarray, ref: np.ndarray) -> None:
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    np.testing.assert_array_equal(ours.view(np.uint32), np.ascontiguousarray(ref, np.float32).view(np.uint32))


# ---------------------------------------------------------------- registry

@pytest.mark.parametrize("name", SUPPORTED)
def test_layout_matches_ggml(name):
    qt = TYPES[name]
    gt = GGMLQuantizationType[name]
    assert qt.ggml_type == int(gt)
    assert (qt.block_size, qt.type_size) == GGML_QUANT_SIZES[gt]
    assert qt.bits_per_weight == pytest.approx(qt.type_size * 8 / qt.block_size)
    assert qt.wgsl_file == f"{name.lower()}.wgsl"


def test_supported_set():
    """Every ggml type llama.cpp writes for weights but the 8-bit activation types (Q8_1, Q8_K), the
    integer and F64 ones and the fp4 ones (MXFP4, NVFP4)."""
    assert set(SUPPORTED) == {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K",
                              "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S",
                              "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0"}
    assert QUANTIZABLE == set(SUPPORTED) - set(DEQUANT_ONLY)
    assert set(SCALE_FIELDS) == set(BLOCK_TYPES)


def test_row_bytes_and_bits():
    assert get_type("Q8_0").row_bytes(640) == 680
    assert get_type("Q4_K").row_bytes(4096) == 16 * 144
    assert get_type("Q4_K").bits_per_weight == 4.5
    assert get_type("Q6_K").bits_per_weight == 6.5625
    assert get_type("F32").row_bytes(7) == 28
    assert get_type("Q5_0").n_cols(22 * 28) == 896
    with pytest.raises(InvalidParameterError, match="multiple of the block size 256"):
        get_type("Q4_K").row_bytes(640)
    with pytest.raises(InvalidParameterError):
        get_type("Q8_0").n_cols(35)


@pytest.mark.parametrize("key", [12, np.int32(12), GGMLQuantizationType.Q4_K, "Q4_K", "q4_k", TYPES["Q4_K"]])
def test_get_type_accepts_ids_names_and_types(key):
    assert get_type(key) is TYPES["Q4_K"]


@pytest.mark.parametrize("key", [9, 15, 39, 999, -1, "Q9_K", "", True, 1.0, None,
                                 QuantType("Q4_K", 12, 256, 145)])
def test_get_type_rejects_unknown(key):
    with pytest.raises(UnsupportedQuantTypeError) as info:
        get_type(key)
    assert isinstance(info.value, GGUFError)
    assert all(name in str(info.value) for name in SUPPORTED)


def test_unknown_id_is_named():
    with pytest.raises(UnsupportedQuantTypeError, match="Q8_1"):
        get_type(9)


# ---------------------------------------------------------------- dequantize == gguf.quants, bit for bit

def _shapes(qt: QuantType) -> list[tuple[int, int]]:
    if qt.block_size == 1:
        cols = (1, 7, 640, 896)
    elif qt.block_size == 32:
        cols = (32, 640, 896, 4096)
    else:
        cols = (256, 2816, 4096)
    return [(rows, c) for rows in (1, 3, 17) for c in cols]


@pytest.mark.parametrize("name", SUPPORTED)
def test_dequantize_bit_exact(name):
    qt = TYPES[name]
    rng = np.random.default_rng(qt.ggml_type)
    for rows, cols in _shapes(qt):
        raw = random_raw(qt, rows, cols, rng)
        ours = dequantize(raw, qt)
        assert ours.shape == (rows, cols)
        assert np.isfinite(ours).all() and np.count_nonzero(ours) > ours.size // 2
        assert_bit_equal(ours, reference(raw, qt))


@pytest.mark.parametrize("name", BLOCK_TYPES)
def test_dequantize_bit_exact_across_chunks_and_any_bytes(name, monkeypatch):
    """Fully random bytes (NaN/inf/subnormal scales too) and a chunk size that splits rows."""
    qt = TYPES[name]
    monkeypatch.setattr(codec, "_DEQUANT_CHUNK", 3 * 256)
    raw = np.random.default_rng(7).integers(0, 256, (5, 2, 40 * qt.type_size), dtype=np.uint8)
    with np.errstate(all="ignore"):
        ref, ours = reference(raw, qt), dequantize(raw, qt)
    assert_bit_equal(ours, ref)


def test_dequantize_accepts_typed_and_noncontiguous_input():
    x = np.random.default_rng(0).standard_normal((6, 64)).astype(np.float32)
    np.testing.assert_array_equal(dequantize(x, "F32"), x)
    raw = random_raw(TYPES["Q8_0"], 8, 640, np.random.default_rng(1))
    assert_bit_equal(dequantize(raw[::2], "Q8_0"), reference(np.ascontiguousarray(raw[::2]), TYPES["Q8_0"]))
    out = dequantize(raw, "Q8_0")
    assert out.flags.writeable and out.flags.c_contiguous


def test_dequantize_rejects_partial_blocks():
    with pytest.raises(InvalidParameterError, match="Q8_0"):
        dequantize(np.zeros((2, 35), np.uint8), "Q8_0")
    with pytest.raises(UnsupportedQuantTypeError):
        dequantize(np.zeros((2, 36), np.uint8), 9)


# ---------------------------------------------------------------- dequantize_rows

@pytest.mark.parametrize("name", ["Q8_0", "Q5_0", "Q4_K", "Q6_K", "F32", "BF16"])
def test_dequantize_rows_matches_full(name):
    qt = TYPES[name]
    raw = random_raw(qt, 50, 256 * 3 if qt.block_size == 256 else 640, np.random.default_rng(3))
    rows = [7, 0, 49, 7, 13]
    got = dequantize_rows(raw, qt, rows)
    assert got.shape == (5, raw.shape[1] // qt.type_size * qt.block_size)
    assert_bit_equal(got, dequantize(raw, qt)[rows])
    assert_bit_equal(dequantize_rows(raw, qt, np.array([[1, 2], [3, 4]])), dequantize(raw, qt)[[[1, 2], [3, 4]]])
    assert_bit_equal(dequantize_rows(raw, qt, np.int32(9)), dequantize(raw, qt)[9])
    assert dequantize_rows(raw, qt, []).shape == (0, got.shape[1])


def test_dequantize_rows_reads_only_requested_rows(monkeypatch, tmp_path):
    """Poison every other row (NaN scales) in a memory-mapped file; count the blocks the kernel sees."""
    qt = TYPES["Q8_0"]
    n_rows, n_cols = 4096, 640
    clean = random_raw(qt, n_rows, n_cols, np.random.default_rng(4))
    path = tmp_path / "table.bin"
    poisoned = clean.copy()
    wanted = np.array([5, 4095, 17, 5])
    mask = np.ones(n_rows, bool)
    mask[wanted] = False
    poisoned.reshape(n_rows, -1, qt.type_size)[mask, :, 0:2] = np.array([0x00, 0x7E], np.uint8)  # f16 NaN
    poisoned.tofile(path)
    table = np.memmap(path, dtype=np.uint8, mode="r", shape=clean.shape)

    seen = []
    kernel = codec._DEQUANT["Q8_0"]
    monkeypatch.setitem(codec._DEQUANT, "Q8_0", lambda b, o: (seen.append(b.shape[0]), kernel(b, o)))
    got = dequantize_rows(table, qt, wanted)
    assert sum(seen) == len(wanted) * n_cols // qt.block_size
    assert np.isfinite(got).all()
    assert_bit_equal(got, reference(clean[wanted], qt))


@pytest.mark.parametrize("rows", [[3, 10], [-1], [0, 2**40]])
def test_dequantize_rows_rejects_out_of_range(rows):
    raw = random_raw(TYPES["Q8_0"], 10, 32, np.random.default_rng(5))
    with pytest.raises(IndexError, match="out of range"):
        dequantize_rows(raw, "Q8_0", rows)


def test_dequantize_rows_rejects_bad_args():
    raw = random_raw(TYPES["Q8_0"], 10, 32, np.random.default_rng(5))
    with pytest.raises(InvalidParameterError):
        dequantize_rows(raw, "Q8_0", [1.0])
    with pytest.raises(InvalidParameterError):
        dequantize_rows(raw.reshape(2, 5, -1), "Q8_0", [1])


# ---------------------------------------------------------------- quantize

@pytest.mark.parametrize("name", GGUF_QUANTIZED)
def test_quantize_equals_gguf_package(name):
    qt = TYPES[name]
    n = 896 if qt.block_size <= 32 else 768
    x = (np.random.default_rng(6).standard_normal((2, 3, n)) * 0.05).astype(np.float32)
    q = quantize(x, qt)
    assert q.dtype == np.uint8 and q.shape == (2, 3, qt.row_bytes(n))
    ref = np.ascontiguousarray(gguf_quants.quantize(x, GGMLQuantizationType(qt.ggml_type))).view(np.uint8)
    np.testing.assert_array_equal(q, ref.reshape(q.shape))
    assert not np.may_share_memory(q, x)


# Relative RMS error of quantize -> dequantize on N(0, 1) data, measured vs float64.
# Measured (64 x 4096, seed 0): Q2_K 0.297, Q3_K 0.151, Q4_K 0.0715, Q5_K 0.0362, Q6_K 0.0178.
RMS_BOUND = {"Q2_K": 0.32, "Q3_K": 0.17, "Q4_K": 0.08, "Q5_K": 0.04, "Q6_K": 0.02}


def _rel_rms(name: str, x64: np.ndarray) -> float:
    y = dequantize(quantize(x64.astype(np.float32), name), name).astype(np.float64)
    return float(np.sqrt(np.mean((y - x64) ** 2) / np.mean(x64 ** 2)))


def test_kquant_round_trip_error_bounds():
    x = np.random.default_rng(0).standard_normal((64, 4096))
    errs = {name: _rel_rms(name, x) for name in K_QUANTS}
    for name, bound in RMS_BOUND.items():
        assert errs[name] < bound, (name, errs[name])
    # more bits, less error, and by a real margin (each extra bit roughly halves it)
    ordered = [errs[n] for n in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")]
    assert all(a > 1.6 * b for a, b in zip(ordered, ordered[1:])), errs


@pytest.mark.parametrize("name", K_QUANTS)
def test_kquant_shapes_and_scale_invariance(name):
    """Any leading shape; multiplying the input by a power of two scales the output exactly."""
    qt = TYPES[name]
    x = np.random.default_rng(8).standard_normal((3, 2, 512)).astype(np.float32)
    q = quantize(x, qt)
    assert q.shape == (3, 2, 2 * qt.type_size)
    y = dequantize(q, qt)
    y4 = dequantize(quantize(x * np.float32(4), qt), qt)
    np.testing.assert_array_equal(y4, y * np.float32(4))


@pytest.mark.parametrize("name", (*K_QUANTS, "IQ4_NL", "IQ4_XS"))
def test_kquant_degenerate_blocks(name):
    """All-zero blocks decode to zeros; constant and one-hot blocks stay close."""
    x = np.zeros((4, 256), np.float32)
    x[1] = 0.75
    x[2, 100] = -3.0
    x[3, :16] = 1e-3
    y = dequantize(quantize(x, name), name)
    np.testing.assert_array_equal(y[0], 0)
    err = np.abs(y - x).max(axis=1)[1:]
    assert (err <= 0.1 * np.abs(x).max(axis=1)[1:]).all(), err


def test_quantize_rejects_bad_input():
    with pytest.raises(InvalidParameterError, match="multiple"):
        quantize(np.ones((2, 100), np.float32), "Q4_K")
    with pytest.raises(InvalidParameterError, match="non-finite"):
        quantize(np.full((1, 256), np.inf, np.float32), "Q6_K")
    with pytest.raises(UnsupportedQuantTypeError, match="dequantize only"):
        quantize(np.ones((1, 256), np.float32), "IQ3_S")
    with pytest.raises(UnsupportedQuantTypeError, match="dequantize only"):
        quantize(np.ones((1, 256), np.float32), "IQ2_XXS")


@pytest.mark.parametrize("name", BLOCK_TYPES)
@pytest.mark.parametrize("magnitude", list(MAGNITUDES))
def test_random_blocks_have_the_asked_scales(name, magnitude):
    """The kernel checks' weights: every block's values of the asked magnitude (a few zero blocks among
    the normal ones), finite, and each row different."""
    qt = TYPES[name]
    raw = random_blocks(qt, 5, 2 * max(qt.block_size, 256), np.random.default_rng(9), magnitude)
    assert raw.shape == (5, qt.row_bytes(2 * max(qt.block_size, 256)))
    blocks = dequantize(raw, qt).reshape(-1, qt.block_size)
    assert np.isfinite(blocks).all() and len({r.tobytes() for r in raw}) == 5
    peak = np.abs(blocks).max(axis=1)
    lo, hi = MAGNITUDES[magnitude]
    live = peak[peak > 0]
    assert live.min() >= lo / 2 and live.max() <= hi * 128 * 64, (live.min(), live.max())
    assert (peak == 0).sum() <= len(peak) // 4

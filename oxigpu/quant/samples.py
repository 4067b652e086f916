"""Random tensors of any registered type, for kernel checks and tests: random quants, chosen scales.

Every byte pattern of a block is a valid block (grid indices cover their tables, sign and scale bits
are free), so random bytes exercise every code path of a dequantizer; only the f16 scale fields are set,
to finite values of a chosen magnitude, so that results stay comparable. Types the package cannot
quantize (the IQ and TQ types) get their test weights this way.
"""
from __future__ import annotations

import numpy as np

from oxigpu.errors import InvalidParameterError

from .registry import QuantType, get_type

SCALE_FIELDS: dict[str, tuple[int, ...]] = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ4_NL": (0,), "IQ4_XS": (0,), "IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ2_S": (0,), "IQ3_XXS": (0,),
    "IQ3_S": (0,), "IQ1_S": (0,), "TQ1_0": (52,), "TQ2_0": (64,),
    "IQ1_M": (),      # its f16 d is the top nibbles of the four scale words at bytes 48..55 (set apart)
}
"""Byte offsets of the f16 scale (and min) fields of each block type."""

MAGNITUDES = {"normal": (0.005, 0.02), "huge": (2.0 ** 14, 2.0 ** 15), "tiny": (2.0 ** -14, 2.0 ** -13)}
"""|scale| ranges: typical of real files; the largest f16 binades; the smallest normal ones."""


def _scales(rng: np.random.Generator, n: int, magnitude: str, zeros: bool) -> np.ndarray:
    lo, hi = MAGNITUDES[magnitude]
    s = rng.uniform(lo, hi, n) * rng.choice([-1.0, 1.0], n)
    if zeros:
        s[rng.random(n) < 1 / 32] = 0.0       # all-zero-scale blocks occur in real files
    return s.astype(np.float16)


def random_blocks(qtype: str | QuantType, n_rows: int, n_cols: int, rng: np.random.Generator,
                  magnitude: str = "normal") -> np.ndarray:
    """Random ``qtype`` rows (n_rows, row_bytes) uint8: random quants with every f16 scale of
    ``magnitude`` (``MAGNITUDES``; "normal" also zeroes a few blocks' scales) and a random sign. Float
    types get values of that magnitude times N(0, 1) (times 3 for "normal")."""
    qt = get_type(qtype)
    if magnitude not in MAGNITUDES:
        raise InvalidParameterError(f"magnitude {magnitude!r}; choose one of {', '.join(MAGNITUDES)}")
    if not qt.is_block:
        mult = {"normal": 3.0, "huge": 2.0 ** 11, "tiny": 2.0 ** -8}[magnitude]
        x = (rng.standard_normal((n_rows, n_cols)) * mult).astype(np.float32)
        if qt.name == "F32":
            return x.view(np.uint8)
        if qt.name == "F16":
            return x.astype(np.float16).view(np.uint8)
        return (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    n_blocks = n_rows * (n_cols // qt.block_size)
    raw = rng.integers(0, 256, (n_blocks, qt.type_size), dtype=np.uint8)
    zeros = magnitude == "normal"
    for off in SCALE_FIELDS[qt.name]:
        raw[:, off:off + 2] = _scales(rng, n_blocks, magnitude, zeros).view(np.uint8).reshape(-1, 2)
    if qt.name == "IQ1_M":
        d = _scales(rng, n_blocks, magnitude, zeros).view(np.uint16).astype(np.uint16)
        words = raw[:, 48:56].copy().view(np.uint16)
        for i in range(4):
            words[:, i] = (words[:, i] & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12)
        raw[:, 48:56] = words.view(np.uint8)
    return raw.reshape(n_rows, qt.row_bytes(n_cols))


def sample_weights(qtype: str | QuantType, n_rows: int, n_cols: int, rng: np.random.Generator) -> np.ndarray:
    """Test weights of ``qtype`` (n_rows, row_bytes): N(0, 1) through the package's quantizer (ggml's
    arithmetic) where it has one, else ``random_blocks`` with normal scales (the IQ types)."""
    from .codec import QUANTIZABLE, quantize
    qt = get_type(qtype)
    if qt.name in QUANTIZABLE:
        return quantize(rng.standard_normal((n_rows, n_cols), np.float32), qt)
    return random_blocks(qt, n_rows, n_cols, rng)

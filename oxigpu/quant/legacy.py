"""Dequantizers for ggml's 32-element legacy blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.

Block layouts (ggml-common.h): an f16 scale `d` (plus an f16 offset `m` for the _1 types),
for the 5-bit types a 32-bit mask of high bits `qh`, then the quants. Element j < 16 is the low
nibble of qs[j], element j + 16 its high nibble. Arithmetic order matches gguf.quants
(d * q, then + m), so results are bit-identical to it.
"""
from __future__ import annotations

import numpy as np

from ._bits import Kernel, bit_planes, f16_field, scale_into


def _q4(qs: np.ndarray) -> np.ndarray:
    """(n, 16) packed nibbles -> (n, 32) uint8 quants in element order."""
    return bit_planes(qs, 4).reshape(qs.shape[0], 32)


def _q5(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Low nibbles plus the high bit from the little-endian u32 mask -> (n, 32) uint8 in 0..31."""
    q = _q4(qs)
    q |= np.unpackbits(qh, axis=1, bitorder="little") << np.uint8(4)
    return q


def _centered(q: np.ndarray, offset: int) -> np.ndarray:
    """Unsigned quants minus a fixed offset, as int8 (in place)."""
    q -= np.uint8(offset)
    return q.view(np.int8)


def _with_min(out: np.ndarray, q: np.ndarray, d: np.ndarray, m: np.ndarray) -> None:
    scale_into(out, q, d)[...] += m


def q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    scale_into(out, _centered(_q4(blocks[:, 2:]), 8), f16_field(blocks, 0))


def q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    _with_min(out, _q4(blocks[:, 4:]), f16_field(blocks, 0), f16_field(blocks, 2))


def q5_0(blocks: np.ndarray, out: np.ndarray) -> None:
    scale_into(out, _centered(_q5(blocks[:, 2:6], blocks[:, 6:]), 16), f16_field(blocks, 0))


def q5_1(blocks: np.ndarray, out: np.ndarray) -> None:
    _with_min(out, _q5(blocks[:, 4:8], blocks[:, 8:]), f16_field(blocks, 0), f16_field(blocks, 2))


def q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    scale_into(out, blocks[:, 2:].view(np.int8), f16_field(blocks, 0))


DEQUANT: dict[str, Kernel] = {"Q4_0": q4_0, "Q4_1": q4_1, "Q5_0": q5_0, "Q5_1": q5_1, "Q8_0": q8_0}
